package extproc

import (
	"strconv"

	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/payload"
	"github.com/sluicegw/sluice/internal/provider"
	"github.com/sluicegw/sluice/policies"
)

// clientRequest is what a processor notes from the request headers, as the
// client sent them (the downstream processor never rewrites them for a
// fallback model, so the upstream processor sees the same values).
type clientRequest struct {
	path      string // :path, query included
	method    string
	requestID string
	ep        llmapi.Endpoint
	dialect   llmapi.Dialect
	// clientAnthropicVersion: the client sent anthropic-version itself.
	clientAnthropicVersion bool
}

func (c *clientRequest) note(get func(string) (string, bool)) {
	c.path, _ = get(":path")
	c.method, _ = get(":method")
	c.requestID, _ = get("x-request-id")
	_, c.clientAnthropicVersion = get("anthropic-version")
	c.ep = llmapi.EndpointFor(c.path)
	c.dialect = llmapi.RequestDialect(c.path, get)
}

// targetRewrite is the provider-specific rewrite of the request for target
// t — the one call, made by the downstream processor for a single-provider
// or weighted model and by the upstream processor on every attempt of a
// fallback model. What the rewrite is belongs to the provider's kind
// (provider.Provider.Rewrite: credential, path, version headers, the
// caller's credential headers removed, the model in the body); this turns
// it into Envoy's header mutation.
//
// The caller adds its own provider-agnostic parts (the routing header,
// ForceIncludeUsage) and answers with bodyReply.
func (c *clientRequest) targetRewrite(snap *policies.Snapshot, t policies.Target, model string) (*extprocsvc.HeaderMutation, payload.Rewrite) {
	pr := t.Provider
	rw := adapter(pr).Rewrite(provider.Target{
		APIKey:           pr.APIKey.Reveal(),
		APIVersion:       pr.APIVersion,
		AnthropicVersion: pr.AnthropicVersion,
		PathPrefix:       snap.PathPrefix(pr.Name),
		Upstream:         t.Upstream,
		// the account headers the client may still send (Configure'd)
		ForwardClientHeaders: pr.ForwardClientHeaders,
	}, provider.Request{Path: c.path, Endpoint: c.ep, Model: model, AnthropicVersion: c.clientAnthropicVersion})
	hm := &extprocsvc.HeaderMutation{RemoveHeaders: rw.Remove}
	for _, h := range rw.Set {
		hm.SetHeaders = append(hm.SetHeaders, rawHeader(h.Key, h.Value))
	}
	return hm, rw.Body
}

// adapter is what pr's kind does to a request (provider.For). The
// snapshot holds only known kinds (policies validates them), so it is
// never nil.
func adapter(pr *policies.Provider) provider.Provider {
	a, _ := provider.For(pr.Kind)
	return a
}

// clientCredentialsRemoved is the provider-agnostic header mutation: the
// caller's credential headers removed, nothing set.
func clientCredentialsRemoved() *extprocsvc.HeaderMutation {
	return &extprocsvc.HeaderMutation{RemoveHeaders: append([]string(nil), apikey.CredentialHeaders...)}
}

func hasSet(hm *extprocsvc.HeaderMutation, k string) bool {
	for _, h := range hm.GetSetHeaders() {
		if h.GetHeader().GetKey() == k {
			return true
		}
	}
	return false
}

// bodyReply answers a BUFFERED request body: hm, and when rw changes the
// body the new body with a content-length to match (envoy-protocol.md
// §1.4). clearRouteCache re-routes on hm (downstream only: Envoy ignores it
// in an upstream filter chain).
func bodyReply(body []byte, hm *extprocsvc.HeaderMutation, rw payload.Rewrite, clearRouteCache bool) (*extprocsvc.ProcessingResponse, error) {
	newBody, err := payload.Apply(body, rw)
	if err != nil {
		return nil, err
	}
	resp, cr := requestBodyReply(hm, true)
	cr.ClearRouteCache = clearRouteCache
	if string(newBody) != string(body) {
		cr.BodyMutation = &extprocsvc.BodyMutation{Mutation: &extprocsvc.BodyMutation_Body{Body: newBody}}
		hm.SetHeaders = append(hm.SetHeaders, rawHeader("content-length", strconv.Itoa(len(newBody))))
	}
	return resp, nil
}

// continueReply answers m, whatever its type, with "continue" and no
// mutation.
func continueReply(m *extprocsvc.ProcessingRequest) *extprocsvc.ProcessingResponse {
	switch m.GetRequest().(type) {
	case *extprocsvc.ProcessingRequest_RequestHeaders:
		return headersContinue(nil)
	case *extprocsvc.ProcessingRequest_RequestBody:
		return bodyContinue(nil)
	case *extprocsvc.ProcessingRequest_ResponseHeaders:
		return headersResponse(nil)
	case *extprocsvc.ProcessingRequest_ResponseBody:
		resp, _ := responseBodyReply()
		return resp
	case *extprocsvc.ProcessingRequest_RequestTrailers:
		return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocsvc.TrailersResponse{}}}
	case *extprocsvc.ProcessingRequest_ResponseTrailers:
		return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocsvc.TrailersResponse{}}}
	}
	// An empty oneof: answer something Envoy will treat as spurious rather
	// than guess.
	return &extprocsvc.ProcessingResponse{}
}
