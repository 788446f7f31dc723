package load

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/app"
)

// benchKey is the secret whose SHA-256 bench.yaml declares.
const benchKey = "sk-sluice-BenchOnlyNotASecret000000000000000000000000"

// short are the scenarios of `make bench-service`, cut to a few requests
// (the ramp: see TestRampScenario).
var short = map[string]func(Config) Config{
	"open-200rps":  func(c Config) Config { c.Rate, c.Requests, c.Duration = 200, 10, 0; return c },
	"open-1000rps": func(c Config) Config { c.Rate, c.Requests, c.Duration = 1000, 20, 0; return c },
	"streams-50x20": func(c Config) Config {
		c.Concurrency, c.Requests, c.Chunks, c.Interval, c.Duration = 4, 8, 5, time.Millisecond, 0
		return c
	},
	"streams-2000": func(c Config) Config {
		c.Concurrency, c.Requests, c.Chunks, c.Interval, c.Duration, c.SpreadStarts = 40, 40, 5, time.Millisecond, 0, true
		return c
	},
	"closed-max": func(c Config) Config { c.Concurrency, c.Requests, c.Duration = 4, 20, 0; return c },
	"closed-64":  func(c Config) Config { c.Concurrency, c.Requests, c.Duration = 8, 40, 0; return c },
	"closed-streams": func(c Config) Config {
		c.Concurrency, c.Requests, c.Chunks, c.Duration = 4, 8, 5, 0
		return c
	},
	"fallback": func(c Config) Config { c.Rate, c.Requests, c.Duration = 200, 10, 0; return c },
}

