package app

import (
	"errors"
	"fmt"
	"io"

	"github.com/sluicegw/sluice/internal/cli"
	"github.com/sluicegw/sluice/policies"
)

func runCheckConfig(args []string, stdout, stderr io.Writer, env Env) error {
	fs := newFlags("check-config", "[FILE]", "Validate a Sluice config file and print every problem with its path.\nFILE defaults to --config. Exit status 1 if there is any problem.", stderr)
	config := fs.String("config", "sluice.yaml", "config `file`")
	if err := fs.Parse(args); err != nil {
		return cli.FlagErr(err)
	}
	path := *config
	switch fs.NArg() {
	case 0:
	case 1:
		path = fs.Arg(0)
	default:
		fmt.Fprintln(stderr, "check-config takes at most one FILE")
		fs.Usage()
		return errUsage
	}
	snap, err := loadSnapshot(path, env)
	if err != nil {
		var ps policies.Problems
		if errors.As(err, &ps) {
			for _, p := range ps {
				fmt.Fprintln(stderr, p.String())
			}
			fmt.Fprintf(stderr, "%s: %d problem(s)\n", path, len(ps))
			return exitError{1}
		}
		return err
	}
	cfg := snap.Config()
	fmt.Fprintf(stdout, "%s: ok (version %s: %d providers, %d models, %d orgs, %d teams, %d declared keys)\n",
		path, snap.Version(), len(cfg.Providers), len(cfg.Models), len(cfg.Orgs), len(cfg.Teams), len(cfg.Keys))
	return nil
}

// loadSnapshot loads, validates and compiles a config file.
func loadSnapshot(path string, env Env) (*policies.Snapshot, error) {
	cfg, err := policies.Load(path, env)
	if err != nil {
		return nil, err
	}
	snap, err := policies.Compile(cfg, path)
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", path, err)
	}
	return snap, nil
}
