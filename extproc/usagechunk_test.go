package extproc_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/authz"
	"github.com/sluicegw/sluice/extproc"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/fixtures"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/principal"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/tokens"
	"github.com/sluicegw/sluice/policies"
)

const usageConfig = `
providers:
  - {name: openai, kind: openai, base_url: "https://api.openai.com", api_key: "sk-upstream"}
models:
  - {name: gpt-5-nano, provider: openai}
  - {name: babbage-002, provider: openai}
teams:
  - {name: t, models: [gpt-5-nano, babbage-002]}
keys:
  - {name: k, team: t, sha256: "%s"}
`

// usageHarness is Sluice's ext_proc server on 127.0.0.1:0 and a client
// that plays Envoy's part.
type usageHarness struct {
	client extprocsvc.ExternalProcessorClient
	led    *goldenLedger
	reg    *prometheus.Registry
}

func newUsageHarness(t *testing.T) *usageHarness {
	t.Helper()
	cfg, err := policies.Parse(fmt.Appendf(nil, usageConfig, apikey.HashHex(goldenKey)), "sluice.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := policies.Compile(cfg, filepath.Join(t.TempDir(), "sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	ring := keyring.New(log)
	ring.SetPolicy(snap)
	counters := limits.New(limits.Options{})
	h := &usageHarness{led: &goldenLedger{}, reg: prometheus.NewRegistry()}
	deps := &extproc.Deps{
		Policy:     func() *policies.Snapshot { return snap },
		Ring:       ring,
		Auth:       authz.NewChecker(ring, admission.NewLocal(counters, admission.LocalOptions{}), nil, time.Now),
		Admitter:   admission.NewLocal(counters, admission.LocalOptions{}),
		Ledger:     h.led,
		Principals: harnessPrincipals,
		Metrics:    extproc.NewMetrics(h.reg),
		Log:        log,
		Now:        time.Now,
		NewID:      sequentialIDs(),
	}
	gs := grpc.NewServer()
	extprocsvc.RegisterExternalProcessorServer(gs, extproc.NewServer(deps))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
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
	h.client = extprocsvc.NewExternalProcessorClient(conn)
	return h
}

// upstream is what the provider answers.
type upstream struct {
	headers  []string // after :status 200
	chunks   [][]byte // as Envoy hands them over; the last has end_of_stream unless trailers
	trailers bool     // the response ends in trailers
}

// exchanged is what one request produced.
type exchanged struct {
	requestBody *extprocsvc.CommonResponse   // the request body reply
	replies     []*extprocsvc.CommonResponse // one per response chunk
	client      []byte                       // what the client received
	record      ledger.Record
}

// exchange sends one request over a new ext_proc stream, in Sluice's
// processing modes, and returns what the client receives: each response
// chunk as the reply to it left it, the way STREAMED mode applies a body
// mutation to its own chunk only (ProcessorState::handleBodyResponse,
// source/extensions/filters/http/ext_proc/processor_state.cc).
func (h *usageHarness) exchange(t *testing.T, path, body string, up upstream) exchanged {
	t.Helper()
	ctx, cancel := context.WithCancel(testctx.Deadline(t))
	defer cancel()
	s, err := h.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	call := func(m *extprocsvc.ProcessingRequest) *extprocsvc.ProcessingResponse {
		t.Helper()
		if err := s.Send(m); err != nil {
			t.Fatal(err)
		}
		r, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	md, _ := structpb.NewStruct(map[string]any{"key_id": "config:k", "team": "t",
		chain.PrincipalSignatureKey: harnessKeys.Sign(principal.ForPrincipal, "rid", time.Now(), "config:k", "t", "")})
	header := func(kv ...string) *corev3.HeaderMap {
		m := &corev3.HeaderMap{}
		for i := 0; i+1 < len(kv); i += 2 {
			m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
		}
		return m
	}
	var x exchanged
	call(&extprocsvc.ProcessingRequest{
		MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{chain.AuthzNamespace: md}},
		Request: &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocsvc.HttpHeaders{
			Headers: header(":method", "POST", ":path", path, ":authority", "gw", "x-request-id", "rid"),
		}},
	})
	r := call(&extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_RequestBody{RequestBody: &extprocsvc.HttpBody{Body: []byte(body), EndOfStream: true}}})
	if r.GetRequestBody() == nil {
		t.Fatalf("request body reply %v", r)
	}
	x.requestBody = r.GetRequestBody().GetResponse()
	call(&extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocsvc.HttpHeaders{
		Headers: header(append([]string{":status", "200"}, up.headers...)...),
	}}})
	for i, c := range up.chunks {
		eos := i == len(up.chunks)-1 && !up.trailers
		r := call(&extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_ResponseBody{ResponseBody: &extprocsvc.HttpBody{Body: c, EndOfStream: eos}}})
		cr := r.GetResponseBody().GetResponse()
		x.replies = append(x.replies, cr)
		switch m := cr.GetBodyMutation().GetMutation().(type) {
		case *extprocsvc.BodyMutation_Body:
			c = m.Body
		case *extprocsvc.BodyMutation_ClearBody:
			if m.ClearBody {
				c = nil
			}
		}
		x.client = append(x.client, c...)
	}
	if up.trailers {
		call(&extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocsvc.HttpTrailers{Trailers: header("x-done", "1")}}})
	}
	recs := h.led.all()
	if len(recs) == 0 {
		t.Fatal("no spend record")
	}
	x.record = recs[len(recs)-1]
	return x
}

