package load

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Config is one run.
type Config struct {
	Scenario string // name printed in the result
	Server   string // name of the server (sluice, floor), printed
	Addr     string // host:port of the gRPC server
	PID      int    // the server's pid, for CPU and RSS (0: not measured)
	Key      string // the API key the requests carry
	Model    string

	// Closed loop: Concurrency workers, each sending its next request
	// when the last one ends. Open loop: Rate requests a second on a
	// fixed schedule, whatever is in flight (Concurrency is ignored).
	Concurrency int
	Rate        float64
	// The run ends after Requests requests or Duration, whichever comes
	// first (0 means no limit; one of them must be set).
	Requests int
	Duration time.Duration

	Stream   bool          // SSE response of Chunks chunks, else one JSON body
	Chunks   int           // chunks of a stream, at least 3
	Interval time.Duration // between two response chunks
}

// Result is the JSON line of one run. Latency is the whole request as the
// driver sees it (Check through the last body reply), from the scheduled
// send time in open loop. CPU is the server's utime+stime over the run
// (10 ms resolution) divided by the completed requests.
type Result struct {
	Scenario      string  `json:"scenario"`
	Server        string  `json:"server"`
	Concurrency   int     `json:"concurrency,omitempty"`
	Rate          float64 `json:"rate,omitempty"`
	Chunks        int     `json:"chunks"`
	Requests      int     `json:"requests"`
	Errors        int     `json:"errors"`
	Timeouts      int     `json:"timeouts"`
	CPUMicrosReq  float64 `json:"cpu_us_per_req"`
	ReqPerSec     float64 `json:"req_per_s"`
	P50Millis     float64 `json:"p50_ms"`
	P99Millis     float64 `json:"p99_ms"`
	RSSKiB        int64   `json:"rss_kib"`
	FirstError    string  `json:"first_error,omitempty"`
	ElapsedMillis float64 `json:"elapsed_ms"`
}

func (c Config) validate() error {
	var errs []error
	if c.Addr == "" {
		errs = append(errs, errors.New("addr: required"))
	}
	if c.Rate < 0 || (c.Rate == 0 && c.Concurrency < 1) {
		errs = append(errs, errors.New("concurrency: at least 1 (or set rate)"))
	}
	if c.Requests <= 0 && c.Duration <= 0 {
		errs = append(errs, errors.New("requests or duration: one must be set"))
	}
	if c.Stream && c.Chunks < 3 {
		errs = append(errs, errors.New("chunks: at least 3 for a stream (deltas, usage, [DONE])"))
	}
	return errors.Join(errs...)
}

// Run makes one run against cfg.Addr.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	bodies, err := NewBodies(cfg.Model, cfg.Chunks, cfg.Stream)
	if err != nil {
		return Result{}, err
	}
	// One HTTP/2 connection, as one Envoy worker thread has to a cluster
	// host (grpc-go's defaults: no keepalive, default window sizes).
	conn, err := grpc.NewClient(cfg.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return Result{}, err
	}
	defer conn.Close()
	x := newExchange(conn, cfg.Key, bodies, cfg.Stream, cfg.Interval)
	// One request first, unmeasured: it opens the connection and fails
	// the run early on a misconfiguration.
	if err := x.do(ctx); err != nil {
		return Result{}, fmt.Errorf("first request: %w", err)
	}

	var (
		mu       sync.Mutex
		lat      []time.Duration
		errs     int
		timeouts int
		firstErr string
	)
	record := func(d time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs++
			if errors.Is(err, errTimeout) {
				timeouts++
			}
			if firstErr == "" {
				firstErr = err.Error()
			}
			return
		}
		lat = append(lat, d)
	}

	runCtx := ctx
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	var cpu0 time.Duration
	if cfg.PID > 0 {
		if cpu0, err = cpuTime(cfg.PID); err != nil {
			return Result{}, err
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	if cfg.Rate > 0 {
		period := time.Duration(float64(time.Second) / cfg.Rate)
		for i := 0; cfg.Requests <= 0 || i < cfg.Requests; i++ {
			at := start.Add(time.Duration(i) * period)
			if sleepUntil(runCtx, at) != nil {
				break
			}
			wg.Go(func() {
				// A started request runs to its end even when the
				// duration is up: ctx, not runCtx.
				err := x.do(ctx)
				record(time.Since(at), err)
			})
		}
	} else {
		var next sync.Mutex
		n := 0
		take := func() bool {
			next.Lock()
			defer next.Unlock()
			if runCtx.Err() != nil || (cfg.Requests > 0 && n >= cfg.Requests) {
				return false
			}
			n++
			return true
		}
		for range cfg.Concurrency {
			wg.Go(func() {
				for take() {
					t := time.Now()
					err := x.do(ctx)
					record(time.Since(t), err)
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)

	res := Result{
		Scenario: cfg.Scenario, Server: cfg.Server, Rate: cfg.Rate,
		Requests: len(lat) + errs, Errors: errs, Timeouts: timeouts, FirstError: firstErr,
		ElapsedMillis: ms(elapsed),
	}
	if cfg.Rate == 0 {
		res.Concurrency = cfg.Concurrency
	}
	res.Chunks = 1
	if cfg.Stream {
		res.Chunks = len(bodies.Chunks)
	}
	if cfg.PID > 0 {
		cpu1, err := cpuTime(cfg.PID)
		if err != nil {
			return Result{}, err
		}
		if res.Requests > 0 {
			res.CPUMicrosReq = float64((cpu1 - cpu0).Microseconds()) / float64(res.Requests)
		}
		if res.RSSKiB, err = rssKiB(cfg.PID); err != nil {
			return Result{}, err
		}
	}
	if elapsed > 0 {
		res.ReqPerSec = float64(len(lat)) / elapsed.Seconds()
	}
	slices.Sort(lat)
	res.P50Millis, res.P99Millis = ms(quantile(lat, 0.50)), ms(quantile(lat, 0.99))
	return res, nil
}

// quantile is the nearest-rank quantile of sorted d (0 when empty).
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(q*float64(len(d))+0.999999) - 1
	return d[max(0, min(i, len(d)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
