package load

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// DefaultMaxInFlight caps the requests an open loop has in flight: a
// request due while that many are running is not started and counts as
// an error (not served).
const DefaultMaxInFlight = 4096

// Config is one run.
type Config struct {
	Scenario string // name printed in the result
	Server   string // name of the server (sluice, floor), printed
	Addr     string // host:port of the gRPC server
	PID      int    // the server's pid, for CPU and RSS (0: not measured)
	Key      string // the API key the requests carry
	Model    string

	// Closed loop: Concurrency workers, each sending its next request
	// when the last one ends; with SpreadStarts, worker k starts
	// k/Concurrency of one stream's length ((Chunks-1) × Interval, so it
	// follows an overridden Interval) late, and the workers do not all
	// Check at once. Open loop: Rate
	// requests a second on a fixed schedule, whatever is in flight
	// (Concurrency is ignored), at most MaxInFlight at once (0:
	// DefaultMaxInFlight).
	Concurrency  int
	SpreadStarts bool
	Rate         float64
	MaxInFlight  int
	// The run ends after Requests requests or Duration, whichever comes
	// first (0 means no limit; one of them must be set). An open loop
	// with a Duration schedules Rate × Duration requests.
	Requests int
	Duration time.Duration

	Stream   bool          // SSE response of Chunks chunks, else one JSON body
	Chunks   int           // chunks of a stream, at least 3
	Interval time.Duration // between two response chunks

	// Conns is the number of gRPC connections (Envoy worker threads);
	// requests take them in turn. 0 means 1.
	Conns int
	// HostProvider, when set, makes the model a fallback model (one with a
	// priority list of providers) and each request's one attempt go to a
	// host of this provider; the upstream ext_proc stream is played too.
	HostProvider string

	// Ramp, when set, makes the run a ramp (see RunRamp): open loop at each
	// rate for Step.
	Ramp []float64
	Step time.Duration

	// CPUProfile, when set, is the file the driver's own CPU profile is
	// written to: the driver's core is the other half of the machine.
	CPUProfile string `json:"-"`

	// TLS, when set, is the connections' TLS (mTLS with a client
	// certificate); the zero value is plaintext, as before.
	TLS ClientTLS
}

// Result is the JSON line of one run. Latency is the whole request as the
// driver sees it (Check through the last body reply), from the scheduled
// send time in open loop; TTFC (streams only) is from the same start to
// the reply to the first response body chunk. CPU is the server's
// utime+stime over the run (10 ms resolution) divided by the requests
// that reached it.
type Result struct {
	Scenario     string  `json:"scenario"`
	Server       string  `json:"server"`
	Concurrency  int     `json:"concurrency,omitempty"`
	Rate         float64 `json:"rate,omitempty"`
	Conns        int     `json:"conns"`
	Chunks       int     `json:"chunks"`
	Requests     int     `json:"requests"`
	Errors       int     `json:"errors"`
	Timeouts     int     `json:"timeouts"`
	NotStarted   int     `json:"not_started,omitempty"`
	CPUMicrosReq float64 `json:"cpu_us_per_req"`
	// ServerBusy and DriverBusy are the server's and the driver's CPU
	// over the run in percent of one core: a run whose driver is near
	// 100 measured the driver's limit, not the server's.
	ServerBusy    float64 `json:"server_cpu_pct"`
	DriverBusy    float64 `json:"driver_cpu_pct"`
	ReqPerSec     float64 `json:"req_per_s"`
	P50Millis     float64 `json:"p50_ms"`
	P99Millis     float64 `json:"p99_ms"`
	TTFCP50Millis float64 `json:"ttfc_p50_ms,omitempty"`
	TTFCP99Millis float64 `json:"ttfc_p99_ms,omitempty"`
	RSSKiB        int64   `json:"rss_kib"`
	RSSMaxKiB     int64   `json:"rss_max_kib"`
	// RSSAnonKiB and RSSAnonMaxKiB are RssAnon at the end and its peak:
	// what a memory limit sees of the process beside the page cache.
	RSSAnonKiB    int64 `json:"rss_anon_kib"`
	RSSAnonMaxKiB int64 `json:"rss_anon_max_kib"`
	// TLS is "tls" or "mtls" (a client certificate presented) when the
	// connections were TLS; absent when plaintext.
	TLS           string  `json:"tls,omitempty"`
	FirstError    string  `json:"first_error,omitempty"`
	ElapsedMillis float64 `json:"elapsed_ms"`
}

