package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sluicegw/sluice/internal/cli"
	"github.com/sluicegw/sluice/policies"
)

// Env looks up an environment variable (os.LookupEnv in main).
type Env = policies.LookupEnv

// errUsage marks a command-line mistake; the usage has been printed.
var errUsage = cli.ErrUsage

// exitError carries an exit status without extra text (the command has
// already said what went wrong).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// ExitCode maps an error returned by Run to a process exit status.
func ExitCode(err error) int {
	var e exitError
	if errors.As(err, &e) {
		return e.code
	}
	return cli.ExitCode(err)
}

// program is the sluice command line: one row per command, and the usage
// generated from it.
func program(env Env) *cli.Program {
	withEnv := func(run func(context.Context, []string, io.Writer, io.Writer, Env) error) func(context.Context, []string, io.Writer, io.Writer) error {
		return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			return run(ctx, args, stdout, stderr, env)
		}
	}
	noCtx := func(run func([]string, io.Writer, io.Writer, Env) error) func(context.Context, []string, io.Writer, io.Writer) error {
		return func(_ context.Context, args []string, stdout, stderr io.Writer) error {
			return run(args, stdout, stderr, env)
		}
	}
	// The test doubles are not in this binary (it ships only what
	// production runs); their old names say where they went.
	moved := func(name string) cli.Command {
		return cli.Command{Name: name, Run: func(_ context.Context, _ []string, _, stderr io.Writer) error {
			fmt.Fprintf(stderr, "%q is not a sluice command: run sluice-dev %s (make build-dev builds bin/sluice-dev)\n", name, strings.TrimPrefix(name, "dev-"))
			return errUsage
		}}
	}
	return &cli.Program{
		Name:  "sluice",
		Title: "sluice — an LLM gateway inside Envoy.",
		Note:  "The Envoy emulator and the mock LLM provider are in the sluice-dev command.",
		Commands: []cli.Command{
			{Name: "serve", Summary: "run the ext_authz and ext_proc gRPC services and the admin HTTP server", Run: withEnv(runServe)},
			{Name: "check-config", Summary: "validate a sluice.yaml and print every problem", Run: noCtx(runCheckConfig)},
			{Name: "keys", Summary: "create, list, revoke and import API keys", Run: withEnv(runKeys)},
			{Name: "spend", Summary: "report tokens and cost from the spend ledger", Run: withEnv(runSpend)},
			{Name: "migrate", Summary: "apply the PostgreSQL schema's pending migrations (before a rollout)", Run: withEnv(runMigrate)},
			{Name: "pricing", Summary: "pricing import: turn a LiteLLM price file into sluice.yaml's pricing section", Run: noCtx(runPricing)},
			{Name: "envoy", Summary: "envoy bootstrap: print the bootstrap for an Envoy that takes its config from Sluice", Run: noCtx(runEnvoy)},
			cli.VersionCommand("sluice"),
			moved("dev-envoy"),
			moved("dev-llm"),
		},
	}
}

// Run runs the sluice command line with args (without the program name).
// stdout gets a command's output; stderr gets logs and problems.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, env Env) error {
	return program(env).Run(ctx, args, stdout, stderr)
}

// Version describes the binary: module version and VCS revision when the
// build recorded them.
func Version() string { return cli.Version("sluice") }

// newFlags returns the FlagSet of `sluice name`.
func newFlags(name, args, summary string, stderr io.Writer) *flag.FlagSet {
	return cli.NewFlags("sluice", name, args, summary, stderr)
}
