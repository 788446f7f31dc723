// Package llmapi owns the identity of the LLM API endpoints Sluice
// understands: which request paths they are, which API family (dialect)
// each belongs to, and whether a request to it can stream. Parsers of
// request bodies (payload) and of responses (usage) key on it.
//
// It must not parse bodies or know about providers.
package llmapi

import "strings"

// Endpoint is an LLM API endpoint.
type Endpoint uint8

// The endpoints Sluice meters. Unknown is every other path.
const (
	Unknown         Endpoint = iota
	ChatCompletions          // OpenAI POST /v1/chat/completions
	Completions              // OpenAI POST /v1/completions
	Embeddings               // OpenAI POST /v1/embeddings
	Responses                // OpenAI POST /v1/responses
	Messages                 // Anthropic POST /v1/messages
)

var names = [...]string{"unknown", "chat_completions", "completions", "embeddings", "responses", "messages"}

// String is the endpoint's stable name (metrics label, ledger column).
func (e Endpoint) String() string {
	if int(e) < len(names) {
		return names[e]
	}
	return "unknown"
}

// EndpointFor maps a request path (a query string is ignored) to its
// endpoint. Only exact paths match: /v1/chat/completions/x is Unknown.
func EndpointFor(path string) Endpoint {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	switch path {
	case "/v1/chat/completions":
		return ChatCompletions
	case "/v1/completions":
		return Completions
	case "/v1/embeddings":
		return Embeddings
	case "/v1/responses":
		return Responses
	case "/v1/messages":
		return Messages
	}
	return Unknown
}

// Dialect is the API family's error dialect.
func (e Endpoint) Dialect() Dialect {
	if e == Messages {
		return Anthropic
	}
	return OpenAI
}

// CanStream reports whether requests to the endpoint may ask for a stream.
func (e Endpoint) CanStream() bool { return e != Embeddings && e != Unknown }
