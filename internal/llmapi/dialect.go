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
