// Package xdstest holds xDS clients for tests and benchmarks of the
// control plane: a Fleet of state-of-the-world ADS clients, each its own
// node, that subscribe to clusters, endpoints, listeners and routes on one
// stream and ACK every response, as Envoy does. It depends on nothing in
// Sluice, so both the xds package's tests and bench/ use it.
//
// It must not be imported by non-test code.
package xdstest
