package app

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/sluicegw/sluice/internal/cli"
	"github.com/sluicegw/sluice/internal/pricingimport"
	"github.com/sluicegw/sluice/policies"
)

const pricingUsage = `Usage: sluice pricing import [flags] FILE

Convert a price list in LiteLLM's model_prices_and_context_window.json
format (a file you supply; nothing is downloaded) into the pricing:
section of sluice.yaml.

Run "sluice pricing import --help" for its flags.
`

func runPricing(args []string, stdout, stderr io.Writer, env Env) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, pricingUsage)
		return errUsage
	}
	switch args[0] {
	case "import":
		return runPricingImport(args[1:], stdout, stderr, env)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, pricingUsage)
		return nil
	default:
		fmt.Fprintf(stderr, "unknown pricing command %q\n\n%s", args[0], pricingUsage)
		return errUsage
	}
}

func runPricingImport(args []string, stdout, stderr io.Writer, env Env) error {
	fs := newFlags("pricing import", "FILE", `Read FILE, a price list in LiteLLM's model_prices_and_context_window.json
format, and print sluice.yaml's pricing: section: integer micro-dollars per
1M tokens, converted exactly from the file's dollars per token. A price
finer than that unit, negative or absurd is reported and its model skipped,
never rounded. A summary (imported, skipped and why) goes to stderr.`, stderr)
	config := fs.String("config", "", "import only the models this sluice.yaml `file` declares, each under its name,\nlooked up in FILE by name, then by its upstream names (default: every chat,\ncompletion, responses and embedding model in FILE)")
	out := fs.String("out", "", "write the section to this `file` instead of stdout")
	// Flags may also follow FILE.
	var files []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return cli.FlagErr(err)
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(files) != 1 {
		fmt.Fprintln(stderr, "pricing import takes one FILE")
		fs.Usage()
		return errUsage
	}
	file := files[0]
	var wanted []pricingimport.Wanted
	if *config != "" {
		cfg, err := policies.Load(*config, env)
		if err != nil {
			return err
		}
		wanted = wantedModels(cfg)
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	res, err := pricingimport.Read(f, pricingimport.Options{Models: wanted})
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	var b bytes.Buffer
	if err := pricingimport.WriteYAML(&b, file, res.Models); err != nil {
		return err
	}
	if *out == "" {
		if _, err := stdout.Write(b.Bytes()); err != nil {
			return err
		}
	} else if err := os.WriteFile(*out, b.Bytes(), 0o644); err != nil {
		return err
	}
	res.WriteSummary(stderr, file)
	return nil
}

// wantedModels are the models cfg declares, each looked up by its name,
// then its upstream names (the model's, then each provider's), each once.
func wantedModels(cfg *policies.Config) []pricingimport.Wanted {
	out := make([]pricingimport.Wanted, 0, len(cfg.Models))
	for _, m := range cfg.Models {
		w := pricingimport.Wanted{Name: m.Name, Lookup: []string{m.Name}}
		add := func(n string) {
			if n != "" && !slices.Contains(w.Lookup, n) {
				w.Lookup = append(w.Lookup, n)
			}
		}
		add(m.Upstream)
		for _, p := range m.Providers {
			add(p.Upstream)
		}
		out = append(out, w)
	}
	return out
}
