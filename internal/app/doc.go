// Package app owns the sluice command line: parsing flags, the
// subcommands, wiring the components together and the process lifecycle
// (one errgroup, graceful and bounded shutdown).
//
// It must not hold protocol or policy logic; each component it wires owns
// its own. Run takes everything from its arguments — no global state, no
// hidden environment reads beyond the lookup function it is given — so
// tests call it like main does.
package app
