package extproc

import (
	"fmt"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/llmapi"
)

// denial is the one place an *apierr.Error becomes an Envoy reply: an
// ImmediateResponse with e's status, a JSON body in the dialect of the API
// called, a retry-after header when e says when a retry can succeed, then
// extra (the upstream processor's served-by headers). It is counted in
// sluice_extproc_denials_total by e.Code, and its response-code details
// are sluice_<code>.
func denial(m *Metrics, dialect llmapi.Dialect, e *apierr.Error, extra ...*corev3.HeaderValueOption) *extprocsvc.ProcessingResponse {
	m.denials.WithLabelValues(e.Code).Inc()
	hs := []*corev3.HeaderValueOption{rawHeader("content-type", "application/json")}
	if s := e.RetryAfterSeconds(); s > 0 {
		hs = append(hs, rawHeader("retry-after", strconv.FormatInt(s, 10)))
	}
	hs = append(hs, extra...)
	return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocsvc.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode(e.Status)},
		Headers: &extprocsvc.HeaderMutation{SetHeaders: hs},
		Body:    apierr.Body(dialect, e),
		Details: "sluice_" + e.Code,
	}}}
}

// parseRefusal is the refusal of a body payload.Parse rejected.
func parseRefusal(err error) *apierr.Error {
	if e, ok := apierr.As(err); ok {
		return e
	}
	return apierr.New(400, apierr.CodeInvalidRequest, err.Error())
}

// modelNotFound refuses a model the gateway does not have (or, on
// /v1/models/{id}, one the key may not use: the same answer), in OpenAI's
// and Anthropic's own words for it.
func modelNotFound(model string) *apierr.Error {
	e := apierr.New(404, apierr.CodeModelNotFound, "model %q does not exist on this gateway", model)
	e.OpenAIMessage = "The model `" + model + "` does not exist or you do not have access to it."
	e.AnthropicMessage = "model: " + model
	return e
}

// modelNotAllowed refuses a model outside the key's or team's allow-list:
// OpenAI's 403 for a model the project may not use (its principal, a
// project there, is the key and team here), Anthropic's permission_error.
func modelNotAllowed(p *keyring.Principal, model string) *apierr.Error {
	e := apierr.New(403, apierr.CodeModelNotAllowed, "API key %s (team %s) may not use model %q", p.KeyID, p.Team, model)
	e.OpenAIMessage = fmt.Sprintf("API key `%s` of team `%s` does not have access to model `%s`", p.KeyID, p.Team, model)
	e.AnthropicMessage = fmt.Sprintf("Your API key does not have permission to use the specified resource. (API key %s of team %s may not use model %s.)", p.KeyID, p.Team, model)
	return e
}

// bodyTooLarge refuses a body of size bytes (decimal digits: its length
// or its declared content-length) over gateway.max_request_body_bytes;
// the Anthropic body starts with Anthropic's words for it.
func bodyTooLarge(size string, limit int64) *apierr.Error {
	e := apierr.New(413, apierr.CodeBodyTooLarge, "the request body is %s bytes; this gateway accepts at most %d", size, limit)
	e.AnthropicMessage = "Request exceeds the maximum size (" + e.Message + ")"
	return e
}

// unknownPath refuses a path that is not an API the gateway serves:
// OpenAI's "Invalid URL (POST /v1/x)", then the APIs it does serve.
func unknownPath(method, path string) *apierr.Error {
	const serves = "POST /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses, /v1/messages or /v1/messages/count_tokens, or GET /v1/models or /v1/models/{id}"
	e := apierr.New(404, apierr.CodeUnknownPath, "%s is not an API this gateway serves; use "+serves, path)
	e.OpenAIMessage = fmt.Sprintf("Invalid URL (%s %s). This gateway serves %s.", method, path, serves)
	return e
}

// methodNotAllowed refuses a known API called with the wrong method:
// OpenAI's "Method not allowed (GET /v1/x)", then the method it takes.
func methodNotAllowed(method, path, want string) *apierr.Error {
	e := apierr.New(405, apierr.CodeMethodNotAllowed, "%s takes %s, got %s", path, want, method)
	e.OpenAIMessage = fmt.Sprintf("Method not allowed (%s %s). It takes %s.", method, path, want)
	return e
}

// unsupportedEndpoint refuses an endpoint the model's provider cannot
// serve; why is compatible's answer.
func unsupportedEndpoint(model, why string) *apierr.Error {
	return apierr.New(400, apierr.CodeUnsupportedEndpoint, "model %q: %s", model, why)
}
