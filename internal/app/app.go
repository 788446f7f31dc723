package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
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

const usage = `sluice — an LLM gateway inside Envoy.

Usage:
  sluice <command> [flags]

Commands:
  serve          run the ext_authz and ext_proc gRPC services and the admin HTTP server
  check-config   validate a sluice.yaml and print every problem
  keys           create, list and revoke API keys
  spend          report tokens and cost from the spend ledger
  pricing        pricing import: turn a LiteLLM price file into sluice.yaml's pricing section
  envoy          envoy bootstrap: print the bootstrap for an Envoy that takes its config from Sluice
  version        print the version

The Envoy emulator and the mock LLM provider are in the sluice-dev command.

Run "sluice <command> --help" for a command's flags.
`

// Run runs the sluice command line with args (without the program name).
// stdout gets a command's output; stderr gets logs and problems.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, env Env) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return runServe(ctx, rest, stdout, stderr, env)
	case "check-config":
		return runCheckConfig(rest, stdout, stderr, env)
	case "keys":
		return runKeys(ctx, rest, stdout, stderr, env)
	case "spend":
		return runSpend(ctx, rest, stdout, stderr, env)
	case "pricing":
		return runPricing(rest, stdout, stderr, env)
	case "envoy":
		return runEnvoy(rest, stdout, stderr, env)
	case "dev-envoy", "dev-llm":
		// The test doubles are not in this binary (it ships only what
		// production runs); say where they went.
		fmt.Fprintf(stderr, "%q is not a sluice command: run sluice-dev %s (make build-dev builds bin/sluice-dev)\n", cmd, strings.TrimPrefix(cmd, "dev-"))
		return errUsage
	case "version":
		fs := newFlags("version", "", "Print the version of this sluice binary.", stderr)
		if err := fs.Parse(rest); err != nil {
			return cli.FlagErr(err)
		}
		fmt.Fprintln(stdout, Version())
		return nil
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprintf(stderr, "unknown command %q\n\n%s", cmd, usage)
		return errUsage
	}
}

// Version describes the binary: module version and VCS revision when the
// build recorded them.
func Version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "sluice (unknown build)"
	}
	v := info.Main.Version
	if v == "" || v == "(devel)" {
		v = "dev"
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+modified"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	out := "sluice " + v + " (" + info.GoVersion
	if rev != "" {
		out += ", " + rev + modified
	}
	return out + ")"
}

// newFlags returns the FlagSet of `sluice name`.
func newFlags(name, args, summary string, stderr io.Writer) *flag.FlagSet {
	return cli.NewFlags("sluice", name, args, summary, stderr)
}
