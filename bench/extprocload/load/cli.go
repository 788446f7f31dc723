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
)

// ErrUsage is returned when the command line is wrong (already reported).
var ErrUsage = errors.New("usage")

// Scenarios are the named runs of `make bench-service`; flags override
// any field.
var Scenarios = map[string]Config{
	// Steady state: a fixed 200 requests a second, non-stream.
	"open-200rps": {Rate: 200, Duration: 10 * time.Second},
	// 50 concurrent SSE streams of 20 chunks, 20 ms apart.
	"streams-50x20": {Concurrency: 50, Stream: true, Chunks: 20, Interval: 20 * time.Millisecond, Duration: 10 * time.Second},
	// Closed loop as fast as the server answers, non-stream.
	"closed-max": {Concurrency: 16, Duration: 5 * time.Second},
}

const usage = `usage:
  extprocload run   --addr HOST:PORT --key KEY [--pid PID] [--scenario NAME] [flags]
  extprocload floor --addr 127.0.0.1:0 [--ready-file FILE]

run plays Envoy for Sluice's filter chain against the gRPC server at
--addr and prints one JSON line. floor serves the do-nothing ext_authz and
ext_proc server. Scenarios: `

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
		res, err := Run(ctx, cfg)
		if err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(res)
	case "floor":
		return runFloor(ctx, args[1:], stderr)
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
	fs.StringVar(&c.Model, "model", "gpt-4o-mini", "model of the chat-completions request")
	fs.StringVar(&c.Server, "server", "sluice", "server name printed in the result")
	conc := fs.Int("concurrency", 0, "closed loop: concurrent workers")
	rate := fs.Float64("rate", 0, "open loop: requests a second (latency from the scheduled send time)")
	reqs := fs.Int("requests", 0, "stop after this many requests (0: no limit)")
	dur := fs.Duration("duration", 0, "stop after this long (0: no limit)")
	stream := fs.Bool("stream", false, "SSE stream responses")
	chunks := fs.Int("chunks", 0, "chunks of a stream response (>= 3)")
	interval := fs.Duration("interval", 0, "time between two response chunks")
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
	base.Scenario, base.Addr, base.PID, base.Key, base.Model, base.Server = *scenario, c.Addr, c.PID, c.Key, c.Model, c.Server
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
	if err := fs.Parse(args); err != nil {
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
	return ServeFloor(ctx, ln)
}
