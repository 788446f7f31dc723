package app

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/sluicegw/sluice/policies"
)

// litellmSample is a small price file in LiteLLM's shape (prices as
// published: dollars per token).
const litellmSample = `{
  "sample_spec": {"input_cost_per_token": 0.0, "mode": "one of: chat, embedding"},
  "gpt-4o": {"input_cost_per_token": 2.5e-06, "cache_read_input_token_cost": 1.25e-06, "output_cost_per_token": 1e-05, "mode": "chat"},
  "gpt-4o-mini-2024-07-18": {"input_cost_per_token": 1.5e-07, "cache_read_input_token_cost": 7.5e-08, "output_cost_per_token": 6e-07, "mode": "chat"},
  "dall-e-3": {"output_cost_per_image": 0.04, "mode": "image_generation"},
  "broken": {"input_cost_per_token": 1e-15, "output_cost_per_token": 1e-06, "mode": "chat"}
}`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPricingImportAll: every metered model of the file goes to stdout,
// the summary to stderr.
func TestPricingImportAll(t *testing.T) {
	prices := writeFile(t, "prices.json", litellmSample)
	stdout, stderr, err := run(t, "pricing", "import", prices)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	want := "# Imported by `sluice pricing import` from " + prices + " (LiteLLM's price format):\n" +
		"# integer micro-dollars per 1M tokens; per_request in micro-dollars.\n" +
		"pricing:\n" +
		"  gpt-4o: {input: 2500000, cached_input: 1250000, output: 10000000}\n" +
		"  gpt-4o-mini-2024-07-18: {input: 150000, cached_input: 75000, output: 600000}\n"
	if d := cmp.Diff(want, stdout); d != "" {
		t.Errorf("stdout (-want +got):\n%s", d)
	}
	wantErr := "imported 2 models from " + prices + " (5 entries); skipped 3:\n" +
		"  bad price: broken: input_cost_per_token is 1e-15: finer than 1 pico-dollar per token (Sluice's unit: micro-dollars per 1M tokens)\n" +
		"  1 mode image_generation: dall-e-3\n" +
		"  1 the format's sample_spec: sample_spec\n"
	if d := cmp.Diff(wantErr, stderr); d != "" {
		t.Errorf("stderr (-want +got):\n%s", d)
	}
}

// TestPricingImportConfig: with --config, the models the config declares,
// found by name or upstream name, written under their names to --out
// (flags after FILE too); what is missing is said; and the section,
// put into the config in place of its own, loads with the same prices.
func TestPricingImportConfig(t *testing.T) {
	prices := writeFile(t, "prices.json", litellmSample)
	base := `
providers:
  - {name: mock, kind: openai-compatible, base_url: "http://127.0.0.1:8081"}
models:
  - {name: mini, provider: mock, upstream: gpt-4o-mini-2024-07-18}
  - {name: gpt-4o, provider: mock}
  - {name: local-llama, provider: mock, upstream: llama-3}
`
	config := writeFile(t, "sluice.yaml", base)
	out := filepath.Join(t.TempDir(), "pricing.yaml")
	stdout, stderr, err := run(t, "pricing", "import", prices, "--config", config, "--out", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if stdout != "" {
		t.Errorf("stdout %q, want nothing (--out)", stdout)
	}
	wantErr := "imported 2 models from " + prices + " (5 entries)\n" +
		"not in " + prices + " (looked up by model name, then upstream names): local-llama\n"
	if d := cmp.Diff(wantErr, stderr); d != "" {
		t.Errorf("stderr (-want +got):\n%s", d)
	}
	section, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(section), "  mini: {input: 150000, cached_input: 75000, output: 600000}   # gpt-4o-mini-2024-07-18\n") {
		t.Errorf("section lacks mini under its configured name:\n%s", section)
	}
	cfg, err := policies.Parse(append([]byte(base), section...), "merged.yaml", nil)
	if err != nil {
		t.Fatalf("the section does not load:\n%v\n%s", err, section)
	}
	want := map[string]policies.Price{
		"mini":   {Input: 150000, CachedInput: 75000, Output: 600000},
		"gpt-4o": {Input: 2500000, CachedInput: 1250000, Output: 10000000},
	}
	if d := cmp.Diff(want, cfg.Pricing); d != "" {
		t.Errorf("loaded pricing (-want +got):\n%s", d)
	}
}

