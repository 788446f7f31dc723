package apierr

// Every error code Sluice answers a client with, in one place. Codes are
// stable: they are the `code` of an OpenAI-shaped error body, the `reason`
// label of sluice_authz_checks_total and sluice_extproc_denials_total, and
// the `sluice_<code>` response-code details of an ext_proc local reply. A
// code is never renamed; a new failure gets a new code here.
const (
	// CodeOK is the reason of an admitted check (metrics only).
	CodeOK = "ok"

	// Credentials (ext_authz, or ext_proc without it).
	CodeMissingCredential      = "missing_credential"      // 401: no API key in the request
	CodeMalformedCredential    = "malformed_credential"    // 401: not an sk-sluice- key
	CodeConflictingCredentials = "conflicting_credentials" // 401: two headers, two different keys
	CodeUnknownKey             = "unknown_key"             // 401: no such key
	CodeRevokedKey             = "revoked_key"             // 403
	CodeExpiredKey             = "expired_key"             // 403
	CodeUnknownTeam            = "unknown_team"            // 403: the key's team is gone

	// The request line and body.
	CodeUnknownPath      = "unknown_path"            // 404: not an API the gateway serves
	CodeMethodNotAllowed = "method_not_allowed"      // 405
	CodeBodyTooLarge     = "body_too_large"          // 413
	CodeEmptyBody        = "empty_body"              // 400
	CodeInvalidJSON      = "invalid_json"            // 400
	CodeNotAnObject      = "not_an_object"           // 400: the body is JSON but not an object
	CodeMissingModel     = "missing_model"           // 400
	CodeInvalidModel     = "invalid_model"           // 400: model is not a usable string
	CodeInvalidField     = "invalid_field"           // 400: a field Sluice reads has a bad value
	CodeIntegerBelowMin  = "integer_below_min_value" // 400: an integer field below its minimum (OpenAI's code)
	CodeIntegerAboveMax  = "integer_above_max_value" // 400: an integer field above its maximum (OpenAI's code)
	CodeDuplicateField   = "duplicate_field"         // 400: a field Sluice reads occurs twice
	CodeInvalidUTF8      = "invalid_utf8"            // 400
	CodeInvalidRequest   = "invalid_request"         // 400: anything else wrong with the body

	// The model and where it goes.
	CodeModelNotFound         = "model_not_found"         // 404
	CodeModelNotAllowed       = "model_not_allowed"       // 403: outside the key's or team's allow-list
	CodeModelUnpriced         = "model_unpriced"          // 403: gateway.unpriced_models: deny
	CodeUnsupportedEndpoint   = "unsupported_endpoint"    // 400: the provider does not speak this API
	CodeProviderNotConfigured = "provider_not_configured" // 503: the configuration changed under a fallback
	CodeFallbackMisconfigured = "fallback_misconfigured"  // 503: an attempt whose upstream host names no provider
	CodeFallbackHostUnknown   = "fallback_host_unknown"   // 503: an attempt whose upstream host is a provider the model does not fall back to

	// Envoy's own local replies, rewritten by the listener's
	// local_reply_config (chain.LocalReply); body_too_large above is one.
	CodeUpstreamTimeout     = "upstream_timeout"     // 504: the provider did not answer within the route's timeout
	CodeUpstreamUnavailable = "upstream_unavailable" // 503: no healthy endpoint, or the connection failed before a response
	CodeNoRoute             = "no_route"             // 404: the router met a request Sluice did not route (the no-provider route)
	CodeGatewayUnavailable  = "gateway_unavailable"  // 503: Envoy could not reach Sluice's ext_authz or ext_proc (their failure replies)
	CodeGatewayTimeout      = "gateway_timeout"      // 504: Sluice's ext_proc did not answer within its message timeout

	// Limits and budgets.
	CodeRateLimited          = "rate_limited"          // 429: a request-rate window is full
	CodeTokensRateLimited    = "tokens_rate_limited"   // 429: a token window has no room
	CodeInsufficientQuota    = "insufficient_quota"    // 429: a dollar budget is spent (OpenAI's type too)
	CodeAdmissionUnavailable = "admission_unavailable" // 503: limits cannot be checked
)
