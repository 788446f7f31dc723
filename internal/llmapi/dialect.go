package llmapi

import "strings"

// Dialect is an API family: the shape of its requests, responses and
// error bodies, and the credential header its clients send. It is the one
// definition: error bodies (apierr), provider kinds (provider) and the
// endpoints here all speak in it.
type Dialect uint8

const (
	// OpenAI: /v1/chat/completions, /v1/completions, /v1/embeddings,
	// /v1/responses; errors {"error":{"message","type","param","code"}}.
	OpenAI Dialect = iota
	// Anthropic: /v1/messages; errors
	// {"type":"error","error":{"type","message"}}.
	Anthropic
)

func (d Dialect) String() string {
	if d == Anthropic {
		return "anthropic"
	}
	return "openai"
}

// DialectFor returns the dialect of the API a request path belongs to: the
// Anthropic Messages API (`/v1/messages`, `/v1/messages/…`, `/v1/complete`)
// speaks Anthropic; every other path, OpenAI's `/v1/chat/completions`,
// `/v1/completions`, `/v1/embeddings`, `/v1/responses` included, speaks
// OpenAI. A query string is ignored.
func DialectFor(path string) Dialect {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	if path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/") || path == "/v1/complete" {
		return Anthropic
	}
	return OpenAI
}

// RequestDialect is the dialect of a request, for its answer and its
// error bodies: DialectFor(path), except on the model endpoints
// (/v1/models, /v1/models/{id}), which both families serve at the same
// path: there a request carrying an anthropic-version header is
// Anthropic's (Anthropic's API requires the header on every request, and
// its SDKs always send it), any other OpenAI's. The credential header
// does not decide: ext_authz removes it before ext_proc sees the request,
// so it would answer differently with and without ext_authz in the
// chain.
func RequestDialect(path string, header func(string) (string, bool)) Dialect {
	switch EndpointFor(path) {
	case ModelList, ModelGet:
		if _, ok := header("anthropic-version"); ok {
			return Anthropic
		}
		return OpenAI
	}
	return DialectFor(path)
}
