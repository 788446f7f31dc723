package extproc

import (
	"strings"
	"testing"

	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc/metadata"

	"github.com/sluicegw/sluice/internal/chain"
)

// TestServerFallbackWithheld: over real gRPC, a downstream stream whose
// initial metadata says the Envoy was served no fallback cluster
// (chain.FallbackMetadataKey, set by xds for an Envoy too old for
// fallback) sends a fallback model to its first provider as a
// single-provider model: its credential and upstream model, its route, no
// handoff to attempts; and a served-by header on the response (which no
// upstream processor set, so the provider did) neither names the provider
// recorded nor reaches the client. Without the metadata the same request
// goes to the fallback cluster.
func TestServerFallbackWithheld(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	d, led := newDeps(t)
	client := serveGRPC(t, d)
	exchange := func(stream extprocsvc.ExternalProcessor_ProcessClient, m *extprocsvc.ProcessingRequest) *extprocsvc.ProcessingResponse {
		t.Helper()
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	const body = `{"model":"fb","messages":[{"role":"user","content":"hi"}]}`

	withheld := metadata.AppendToOutgoingContext(t.Context(), chain.FallbackMetadataKey, chain.FallbackMetadataWithheld)
	s, err := client.Process(withheld)
	if err != nil {
		t.Fatal(err)
	}
	exchange(s, reqHeaders("/v1/chat/completions", false, authzMeta("config:k")))
	r := exchange(s, reqBody(body))
	set := setHeaders(r.GetRequestBody().GetResponse().GetHeaderMutation())
	if set[chain.RoutingHeader] != "openai" || set["authorization"] != "Bearer sk-upstream" {
		t.Errorf("routing %q, authorization %q; want fb's first provider, openai, with its credential", set[chain.RoutingHeader], set["authorization"])
	}
	if b := string(r.GetRequestBody().GetResponse().GetBodyMutation().GetBody()); !strings.Contains(b, `"gpt-4o-fb"`) {
		t.Errorf("body %s, want the model rewritten for openai (gpt-4o-fb)", b)
	}
	if r.GetDynamicMetadata() != nil {
		t.Errorf("a handoff to fallback attempts was left: %v", r.GetDynamicMetadata())
	}
	rh := &extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocsvc.HttpHeaders{
		Headers: hdrs(":status", "200", "content-type", "application/json", chain.ServedByHeader, "az", chain.ServedModelHeader, "dep-fb")}}}
	r = exchange(s, rh)
	if rm := r.GetResponseHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders(); !strings.Contains(strings.Join(rm, ","), chain.ServedByHeader) {
		t.Errorf("response headers reply %v, want the provider's served-by header removed", r)
	}
	exchange(s, respBody(chatJSON, true))
	s.CloseSend()
	s.Recv()
	if len(led.records) != 1 || led.records[0].Provider != "openai" || led.records[0].UpstreamModel != "gpt-4o-fb" {
		t.Errorf("records %+v, want one against openai, gpt-4o-fb", led.records)
	}

	s, err = client.Process(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	exchange(s, reqHeaders("/v1/chat/completions", false, authzMeta("config:k"), "x-request-id", "rid-2"))
	r = exchange(s, reqBody(body))
	if got := setHeaders(r.GetRequestBody().GetResponse().GetHeaderMutation())[chain.RoutingHeader]; got != "sluice.fallback.fb" {
		t.Errorf("without the metadata: routing %q, want the fallback cluster", got)
	}
	s.CloseSend()
	s.Recv()
}
