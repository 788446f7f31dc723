package apierr

// Every error code Sluice answers a client with, in one place. Codes are
// stable: they are the `reason` label of sluice_authz_checks_total and
// sluice_extproc_denials_total and the `sluice_<code>` response-code
// details of an ext_proc local reply, and — unless openAIWire below gives
// OpenAI's own code for the same refusal — the `code` of an OpenAI-shaped
// error body. A code is never renamed; a new failure gets a new code here.
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

	// Proof that a stream came from Envoy on behalf of a valid key
	// (internal/principal).
	CodePrincipalRefused = "principal_refused" // 403 (503 when only its age is wrong): ext_proc got no validly signed principal
	CodeHandoffRefused   = "handoff_refused"   // 403: a fallback attempt without a validly signed handoff

	// The request line and body.
	CodeUnknownPath      = "unknown_path"            // 404: not an API the gateway serves
	CodeMethodNotAllowed = "method_not_allowed"      // 405
	CodeNonCanonicalPath = "non_canonical_path"      // 400: an API the gateway serves (or Azure's path for one), spelled otherwise, or a path with no one canonical form (llmapi.ClassifyPath)
	CodeNotMetered       = "not_metered"             // 400: an API that bills model work Sluice does not meter (batches, legacy completions), never passed
	CodeBodyTooLarge     = "body_too_large"          // 413
	CodeEmptyBody        = "empty_body"              // 400
	CodeInvalidJSON      = "invalid_json"            // 400
	CodeNotAnObject      = "not_an_object"           // 400: the body is JSON but not an object
	CodeMissingModel     = "missing_model"           // 400: no model, or an empty one
	CodeInvalidModel     = "invalid_model"           // 400: the model name is too long or holds a control character
	CodeInvalidField     = "invalid_field"           // 400: a top-level key that differs from one Sluice reads only in case
	CodeInvalidType      = "invalid_type"            // 400: a field Sluice reads has a value of the wrong JSON type (OpenAI's code)
	CodeIntegerBelowMin  = "integer_below_min_value" // 400: an integer field below its minimum (OpenAI's code)
	CodeIntegerAboveMax  = "integer_above_max_value" // 400: an integer field above its maximum (OpenAI's code)
	CodeDuplicateField   = "duplicate_field"         // 400: a field Sluice reads occurs twice
	CodeInvalidUTF8      = "invalid_utf8"            // 400
	CodeInvalidRequest   = "invalid_request"         // 400: anything else wrong with the body

	// Work Sluice cannot bound or meter.
	CodeInputByReference     = "input_by_reference"     // 400: the prompt points at content Sluice cannot see, and no context window is known for the model
	CodeBackgroundNotMetered = "background_not_metered" // 400: "background": true, and gateway.background is deny

	// The model and where it goes.
	CodeModelNotFound         = "model_not_found"         // 404
	CodeModelNotAllowed       = "model_not_allowed"       // 403: outside the key's or team's allow-list
	CodeModelUnpriced         = "model_unpriced"          // 403: gateway.unpriced_models: deny
	CodeUnsupportedEndpoint   = "unsupported_endpoint"    // 400: the provider does not speak this API
	CodeProviderNotConfigured = "provider_not_configured" // 503: the configuration changed under a fallback, or removed the provider a request was routed to (Envoy's cluster_not_found)
	CodeFallbackMisconfigured = "fallback_misconfigured"  // 503: an attempt whose upstream host names no provider
	CodeFallbackHostUnknown   = "fallback_host_unknown"   // 503: an attempt whose upstream host is a provider the model does not fall back to

	// Envoy's own local replies, rewritten by the listener's
	// local_reply_config (chain.LocalReply); body_too_large above is one.
	CodeUpstreamTimeout     = "upstream_timeout"     // 504: the provider did not answer within the route's timeout, or sent nothing for the stream idle timeout
	CodeUpstreamUnavailable = "upstream_unavailable" // 503: no healthy endpoint, or the connection failed before a response
	CodeNoRoute             = "no_route"             // 404: the router met a request Sluice did not route (the no-provider route)
	CodeGatewayUnavailable  = "gateway_unavailable"  // 503: Envoy could not reach Sluice's ext_authz or ext_proc (their failure replies)
	CodeGatewayTimeout      = "gateway_timeout"      // 504: Sluice's ext_proc did not answer within its message timeout, or the whole request was received but not handed on within the listener's request_timeout
	CodeGatewayOverloaded   = "gateway_overloaded"   // 503: Envoy's overload manager sheds new requests (stop_accepting_requests)
	CodeRequestTimeout      = "request_timeout"      // 408: the client did not send the whole request in time (the listener's stream idle timeout or request_timeout)
	CodeHeadersTooLarge     = "headers_too_large"    // 431: the request's headers are over Envoy's size or count limit (max_request_headers_kb, max_headers_count)
	CodeMalformedRequest    = "malformed_request"    // 400 (501 for a transfer-encoding other than chunked): Envoy's HTTP/1 codec refused the request
	CodeHTTPVersion         = "http_version"         // 426: an HTTP/1.0 request; the listener speaks HTTP/1.1 and HTTP/2
	CodeUpgradeRefused      = "upgrade_refused"      // 403: a protocol upgrade (WebSocket); the listener accepts none

	// Limits and budgets.
	CodeRateLimited          = "rate_limited"          // 429: a request-rate window is full
	CodeTokensRateLimited    = "tokens_rate_limited"   // 429: a token window has no room
	CodeInsufficientQuota    = "insufficient_quota"    // 429: a dollar budget is spent (OpenAI's type too)
	CodeAdmissionUnavailable = "admission_unavailable" // 503: limits cannot be checked
	CodeLedgerUnavailable    = "ledger_unavailable"    // 503: the spend ledger cannot take records (disk full, writes failing): the request could not be recorded
)

