// Package cli owns the command-line conventions Sluice's binaries share
// (sluice and sluice-dev): flag sets that report to stderr and never exit,
// --help as success, a usage error that maps to exit status 2, comma lists
// and the --log-level/--log-format logger.
//
// It must not know any command: each binary's package defines its own.
package cli