// spread is how late the last closed-loop worker starts: one stream's
// length with SpreadStarts, else 0.
func (c Config) spread() time.Duration {
	if !c.SpreadStarts || !c.Stream || c.Chunks < 2 {
		return 0
	}
	return time.Duration(c.Chunks-1) * c.Interval
}

func (c Config) validate() error {
	var errs []error
	if c.Addr == "" {
		errs = append(errs, errors.New("addr: required"))
	}
	if len(c.Ramp) > 0 {
		if c.Step <= 0 {
			errs = append(errs, errors.New("step: must be positive for a ramp"))
		}
		for i, r := range c.Ramp {
			if r <= 0 {
				errs = append(errs, fmt.Errorf("ramp[%d]: must be positive", i))
			}
		}
	} else {
		if c.Rate < 0 || (c.Rate == 0 && c.Concurrency < 1) {
			errs = append(errs, errors.New("concurrency: at least 1 (or set rate)"))
		}
		if c.Requests <= 0 && c.Duration <= 0 {
			errs = append(errs, errors.New("requests or duration: one must be set"))
		}
	}
	if c.Stream && c.Chunks < 3 {
		errs = append(errs, errors.New("chunks: at least 3 for a stream (deltas, usage, [DONE])"))
	}
	if c.Conns < 0 || c.MaxInFlight < 0 {
		errs = append(errs, errors.New("conns, max-in-flight: must not be negative"))
	}
	errs = append(errs, c.TLS.validate())
	return errors.Join(errs...)
}

// driver is the connections and the exchange of a run.
type driver struct {
	cfg   Config
	conns []*grpc.ClientConn
	x     *exchange
}

// dial opens cfg.Conns HTTP/2 connections, as Envoy's worker threads each
// have one to a cluster host, and makes one request, unmeasured: it opens
// the connections and fails the run early on a misconfiguration. They
// behave as Envoy's do with a cluster's default http2_protocol_options
// (api/envoy/config/core/v3/protocol.proto): stream and connection
// windows of 256 MiB, fixed, and no PING unless connection_keepalive is
// set. grpc-go's defaults would instead send a PING about once a round
// trip to size its windows, which the server must read and answer.
// envoyWindow is Envoy's default initial_stream_window_size and
// initial_connection_window_size.
const envoyWindow = 256 << 20

