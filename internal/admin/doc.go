// Package admin owns Sluice's admin HTTP server on listen.admin (loopback
// by default): /healthz (the process is alive), /readyz (config compiled
// and key store loaded) and /metrics (Prometheus, from an injected
// registry), open to whoever reaches the listener; and the admin API under
// /v1/ — keys (create, list, revoke, set limits), teams and orgs (put,
// list), remaining budgets and spend totals — which requires the bearer
// token admin.token and is off (403) without one; and, only while
// admin.pprof is set (404 otherwise), Go's runtime profiles under
// /debug/pprof/, behind the same token. The profiles are served from
// runtime/pprof: net/http/pprof is not imported, since its init registers
// on http.DefaultServeMux. The routes are described in
// docs/admin-api.openapi.yaml; a test keeps the two in step.
//
// It must not make decisions or hold state of its own: it writes through
// the key store, reads principals from the keyring, budgets from
// admission and totals from the ledger, each through a small interface
// declared here. Limits are checked by policies, as sluice.yaml's are.
package admin
