package extproc

import (
	"time"

	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/principal"
)

// delivered is reply metadata as Envoy hands it to the next ext_proc
// stream of the request: each top-level field a namespace.
func delivered(s *structpb.Struct) *corev3.Metadata {
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
	for ns, v := range s.GetFields() {
		md.FilterMetadata[ns] = v.GetStructValue()
	}
	return md
}

func headerMap(hs []*corev3.HeaderValueOption) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for _, h := range hs {
		m.Headers = append(m.Headers, h.GetHeader())
	}
	return m
}

// TestHandoffRoundTrip: the attempt rebuilds the client's request from
// the handoff, whatever a previous attempt did to the shared header map.
func TestHandoffRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		client  []string // the client's request headers
		attempt []string // the header map as the attempt finds it
	}{
		{name: "chat, after an Azure attempt rewrote the path",
			client:  []string{":method", "POST", ":path", "/v1/chat/completions?x=1", "x-request-id", "rid-1"},
			attempt: []string{":method", "POST", ":path", "/openai/deployments/dep/chat/completions?api-version=2024-10-21", "x-request-id", "rid-1"}},
		{name: "messages without anthropic-version, after an attempt set one",
			client:  []string{":method", "POST", ":path", "/v1/messages", "x-request-id", "rid-2"},
			attempt: []string{":method", "POST", ":path", "/prefix/v1/messages", "x-request-id", "rid-2", "anthropic-version", "2023-06-01"}},
		{name: "messages with the client's anthropic-version",
			client:  []string{":method", "POST", ":path", "/v1/messages", "anthropic-version", "2024-01-01"},
			attempt: []string{":method", "POST", ":path", "/v1/messages", "anthropic-version", "2024-01-01"}},
		{name: "first attempt: nothing rewritten yet",
			client:  []string{":method", "POST", ":path", "/v1/embeddings"},
			attempt: []string{":method", "POST", ":path", "/v1/embeddings"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var client clientRequest
			client.note(headerGetter(hdrs(tt.client...)))
			h := handoffFrom(&client, "fb")
			dec := decodeHandoff(delivered(h.Encode(testKeys, t0)), h.RequestID)
			if r := dec.verify(testKeys, t0, time.Minute); r != principal.OK {
				t.Errorf("the handoff's signature: %q", r)
			}
			if dec.Signature = ""; dec != h {
				t.Errorf("decodeHandoff(Encode(%+v)) = %+v", h, dec)
			}
			got := decodeHandoff(delivered(h.Encode(testKeys, t0)), h.RequestID).request(headerGetter(hdrs(tt.attempt...)))
			if diff := cmp.Diff(client, got, cmp.AllowUnexported(clientRequest{})); diff != "" {
				t.Errorf("the attempt's request differs from the client's (-client +attempt):\n%s", diff)
			}
		})
	}
}

// fallbackMeta is the handoff metadata as Envoy delivers it to an
// attempt's stream, written out key by key.
func fallbackMeta(path string, clientAnthropicVersion bool, model, sig string) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{chain.UsageNamespace: {Fields: map[string]*structpb.Value{
		chain.FallbackPathKey:             structpb.NewStringValue(path),
		chain.FallbackAnthropicVersionKey: structpb.NewBoolValue(clientAnthropicVersion),
		chain.FallbackModelKey:            structpb.NewStringValue(model),
		chain.FallbackSignatureKey:        structpb.NewStringValue(sig),
	}}}}
}

// TestHandoffWire: the metadata keys are chain's, as deployed Sluice
// replicas and the golden fallback exchanges read them.
func TestHandoffWire(t *testing.T) {
	h := handoff{Path: "/v1/messages?beta=true", ClientAnthropicVersion: true, Model: "fb-claude", RequestID: "rid-9"}
	got := delivered(h.Encode(testKeys, t0))
	sig := testKeys.Sign(principal.ForHandoff, "rid-9", t0, "/v1/messages?beta=true", "1", "fb-claude")
	if diff := cmp.Diff(fallbackMeta("/v1/messages?beta=true", true, "fb-claude", sig), got, protocmp.Transform()); diff != "" {
		t.Errorf("Encode (-want +got):\n%s", diff)
	}
	if got := decodeHandoff(fallbackMeta("/v1/chat/completions", false, "fb", "v1.x"), "r"); got != (handoff{Path: "/v1/chat/completions", Model: "fb", RequestID: "r", Signature: "v1.x"}) {
		t.Errorf("decodeHandoff = %+v", got)
	}
}

