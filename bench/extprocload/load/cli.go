package load

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
)

// ErrUsage is returned when the command line is wrong (already reported).
var ErrUsage = errors.New("usage")

// Scenarios are the named runs of `make bench-service`; flags override
// any field.
var Scenarios = map[string]Config{
	// Steady state: a fixed 200 requests a second, non-stream.
	"open-200rps": {Rate: 200, Duration: 10 * time.Second},
	// A fixed 1,000 requests a second, non-stream.
	"open-1000rps": {Rate: 1000, Duration: 10 * time.Second},
	// 50 concurrent SSE streams of 20 chunks, 15 ms apart (the pace of
	// the published gateway benchmark).
	"streams-50x20": {Concurrency: 50, Stream: true, Chunks: 20, Interval: 15 * time.Millisecond, Duration: 10 * time.Second},
	// 2,000 concurrent SSE streams of 20 chunks, 15 ms apart, over 4
	// connections (a 4-worker Envoy), the workers' starts spread over one
	// stream's length.
	"streams-2000": {Concurrency: 2000, Stream: true, Chunks: 20, Interval: 15 * time.Millisecond, Duration: 15 * time.Second,
		Conns: 4, SpreadStarts: true},
	// Closed loop as fast as the server answers, non-stream.
	"closed-max": {Concurrency: 16, Duration: 5 * time.Second},
	// The same with 64 workers: enough requests in flight that the
	// server's batches (a spool sync, an ingest transaction) fill, so its
	// capacity shows while the driver's core is what saturates.
	"closed-64": {Concurrency: 64, Duration: 5 * time.Second},
	// Closed loop of SSE streams of 20 chunks sent as fast as the server
	// answers (no interval): a stream's cost without the idle wake-ups
	// that pacing adds to every chunk.
	"closed-streams": {Concurrency: 16, Stream: true, Chunks: 20, Duration: 5 * time.Second},
	// Open loop from 250 req/s, doubling, 20 s a step, until a step does
	// not hold (RunRamp), non-stream.
	"ramp": {Ramp: RampRates, Step: 20 * time.Second},
	// A fallback model (a priority list of providers), its one attempt
	// succeeding on the first provider: 200 requests a second, non-stream.
	"fallback": {Rate: 200, Duration: 10 * time.Second, Model: FallbackModel, HostProvider: "openai"},
}

// FallbackModel is bench.yaml's model with a priority list of providers.
const FallbackModel = "gpt-4o-mini-fallback"

const usage = `usage:
  extprocload run   --addr HOST:PORT --key KEY [--pid PID] [--scenario NAME] [--tls-ca FILE [--tls-cert FILE --tls-key FILE] [--tls-server-name NAME]] [flags]
  extprocload floor --addr 127.0.0.1:0 [--ready-file FILE] [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]
  extprocload certs --dir DIR
  extprocload chart --in RESULTS.jsonl --out DIR
  extprocload median [--markdown] [--out FILE] RUN.jsonl...
  extprocload prefill --ledger FILE --records N

run plays Envoy for Sluice's filter chain against the gRPC server at
--addr and prints one JSON line (a ramp: one a step, then a summary).
floor serves the do-nothing ext_authz and ext_proc server. certs writes a
throwaway CA and a server and a client certificate for mTLS runs. chart draws
PNG charts of run's JSON lines. median picks, of several runs' results,
the median run of each scenario and server by CPU a request (a ramp's by
its highest held rate). Scenarios: `

// Main runs the command line args (without the program name).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	names := make([]string, 0, len(Scenarios))
	for n := range Scenarios {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage+strings.Join(names, ", "))
		return ErrUsage
	}
	switch args[0] {
	case "run":
		cfg, err := parseRun(args[1:], stderr)
		if err != nil {
			return err
		}
		if cfg.CPUProfile != "" {
			stop, err := startCPUProfile(cfg.CPUProfile)
			if err != nil {
				return err
			}
			defer stop()
		}
		enc := json.NewEncoder(stdout)
		if len(cfg.Ramp) > 0 {
			return RunRamp(ctx, cfg, func(v any) error { return enc.Encode(v) })
		}
		res, err := Run(ctx, cfg)
		if err != nil {
			return err
		}
		return enc.Encode(res)
	case "floor":
		return runFloor(ctx, args[1:], stderr)
	case "certs":
		return runCerts(args[1:], stdout, stderr)
	case "chart":
		return runChart(args[1:], stderr)
	case "median":
		return runMedian(args[1:], stdout, stderr)
	case "prefill":
		return runPrefill(ctx, args[1:], stderr)
	default:
		fmt.Fprintln(stderr, usage+strings.Join(names, ", "))
		return ErrUsage
	}
}

