package load

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/internal/chain"
)

// serve serves srv (ext_authz and ext_proc) on 127.0.0.1:0 until the
// test ends.
func serve(t *testing.T, srv interface {
	authv3.AuthorizationServer
	extprocsvc.ExternalProcessorServer
}) string {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	authv3.RegisterAuthorizationServer(g, srv)
	extprocsvc.RegisterExternalProcessorServer(g, srv)
	go g.Serve(ln) //nolint:errcheck // ends with Stop
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}

// TestRampScenario runs the ramp, two tiny steps, against the floor and
// against Sluice: a line per step run, then the summary. Whether a step
// holds depends on this machine's load, so only the lines' consistency
// is checked (the rule itself: TestHolds, TestRampStops…).
func TestRampScenario(t *testing.T) {
	servers := map[string]string{"floor": startFloor(t), "sluice": startSluice(t)}
	for server, addr := range servers {
		t.Run(server, func(t *testing.T) {
			cfg := Scenarios["ramp"]
			cfg.Ramp, cfg.Step = []float64{100, 200}, 50*time.Millisecond
			cfg.Scenario, cfg.Server, cfg.Addr, cfg.PID, cfg.Key, cfg.Model = "ramp", server, addr, os.Getpid(), benchKey, "gpt-4o-mini"
			var out bytes.Buffer
			enc := json.NewEncoder(&out)
			if err := RunRamp(t.Context(), cfg, func(v any) error { return enc.Encode(v) }); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) < 2 || len(lines) > 3 {
				t.Fatalf("%d lines, want 1 or 2 steps and the summary:\n%s", len(lines), out.String())
			}
			held := 0.0
			for i, l := range lines[:len(lines)-1] {
				var s RampStep
				if err := json.Unmarshal([]byte(l), &s); err != nil {
					t.Fatal(err)
				}
				want := []float64{100, 200}[i]
				if s.Scenario != "ramp" || s.Server != server || s.StepRate != want || s.Offered != int(want/20) ||
					s.Served+s.Errors != s.Offered || s.P99Millis < s.P50Millis || s.CPUMicrosReq < 0 {
					t.Errorf("step %d: %s", i, l)
				}
				if s.Holds != holds(s.StepRate, s.ServedPerSec, s.Offered, s.Errors) {
					t.Errorf("step %d: holds %v against the rule: %s", i, s.Holds, l)
				}
				if !s.Holds && i != len(lines)-2 {
					t.Errorf("step %d did not hold, yet the ramp went on", i)
				}
				if s.Holds {
					held = s.StepRate
				}
				for _, f := range []string{"step_rate", "served_per_s", "errors", "p50_ms", "p99_ms", "cpu_us_per_req", "holds"} {
					if !strings.Contains(l, `"`+f+`":`) {
						t.Errorf("step %d lacks %q: %s", i, f, l)
					}
				}
			}
			var sum RampSummary
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil || sum.MaxHeldRate != held || sum.Server != server ||
				!strings.Contains(lines[len(lines)-1], `"max_held_rate":`) {
				t.Errorf("summary %s (want max_held_rate %v): %v", lines[len(lines)-1], held, err)
			}
		})
	}
}

func TestHolds(t *testing.T) {
	for _, tc := range []struct {
		rate, served    float64
		offered, errors int
		want            bool
	}{
		{1000, 1000, 20000, 0, true},
		{1000, 950, 20000, 199, true},     // exactly 95% of the rate, errors under 1%
		{1000, 949.99, 20000, 0, false},   // under 95%
		{1000, 990, 20000, 200, false},    // exactly 1% errors
		{1000, 990, 20000, 199, true},     // just under 1%
		{250, 237.5, 5000, 49, true},      // 95% exactly
		{250, 237.49, 5000, 0, false},     // just under
		{8000, 8000, 160000, 1600, false}, // 1% exactly
		{250, 0, 0, 0, false},             // nothing offered
	} {
		if got := holds(tc.rate, tc.served, tc.offered, tc.errors); got != tc.want {
			t.Errorf("holds(rate %v, served %v/s, offered %d, errors %d) = %v, want %v", tc.rate, tc.served, tc.offered, tc.errors, got, tc.want)
		}
	}
}

func TestServedRate(t *testing.T) {
	// Kept up: the last request ended within the step.
	if got := servedRate(1000, time.Second, 999*time.Millisecond); got != 1000 {
		t.Errorf("kept up: %v", got)
	}
	// Fell behind: the 1000 took 1.25 s.
	if got := servedRate(1000, time.Second, 1250*time.Millisecond); got != 800 {
		t.Errorf("behind: %v", got)
	}
}

