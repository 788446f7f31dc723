package extproc

import (
	"fmt"
	"net"
	"testing"

	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/testctx"
)

// mutation is a header mutation flattened for exact comparison: set
// headers as "key: value" in order, then the removed keys.
type mutation struct {
	Set    []string
	Remove []string
}

func flatten(hm *extprocsvc.HeaderMutation) mutation {
	var m mutation
	for _, h := range hm.GetSetHeaders() {
		m.Set = append(m.Set, h.GetHeader().GetKey()+": "+string(h.GetHeader().GetRawValue()))
	}
	m.Remove = hm.GetRemoveHeaders()
	return m
}

func contentLength(body string) string { return fmt.Sprintf("content-length: %d", len(body)) }

// denied checks an ImmediateResponse's status and stable code.
func denied(t *testing.T, r *extprocsvc.ProcessingResponse, status int, code string) {
	t.Helper()
	im := r.GetImmediateResponse()
	// Sluice's code is in the details; the body carries the provider's.
	if im == nil || int(im.GetStatus().GetCode()) != status || im.GetDetails() != "sluice_"+code {
		t.Fatalf("got %v, want an immediate %d %s", r, status, code)
	}
}

var otherCredentials = []string{"x-api-key", "api-key"}

// TestWeightedDefaultRandom: without Deps.Rand, draws come from
// math/rand/v2 and reach every provider (P(a miss in 200 draws at 1:3) is
// below 1e-24).
func TestWeightedDefaultRandom(t *testing.T) {
	d, _ := newDeps(t)
	seen := map[string]int{}
	for range 200 {
		p := NewProcessor(d)
		p.Handle(testctx.Deadline(t), reqHeaders("/v1/chat/completions", false, authzMeta("config:k")))
		r := p.Handle(testctx.Deadline(t), reqBody(`{"model":"mix","messages":[]}`))
		seen[setHeaders(r.GetRequestBody().GetResponse().GetHeaderMutation())[chain.RoutingHeader]]++
	}
	if len(seen) != 2 || seen["openai"] == 0 || seen["compat"] == 0 {
		t.Errorf("routed %v", seen)
	}
}

// TestServerUpstreamStream: over real gRPC, a stream whose initial metadata
// carries x-sluice-upstream is served by the upstream processor; one
// without it by the downstream processor.
func TestServerUpstreamStream(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	d, led := newDeps(t)
	client := serveGRPC(t, d)
	ctx := t.Context()

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

	up, err := client.Process(metadata.AppendToOutgoingContext(ctx, chain.UpstreamMetadataKey, chain.UpstreamMetadataValue))
	if err != nil {
		t.Fatal(err)
	}
	// The third attempt, on a host of fb's third provider, compat.
	r := exchange(up, withHost(reqHeaders("/v1/chat/completions", false, fallbackHandoff("fb"), chain.RoutingHeader, "sluice.fallback.fb", chain.AttemptCountHeader, "3"), "compat"))
	if diff := cmp.Diff(mutation{Remove: []string{chain.RoutingHeader, chain.AttemptCountHeader}}, flatten(r.GetRequestHeaders().GetResponse().GetHeaderMutation())); diff != "" {
		t.Errorf("request headers (-want +got):\n%s", diff)
	}
	r = exchange(up, reqBody(`{"model":"fb","messages":[]}`))
	want := mutation{Set: []string{"authorization: Bearer sk-compat", ":path: /api/v1/chat/completions", contentLength(`{"model":"local-fb","messages":[]}`)}, Remove: append([]string{"openai-organization", "openai-project"}, otherCredentials...)}
	if diff := cmp.Diff(want, flatten(r.GetRequestBody().GetResponse().GetHeaderMutation())); diff != "" {
		t.Errorf("request body (-want +got):\n%s", diff)
	}
	r = exchange(up, respHeaders("200", "application/json"))
	if got := setHeaders(r.GetResponseHeaders().GetResponse().GetHeaderMutation())[chain.ServedByHeader]; got != "compat" {
		t.Errorf("served-by %q", got)
	}
	if err := up.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := up.Recv(); err == nil {
		t.Error("the stream did not end after the client half-closed")
	}

	// Without the metadata: the downstream processor, which authenticates.
	down, err := client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	denied(t, exchange(down, reqHeaders("/v1/chat/completions", false, nil)), 401, "missing_credential")
	down.CloseSend()
	down.Recv()
	if len(led.records) != 0 {
		t.Errorf("%d spend records", len(led.records))
	}
}

// serveGRPC serves d's ext_proc service over real gRPC on loopback until
// the test ends, and returns a client of it.
func serveGRPC(t *testing.T, d *Deps) extprocsvc.ExternalProcessorClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	extprocsvc.RegisterExternalProcessorServer(gs, NewServer(d))
	served := make(chan error, 1)
	go func() { served <- gs.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return extprocsvc.NewExternalProcessorClient(conn)
}