func parseRun(args []string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenario := fs.String("scenario", "closed-max", "named scenario the other flags override")
	var c Config
	fs.StringVar(&c.Addr, "addr", "", "gRPC `host:port` of the server")
	fs.IntVar(&c.PID, "pid", 0, "the server's `pid`, for CPU (/proc/PID/stat) and RSS (/proc/PID/status); 0: not measured")
	fs.StringVar(&c.Key, "key", "", "API key the requests carry")
	model := fs.String("model", "gpt-4o-mini", "model of the chat-completions request (the scenario's, if it names one)")
	fs.StringVar(&c.Server, "server", "sluice", "server name printed in the result")
	conc := fs.Int("concurrency", 0, "closed loop: concurrent workers")
	rate := fs.Float64("rate", 0, "open loop: requests a second (latency from the scheduled send time)")
	reqs := fs.Int("requests", 0, "stop after this many requests (0: no limit)")
	dur := fs.Duration("duration", 0, "stop after this long (0: no limit)")
	stream := fs.Bool("stream", false, "SSE stream responses")
	chunks := fs.Int("chunks", 0, "chunks of a stream response (>= 3)")
	interval := fs.Duration("interval", 0, "time between two response chunks")
	conns := fs.Int("conns", 0, "gRPC connections (Envoy worker threads) the requests take in turn")
	inflight := fs.Int("max-in-flight", 0, "open loop: requests in flight at most (0: 4096); one due beyond it is not started and counts as an error")
	step := fs.Duration("step", 0, "ramp: how long each step lasts")
	hostProvider := fs.String("host-provider", "", "play a fallback model's attempt on a host of this provider")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write the driver's own CPU profile to this `file` (where its core goes)")
	fs.StringVar(&c.TLS.Cert, "tls-cert", "", "TLS: the client certificate (PEM `file`) presented for mTLS")
	fs.StringVar(&c.TLS.Key, "tls-key", "", "TLS: the client certificate's key (PEM `file`)")
	fs.StringVar(&c.TLS.CA, "tls-ca", "", "TLS: the CA bundle (PEM `file`) the server's certificate must chain to; turns TLS on")
	fs.StringVar(&c.TLS.ServerName, "tls-server-name", "", "TLS: the `name` the server's certificate must carry, sent as SNI (default: the address's host)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Config{}, ErrUsage
		}
		return Config{}, ErrUsage
	}
	base, ok := Scenarios[*scenario]
	if !ok {
		fmt.Fprintf(stderr, "scenario %q: unknown\n", *scenario)
		return Config{}, ErrUsage
	}
	base.Scenario, base.Addr, base.PID, base.Key, base.Server = *scenario, c.Addr, c.PID, c.Key, c.Server
	base.CPUProfile, base.TLS = c.CPUProfile, c.TLS
	if base.Model == "" {
		base.Model = *model
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "concurrency":
			base.Concurrency = *conc
			base.Rate = 0
		case "rate":
			base.Rate = *rate
		case "requests":
			base.Requests = *reqs
		case "duration":
			base.Duration = *dur
		case "stream":
			base.Stream = *stream
		case "chunks":
			base.Chunks = *chunks
		case "interval":
			base.Interval = *interval
		case "conns":
			base.Conns = *conns
		case "max-in-flight":
			base.MaxInFlight = *inflight
		case "step":
			base.Step = *step
		case "host-provider":
			base.HostProvider = *hostProvider
		case "model":
			base.Model = *model
		}
	})
	if err := base.validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return Config{}, ErrUsage
	}
	return base, nil
}

func runFloor(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("floor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:0", "listen `host:port`")
	ready := fs.String("ready-file", "", "once listening, write {\"grpc\": ADDR} to this `file`")
	cert := fs.String("tls-cert", "", "TLS: the server certificate (PEM `file`)")
	key := fs.String("tls-key", "", "TLS: its key (PEM `file`)")
	clientCA := fs.String("tls-client-ca", "", "mTLS: require a client certificate that chains to this CA bundle (PEM `file`)")
	if err := fs.Parse(args); err != nil {
		return ErrUsage
	}
	var opts []grpc.ServerOption
	switch {
	case *cert != "" && *key != "":
		creds, err := FloorCredentials(*cert, *key, *clientCA)
		if err != nil {
			return err
		}
		opts = append(opts, grpc.Creds(creds))
	case *cert != "" || *key != "" || *clientCA != "":
		fmt.Fprintln(stderr, "floor: --tls-cert and --tls-key go together, and --tls-client-ca needs them")
		return ErrUsage
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", *addr)
	if err != nil {
		return err
	}
	if *ready != "" {
		b, err := json.Marshal(map[string]string{"grpc": ln.Addr().String()})
		if err != nil {
			ln.Close()
			return err
		}
		if err := os.WriteFile(*ready, b, 0o600); err != nil {
			ln.Close()
			return err
		}
	}
	return ServeFloor(ctx, ln, opts...)
}
