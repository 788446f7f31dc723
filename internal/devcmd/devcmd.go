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

// program is the sluice-dev command line: one row per command, and the
// usage generated from it.
var program = &cli.Program{
	Name:  "sluice-dev",
	Title: "sluice-dev — development and test tools for Sluice (never for production traffic).",
	Commands: []cli.Command{
		{Name: "envoy", Summary: "run the Envoy emulator from an Envoy bootstrap file", Run: runEnvoy},
		{Name: "llm", Summary: "run the mock LLM provider (OpenAI and Anthropic APIs)", Run: runLLM},
		cli.VersionCommand("sluice-dev"),
	},
}

// Run runs the sluice-dev command line with args (without the program
// name). stdout gets a command's output (the emulator's access log, the
// mock's address); stderr gets logs and problems.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return program.Run(ctx, args, stdout, stderr)
}

// runLLM is `sluice-dev llm`: the mock provider as a process.
func runLLM(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if err := mockllm.Run(ctx, args, stdout, stderr); err != nil {
		if errors.Is(err, mockllm.ErrUsage) {
			return errUsage
		}
		return fmt.Errorf("llm: %w", err)
	}
	return nil
}

// newFlags returns the FlagSet of `sluice-dev name`.
func newFlags(name, summary string, stderr io.Writer) *flag.FlagSet {
	return cli.NewFlags("sluice-dev", name, "", summary, stderr)
}
