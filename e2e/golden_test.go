package e2e

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/envoy/envoytest"
	"github.com/sluicegw/sluice/internal/chain"
)

var update = flag.Bool("update", false, "rewrite the golden exchanges in testdata/golden")

// TestGoldenExchanges pins the ext_proc conversation between the emulator
// and Sluice for one request per endpoint and a denial: each message
// Envoy sent and each reply Sluice gave, reduced to what matters (message
// kinds, end_of_stream, header and body mutations, route cache clearing,
// immediate responses, usage metadata), in testdata/golden/<case>.txt.
// go test ./e2e -run TestGoldenExchanges -update rewrites them.
func TestGoldenExchanges(t *testing.T) {
	_, mockAddr := mockProvider(t, mockllm.Options{APIKey: openaiKey, AnthropicAPIKey: anthropicKey, AzureAPIKey: azureKey})
	s := startSluice(t, gatewayConfig)
	_, key := s.createKey(t, "apps")
	b := gatewayBootstrap(t, s.grpcAddr, mockAddr)
	e, err := envoytest.New(b, envoytest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	url := serveEmulator(t, e)
	for _, tc := range []struct {
		name string
		call call
	}{
		{"chat", call{path: "/v1/chat/completions", body: `{"model":"mini","messages":[{"role":"user","content":"Hi"}]}`}},
		{"chat-stream", call{path: "/v1/chat/completions", body: `{"model":"gpt-5-nano","stream":true,"messages":[{"role":"user","content":"Hi"}]}`, headers: map[string]string{"x-mock-chunks": "2"}}},
		{"messages-stream", call{path: "/v1/messages", body: `{"model":"claude-sonnet-4","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"Hi"}]}`, headers: map[string]string{"x-mock-chunks": "2"}}},
		{"azure-embeddings", call{path: "/v1/embeddings", body: `{"model":"azure-4o","input":"hi"}`}},
		{"denied-model", call{path: "/v1/chat/completions", body: `{"model":"gpt-4o","messages":[]}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.ResetExchanges()
			tc.call.do(t, url, key)
			xs := waitExchanges(t, e, 1)
			if len(xs) != 1 {
				t.Fatalf("%d exchanges", len(xs))
			}
			got := describeExchange(xs[0])
			path := filepath.Join("testdata", "golden", tc.name+".txt")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("exchange differs from %s (-want +got):\n%s", path, diff)
			}
		})
	}
}

// serveEmulator serves e on its listener until the test ends.
func serveEmulator(t *testing.T, e *envoytest.Emulator) string {
	t.Helper()
	ctx, cancel := contextWithCancel()
	ln, err := e.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + ln.Addr().String()
}

// describeExchange renders the deterministic part of an exchange.
func describeExchange(x *envoytest.Exchange) string {
	var b strings.Builder
	fmt.Fprintf(&b, "client: %s %s -> %d %s\n", x.Method, x.Path, x.Status, x.Details)
	if u := x.Upstream; u != nil {
		fmt.Fprintf(&b, "upstream: %s %s %s\n", u.Cluster, u.Method, u.Path)
	}
	for _, ev := range x.ExtProc {
		// Mid-stream response chunks depend on how the transport split
		// the body; only the final one is pinned.
		if rb := ev.Sent.GetResponseBody(); rb != nil && !rb.GetEndOfStream() {
			continue
		}
		if r := ev.Received.GetResponseBody(); r != nil && ev.Received.GetDynamicMetadata() == nil {
			continue
		}
		switch {
		case ev.Sent != nil:
			fmt.Fprintf(&b, "→ %s\n", describeSent(ev.Sent))
		case ev.Received != nil:
			fmt.Fprintf(&b, "← %s\n", describeReceived(ev.Received))
		default:
			fmt.Fprintf(&b, "  %s\n", ev.Event)
		}
	}
	if m := x.Metadata["sluice"]; m != nil {
		fields := m.AsMap()
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString("metadata sluice:")
		for _, k := range keys {
			if k == "key_id" {
				continue // random per run
			}
			fmt.Fprintf(&b, " %s=%v", k, fields[k])
		}
		b.WriteString("\n")
	}
	return keyIDs.ReplaceAllString(b.String(), "key_<id>")
}

// keyIDs are random per run.
var keyIDs = regexp.MustCompile(`key_[0-9A-Za-z]{16}`)

func describeSent(m *extprocsvc.ProcessingRequest) string {
	switch r := m.GetRequest().(type) {
	case *extprocsvc.ProcessingRequest_RequestHeaders:
		return fmt.Sprintf("request_headers eos=%v", r.RequestHeaders.GetEndOfStream())
	case *extprocsvc.ProcessingRequest_RequestBody:
		return fmt.Sprintf("request_body %dB eos=%v", len(r.RequestBody.GetBody()), r.RequestBody.GetEndOfStream())
	case *extprocsvc.ProcessingRequest_ResponseHeaders:
		return fmt.Sprintf("response_headers eos=%v", r.ResponseHeaders.GetEndOfStream())
	case *extprocsvc.ProcessingRequest_ResponseBody:
		return fmt.Sprintf("response_body eos=%v", r.ResponseBody.GetEndOfStream())
	}
	return fmt.Sprintf("%T", m.GetRequest())
}

func describeReceived(m *extprocsvc.ProcessingResponse) string {
	var cr *extprocsvc.CommonResponse
	var kind string
	switch r := m.GetResponse().(type) {
	case *extprocsvc.ProcessingResponse_RequestHeaders:
		kind, cr = "request_headers", r.RequestHeaders.GetResponse()
	case *extprocsvc.ProcessingResponse_RequestBody:
		kind, cr = "request_body", r.RequestBody.GetResponse()
	case *extprocsvc.ProcessingResponse_ResponseHeaders:
		kind, cr = "response_headers", r.ResponseHeaders.GetResponse()
	case *extprocsvc.ProcessingResponse_ResponseBody:
		kind, cr = "response_body", r.ResponseBody.GetResponse()
	case *extprocsvc.ProcessingResponse_ImmediateResponse:
		im := r.ImmediateResponse
		return fmt.Sprintf("immediate %d details=%s body=%s", im.GetStatus().GetCode(), im.GetDetails(), im.GetBody())
	}
	out := kind
	for _, h := range cr.GetHeaderMutation().GetSetHeaders() {
		v := string(h.GetHeader().GetRawValue())
		switch h.GetHeader().GetKey() {
		case "content-length":
			v = "N"
		case chain.RequestIDHeader: // Envoy's x-request-id, a UUID
			v = "ID"
		}
		out += fmt.Sprintf(" set(%s=%s)", h.GetHeader().GetKey(), v)
	}
	for _, k := range cr.GetHeaderMutation().GetRemoveHeaders() {
		out += " remove(" + k + ")"
	}
	// A response chunk's body mutation (the usage chunk Sluice forced,
	// taken out: extproc/usagechunk.go) depends on where the transport
	// split the body, so it is not pinned here; the usage-chunk tests
	// pin it (extproc/usagechunk_test.go, usagechunk_e2e_test.go).
	if bm := cr.GetBodyMutation(); bm != nil && kind != "response_body" {
		out += " body=" + string(bm.GetBody())
	}
	if cr.GetClearRouteCache() {
		out += " clear_route_cache"
	}
	if m.GetDynamicMetadata() != nil {
		out += " +metadata"
	}
	return out
}
