// Package llmapi owns the identity of the LLM API endpoints Sluice
// understands: which request paths they are, which API family (dialect)
// each belongs to, and whether a request to it can stream, and the
// notation OpenAI's API writes durations in (OpenAIDuration). Parsers of
// request bodies (payload) and of responses (usage) key on it.
//
// It must not parse bodies or know about providers.
package llmapi

import (
	"net/url"
	"strings"
)

// Endpoint is an LLM API endpoint.
type Endpoint uint8

// The endpoints Sluice understands: the ones it meters (ChatCompletions
// to Messages), one it forwards unmetered (CountTokens) and the ones it
// answers itself (ModelList, ModelGet). Unknown is every other path.
const (
	Unknown         Endpoint = iota
	ChatCompletions          // OpenAI POST /v1/chat/completions
	Completions              // OpenAI POST /v1/completions
	Embeddings               // OpenAI POST /v1/embeddings
	Responses                // OpenAI POST /v1/responses
	Messages                 // Anthropic POST /v1/messages
	CountTokens              // Anthropic POST /v1/messages/count_tokens
	ModelList                // OpenAI and Anthropic GET /v1/models
	ModelGet                 // OpenAI and Anthropic GET /v1/models/{id}
)

var names = [...]string{"unknown", "chat_completions", "completions", "embeddings", "responses", "messages", "count_tokens", "models", "model"}

// String is the endpoint's stable name (metrics label, ledger column).
func (e Endpoint) String() string {
	if int(e) < len(names) {
		return names[e]
	}
	return "unknown"
}

// EndpointFor maps a request path (a query string is ignored) to its
// endpoint. Only exact paths match: /v1/chat/completions/x is Unknown;
// /v1/models/ followed by anything but nothing is ModelGet (ModelID
// reads the id).
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
	case "/v1/messages/count_tokens":
		return CountTokens
	case "/v1/models":
		return ModelList
	}
	if id, ok := strings.CutPrefix(path, modelsPrefix); ok && id != "" {
		return ModelGet
	}
	return Unknown
}

const modelsPrefix = "/v1/models/"

// ModelID is the model id a ModelGet path names: everything after
// /v1/models/ (a query string ignored), percent-decoded — model names may
// hold '/', which a client may send as is or as %2F, and Envoy forwards
// an escaped slash unchanged by default
// (path_with_escaped_slashes_action). ok is false for any other path, or
// an id that does not decode.
func ModelID(path string) (id string, ok bool) {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	raw, ok := strings.CutPrefix(path, modelsPrefix)
	if !ok || raw == "" {
		return "", false
	}
	id, err := url.PathUnescape(raw)
	if err != nil || id == "" {
		return "", false
	}
	return id, true
}

// Dialect is the API family's error dialect: the path's (DialectFor). The
// model endpoints are both families'; RequestDialect decides for them.
func (e Endpoint) Dialect() Dialect {
	if e == Messages || e == CountTokens {
		return Anthropic
	}
	return OpenAI
}

// Method is the HTTP method the endpoint takes.
func (e Endpoint) Method() string {
	if e == ModelList || e == ModelGet {
		return "GET"
	}
	return "POST"
}

// CanStream reports whether requests to the endpoint may ask for a stream.
func (e Endpoint) CanStream() bool {
	switch e {
	case Embeddings, Unknown, CountTokens, ModelList, ModelGet:
		return false
	}
	return true
}
