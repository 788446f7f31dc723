package extproc

import (
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluicegw/sluice/internal/apierr"
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

// modelNotFound refuses a model the gateway does not have.
func modelNotFound(model string) *apierr.Error {
	return apierr.New(404, apierr.CodeModelNotFound, "model %q does not exist on this gateway", model)
}

// unsupportedEndpoint refuses an endpoint the model's provider cannot
// serve; why is compatible's answer.
func unsupportedEndpoint(model, why string) *apierr.Error {
	return apierr.New(400, apierr.CodeUnsupportedEndpoint, "model %q: %s", model, why)
}
