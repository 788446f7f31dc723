package apierr

import (
	"encoding/json"
	"strings"
)

// Dialect is the error-body shape a client understands.
type Dialect uint8

const (
	// OpenAI: {"error":{"message","type","param","code"}}.
	OpenAI Dialect = iota
	// Anthropic: {"type":"error","error":{"type","message"}}.
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

// CodeInsufficientQuota is the code (and, in OpenAI's shape, the type) of
// a refusal because a dollar budget is spent.
const CodeInsufficientQuota = "insufficient_quota"

// Body renders the error body for status in dialect d. code is Sluice's
// stable error code; message is shown to the client as is.
func Body(d Dialect, status int, code, message string) []byte {
	var v any
	if d == Anthropic {
		v = anthropicBody{Type: "error", Error: anthropicError{Type: anthropicType(status), Message: message}}
	} else {
		typ := openAIType(status)
		if code == CodeInsufficientQuota {
			// OpenAI answers an exhausted quota with 429 and this type.
			typ = CodeInsufficientQuota
		}
		v = openAIBody{Error: openAIError{Message: message, Type: typ, Code: code}}
	}
	b, err := json.Marshal(v)
	if err != nil {
		// Only strings and fixed structs are marshalled: this cannot fail.
		panic("apierr: " + err.Error())
	}
	return b
}

type openAIBody struct {
	Error openAIError `json:"error"`
}

type openAIError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

type anthropicBody struct {
	Type  string         `json:"type"`
	Error anthropicError `json:"error"`
}

type anthropicError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// openAIType follows the `type` values OpenAI's API returns.
func openAIType(status int) string {
	switch {
	case status == 429:
		return "rate_limit_error"
	case status == 402:
		return "insufficient_quota"
	case status >= 500:
		return "server_error"
	case status == 401:
		return "authentication_error"
	case status == 403:
		return "permission_error"
	default:
		return "invalid_request_error"
	}
}

// anthropicType follows the error types of Anthropic's API documentation.
func anthropicType(status int) string {
	switch status {
	case 401:
		return "authentication_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}