func TestPricingImportErrors(t *testing.T) {
	prices := writeFile(t, "prices.json", litellmSample)
	notJSON := writeFile(t, "prices.html", "<html>rate limited</html>")
	badConfig := writeFile(t, "bad.yaml", "providers: []\n")
	tests := []struct {
		name     string
		args     []string
		exit     int
		inStderr string // or in the error
	}{
		{"no command", []string{"pricing"}, 2, "Usage: sluice pricing import"},
		{"unknown command", []string{"pricing", "export"}, 2, `unknown pricing command "export"`},
		{"no file", []string{"pricing", "import"}, 2, "pricing import takes one FILE"},
		{"two files", []string{"pricing", "import", prices, prices}, 2, "pricing import takes one FILE"},
		{"unknown flag", []string{"pricing", "import", "--from", "x", prices}, 2, "flag provided but not defined: -from"},
		{"missing file", []string{"pricing", "import", prices + ".nope"}, 1, "no such file"},
		{"not JSON", []string{"pricing", "import", notJSON}, 1, notJSON + ": not JSON"},
		{"config with problems", []string{"pricing", "import", "--config", badConfig, prices}, 1, "at least one provider is required"},
		{"help", []string{"pricing", "import", "--help"}, 0, "Usage: sluice pricing import [flags] FILE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, err := run(t, tt.args...)
			if got := ExitCode(err); got != tt.exit {
				t.Fatalf("exit %d (%v), want %d\n%s", got, err, tt.exit, stderr)
			}
			msg := stderr
			if err != nil {
				msg += err.Error()
			}
			if !strings.Contains(msg, tt.inStderr) {
				t.Errorf("stderr and error %q lack %q", msg, tt.inStderr)
			}
			if tt.exit != 0 && stdout != "" {
				t.Errorf("stdout %q on failure", stdout)
			}
		})
	}
}

// TestImportedFieldsAreSluices: every field the importer writes is a
// field of policies.Price (decoded strictly, an unknown one is an error),
// with the value it means: claude-sonnet-4-5's whole price, long-context
// tier included, and a 0 the file gives as a price kept as free.
func TestImportedFieldsAreSluices(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "pricingimport", "testdata", "all.golden.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Pricing map[string]policies.Price `yaml:"pricing"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("the imported section is not Sluice's price format: %v", err)
	}
	p := func(v int64) *int64 { return &v }
	want := policies.Price{
		Input: 3000000, CachedInput: 300000, CacheWrite: p(3750000), CacheWrite1h: p(6000000), Output: 15000000,
		LongContext: &policies.LongContext{AboveInputTokens: 200000, Input: p(6000000), CachedInput: p(600000), CacheWrite: p(7500000), CacheWrite1h: p(12000000), Output: p(22500000)},
	}
	if d := cmp.Diff(want, doc.Pricing["claude-sonnet-4-5"]); d != "" {
		t.Errorf("claude-sonnet-4-5 (-want +got):\n%s", d)
	}
	if got := doc.Pricing["gpt-4o-audio-preview"]; got.AudioInput == nil || *got.AudioInput != 40000000 || got.AudioOutput == nil || *got.AudioOutput != 80000000 {
		t.Errorf("gpt-4o-audio-preview: %+v, want its audio prices", got)
	}
	if got := doc.Pricing["search/sonar"]; got.PerRequest != 5000 {
		t.Errorf("search/sonar: %+v, want a 5000 µ$ request fee", got)
	}
}
