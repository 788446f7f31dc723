package envoytest

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestRequestIDPolicy: what the connection manager does with a client's
// x-request-id under each setting, per conn_manager_utility.cc.
func TestRequestIDPolicy(t *testing.T) {
	loopback := &hcmv3.HttpConnectionManager_InternalAddressConfig{CidrRanges: []*corev3.CidrRange{
		{AddressPrefix: "127.0.0.0", PrefixLen: wrapperspb.UInt32(8)},
	}}
	tests := []struct {
		name    string
		hcm     *hcmv3.HttpConnectionManager
		headers [][2]string // what the client sent
		keep    bool        // the client's x-request-id survives
	}{
		{"no use_remote_address: never an edge request, the id is kept", &hcmv3.HttpConnectionManager{}, nil, true},
		{"use_remote_address: an edge request, the id is replaced",
			&hcmv3.HttpConnectionManager{UseRemoteAddress: wrapperspb.Bool(true)}, nil, false},
		{"preserve_external_request_id keeps it on an edge request",
			&hcmv3.HttpConnectionManager{UseRemoteAddress: wrapperspb.Bool(true), PreserveExternalRequestId: true}, nil, true},
		{"an internal peer is not an edge request: kept",
			&hcmv3.HttpConnectionManager{UseRemoteAddress: wrapperspb.Bool(true), InternalAddressConfig: loopback}, nil, true},
		{"an internal peer that sent x-forwarded-for is an edge request: replaced",
			&hcmv3.HttpConnectionManager{UseRemoteAddress: wrapperspb.Bool(true), InternalAddressConfig: loopback},
			[][2]string{{"x-forwarded-for", "10.0.0.1"}}, false},
		{"generate_request_id false: left alone",
			&hcmv3.HttpConnectionManager{UseRemoteAddress: wrapperspb.Bool(true), GenerateRequestId: wrapperspb.Bool(false)}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := newRequestIDPolicy(tt.hcm)
			if err != nil {
				t.Fatal(err)
			}
			h := &Headers{}
			h.Add("x-request-id", "client-chosen")
			for _, kv := range tt.headers {
				h.Add(kv[0], kv[1])
			}
			p.apply(h, "127.0.0.1")
			got, _ := h.Get("x-request-id")
			if (got == "client-chosen") != tt.keep || got == "" || len(h.Values("x-request-id")) != 1 {
				t.Errorf("x-request-id = %q (%d values); want the client's kept: %v", got, len(h.Values("x-request-id")), tt.keep)
			}
			// Without one, a request always gets one (unless generation is off).
			h = &Headers{}
			p.apply(h, "127.0.0.1")
			if _, ok := h.Get("x-request-id"); ok != p.generate {
				t.Errorf("no x-request-id sent: generated %v; want %v", ok, p.generate)
			}
		})
	}
	// always_set_request_id_in_response: the response carries the id the
	// request went upstream with; without it, none.
	for _, always := range []bool{true, false} {
		p, err := newRequestIDPolicy(&hcmv3.HttpConnectionManager{UseRemoteAddress: wrapperspb.Bool(true), AlwaysSetRequestIdInResponse: always})
		if err != nil {
			t.Fatal(err)
		}
		req, resp := &Headers{}, &Headers{}
		req.Add("x-request-id", "client-chosen")
		p.apply(req, "127.0.0.1")
		p.respond(resp, req)
		sent, _ := req.Get("x-request-id")
		if got, ok := resp.Get("x-request-id"); ok != always || (always && got != sent) {
			t.Errorf("always_set_request_id_in_response %v: response x-request-id %q (%v); request's %q", always, got, ok, sent)
		}
	}
	if _, err := newRequestIDPolicy(&hcmv3.HttpConnectionManager{InternalAddressConfig: &hcmv3.HttpConnectionManager_InternalAddressConfig{
		CidrRanges: []*corev3.CidrRange{{AddressPrefix: "not-an-ip"}}}}); err == nil {
		t.Error("a bad CIDR range was accepted")
	}
}