// TestHandoffAbsent: without the downstream processor's metadata the
// attempt's request is what its headers say.
func TestHandoffAbsent(t *testing.T) {
	for _, md := range []*corev3.Metadata{nil, {}, authzMeta("key_x")} {
		h := decodeHandoff(md, "rid")
		if h != (handoff{RequestID: "rid"}) {
			t.Errorf("decodeHandoff(%v) = %+v, want none", md, h)
		}
		get := headerGetter(hdrs(":method", "POST", ":path", "/v1/messages", "anthropic-version", "2023-06-01", "x-request-id", "rid"))
		var want clientRequest
		want.note(get)
		if diff := cmp.Diff(want, h.request(get), cmp.AllowUnexported(clientRequest{})); diff != "" {
			t.Errorf("request without a handoff (-headers +got):\n%s", diff)
		}
	}
}

func TestServedByHeaders(t *testing.T) {
	tests := []struct {
		s    servedBy
		want []string // the headers, key then value
	}{
		{s: servedBy{Provider: "az", Sent: true, Model: "dep-fb"}, want: []string{chain.ServedByHeader, "az", chain.ServedModelHeader, "dep-fb"}},
		{s: servedBy{Provider: "compat", Sent: true}, want: []string{chain.ServedByHeader, "compat", chain.ServedModelHeader, ""}},
		{s: servedBy{Provider: "claude2"}, want: []string{chain.ServedByHeader, "claude2"}}, // refused: nothing sent
		{s: servedBy{}},
	}
	for _, tt := range tests {
		hs := tt.s.headers()
		var kv []string
		for _, h := range hs {
			kv = append(kv, h.GetHeader().GetKey(), string(h.GetHeader().GetRawValue()))
		}
		if diff := cmp.Diff(tt.want, kv); diff != "" {
			t.Errorf("%+v.headers() (-want +got):\n%s", tt.s, diff)
		}
		got, ok := decodeServedBy(headerGetter(headerMap(hs)))
		if ok != (tt.s.Provider != "") || got != tt.s {
			t.Errorf("decodeServedBy(%+v.headers()) = %+v, %v", tt.s, got, ok)
		}
	}
	// The model header alone still counts as the handoff's (and is removed).
	if _, ok := decodeServedBy(headerGetter(hdrs(chain.ServedModelHeader, "m"))); !ok {
		t.Error("served-model alone not recognised")
	}
}

// TestHostProvider: the attempt's provider is the attribute Envoy
// evaluated for chain.UpstreamHostProviderAttribute, as it sends it (a
// string under the expression, in the ext_proc filter's struct), and
// nothing without it.
func TestHostProvider(t *testing.T) {
	attrs := func(fields map[string]*structpb.Value) *extprocsvc.ProcessingRequest {
		return &extprocsvc.ProcessingRequest{Attributes: map[string]*structpb.Struct{chain.ExtProcAttributesKey: {Fields: fields}}}
	}
	tests := []struct {
		m    *extprocsvc.ProcessingRequest
		want string
	}{
		{attrs(map[string]*structpb.Value{chain.UpstreamHostProviderAttribute: structpb.NewStringValue("az")}), "az"},
		{attrs(map[string]*structpb.Value{"xds.upstream_host_metadata.filter_metadata['other']['provider']": structpb.NewStringValue("az")}), ""},
		{attrs(map[string]*structpb.Value{chain.UpstreamHostProviderAttribute: structpb.NewBoolValue(true)}), ""},
		{attrs(nil), ""},
		{&extprocsvc.ProcessingRequest{}, ""},
	}
	for _, tt := range tests {
		if got := hostProvider(tt.m); got != tt.want {
			t.Errorf("hostProvider(%v) = %q, want %q", tt.m.GetAttributes(), got, tt.want)
		}
	}
	if chain.UpstreamHostProviderAttribute != "xds.upstream_host_metadata.filter_metadata['sluice']['provider']" {
		t.Errorf("attribute %q", chain.UpstreamHostProviderAttribute)
	}
}