// TestScenarios runs every scenario once, briefly, against the floor and
// against a Sluice serving bench.yaml in this process (its pid is the
// test's), and checks that every request completed and the result is
// sane. No timing is asserted.
func TestScenarios(t *testing.T) {
	servers := map[string]string{"floor": startFloor(t), "sluice": startSluice(t)}
	for server, addr := range servers {
		for name, preset := range Scenarios {
			if len(preset.Ramp) > 0 {
				continue
			}
			t.Run(server+"/"+name, func(t *testing.T) {
				cfg := short[name](preset)
				cfg.Scenario, cfg.Server, cfg.Addr, cfg.PID, cfg.Key = name, server, addr, os.Getpid(), benchKey
				if cfg.Model == "" {
					cfg.Model = "gpt-4o-mini"
				}
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				defer cancel()
				res, err := Run(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				if res.Errors != 0 || res.Requests != cfg.Requests {
					t.Fatalf("requests %d (want %d), errors %d: %s", res.Requests, cfg.Requests, res.Errors, res.FirstError)
				}
				wantChunks := 1
				if cfg.Stream {
					wantChunks = cfg.Chunks
				}
				if res.Chunks != wantChunks {
					t.Errorf("chunks = %d, want %d", res.Chunks, wantChunks)
				}
				if res.CPUMicrosReq < 0 || res.ReqPerSec <= 0 || res.P50Millis <= 0 || res.P99Millis < res.P50Millis || res.RSSKiB <= 0 || res.RSSMaxKiB < res.RSSKiB || res.RSSAnonKiB <= 0 || res.RSSAnonMaxKiB < res.RSSAnonKiB {
					t.Errorf("result not sane: %+v", res)
				}
				if wantConns := max(1, cfg.Conns); res.Conns != wantConns {
					t.Errorf("conns = %d, want %d", res.Conns, wantConns)
				}
				if cfg.Stream && (res.TTFCP50Millis <= 0 || res.TTFCP99Millis < res.TTFCP50Millis || res.TTFCP99Millis > res.P99Millis) {
					t.Errorf("stream ttfc not sane: %+v", res)
				}
				if !cfg.Stream && (res.TTFCP50Millis != 0 || res.TTFCP99Millis != 0) {
					t.Errorf("ttfc reported for a non-stream run: %+v", res)
				}
				b, err := json.Marshal(res)
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range []string{"scenario", "server", "requests", "errors", "cpu_us_per_req", "req_per_s", "p50_ms", "p99_ms", "rss_kib"} {
					if !bytes.Contains(b, []byte(`"`+f+`":`)) {
						t.Errorf("JSON line lacks %q: %s", f, b)
					}
				}
			})
		}
	}
}

// TestRejectedCredentialIsAnError checks that a request Sluice refuses
// counts as an error, not a completed request: the driver must not
// measure a run of denials as throughput.
func TestRejectedCredentialIsAnError(t *testing.T) {
	addr := startSluice(t)
	_, err := Run(t.Context(), Config{Addr: addr, Key: "sk-sluice-WrongKey000000000000000000000000000000", Model: "gpt-4o-mini", Concurrency: 1, Requests: 1})
	if err == nil || !strings.Contains(err.Error(), "denied") {
		t.Fatalf("Run with an unknown key: err = %v, want a denied check", err)
	}
}

func TestParseRun(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want func(Config) bool
		err  bool
	}{
		{args: []string{"--addr", "a:1", "--scenario", "open-200rps", "--duration", "1s"},
			want: func(c Config) bool { return c.Rate == 200 && c.Duration == time.Second && c.Scenario == "open-200rps" }},
		{args: []string{"--addr", "a:1", "--scenario", "open-200rps", "--concurrency", "3"},
			want: func(c Config) bool { return c.Rate == 0 && c.Concurrency == 3 }},
		{args: []string{"--addr", "a:1", "--scenario", "streams-50x20"},
			want: func(c Config) bool {
				return c.Stream && c.Chunks == 20 && c.Concurrency == 50 && c.Interval == 15*time.Millisecond
			}},
		{args: []string{"--addr", "a:1", "--scenario", "open-1000rps"},
			want: func(c Config) bool { return c.Rate == 1000 && c.Duration == 10*time.Second && !c.Stream }},
		{args: []string{"--addr", "a:1", "--scenario", "streams-2000"},
			want: func(c Config) bool {
				return c.Concurrency == 2000 && c.Chunks == 20 && c.Interval == 15*time.Millisecond && c.Conns == 4 && c.Duration == 15*time.Second &&
					c.spread() == 19*15*time.Millisecond
			}},
		// The starts' spread is one stream's length, paced or not.
		{args: []string{"--addr", "a:1", "--scenario", "streams-2000", "--interval", "250ms"},
			want: func(c Config) bool { return c.spread() == 19*250*time.Millisecond }},
		{args: []string{"--addr", "a:1", "--scenario", "closed-max"},
			want: func(c Config) bool { return c.spread() == 0 }},
		{args: []string{"--addr", "a:1", "--scenario", "ramp", "--step", "2s"},
			want: func(c Config) bool { return slices.Equal(c.Ramp, RampRates) && c.Step == 2*time.Second }},
		{args: []string{"--addr", "a:1", "--scenario", "fallback"},
			want: func(c Config) bool { return c.Model == FallbackModel && c.HostProvider == "openai" }},
		{args: []string{"--addr", "a:1", "--scenario", "open-200rps", "--conns", "3", "--max-in-flight", "7"},
			want: func(c Config) bool { return c.Conns == 3 && c.MaxInFlight == 7 && c.Model == "gpt-4o-mini" }},
		{args: []string{"--addr", "a:1", "--scenario", "ramp", "--step", "0s"}, err: true},           // no step
		{args: []string{"--scenario", "closed-max"}, err: true},                                      // no addr
		{args: []string{"--addr", "a:1", "--scenario", "nope"}, err: true},                           // unknown
		{args: []string{"--addr", "a:1", "--scenario", "streams-50x20", "--chunks", "2"}, err: true}, // too few chunks
	} {
		c, err := parseRun(tc.args, io.Discard)
		if tc.err {
			if !errors.Is(err, ErrUsage) {
				t.Errorf("%v: err = %v, want ErrUsage", tc.args, err)
			}
			continue
		}
		if err != nil || !tc.want(c) {
			t.Errorf("%v: %+v, %v", tc.args, c, err)
		}
	}
}

