// Package envoytest is an Envoy EMULATOR: test and demo infrastructure that
// plays Envoy's part on the wire so that Sluice's ext_authz and ext_proc
// services, and its xDS configuration, can be exercised end to end on
// machines where no Envoy binary can be installed. It is never a
// production proxy, and says so at start-up (Banner).
//
// It owns the emulation: an HTTP front (HTTP/1.1 and h2c) with Envoy's
// connection manager, the ext_authz and ext_proc clients, the router with
// its retries, clusters, load balancing, circuit breakers, outlier
// detection, active gRPC health checks and upstream TLS, local replies and
// access logs, and a state-of-the-world ADS client. It is configured with
// real Envoy protos (a bootstrapv3.Bootstrap, static or over ADS), so the
// same configuration runs on a real Envoy (StartRealEnvoy); it runs the
// envoy/envoyrules table over what it loads, as xds.Validate does, and
// refuses at load, naming the field, whatever it cannot emulate, never
// silently. Each behaviour follows the Envoy source cited in
// ../shared/envoy-protocol.md, and every request is recorded as an
// Exchange (the ext_authz and ext_proc messages both ways, the upstream
// attempts, status, response-code details and flags, dynamic metadata)
// for golden tests.
//
// A test builds a bootstrap (Bootstrap, StaticCluster, HTTPFilter; for
// ADS, ADSBootstrap and its builders), calls New, Listen and Serve (and
// Run over ADS), sends requests, and reads Exchanges.
//
// README.md beside this file is the emulator's manual: what of Envoy it
// implements, part by part, with the Envoy source file and function each
// follows and the tests that cover it; what it refuses and what it leaves
// out, and why; its Options; Envoy releases; xDS; and how to write a test
// with it. docs/testing.md ("The Envoy emulator") says how the end-to-end
// tests use it.
//
// It must not import Sluice's packages: it must emulate Envoy, not share
// Sluice's assumptions. envoy/envoyrules, which states Envoy's own load
// rules, is the one it shares, and its tests use internal/testtls.
package envoytest
