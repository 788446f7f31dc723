package llmapi

// The headers a client of these APIs sends its key in, lower-case as Envoy
// presents them: OpenAI's authorization (Bearer), Anthropic's x-api-key,
// and api-key, which Azure OpenAI clients send. They are named here, with
// the APIs, because both sides of the gateway speak of them: the caller's
// key is read from them (apikey) and they never travel upstream with a
// provider's credential (the provider kinds).
const (
	HeaderAuthorization = "authorization"
	HeaderXAPIKey       = "x-api-key"
	HeaderAPIKey        = "api-key"
)

// CredentialHeaders lists every header a caller's key may arrive in, in
// the order they are read. It is shared: never modify it.
var CredentialHeaders = []string{HeaderAuthorization, HeaderXAPIKey, HeaderAPIKey}