// tiring allows limit Checks, then denies every one.
type tiring struct {
	Floor
	limit int64
	n     atomic.Int64
}

func (f *tiring) Check(ctx context.Context, r *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	if f.n.Add(1) > f.limit {
		return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied)}}, nil
	}
	return f.Floor.Check(ctx, r)
}

// TestRampStopsAtFirstStepThatDoesNotHold: a server that fails every
// request after the first step's: the ramp reports the first step held,
// the second not, runs no third, and names the first's rate.
func TestRampStopsAtFirstStepThatDoesNotHold(t *testing.T) {
	// The unmeasured first request, then the 40 of the first step.
	addr := serve(t, &tiring{limit: 1 + 40})
	var steps []RampStep
	var sum RampSummary
	// 40 requests at 10 a second: the step holds while its last request,
	// sent at 3.9 s, ends within 310 ms (served/s ≥ 95% of the rate), a
	// margin a loaded machine under the race detector keeps; 200 a second
	// for 200 ms left it 10 ms.
	cfg := Config{Scenario: "ramp", Server: "fake", Addr: addr, Model: "m", Ramp: []float64{10, 20, 40}, Step: 4 * time.Second}
	err := RunRamp(t.Context(), cfg, func(v any) error {
		switch v := v.(type) {
		case RampStep:
			steps = append(steps, v)
		case RampSummary:
			sum = v
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 2 || !steps[0].Holds || steps[1].Holds || steps[1].Errors != steps[1].Offered || steps[1].Served != 0 {
		t.Fatalf("steps %+v", steps)
	}
	if sum.MaxHeldRate != 10 {
		t.Errorf("summary %+v, want max_held_rate 10", sum)
	}
}

// stuck allows the first Check and holds every later one until its
// context ends.
type stuck struct {
	Floor
	n atomic.Int64
}

func (f *stuck) Check(ctx context.Context, r *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	if f.n.Add(1) > 1 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return f.Floor.Check(ctx, r)
}

// TestOpenLoopInFlightCap: a request due while MaxInFlight are running
// is not started and counts as an error; the loop does not wait for it.
func TestOpenLoopInFlightCap(t *testing.T) {
	addr := serve(t, &stuck{})
	res, err := Run(t.Context(), Config{Addr: addr, Model: "m", Rate: 1000, Requests: 10, MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The first holds the one slot until its Check times out (200 ms);
	// the other nine are due within 9 ms.
	if res.Requests != 10 || res.Errors != 10 || res.NotStarted != 9 || !strings.Contains(res.FirstError, "check") && !strings.Contains(res.FirstError, "not started") {
		t.Fatalf("%+v", res)
	}
}

// pipelineProbe answers no response body chunk until it has received
// every chunk of the body: a driver that waited for each reply before
// sending the next chunk would time out.
type pipelineProbe struct{ Floor }

func (pipelineProbe) Process(s extprocsvc.ExternalProcessor_ProcessServer) error {
	held := 0
	for {
		req, err := s.Recv()
		if err != nil {
			return nil
		}
		b := req.GetResponseBody()
		if b == nil {
			if err := s.Send(floorReply(req)); err != nil {
				return err
			}
			continue
		}
		held++
		if !b.GetEndOfStream() {
			continue
		}
		for range held {
			if err := s.Send(&extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_ResponseBody{ResponseBody: &extprocsvc.BodyResponse{}}}); err != nil {
				return err
			}
		}
		held = 0
	}
}

// TestStreamedBodyIsPipelined: in STREAMED mode the driver sends chunk
// N+1 without waiting for the reply to chunk N, as Envoy does.
func TestStreamedBodyIsPipelined(t *testing.T) {
	addr := serve(t, pipelineProbe{})
	res, err := Run(t.Context(), Config{Addr: addr, Model: "m", Concurrency: 1, Requests: 2, Stream: true, Chunks: 6, Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 0 || res.Requests != 2 {
		t.Fatalf("%+v", res)
	}
}

// fallbackRecorder plays Sluice's two processors minimally and records
// what each stream received.
type fallbackRecorder struct {
	Floor
	mu      sync.Mutex
	streams []*recorded
}

type recorded struct {
	upstream bool
	msgs     []*extprocsvc.ProcessingRequest
}

func (f *fallbackRecorder) Process(s extprocsvc.ExternalProcessor_ProcessServer) error {
	md, _ := metadata.FromIncomingContext(s.Context())
	up := len(md.Get(chain.UpstreamMetadataKey)) > 0 && md.Get(chain.UpstreamMetadataKey)[0] == chain.UpstreamMetadataValue
	rec := &recorded{upstream: up}
	f.mu.Lock()
	f.streams = append(f.streams, rec)
	f.mu.Unlock()
	for {
		req, err := s.Recv()
		if err != nil {
			return nil
		}
		// Recorded before the reply, so all is in once the driver is done.
		f.mu.Lock()
		rec.msgs = append(rec.msgs, req)
		f.mu.Unlock()
		resp := floorReply(req)
		switch {
		case req.GetResponseBody() != nil:
			resp = &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_ResponseBody{ResponseBody: &extprocsvc.BodyResponse{}}}
		case !up && req.GetRequestBody() != nil:
			// The downstream processor routes to the aggregate cluster and
			// leaves the handoff.
			handoff, err := structpb.NewStruct(map[string]any{chain.UsageNamespace: map[string]any{chain.FallbackPathKey: "/v1/chat/completions", chain.FallbackModelKey: "m"}})
			if err != nil {
				return err
			}
			resp = &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_RequestBody{RequestBody: &extprocsvc.BodyResponse{Response: &extprocsvc.CommonResponse{
				HeaderMutation: &extprocsvc.HeaderMutation{
					SetHeaders:    []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: chain.RoutingHeader, RawValue: []byte("sluice.fallback.m")}}},
					RemoveHeaders: []string{"authorization"},
				},
				ClearRouteCache: true,
			}}}, DynamicMetadata: handoff}
		case up && req.GetResponseHeaders() != nil:
			resp = &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocsvc.HeadersResponse{Response: &extprocsvc.CommonResponse{
				HeaderMutation: &extprocsvc.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: chain.ServedByHeader, RawValue: []byte("openai")}}}},
			}}}}
		}
		if err := s.Send(resp); err != nil {
			return err
		}
	}
}