// usageChunks reads sluice_extproc_usage_chunks_total{outcome}.
func (h *usageHarness) usageChunks(t *testing.T, outcome string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_extproc_usage_chunks_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// recorded is a recorded stream with a usage chunk and what it reports.
type recorded struct {
	name, path, request string
	body                string
	// the usage event's bytes in body, and the usage it reports
	usageStart, usageEnd     int
	input, output, reasoning int64
}

func loadRecorded(t *testing.T) []recorded {
	t.Helper()
	dir := fixtures.OpenAI(t)
	rs := []recorded{
		{name: "completion-streaming-usage.yaml", path: "/v1/completions",
			request: `{"model":"babbage-002","prompt":"def fib(n):","max_tokens":25,"stream":true}`, input: 31, output: 25},
		{name: "../thirdparty/openai/agw-chat-stream.yaml", path: "/v1/chat/completions",
			request: `{"model":"gpt-5-nano","stream":true,"messages":[{"role":"user","content":"Hello!"}]}`, input: 18, output: 286, reasoning: 192},
	}
	for i := range rs {
		b := fixtures.One(t, filepath.Join(dir, rs[i].name)).Response.Body
		at := strings.Index(b, `"choices":[]`)
		rs[i].body = b
		rs[i].usageStart = strings.LastIndex(b[:at], "\n\n") + 2
		rs[i].usageEnd = at + strings.Index(b[at:], "\n\n") + 2
		if !strings.HasPrefix(b[rs[i].usageEnd:], "data: [DONE]") {
			t.Fatalf("%s: the usage chunk is not just before [DONE]", rs[i].name)
		}
	}
	return rs
}

func (r recorded) withoutUsage() string { return r.body[:r.usageStart] + r.body[r.usageEnd:] }

// events cuts a stream into its events, as OpenAI flushes them.
func events(body string) [][]byte {
	var out [][]byte
	for _, e := range strings.SplitAfter(body, "\n\n") {
		if e != "" {
			out = append(out, []byte(e))
		}
	}
	return out
}

func cutAt(body string, at ...int) [][]byte {
	var out [][]byte
	prev := 0
	for _, a := range at {
		out = append(out, []byte(body[prev:a]))
		prev = a
	}
	return append(out, []byte(body[prev:]))
}

// TestUsageChunkRemovedOverGRPC: for a streaming request without
// include_usage (or with it false), Sluice forces the flag, asks for an
// unencoded response, and the client receives the recorded stream
// without its usage chunk — however Envoy chunks it: event by event,
// whole, the usage chunk cut in three, byte by byte, at random — while
// the spend record carries the usage that chunk reported, exactly.
func TestUsageChunkRemovedOverGRPC(t *testing.T) {
	h := newUsageHarness(t)
	for _, r := range loadRecorded(t) {
		t.Run(filepath.Base(r.name), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(len(r.body)), 5))
			chunkings := map[string][][]byte{
				"events": events(r.body),
				"whole":  {[]byte(r.body)},
				"usage chunk cut in three, its blank line split": cutAt(r.body, r.usageStart+3, (r.usageStart+r.usageEnd)/2, r.usageEnd-1),
				"cut just before and after the usage chunk":      cutAt(r.body, r.usageStart, r.usageEnd),
			}
			for i := range 3 {
				var cuts []int
				for at := 0; ; {
					at += 1 + rng.IntN(300)
					if at >= len(r.body) {
						break
					}
					cuts = append(cuts, at)
				}
				chunkings[fmt.Sprintf("random %d", i)] = cutAt(r.body, cuts...)
			}
			if len(r.body) < 8<<10 {
				var bytewise [][]byte
				for i := range len(r.body) {
					bytewise = append(bytewise, []byte(r.body[i:i+1]))
				}
				chunkings["byte by byte, then an empty last chunk"] = append(bytewise, nil)
			}
			for name, chunks := range chunkings {
				for _, req := range []string{r.request, strings.Replace(r.request, `"stream":true`, `"stream":true,"stream_options":{"include_usage":false}`, 1)} {
					t.Run(name, func(t *testing.T) {
						x := h.exchange(t, r.path, req, upstream{headers: []string{"content-type", "text/event-stream"}, chunks: chunks})
						sent := string(x.requestBody.GetBodyMutation().GetBody())
						if !strings.Contains(sent, `"include_usage":true`) || setHeader(x.requestBody, "accept-encoding") != "identity" {
							t.Errorf("request sent as %s with accept-encoding %q; want include_usage forced and identity", sent, setHeader(x.requestBody, "accept-encoding"))
						}
						if got, want := string(x.client), r.withoutUsage(); got != want {
							t.Errorf("the client got %d bytes, want the %d of the recorded stream without its usage chunk:\n%q", len(got), len(want), got)
						}
						rec := x.record
						if rec.Tokens[tokens.Input] != r.input || rec.Tokens[tokens.Output] != r.output || rec.Tokens[tokens.Reasoning] != r.reasoning || rec.Estimated || rec.Outcome != "ok" {
							t.Errorf("record %+v; want %d input, %d output, %d reasoning, reported, ok", rec, r.input, r.output, r.reasoning)
						}
						if name == "events" {
							// Only the usage chunk's reply changes anything.
							for i, cr := range x.replies {
								if usage := strings.Contains(string(chunks[i]), `"choices":[]`); usage != (cr.GetBodyMutation() != nil) || (usage && !cr.GetBodyMutation().GetClearBody()) {
									t.Errorf("chunk %d %.40q: reply %v", i, chunks[i], cr)
								}
							}
						}
					})
				}
			}
		})
	}
	if n := h.usageChunks(t, "removed"); n == 0 {
		t.Error("sluice_extproc_usage_chunks_total{outcome=removed} not counted")
	}
}

