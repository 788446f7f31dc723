// Package chain owns the HTTP filter chains Sluice asks Envoy to run — the
// ext_authz and ext_proc filters in front of the router (HTTPFilters), and
// the upstream ext_proc of a fallback model's aggregate cluster
// (UpstreamHTTPFilters) — and the connection manager's local_reply_config
// that gives Envoy's own local replies the API's JSON error shape
// (LocalReply) in one place, with the names both sides of the wire agree
// on (routing and served-by headers, metadata key and namespaces): the
// emulator tests build their bootstraps from it and the xDS server serves
// it. Changing a mode, a timeout or a name here changes it
// everywhere.
//
// It must not hold request logic; it only describes configuration.
package chain
