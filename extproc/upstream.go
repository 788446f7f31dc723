package extproc

import (
	"context"

	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/principal"
	"github.com/sluicegw/sluice/policies"
)

// UpstreamProcessor handles the ext_proc messages of one attempt of a
// fallback request: the stream of chain.UpstreamExtProc, in the upstream
// filter chain of the model's aggregate cluster (Envoy opens one per
// attempt, so a retry on the next provider gets a new one). Its provider
// is the one the attempt's upstream host belongs to, which Envoy sends as
// the request attribute chain.UpstreamHostProviderAttribute (the
// endpoint metadata xds gives every provider endpoint): an aggregate
// cluster skips members without healthy hosts, so the attempt's number
// does not name its member, and rewriting for any provider but the host's
// would send one provider's credential to another. It rewrites from the
// request as the client sent it: the body is the router's buffered copy,
// the path, whether the client sent anthropic-version and the model it was
// routed for come from the dynamic metadata the downstream processor left
// (the header map itself carries any previous attempt's rewrite). It
// applies the same provider-specific rewrite as the single-provider path
// (targetRewrite); on the response it adds the served-by headers the
// downstream processor meters with. It never admits, settles or writes the
// ledger: the downstream processor does, once per request.
//
// It fails closed: an attempt whose host names no provider
// (fallback_misconfigured), one the model does not fall back to
// (fallback_host_unknown), or a request whose model is no longer the one
// it was routed for is refused with 503 and nothing of a provider's is
// sent. An attempt it cannot rewrite — the endpoint is one the provider
// cannot serve, or the model or the provider is no longer configured (the
// configuration changed between the downstream decision and this attempt)
// — is refused with an ImmediateResponse in the API's error dialect,
// carrying the served-by header once the provider is known. Envoy sends an
// upstream filter's local reply through the downstream filter chain, not
// the router's retry logic (router/upstream_request.cc), so that refusal
// is the client's answer and no later provider is tried.
//
// It is not safe for concurrent use; Server gives each stream its own.
type UpstreamProcessor struct {
	d          *Deps
	snap       *policies.Snapshot
	state      state
	host       string // the provider of the attempt's upstream host
	model      string // the fallback model the request was routed for, from the handoff
	headerPath string // :path as this attempt found it
	// clientRequest is the request as the client sent it, built from the
	// handoff the downstream processor left.
	clientRequest
	served servedBy // the provider once it is known to be the model's; sent once rewritten
}

// NewUpstreamProcessor returns a processor for one attempt.
func NewUpstreamProcessor(d *Deps) *UpstreamProcessor {
	return &UpstreamProcessor{d: d, snap: d.Policy()}
}

