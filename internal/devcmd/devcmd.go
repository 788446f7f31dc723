package devcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/sluicegw/sluice/bench/mockllm"
)

// errUsage marks a command-line mistake; the usage has been printed.
var errUsage = errors.New("usage error")

// ExitCode maps an error returned by Run to a process exit status: 2 for
// a command-line mistake, 1 for anything else.
func ExitCode(err error) int {
	if errors.Is(err, errUsage) {
		return 2
	}
	return 1
}

const usage = `sluice-dev — development and test tools for Sluice (never for production traffic).

Usage:
  sluice-dev <command> [flags]

Commands:
  envoy   run the Envoy emulator from an Envoy bootstrap file
  llm     run the mock LLM provider (OpenAI and Anthropic APIs)

Run "sluice-dev <command> --help" for a command's flags.
`

// Run runs the sluice-dev command line with args (without the program
// name). stdout gets a command's output (the emulator's access log, the
// mock's address); stderr gets logs and problems.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "envoy":
		return runEnvoy(ctx, rest, stdout, stderr)
	case "llm":
		if err := mockllm.Run(ctx, rest, stdout, stderr); err != nil {
			if errors.Is(err, mockllm.ErrUsage) {
				return errUsage
			}
			return fmt.Errorf("llm: %w", err)
		}
		return nil
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprintf(stderr, "unknown command %q\n\n%s", cmd, usage)
		return errUsage
	}
}

// newFlags returns a FlagSet that reports to stderr and never exits.
func newFlags(name, summary string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sluice-dev %s [flags]\n\n%s\n\nFlags:\n", name, summary)
		fs.PrintDefaults()
	}
	return fs
}

// flagErr turns a FlagSet.Parse error into Run's result: --help (usage
// already printed) is success, anything else a usage error.
func flagErr(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return errUsage
}

// newLogger returns a text logger at level (debug, info, warn or error).
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: want debug, info, warn or error, got %q", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lv})), nil
}

// splitList splits a comma-separated flag value, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