func headerOf(h *corev3.HeaderMap, key string) (string, bool) {
	for _, v := range h.GetHeaders() {
		if v.GetKey() == key {
			return string(v.GetRawValue()), true
		}
	}
	return "", false
}

// TestFallbackAttempt: for a fallback model each request also runs the
// attempt's upstream ext_proc stream, as Envoy does: marked by its
// initial metadata, request headers carrying the host's provider
// attribute and the handoff metadata and the downstream's header
// mutations (less the routing header, plus the attempt count), the body,
// and the response headers, whose mutation the downstream's response
// headers message then shows.
func TestFallbackAttempt(t *testing.T) {
	srv := &fallbackRecorder{}
	addr := serve(t, srv)
	if _, err := Run(t.Context(), Config{Addr: addr, Model: "m", Concurrency: 1, Requests: 1, HostProvider: "openai"}); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	// Two requests (the unmeasured first one and one more), each with
	// its downstream and its attempt's stream.
	var down, up []*recorded
	for _, s := range srv.streams {
		if s.upstream {
			up = append(up, s)
		} else {
			down = append(down, s)
		}
	}
	if len(down) != 2 || len(up) != 2 {
		t.Fatalf("%d downstream, %d upstream streams; want 2 and 2", len(down), len(up))
	}
	for i, u := range up {
		if len(u.msgs) != 3 || u.msgs[0].GetRequestHeaders() == nil || u.msgs[1].GetRequestBody() == nil || u.msgs[2].GetResponseHeaders() == nil {
			t.Fatalf("attempt %d: messages %v", i, u.msgs)
		}
		h := u.msgs[0].GetRequestHeaders().GetHeaders()
		if _, ok := headerOf(h, chain.RoutingHeader); ok {
			t.Errorf("attempt %d: the routing header reached the upstream filter", i)
		}
		if _, ok := headerOf(h, "authorization"); ok {
			t.Errorf("attempt %d: the downstream's removal of authorization not applied", i)
		}
		if v, _ := headerOf(h, chain.AttemptCountHeader); v != "1" {
			t.Errorf("attempt %d: %s = %q", i, chain.AttemptCountHeader, v)
		}
		if got := u.msgs[0].GetAttributes()[chain.ExtProcAttributesKey].GetFields()[chain.UpstreamHostProviderAttribute].GetStringValue(); got != "openai" {
			t.Errorf("attempt %d: host provider attribute %q", i, got)
		}
		if u.msgs[1].GetAttributes() != nil {
			t.Errorf("attempt %d: attributes on the body message", i)
		}
		if !u.msgs[1].GetRequestBody().GetEndOfStream() || len(u.msgs[1].GetRequestBody().GetBody()) == 0 {
			t.Errorf("attempt %d: body %v", i, u.msgs[1].GetRequestBody())
		}
		for j, m := range u.msgs {
			if got := m.GetMetadataContext().GetFilterMetadata()[chain.UsageNamespace].GetFields()[chain.FallbackPathKey].GetStringValue(); got != "/v1/chat/completions" {
				t.Errorf("attempt %d message %d: handoff %v", i, j, m.GetMetadataContext())
			}
			if m.GetMetadataContext().GetFilterMetadata()[chain.AuthzNamespace] != nil {
				t.Errorf("attempt %d message %d: the authz namespace is not the upstream filter's to forward", i, j)
			}
		}
		if u.msgs[0].GetProtocolConfig().GetResponseBodyMode() != 0 || u.msgs[0].GetProtocolConfig().GetRequestBodyMode().String() != "BUFFERED" {
			t.Errorf("attempt %d: protocol_config %v", i, u.msgs[0].GetProtocolConfig())
		}
	}
	for i, d := range down {
		var rh *extprocsvc.ProcessingRequest
		for _, m := range d.msgs {
			if m.GetResponseHeaders() != nil {
				rh = m
			}
		}
		if rh == nil {
			t.Fatalf("downstream %d: no response headers", i)
		}
		if v, _ := headerOf(rh.GetResponseHeaders().GetHeaders(), chain.ServedByHeader); v != "openai" {
			t.Errorf("downstream %d: response headers lack the attempt's %s", i, chain.ServedByHeader)
		}
	}
}

