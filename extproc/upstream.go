package extproc

import (
	"context"
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/sluicegw/sluice/chain"
	"github.com/sluicegw/sluice/llmapi"
	"github.com/sluicegw/sluice/payload"
	"github.com/sluicegw/sluice/policies"
)

// UpstreamProcessor handles the ext_proc messages of one attempt of a
// fallback request: the stream of chain.UpstreamExtProc, in the upstream
// filter chain of a provider's fallback member cluster (Envoy opens one per
// attempt, so a retry on the next provider gets a new one). It sees the
// request as the downstream processor left it — the client's path, model
// and anthropic-version, the caller's credentials already removed — and
// applies the same provider-specific rewrite as the single-provider path
// (targetRewrite) for its provider; on the response it adds the served-by
// headers the downstream processor meters with. It never admits, settles
// or writes the ledger: the downstream processor does, once per request.
//
// An attempt it cannot rewrite — the endpoint is one the provider cannot
// serve, or the model or the provider is no longer configured (the
// configuration changed between the downstream decision and this attempt)
// — is refused with an ImmediateResponse in the API's error dialect,
// carrying the served-by header. Envoy sends an upstream filter's local
// reply through the downstream filter chain, not the router's retry logic
// (router/upstream_request.cc), so that refusal is the client's answer and
// no later provider is tried.
//
// It is not safe for concurrent use; Server gives each stream its own.
type UpstreamProcessor struct {
	d        *Deps
	provider string
	snap     *policies.Snapshot
	state    state
	clientRequest
	target policies.Target // set once the body is rewritten
}

// NewUpstreamProcessor returns a processor for one attempt on the named
// provider (the stream's chain.UpstreamMetadataKey).
func NewUpstreamProcessor(d *Deps, provider string) *UpstreamProcessor {
	return &UpstreamProcessor{d: d, provider: provider, snap: d.Policy()}
}

// Handle answers one message with exactly one reply of the matching type
// (or an ImmediateResponse).
func (u *UpstreamProcessor) Handle(_ context.Context, m *extprocsvc.ProcessingRequest) *extprocsvc.ProcessingResponse {
	switch r := m.GetRequest().(type) {
	case *extprocsvc.ProcessingRequest_RequestHeaders:
		if u.state == awaitRequestHeaders {
			return u.requestHeaders(r.RequestHeaders)
		}
	case *extprocsvc.ProcessingRequest_RequestBody:
		if u.state == awaitRequestBody {
			return u.requestBody(r.RequestBody)
		}
	case *extprocsvc.ProcessingRequest_ResponseHeaders:
		return u.responseHeaders()
	}
	return continueReply(m)
}

// Cancel does nothing: an attempt holds no reservation and writes no
// record; the downstream processor settles the request.
func (u *UpstreamProcessor) Cancel(context.Context) {}

func (u *UpstreamProcessor) requestHeaders(h *extprocsvc.HttpHeaders) *extprocsvc.ProcessingResponse {
	u.note(headerGetter(h.GetHeaders()))
	switch {
	case u.ep == llmapi.Unknown:
		return u.deny(404, "unknown_path", fmt.Sprintf("%s is not an API Sluice can rewrite for provider %q", pathOnly(u.path), u.provider))
	case h.GetEndOfStream():
		return u.deny(400, payload.CodeEmptyBody, "the request has no body; send the JSON request")
	}
	u.state = awaitRequestBody
	return headersContinue(&extprocsvc.HeaderMutation{RemoveHeaders: []string{chain.RoutingHeader}})
}

func (u *UpstreamProcessor) requestBody(b *extprocsvc.HttpBody) *extprocsvc.ProcessingResponse {
	body := b.GetBody()
	req, err := payload.Parse(u.ep, body)
	if err != nil {
		code, msg := "invalid_request", err.Error()
		if pe, ok := err.(*payload.Error); ok {
			code, msg = pe.Code, pe.Message
		}
		return u.deny(400, code, msg)
	}
	route, ok := u.snap.Model(req.Model)
	if !ok {
		return u.deny(404, "model_not_found", fmt.Sprintf("model %q does not exist on this gateway", req.Model))
	}
	t, ok := route.Target(u.provider)
	if !ok {
		return u.deny(503, "provider_not_configured", fmt.Sprintf("model %q is no longer served by provider %q (the configuration changed); retry", route.Name, u.provider))
	}
	if msg := compatible(u.ep, t.Provider); msg != "" {
		return u.deny(400, "unsupported_endpoint", fmt.Sprintf("model %q: %s", route.Name, msg))
	}
	hm, rw := u.targetRewrite(u.snap, t, req.Model)
	resp, err := bodyReply(body, hm, rw, false)
	if err != nil {
		return u.deny(400, payload.CodeInvalidJSON, err.Error())
	}
	u.target = t
	u.state = awaitResponseHeaders
	u.d.Metrics.upstreamAttempts.WithLabelValues(u.provider).Inc()
	return resp
}

func (u *UpstreamProcessor) responseHeaders() *extprocsvc.ProcessingResponse {
	u.state = finished
	hm := &extprocsvc.HeaderMutation{SetHeaders: u.servedBy()}
	return headersResponse(hm)
}

// servedBy is the served-by header, and the served-model header once the
// target is known.
func (u *UpstreamProcessor) servedBy() []*corev3.HeaderValueOption {
	hs := []*corev3.HeaderValueOption{rawHeader(chain.ServedByHeader, u.provider)}
	if u.target.Provider != nil {
		hs = append(hs, rawHeader(chain.ServedModelHeader, u.target.Upstream))
	}
	return hs
}

// deny refuses the attempt; the reply names the provider that refused, so
// the downstream processor records it.
func (u *UpstreamProcessor) deny(status int, code, msg string) *extprocsvc.ProcessingResponse {
	u.state = finished
	resp := denial(u.d.Metrics, u.dialect, status, code, msg)
	im := resp.GetImmediateResponse()
	im.Headers.SetHeaders = append(im.Headers.SetHeaders, u.servedBy()...)
	return resp
}