func dial(ctx context.Context, cfg Config) (*driver, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	bodies, err := NewBodies(cfg.Model, cfg.Chunks, cfg.Stream)
	if err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if cfg.TLS.On() {
		if creds, err = cfg.TLS.credentials(); err != nil {
			return nil, err
		}
	}
	d := &driver{cfg: cfg}
	ifaces := []grpc.ClientConnInterface{}
	for range max(1, cfg.Conns) {
		c, err := grpc.NewClient(cfg.Addr, grpc.WithTransportCredentials(creds),
			grpc.WithStaticStreamWindowSize(envoyWindow), grpc.WithStaticConnWindowSize(envoyWindow))
		if err != nil {
			d.close()
			return nil, err
		}
		d.conns = append(d.conns, c)
		ifaces = append(ifaces, c)
	}
	if d.x, err = newExchange(ifaces, cfg.Key, bodies, cfg.Stream, cfg.Interval, cfg.HostProvider); err != nil {
		d.close()
		return nil, err
	}
	// One request per connection, at once: paced streams last seconds
	// each, and the connections are independent.
	errs := make([]error, len(d.conns))
	var wg sync.WaitGroup
	for i := range d.conns {
		wg.Go(func() { _, errs[i] = d.x.do(ctx, time.Now()) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		d.close()
		return nil, fmt.Errorf("first request: %w", err)
	}
	return d, nil
}

func (d *driver) close() {
	for _, c := range d.conns {
		c.Close()
	}
}

// load is one measured phase: an open loop (rate > 0) of requests
// requests, or a closed loop of concurrency workers until requests or
// duration.
type load struct {
	rate        float64
	concurrency int
	requests    int
	duration    time.Duration
}

// stats is what a phase measured.
type stats struct {
	lat, ttfc  []time.Duration // of the requests served, sorted
	errs       int             // requests that failed, not started ones included
	timeouts   int             // of errs, message timeouts
	notStarted int             // of errs, open-loop requests over the in-flight cap
	firstErr   string
	elapsed    time.Duration // from the start to the end of the last request
	cpu        time.Duration // the server's CPU time over the phase (0 without a pid)
	driverCPU  time.Duration // the driver's own, over the same time
	rss        int64         // VmRSS at the end, KiB
	rssMax     int64         // the largest VmRSS seen during the phase, KiB
	// anon and anonMax are RssAnon likewise: the anonymous memory, which
	// a container's memory limit charges whatever the page cache holds.
	anon, anonMax int64
}

func (s *stats) served() int { return len(s.lat) }

// phase runs l and measures it.
func (d *driver) phase(ctx context.Context, l load) (stats, error) {
	var (
		mu sync.Mutex
		st stats
	)
	record := func(t timing, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			st.errs++
			if errors.Is(err, errTimeout) {
				st.timeouts++
			}
			if st.firstErr == "" {
				st.firstErr = err.Error()
			}
			return
		}
		st.lat = append(st.lat, t.total)
		if d.cfg.Stream {
			st.ttfc = append(st.ttfc, t.ttfc)
		}
	}
	pid := d.cfg.PID
	var cpu0 time.Duration
	if pid > 0 {
		var err error
		if cpu0, err = cpuTime(pid); err != nil {
			return stats{}, err
		}
	}
	self, err := cpuTime(os.Getpid())
	if err != nil {
		return stats{}, err
	}
	sampled := make(chan memPeak, 1)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	go func() { sampled <- sampleRSS(sampleCtx, pid) }()

	start := time.Now()
	var wg sync.WaitGroup
	if l.rate > 0 {
		n := l.requests
		if n <= 0 {
			n = int(math.Round(l.rate * l.duration.Seconds()))
		}
		limit := d.cfg.MaxInFlight
		if limit <= 0 {
			limit = DefaultMaxInFlight
		}
		inFlight := make(chan struct{}, limit)
		for i := range n {
			at := start.Add(time.Duration(float64(i) * float64(time.Second) / l.rate))
			if sleepUntil(ctx, at) != nil {
				break
			}
			select {
			case inFlight <- struct{}{}:
			default:
				mu.Lock()
				st.errs++
				st.notStarted++
				if st.firstErr == "" {
					st.firstErr = fmt.Sprintf("not started: %d requests in flight", limit)
				}
				mu.Unlock()
				continue
			}
			wg.Go(func() {
				defer func() { <-inFlight }()
				record(d.x.do(ctx, at))
			})
		}
	} else {
		runCtx := ctx
		if l.duration > 0 {
			var cancel context.CancelFunc
			runCtx, cancel = context.WithTimeout(ctx, l.duration)
			defer cancel()
		}
		var next sync.Mutex
		n := 0
		take := func() bool {
			next.Lock()
			defer next.Unlock()
			if runCtx.Err() != nil || (l.requests > 0 && n >= l.requests) {
				return false
			}
			n++
			return true
		}
		for k := range l.concurrency {
			wg.Go(func() {
				if spread := d.cfg.spread(); spread > 0 && sleepUntil(runCtx, start.Add(spread*time.Duration(k)/time.Duration(l.concurrency))) != nil {
					return
				}
				for take() {
					// A started request runs to its end even when the
					// duration is up: ctx, not runCtx.
					record(d.x.do(ctx, time.Now()))
				}
			})
		}
	}
	wg.Wait()
	st.elapsed = time.Since(start)
	self1, err := cpuTime(os.Getpid())
	stopSampling()
	peak := <-sampled
	st.rssMax, st.anonMax = peak.rss, peak.anon
	if err != nil {
		return stats{}, err
	}
	st.driverCPU = self1 - self
	if pid > 0 {
		cpu1, err := cpuTime(pid)
		if err != nil {
			return stats{}, err
		}
		st.cpu = cpu1 - cpu0
		if st.rss, err = rssKiB(pid); err != nil {
			return stats{}, err
		}
		st.rssMax = max(st.rssMax, st.rss)
		if st.anon, err = anonKiB(pid); err != nil {
			return stats{}, err
		}
		st.anonMax = max(st.anonMax, st.anon)
	}
	slices.Sort(st.lat)
	slices.Sort(st.ttfc)
	return st, nil
}

// cpuPerReq is the server's CPU µs per request that reached it (not
// started ones never did).
func (s *stats) cpuPerReq() float64 {
	n := s.served() + s.errs - s.notStarted
	if n <= 0 {
		return 0
	}
	return float64(s.cpu.Microseconds()) / float64(n)
}

// busy is the percentage of one core that cpu is over the phase.
func (s *stats) busy(cpu time.Duration) float64 {
	if s.elapsed <= 0 {
		return 0
	}
	return 100 * cpu.Seconds() / s.elapsed.Seconds()
}

// memPeak is the largest VmRSS and RssAnon sampled, KiB.
type memPeak struct{ rss, anon int64 }

// sampleRSS samples VmRSS and RssAnon of pid every 100 ms until ctx ends
// and returns the largest of each (0 when pid is 0 or unreadable).
func sampleRSS(ctx context.Context, pid int) memPeak {
	var peak memPeak
	if pid <= 0 {
		return peak
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		if v, err := rssKiB(pid); err == nil {
			peak.rss = max(peak.rss, v)
		}
		if v, err := anonKiB(pid); err == nil {
			peak.anon = max(peak.anon, v)
		}
		select {
		case <-ctx.Done():
			return peak
		case <-t.C:
		}
	}
}

// Run makes one run against cfg.Addr (not a ramp: see RunRamp).
func Run(ctx context.Context, cfg Config) (Result, error) {
	if len(cfg.Ramp) > 0 {
		return Result{}, errors.New("run: a ramp scenario (use RunRamp)")
	}
	d, err := dial(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	defer d.close()
	st, err := d.phase(ctx, load{rate: cfg.Rate, concurrency: cfg.Concurrency, requests: cfg.Requests, duration: cfg.Duration})
	if err != nil {
		return Result{}, err
	}
	res := Result{
		Scenario: cfg.Scenario, Server: cfg.Server, Rate: cfg.Rate, Conns: len(d.conns),
		Requests: st.served() + st.errs, Errors: st.errs, Timeouts: st.timeouts, NotStarted: st.notStarted, FirstError: st.firstErr,
		ElapsedMillis: ms(st.elapsed), CPUMicrosReq: st.cpuPerReq(), RSSKiB: st.rss, RSSMaxKiB: st.rssMax,
		RSSAnonKiB: st.anon, RSSAnonMaxKiB: st.anonMax,
		ServerBusy: st.busy(st.cpu), DriverBusy: st.busy(st.driverCPU), TLS: cfg.TLS.mode(),
	}
	if cfg.Rate == 0 {
		res.Concurrency = cfg.Concurrency
	}
	res.Chunks = 1
	if cfg.Stream {
		res.Chunks = len(d.x.bodies.Chunks)
		res.TTFCP50Millis, res.TTFCP99Millis = ms(quantile(st.ttfc, 0.50)), ms(quantile(st.ttfc, 0.99))
	}
	if st.elapsed > 0 {
		res.ReqPerSec = float64(st.served()) / st.elapsed.Seconds()
	}
	res.P50Millis, res.P99Millis = ms(quantile(st.lat, 0.50)), ms(quantile(st.lat, 0.99))
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