// Handle answers one message with exactly one reply of the matching type
// (or an ImmediateResponse).
func (u *UpstreamProcessor) Handle(ctx context.Context, m *extprocsvc.ProcessingRequest) *extprocsvc.ProcessingResponse {
	switch r := m.GetRequest().(type) {
	case *extprocsvc.ProcessingRequest_RequestHeaders:
		if u.state == awaitRequestHeaders {
			return u.requestHeaders(ctx, m, r.RequestHeaders)
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

func (u *UpstreamProcessor) requestHeaders(ctx context.Context, m *extprocsvc.ProcessingRequest, h *extprocsvc.HttpHeaders) *extprocsvc.ProcessingResponse {
	get := headerGetter(h.GetHeaders())
	u.headerPath, _ = get(":path")
	rid, _ := get("x-request-id")
	ho := decodeHandoff(m.GetMetadataContext(), rid)
	// Nothing of the attempt is read before its handoff verifies: an
	// attempt the downstream processor did not admit gets no credential.
	// The handoff lives as long as the reservation it rode on.
	if r := ho.verify(u.d.principalKeys(), u.d.Now(), u.snap.Gateway().ReservationTTL); r != principal.OK {
		var c clientRequest
		c.note(get)
		u.clientRequest = c
		u.d.refusedPrincipal(ctx, r, "handoff", "request_id", clip(rid, maxClientRequestID), "path", pathOnly(c.path))
		return u.refuse(handoffRefusal(r))
	}
	u.clientRequest, u.model = ho.request(get), ho.Model
	u.host = hostProvider(m)
	switch {
	case u.host == "":
		return u.refuse(apierr.New(503, apierr.CodeFallbackMisconfigured, "the fallback attempt's upstream host names no provider (endpoint metadata %s.%s, sent as the request attribute %s), so no provider's credential can be sent with it",
			chain.EndpointMetadataNamespace, chain.EndpointProviderKey, chain.UpstreamHostProviderAttribute))
	case u.ep == llmapi.Unknown || u.ep.Method() != "POST": // the model endpoints never reach a provider
		return u.refuse(apierr.New(404, apierr.CodeUnknownPath, "%s is not an API Sluice can rewrite for a provider", pathOnly(u.path)))
	case h.GetEndOfStream():
		return u.refuse(apierr.New(400, apierr.CodeEmptyBody, "the request has no body; send the JSON request"))
	}
	u.state = awaitRequestBody
	return headersContinue(&extprocsvc.HeaderMutation{RemoveHeaders: attemptHeaders()})
}

func (u *UpstreamProcessor) requestBody(b *extprocsvc.HttpBody) *extprocsvc.ProcessingResponse {
	body := b.GetBody()
	r, err := parseModel(u.snap, u.ep, body)
	if err != nil {
		return u.refuse(err)
	}
	req, route := r.req, r.route
	// (The routing header is not compared: the first attempt removed it
	// from the header map every attempt shares.)
	switch {
	case !route.Fallback():
		return u.refuse(apierr.New(503, apierr.CodeProviderNotConfigured, "model %q no longer falls back over providers (the configuration changed); retry", route.Name))
	case u.model != "" && u.model != route.Name:
		return u.refuse(apierr.New(503, apierr.CodeProviderNotConfigured, "the request was routed for model %q, but its model %q is now %q (the configuration changed); retry", u.model, req.Model, route.Name))
	}
	t, ok := targetOf(route, u.host)
	if !ok {
		return u.refuse(apierr.New(503, apierr.CodeFallbackHostUnknown, "the fallback attempt went to a host of provider %q, which model %q does not fall back to; no credential was sent", u.host, route.Name))
	}
	u.served.Provider = t.Provider.Name
	if msg := compatible(u.ep, t.Provider); msg != "" {
		return u.refuse(unsupportedEndpoint(route.Name, msg))
	}
	hm, rw := u.targetRewrite(u.snap, t, req.Model)
	if !hasSet(hm, ":path") && u.headerPath != u.path {
		// A previous attempt rewrote :path for its provider; this one
		// needs the client's back.
		hm.SetHeaders = append(hm.SetHeaders, rawHeader(":path", u.path))
	}
	resp, err := reply(body, hm, rw, false)
	if err != nil {
		return u.refuse(err)
	}
	u.served.Sent, u.served.Model = true, t.Upstream
	u.state = awaitResponseHeaders
	u.d.Metrics.upstreamAttempts.WithLabelValues(u.served.Provider).Inc()
	return resp
}

func (u *UpstreamProcessor) responseHeaders() *extprocsvc.ProcessingResponse {
	u.state = finished
	return headersResponse(&extprocsvc.HeaderMutation{SetHeaders: u.served.headers()})
}

// refuse refuses the attempt with e; the reply names the provider that
// refused, so the downstream processor records it.
func (u *UpstreamProcessor) refuse(e *apierr.Error) *extprocsvc.ProcessingResponse {
	u.state = finished
	return denial(u.d.Metrics, u.dialect, e, u.served.headers()...)
}

// targetOf is route's target on provider, ok false when the route has
// none there.
func targetOf(route *policies.ModelRoute, provider string) (policies.Target, bool) {
	for _, t := range route.Targets {
		if t.Provider.Name == provider {
			return t, true
		}
	}
	return policies.Target{}, false
}
