// Package app owns the sluice command line: parsing flags, the
// subcommands (serve, check-config, keys, spend, pricing import, envoy
// bootstrap, version), wiring the components together and the process
// lifecycle.
//
// `sluice serve` is built in explicit steps (components.go): metrics, the
// config and its watcher, the key store and key ring, the spend ledger,
// admission, the listeners, the xDS control plane, the gRPC and admin
// servers — each step uses only what an earlier one made and registers a
// closer for what it opened, released in reverse on every way out. run
// (serve.go) then runs them under one errgroup with a graceful, bounded
// shutdown; the ledger's committer stops last, after the gRPC server has
// drained, so every settled stream's spend is committed. The store,
// ledger and admission backends are each opened in one function, the
// place where other backends are chosen.
//
// It must not hold protocol or policy logic; each component it wires owns
// its own. Nor does it hold the test doubles (the Envoy emulator, the
// mock provider): those are in sluice-dev (internal/devcmd), so the
// production binary ships only what production runs. Run takes everything
// from its arguments — no global state, no hidden environment reads
// beyond the lookup function it is given — so tests call it like main
// does.
package app
