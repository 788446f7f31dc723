// Package cli owns the command-line conventions Sluice's binaries share
// (sluice and sluice-dev): one table-driven dispatcher (Program: a table
// of commands, the usage generated from it, help, --help and --version
// handled in one place), flag sets that report to stderr and never exit,
// --help as success, a usage error that maps to exit status 2, comma lists,
// the --log-level/--log-format logger and the version line.
//
// It must not know any command but version: each binary's package defines
// its own table.
package cli