func TestQuantile(t *testing.T) {
	d := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if q := quantile(d, 0.5); q != 5 {
		t.Errorf("p50 = %d, want 5", q)
	}
	if q := quantile(d, 0.99); q != 10 {
		t.Errorf("p99 = %d, want 10", q)
	}
	if q := quantile(nil, 0.5); q != 0 {
		t.Errorf("p50 of nothing = %d", q)
	}
}

func TestBodies(t *testing.T) {
	b, err := NewBodies("gpt-4o-mini", 6, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Chunks) != 6 || string(b.Chunks[5]) != "data: [DONE]\n\n" || !bytes.Contains(b.Chunks[4], []byte(`"usage":{"completion_tokens":64`)) {
		t.Errorf("stream chunks: %q", b.Chunks)
	}
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	if err := json.Unmarshal(b.Request, &req); err != nil || req.Model != "gpt-4o-mini" || !req.Stream {
		t.Errorf("request %s: %+v %v", b.Request, req, err)
	}
	var resp struct {
		Usage struct {
			TotalTokens int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b.Response, &resp); err != nil || resp.Usage.TotalTokens != 476 {
		t.Errorf("response %s: %v", b.Response, err)
	}
}

func startFloor(t *testing.T) string {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeFloor(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("floor: %v", err)
		}
	})
	return ln.Addr().String()
}

// startSluice runs `sluice serve` on a copy of bench.yaml in this
// process and returns its gRPC address, from the ready file.
func startSluice(t *testing.T) string {
	t.Helper()
	return startSluiceWith(t, "")
}

// startSluiceWith is startSluice with extra appended to the copy of
// bench.yaml (a top-level section, as scripts/bench-service.sh appends
// security.tls).
func startSluiceWith(t *testing.T, extra string) string {
	t.Helper()
	dir := t.TempDir()
	cfg, err := os.ReadFile("../bench.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg = append(cfg, extra...)
	if err := os.WriteFile(filepath.Join(dir, "bench.yaml"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(dir, "ready.json")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var serveErr error
	go func() {
		defer close(done)
		serveErr = app.Run(ctx, []string{"serve", "--config", filepath.Join(dir, "bench.yaml"), "--ready-file", ready, "--log-level", "error", "--shutdown-drain", "0"},
			io.Discard, io.Discard, func(string) (string, bool) { return "", false })
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if serveErr != nil {
			t.Errorf("sluice serve: %v", serveErr)
		}
	})
	// Poll for the ready file (serve writes it once listening), bounded.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-done:
			t.Fatalf("sluice serve ended before ready: %v", serveErr)
		case <-deadline:
			t.Fatal("sluice serve: not ready after 10s")
		case <-tick.C:
		}
		b, err := os.ReadFile(ready)
		if err != nil || len(b) == 0 {
			continue
		}
		var r struct {
			GRPC string `json:"grpc"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			continue // written but not complete yet
		}
		return r.GRPC
	}
}

// TestBusy: a core's share is CPU time over the phase's length, in
// percent; a phase that took no time has none.
func TestBusy(t *testing.T) {
	for _, c := range []struct {
		elapsed, cpu time.Duration
		want         float64
	}{
		{2 * time.Second, 500 * time.Millisecond, 25},
		{time.Second, time.Second, 100},
		{time.Second, 0, 0},
		{0, time.Second, 0},
	} {
		st := stats{elapsed: c.elapsed}
		if got := st.busy(c.cpu); got != c.want {
			t.Errorf("busy(%v) over %v = %v, want %v", c.cpu, c.elapsed, got, c.want)
		}
	}
}
