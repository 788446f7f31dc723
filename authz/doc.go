// Package authz owns Sluice's answer to Envoy's ext_authz filter: the
// envoy.service.auth.v3.Authorization server.
//
// Checker is transport-free — a CheckRequest in, a Decision out — so every
// decision is tested without gRPC: it extracts the caller's key
// (apikey.FromHeaders), resolves it in memory (keyring), refuses revoked
// and expired keys, and counts the request against the key's and team's
// request-rate limits in the admission backend (admission.Backend's
// CountRequest). A Decision holds the principal and, when
// the request is refused, the refusal as an *apierr.Error (401, 403 or
// 429; codes from apierr's table, which are also the `reason` label).
// Server is the thin gRPC adapter; Response is the one place where a
// Decision becomes an Envoy CheckResponse — one function (denied) turns an
// *apierr.Error into the DeniedHttpResponse — and it follows
// envoy-protocol.md §2: header values in `value`, deny headers never
// `append` (Envoy drops those), credential headers removed on OK, the
// principal returned as dynamic metadata (namespace
// envoy.filters.http.ext_authz, fields documented in docs/architecture.md
// and built from the principal by keyring.Principal.Metadata) with its
// signature (internal/principal) over the key id, team and org for the
// request's x-request-id, without which ext_proc sends no credential.
// Usable is the key check ext_proc repeats for a signed principal.
//
// It must not read the request body or know about providers; that is
// extproc's job. It never logs a key beyond its public prefix.
package authz