// openAIWire is how a refusal reads in OpenAI's error body where OpenAI's
// API answers the same refusal itself with its own type or code: its
// `type` ("" means by status: invalid_request_error below 500,
// server_error from 500) and `code` ("" means null). A code not listed
// keeps its own name as `code`, with the type by status. Anthropic's body
// has no code; its type follows the status (anthropicType).
var openAIWire = map[string]struct{ typ, code string }{
	// 401 "You didn't provide an API key…", code null; every unusable key
	// is OpenAI's invalid_api_key ("Incorrect API key provided: …").
	CodeMissingCredential:      {},
	CodeMalformedCredential:    {code: "invalid_api_key"},
	CodeConflictingCredentials: {code: "invalid_api_key"},
	CodeUnknownKey:             {code: "invalid_api_key"},
	CodeRevokedKey:             {code: "invalid_api_key"},
	CodeExpiredKey:             {code: "invalid_api_key"},
	CodeUnknownTeam:            {code: "invalid_api_key"},
	// "Invalid URL (POST /v1/x)" and "Method not allowed (GET /v1/x)",
	// code null.
	CodeUnknownPath:      {},
	CodeMethodNotAllowed: {},
	// "We could not parse the JSON body of your request…", code null.
	CodeInvalidJSON: {},
	// "you must provide a model parameter", code null.
	CodeMissingModel: {},
	// "Unknown parameter: 'Model'.": OpenAI knows no key in another case.
	CodeInvalidField: {code: "unknown_parameter"},
	// 403 "Project `…` does not have access to model `…`" is OpenAI's
	// model_not_found too; an unpriced model refused by policy reads the
	// same to a client.
	CodeModelNotAllowed: {code: "model_not_found"},
	CodeModelUnpriced:   {code: "model_not_found"},
	// 429s: OpenAI's type names the limit, the code is one for both.
	CodeRateLimited:       {typ: "requests", code: "rate_limit_exceeded"},
	CodeTokensRateLimited: {typ: "tokens", code: "rate_limit_exceeded"},
	// A Sluice budget reads as OpenAI's exhausted quota (429, type and
	// code insufficient_quota), the nearest refusal OpenAI makes.
	CodeInsufficientQuota: {typ: "insufficient_quota", code: "insufficient_quota"},
}
