package mockllm

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
)

// ErrUsage marks a command-line mistake; Run has already printed what
// was wrong and the usage. The command exits with status 2 for it.
var ErrUsage = errors.New("usage error")

const runSummary = `mockllm — a mock LLM provider: a test double for tests, demos and
benchmarks, not a model. It speaks the OpenAI (chat completions,
completions, embeddings, responses; also Azure OpenAI deployment paths)
and Anthropic Messages APIs with made-up, deterministic replies, and can
replay go-vcr cassettes. Requests steer it with x-mock-* headers (see
bench/mockllm/README.md in Sluice's repository).

Usage:
  mockllm [flags]
`

// Run is the mockllm command: it parses args (without the program name),
// listens, prints the address to stdout and serves until ctx ends.
// Problems go to stderr. --help prints the usage to stdout and returns
// nil; a flag mistake returns an error wrapping ErrUsage.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		opts      Options
		addr      string
		verbose   bool
		cassettes []string
	)
	fs := flag.NewFlagSet("mockllm", flag.ContinueOnError)
	var flagOut bytes.Buffer
	fs.SetOutput(&flagOut)
	fs.StringVar(&addr, "addr", DefaultAddr, "`host:port` to listen on (loopback unless you say otherwise)")
	fs.StringVar(&opts.APIKey, "api-key", "", "require `key` as \"authorization: Bearer key\" on the OpenAI paths")
	fs.StringVar(&opts.AzureAPIKey, "azure-api-key", "", "require `key` as \"api-key: key\" on the Azure OpenAI paths")
	fs.StringVar(&opts.AnthropicAPIKey, "anthropic-api-key", "", "require `key` as \"x-api-key: key\" (and anthropic-version) on /v1/messages")
	fs.DurationVar(&opts.Latency, "latency", 0, "delay before the response headers")
	fs.DurationVar(&opts.FirstByte, "first-byte", 0, "delay between the response headers and the first body byte")
	fs.DurationVar(&opts.Interval, "interval", 0, "pause before every stream event after the first")
	fs.IntVar(&opts.Words, "words", 0, fmt.Sprintf("reply size in words = output tokens (0: %d, or --chunks)", DefaultWords))
	fs.IntVar(&opts.Chunks, "chunks", 0, "content chunks per stream (0: one per word)")
	fs.IntVar(&opts.Split, "split", 0, "write bodies in pieces of `n` bytes, each flushed (0: off)")
	fs.BoolVar(&opts.Gzip, "gzip", false, "gzip every body (content-encoding: gzip), flushed per piece")
	fs.BoolVar(&opts.CRLF, "crlf", false, "end SSE lines with CRLF")
	fs.BoolVar(&opts.OmitUsage, "omit-usage", false, "never report usage, even when asked")
	fs.Int64Var(&opts.CachedTokens, "cached-tokens", 0, "prompt tokens reported as cache reads")
	fs.Int64Var(&opts.CacheWriteTokens, "cache-write-tokens", 0, "prompt tokens reported as cache writes (Anthropic)")
	fs.Int64Var(&opts.ReasoningTokens, "reasoning-tokens", 0, "reasoning tokens added to the output tokens")
	fs.IntVar(&opts.Dimensions, "dimensions", 0, fmt.Sprintf("embedding length (0: %d)", DefaultDimensions))
	fs.DurationVar(&opts.ShutdownTimeout, "shutdown-timeout", DefaultShutdownTimeout, "how long in-flight requests may finish after a stop signal")
	fs.Func("cassette", "replay the go-vcr v2 cassette at `path` (repeatable)", func(p string) error {
		cassettes = append(cassettes, p)
		return nil
	})
	fs.BoolVar(&verbose, "v", false, "log every request (method, path; never headers or bodies) to stderr")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), runSummary, "\nFlags:\n")
		fs.PrintDefaults()
	}

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return nil
		}
		_, _ = stderr.Write(flagOut.Bytes()) // the error and the usage
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	fs.SetOutput(stderr)
	var problems []error
	if fs.NArg() > 0 {
		problems = append(problems, fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	if err := opts.Validate(); err != nil {
		problems = append(problems, err)
	}
	for _, p := range cassettes {
		c, err := LoadCassette(p)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		opts.Cassettes = append(opts.Cassettes, c)
	}
	if err := errors.Join(problems...); err != nil {
		fmt.Fprintf(stderr, "mockllm: %v\nRun \"mockllm --help\" for the flags.\n", err)
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}

	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	opts.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if host, _, err := net.SplitHostPort(ln.Addr().String()); err == nil {
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			opts.Logger.Warn("listening beyond loopback: anyone who can reach this address can steer the mock", "addr", ln.Addr().String())
		}
	}
	fmt.Fprintf(stdout, "mock LLM provider (a test double, not a real model) listening on http://%s\n", ln.Addr())
	return New(opts).Serve(ctx, ln)
}