func setHeader(cr *extprocsvc.CommonResponse, key string) string {
	for _, h := range cr.GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == key {
			return string(h.GetHeader().GetRawValue())
		}
	}
	return ""
}

// TestUsageChunkKeptWhenAskedFor: a client that asked for usage gets the
// usage chunk, and the stream is not touched at all: no accept-encoding,
// no body mutation on any chunk, the recorded bytes as they came.
func TestUsageChunkKeptWhenAskedFor(t *testing.T) {
	h := newUsageHarness(t)
	for _, r := range loadRecorded(t) {
		req := strings.Replace(r.request, `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
		x := h.exchange(t, r.path, req, upstream{headers: []string{"content-type", "text/event-stream"}, chunks: cutAt(r.body, r.usageStart+5, r.usageEnd-1)})
		if v := setHeader(x.requestBody, "accept-encoding"); v != "" {
			t.Errorf("%s: accept-encoding %q set on a request that asked for usage", r.name, v)
		}
		for i, cr := range x.replies {
			if cr != nil {
				t.Errorf("%s: chunk %d reply %v, want none", r.name, i, cr)
			}
		}
		if string(x.client) != r.body || x.record.Tokens[tokens.Output] != r.output || x.record.Tokens[tokens.Input] != r.input || x.record.Estimated {
			t.Errorf("%s: client got %d bytes (want %d), record %+v", r.name, len(x.client), len(r.body), x.record)
		}
	}
	if n := h.usageChunks(t, "removed"); n != 0 {
		t.Errorf("%v usage chunks counted removed", n)
	}
}

// TestUsageChunkEncodedOrJSON: a provider that compresses despite
// accept-encoding: identity has its stream passed unfiltered (the usage
// chunk reaches the client), metered exactly and counted; a JSON error
// response to a forced stream is not touched either.
func TestUsageChunkEncodedOrJSON(t *testing.T) {
	h := newUsageHarness(t)
	r := loadRecorded(t)[0]
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write([]byte(r.body))
	w.Close()
	zipped := gz.String()
	x := h.exchange(t, r.path, r.request, upstream{
		headers: []string{"content-type", "text/event-stream", "content-encoding", "gzip"},
		chunks:  cutAt(zipped, len(zipped)/3, 2*len(zipped)/3),
	})
	for i, cr := range x.replies {
		if cr != nil {
			t.Errorf("gzip: chunk %d reply %v, want none", i, cr)
		}
	}
	if string(x.client) != zipped || x.record.Tokens[tokens.Input] != r.input || x.record.Tokens[tokens.Output] != r.output || x.record.Estimated {
		t.Errorf("gzip: client got %d bytes (want the %d sent), record %+v", len(x.client), len(zipped), x.record)
	}
	if n := h.usageChunks(t, "encoded"); n != 1 {
		t.Errorf("usage_chunks_total{outcome=encoded} = %v, want 1", n)
	}

	errBody := `{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":null},"choices":[],"usage":{}}`
	x = h.exchange(t, r.path, r.request, upstream{headers: []string{"content-type", "application/json"}, chunks: [][]byte{[]byte("data: " + errBody + "\n\n")}})
	if x.replies[0] != nil {
		t.Errorf("JSON response: reply %v, want none", x.replies[0])
	}
}

// TestUsageChunkTrailers: a response that ends in trailers has no chunk
// with end_of_stream: the usage chunk is still removed when it ended
// before them, and an event still held when the trailers come — one
// that never ended, which a client discards — cannot be sent (no reply
// carries a body any more) and is counted as unterminated.
func TestUsageChunkTrailers(t *testing.T) {
	h := newUsageHarness(t)
	r := loadRecorded(t)[0]
	x := h.exchange(t, r.path, r.request, upstream{headers: []string{"content-type", "text/event-stream"}, chunks: events(r.body), trailers: true})
	if string(x.client) != r.withoutUsage() || x.record.Tokens[tokens.Output] != r.output || x.record.Outcome != "ok" {
		t.Errorf("trailers: client got %q, record %+v", x.client, x.record)
	}
	if n := h.usageChunks(t, "unterminated"); n != 0 {
		t.Errorf("unterminated = %v, want 0", n)
	}
	cut := r.body[:r.usageEnd-2] // the usage chunk never ends
	x = h.exchange(t, r.path, r.request, upstream{headers: []string{"content-type", "text/event-stream"}, chunks: cutAt(cut, r.usageStart), trailers: true})
	if string(x.client) != r.body[:r.usageStart] {
		t.Errorf("trailers after an unterminated event: client got %q", x.client[max(0, len(x.client)-80):])
	}
	if n := h.usageChunks(t, "unterminated"); n != 1 {
		t.Errorf("unterminated = %v, want 1", n)
	}
}
