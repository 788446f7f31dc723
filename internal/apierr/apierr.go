package apierr

import (
	"encoding/json"

	"github.com/sluicegw/sluice/internal/llmapi"
)

// Body renders e as the JSON error body of the API dialect d, in the
// provider's exact shape, so that an SDK reads it as the provider's own:
// OpenAI's {"error":{message, type, param, code}} — param is e.Param, or
// null when it is empty; type and code are OpenAI's for the same refusal
// (openAIWire, codes.go), code null where OpenAI sends null — or
// Anthropic's {"type":"error","error":{type, message}}, its type by
// status. The message is the dialect's own (e.OpenAIMessage,
// e.AnthropicMessage) when set, else e.Message.
func Body(d llmapi.Dialect, e *Error) []byte {
	var v any
	if d == llmapi.Anthropic {
		msg := e.Message
		if e.AnthropicMessage != "" {
			msg = e.AnthropicMessage
		}
		v = anthropicBody{Type: "error", Error: anthropicError{Type: anthropicType(e.Status), Message: msg}}
	} else {
		typ, code := OpenAITypeCode(e)
		var param, c *string
		if e.Param != "" {
			param = &e.Param
		}
		if code != "" {
			c = &code
		}
		msg := e.Message
		if e.OpenAIMessage != "" {
			msg = e.OpenAIMessage
		}
		v = openAIBody{Error: openAIError{Message: msg, Type: typ, Param: param, Code: c}}
	}
	b, err := json.Marshal(v)
	if err != nil {
		// Only strings and fixed structs are marshalled: this cannot fail.
		panic("apierr: " + err.Error())
	}
	return b
}

// OpenAITypeCode is the `type` and `code` of e in OpenAI's body (code ""
// is null): OpenAI's own where it answers the same refusal (openAIWire),
// else the type by status and Sluice's code.
func OpenAITypeCode(e *Error) (typ, code string) {
	typ, code = "", e.Code
	if w, ok := openAIWire[e.Code]; ok {
		typ, code = w.typ, w.code
	}
	if typ == "" {
		typ = "invalid_request_error"
		if e.Status >= 500 {
			typ = "server_error"
		}
	}
	return typ, code
}

type openAIBody struct {
	Error openAIError `json:"error"`
}

type openAIError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

type anthropicBody struct {
	Type  string         `json:"type"`
	Error anthropicError `json:"error"`
}

type anthropicError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// anthropicType is the error type Anthropic's API documentation gives each
// status (400 invalid_request_error, also for other 4xx; 401
// authentication_error; 403 permission_error; 404 not_found_error; 413
// request_too_large; 429 rate_limit_error; 500 api_error; 529
// overloaded_error).
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
