package extproc

import (
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/principal"
)

// The fallback handoff: everything a fallback request's two processors
// tell each other, in one place (internal/chain names the wire).
//
// Downstream processor → each attempt's upstream processor:
//   - handoff, in the request-body reply's dynamic metadata (namespace
//     chain.UsageNamespace): the request as the client sent it, since the
//     header map is shared by every attempt and may carry the previous
//     attempt's rewrite;
//   - chain.RoutingHeader (set downstream to route to the model's aggregate
//     cluster) and chain.AttemptCountHeader (set by Envoy, numbering the
//     attempt), both removed by the attempt (attemptHeaders) so no
//     provider sees them.
//
// Envoy → each attempt's upstream processor: the provider of the host the
// attempt goes to (hostProvider), the request attribute
// chain.UpstreamHostProviderAttribute, which names the attempt's provider
// (its number does not: an aggregate cluster skips members without
// healthy hosts).
//
// Upstream processor → downstream processor: servedBy, in response
// headers, which the downstream processor reads and removes.

// handoff is the part of the client's request an attempt cannot read from
// its own headers.
type handoff struct {
	// Path is the :path the client sent, query included
	// (chain.FallbackPathKey).
	Path string
	// ClientAnthropicVersion: the client sent anthropic-version itself
	// (chain.FallbackAnthropicVersionKey).
	ClientAnthropicVersion bool
	// Model is the fallback model the downstream processor routed the
	// request to (chain.FallbackModelKey): an attempt's provider must be
	// one of its providers.
	Model string
	// RequestID is the request's x-request-id, which the signature binds
	// the handoff to (every attempt carries the same header).
	RequestID string
	// Signature signs the fields above (chain.FallbackSignatureKey).
	Signature string
}

// fields are what the handoff's signature covers, after the request id.
func (h handoff) fields() [3]string {
	av := "0"
	if h.ClientAnthropicVersion {
		av = "1"
	}
	return [3]string{h.Path, av, h.Model}
}

// verify checks h's signature at now: issued for these fields and this
// request no longer ago than maxAge.
func (h handoff) verify(keys *principal.Keys, now time.Time, maxAge time.Duration) principal.Reason {
	if keys == nil {
		return reasonNoKeys
	}
	f := h.fields()
	return keys.Verify(h.Signature, principal.ForHandoff, h.RequestID, now, maxAge, f[:]...)
}

// handoffFrom is the handoff of the client's request c, routed to model.
func handoffFrom(c *clientRequest, model string) handoff {
	return handoff{Path: c.path, ClientAnthropicVersion: c.clientAnthropicVersion, Model: model, RequestID: c.requestID}
}

// Encode is h, signed with keys at now, as the dynamic metadata of the
// downstream processor's request-body reply.
func (h handoff) Encode(keys *principal.Keys, now time.Time) *structpb.Struct {
	f := h.fields()
	sig := keys.Sign(principal.ForHandoff, h.RequestID, now, f[:]...)
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		chain.UsageNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			chain.FallbackPathKey:             structpb.NewStringValue(h.Path),
			chain.FallbackAnthropicVersionKey: structpb.NewBoolValue(h.ClientAnthropicVersion),
			chain.FallbackModelKey:            structpb.NewStringValue(h.Model),
			chain.FallbackSignatureKey:        structpb.NewStringValue(sig),
		}}),
	}}
}

// decodeHandoff reads the handoff from the metadata context of an
// attempt's request headers, bound to the attempt's x-request-id
// (requestID); its signature is empty when there is none.
func decodeHandoff(md *corev3.Metadata, requestID string) handoff {
	f := md.GetFilterMetadata()[chain.UsageNamespace].GetFields()
	return handoff{
		Path:                   f[chain.FallbackPathKey].GetStringValue(),
		ClientAnthropicVersion: f[chain.FallbackAnthropicVersionKey].GetBoolValue(),
		Model:                  f[chain.FallbackModelKey].GetStringValue(),
		RequestID:              requestID,
		Signature:              f[chain.FallbackSignatureKey].GetStringValue(),
	}
}

// request is the client's request as an attempt rewrites it: what the
// attempt's headers (get) say, with h's path — and so endpoint and error
// dialect — and anthropic-version when the handoff carries a path.
func (h handoff) request(get func(string) (string, bool)) clientRequest {
	var c clientRequest
	c.note(get)
	if h.Path != "" {
		c.path = h.Path
		c.ep, c.dialect = llmapi.EndpointFor(h.Path), llmapi.DialectFor(h.Path)
		c.clientAnthropicVersion = h.ClientAnthropicVersion
	}
	return c
}

// hostProvider is the provider of the attempt's upstream host, from the
// attributes of the attempt's first message (Envoy evaluates request
// attributes for the first request-direction message only); "" when
// Envoy sent none — the endpoint has no provider metadata, or the filter
// does not ask for it.
func hostProvider(m *extprocsvc.ProcessingRequest) string {
	return m.GetAttributes()[chain.ExtProcAttributesKey].GetFields()[chain.UpstreamHostProviderAttribute].GetStringValue()
}

// attemptHeaders are the request headers of the handoff, removed by the
// attempt before the request reaches its provider.
func attemptHeaders() []string {
	return []string{chain.RoutingHeader, chain.AttemptCountHeader}
}

// servedBy is who answered an attempt.
type servedBy struct {
	// Provider is the attempt's provider (chain.ServedByHeader); "" until
	// the upstream processor knows the model.
	Provider string
	// Sent: the attempt was rewritten and sent, to Model, the upstream
	// model name (chain.ServedModelHeader). False when the upstream
	// processor refused the attempt.
	Sent  bool
	Model string
}

// headers are s as response headers: none without a provider, the
// served-model header only when the attempt was sent.
func (s servedBy) headers() []*corev3.HeaderValueOption {
	if s.Provider == "" {
		return nil
	}
	hs := []*corev3.HeaderValueOption{rawHeader(chain.ServedByHeader, s.Provider)}
	if s.Sent {
		hs = append(hs, rawHeader(chain.ServedModelHeader, s.Model))
	}
	return hs
}

// decodeServedBy reads s from response headers; ok false when neither
// header is there.
func decodeServedBy(get func(string) (string, bool)) (s servedBy, ok bool) {
	by, okBy := get(chain.ServedByHeader)
	model, okModel := get(chain.ServedModelHeader)
	return servedBy{Provider: by, Sent: okModel, Model: model}, okBy || okModel
}

// servedByHeaders are the response headers of the handoff, removed by the
// downstream processor before the response reaches the client.
func servedByHeaders() []string {
	return []string{chain.ServedByHeader, chain.ServedModelHeader}
}
