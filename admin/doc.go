// Package admin owns Sluice's admin HTTP server: /healthz (the process is
// alive), /readyz (config compiled and key store loaded) and /metrics
// (Prometheus, from an injected registry). It listens on loopback by
// default.
//
// It must not make decisions or hold state of its own: readiness is a
// function the app passes in.
package admin
