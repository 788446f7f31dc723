package apierr

import (
	"encoding/json"

	"github.com/sluicegw/sluice/internal/llmapi"
)

// Body renders e as the JSON error body of the API dialect d: OpenAI's
// {"error":{message, type, param, code}} — param is e.Param, or null when
// it is empty — or Anthropic's {"type":"error","error":{type, message}}.
// The type follows from e.Status (and, for OpenAI, an exhausted quota).
func Body(d llmapi.Dialect, e *Error) []byte {
	var v any
	if d == llmapi.Anthropic {
		v = anthropicBody{Type: "error", Error: anthropicError{Type: anthropicType(e.Status), Message: e.Message}}
	} else {
		typ := openAIType(e.Status)
		if e.Code == CodeInsufficientQuota {
			// OpenAI answers an exhausted quota with 429 and this type.
			typ = CodeInsufficientQuota
		}
		var param *string
		if e.Param != "" {
			param = &e.Param
		}
		v = openAIBody{Error: openAIError{Message: e.Message, Type: typ, Param: param, Code: e.Code}}
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