// TestCharts draws both charts from a small synthetic results file and
// checks each is a PNG of the documented size.
func TestCharts(t *testing.T) {
	jsonl := strings.Join([]string{
		`{"scenario":"open-200rps","server":"sluice","cpu_us_per_req":1400,"p99_ms":10}`,
		`{"scenario":"open-200rps","server":"floor","cpu_us_per_req":800,"p99_ms":7}`,
		`{"scenario":"streams-50x20","server":"sluice","cpu_us_per_req":1500,"ttfc_p50_ms":3}`,
		`{"scenario":"streams-50x20","server":"floor","cpu_us_per_req":1100}`,
		`not json: a log line`,
		`{"scenario":"ramp","server":"sluice","step_rate":250,"served_per_s":249,"p99_ms":9,"cpu_us_per_req":1300,"holds":true}`,
		`{"scenario":"ramp","server":"sluice","step_rate":500,"served_per_s":470,"p99_ms":80,"cpu_us_per_req":900,"holds":false}`,
		`{"scenario":"ramp","server":"sluice","max_held_rate":250}`,
		`{"scenario":"ramp","server":"floor","step_rate":250,"served_per_s":250,"p99_ms":5,"cpu_us_per_req":700,"holds":true}`,
		`{"scenario":"ramp","server":"floor","step_rate":500,"served_per_s":499,"p99_ms":6,"cpu_us_per_req":600,"holds":true}`,
		`{"scenario":"ramp","server":"floor","max_held_rate":500}`,
	}, "\n")
	in := filepath.Join(t.TempDir(), "results.jsonl")
	if err := os.WriteFile(in, []byte(jsonl), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "charts")
	var stderr bytes.Buffer
	if err := Main(t.Context(), []string{"chart", "--in", in, "--out", out}, &bytes.Buffer{}, &stderr); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	for file, h := range map[string]int{CPUChartFile: ChartHeight, RampChartFile: RampHeight} {
		f, err := os.Open(filepath.Join(out, file))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if b := img.Bounds(); b.Dx() != ChartWidth || b.Dy() != h {
			t.Errorf("%s: %dx%d, want %dx%d", file, b.Dx(), b.Dy(), ChartWidth, h)
		}
	}
	// Without a ramp, only the CPU chart; with no scenario line, an error.
	if files, err := Charts(strings.NewReader(`{"scenario":"closed-max","server":"floor","cpu_us_per_req":100}`), t.TempDir()); err != nil || len(files) != 1 {
		t.Errorf("no ramp: %v, %v", files, err)
	}
	if _, err := Charts(strings.NewReader("\n"), t.TempDir()); err == nil {
		t.Error("charts of nothing: no error")
	}
}
