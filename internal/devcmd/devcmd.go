package devcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/internal/cli"
)

// errUsage marks a command-line mistake; the usage has been printed.
var errUsage = cli.ErrUsage

// ExitCode maps an error returned by Run to a process exit status: 2 for
// a command-line mistake, 1 for anything else.
func ExitCode(err error) int { return cli.ExitCode(err) }

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

// newFlags returns the FlagSet of `sluice-dev name`.
func newFlags(name, summary string, stderr io.Writer) *flag.FlagSet {
	return cli.NewFlags("sluice-dev", name, "", summary, stderr)
}
