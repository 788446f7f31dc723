package pricingimport

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func readSample(t testing.TB, opts Options) *Result {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "prices.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := Read(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("%s (-want +got):\n%s", name, d)
	}
}

// TestImportAll: the sample file, every metered model, as YAML and as the
// summary, against golden files (written from reading the sample: each
// price is the sample's dollars × 10^12 per token).
func TestImportAll(t *testing.T) {
	res := readSample(t, Options{})
	var out, sum bytes.Buffer
	if err := WriteYAML(&out, "prices.json", res.Models); err != nil {
		t.Fatal(err)
	}
	res.WriteSummary(&sum, "prices.json")
	golden(t, "all.golden.yaml", out.Bytes())
	golden(t, "all.golden.txt", sum.Bytes())
	checkRoundTrip(t, out.Bytes(), res.Models)
}

// TestImportExact pins a few conversions outside the golden files: the
// decimals are read exactly, bands take the base price they lack.
func TestImportExact(t *testing.T) {
	res := readSample(t, Options{})
	byName := map[string]Price{}
	for _, m := range res.Models {
		byName[m.Name] = m.Price
	}
	n := func(v int64) *int64 { return &v }
	want := map[string]Price{
		"gpt-4o": {Input: n(2_500_000), CachedInput: n(1_250_000), Output: n(10_000_000)},
		"claude-sonnet-4-5": {Input: n(3_000_000), CachedInput: n(300_000), CacheWrite: n(3_750_000), CacheWrite1h: n(6_000_000),
			Output: n(15_000_000), LongContext: &LongContext{AboveInputTokens: 200_000, Input: n(6_000_000), CachedInput: n(600_000),
				CacheWrite: n(7_500_000), CacheWrite1h: n(12_000_000), Output: n(22_500_000)}},
		"gemini/gemini-1.5-pro": {Input: n(1_250_000), Output: n(5_000_000),
			LongContext: &LongContext{AboveInputTokens: 128_000, Input: n(2_500_000), Output: n(10_000_000)}},
		// Bands at 128k and 256k: the lowest; its output is the base one.
		"two-bands": {Input: n(1_000_000), Output: n(2_000_000),
			LongContext: &LongContext{AboveInputTokens: 128_000, Input: n(2_000_000), Output: n(2_000_000)}},
		"gpt-4o-audio-preview":   {Input: n(2_500_000), Output: n(10_000_000), AudioInput: n(40_000_000), AudioOutput: n(80_000_000)},
		"o-reasoner":             {Input: n(1_100_000), Output: n(4_400_000), Reasoning: n(4_400_000)},
		"search/sonar":           {Input: n(1_000_000), Output: n(1_000_000), PerRequest: n(5_000)},
		"text-embedding-3-small": {Input: n(20_000), Output: n(0)},
		"embed-input-only":       {Input: n(100_000)},
		"local/free-model":       {Input: n(0), Output: n(0)},
		"null-prices":            {Input: n(1_000_000), Output: n(1_000_000)},
	}
	for name, w := range want {
		if d := cmp.Diff(w, byName[name]); d != "" {
			t.Errorf("%s (-want +got):\n%s", name, d)
		}
	}
	skipped := map[string]string{}
	for _, s := range res.Skipped {
		skipped[s.Name] = s.Reason
	}
	for name, reason := range map[string]string{
		"sample_spec": "the format's sample_spec", "image-model": "mode image_generation", "no-mode": "no mode",
		"mode-not-a-string": "no mode", "no-output-price": "no per-token output price", "per-character": "no per-token input price",
		"too-fine": "bad price", "negative": "bad price", "a-string": "bad price", "absurd": "bad price", "fee-too-fine": "bad price",
		"not-an-object": "not an object", "a-number": "not an object",
	} {
		if skipped[name] != reason {
			t.Errorf("%s skipped for %q, want %q", name, skipped[name], reason)
		}
	}
	if res.Entries != 27 || len(res.Models)+len(res.Skipped) != res.Entries {
		t.Errorf("%d entries, %d imported, %d skipped; want 27 in all", res.Entries, len(res.Models), len(res.Skipped))
	}
}

// TestImportSelected: with the models a config declares, exactly those
// are written, each under its configured name, found by name or else by
// an upstream name; an unknown model is reported, a configured model
// whose entry is not importable is skipped with the reason, and the mode
// is not asked.
func TestImportSelected(t *testing.T) {
	res := readSample(t, Options{Models: []Wanted{
		{Name: "gpt-4o", Lookup: []string{"gpt-4o"}},
		{Name: "sonnet", Lookup: []string{"sonnet", "claude-sonnet-4-5"}},
		{Name: "haiku", Lookup: []string{"haiku", "nothing-by-that-name", "anthropic.claude-3-haiku-20240307-v1:0"}},
		{Name: "local", Lookup: []string{"local", "no-such-model"}},
		{Name: "cheap", Lookup: []string{"cheap", "too-fine", "gpt-4o"}},
		{Name: "painter", Lookup: []string{"painter", "image-model"}},
		{Name: "undeclared-mode", Lookup: []string{"undeclared-mode", "no-mode"}},
	}})
	var out, sum bytes.Buffer
	if err := WriteYAML(&out, "prices.json", res.Models); err != nil {
		t.Fatal(err)
	}
	res.WriteSummary(&sum, "prices.json")
	golden(t, "selected.golden.yaml", out.Bytes())
	golden(t, "selected.golden.txt", sum.Bytes())
	checkRoundTrip(t, out.Bytes(), res.Models)
	var names []string
	for _, m := range res.Models {
		names = append(names, m.Name+"<"+m.Source)
	}
	if d := cmp.Diff([]string{"gpt-4o<gpt-4o", "sonnet<claude-sonnet-4-5", "haiku<anthropic.claude-3-haiku-20240307-v1:0",
		"undeclared-mode<no-mode"}, names); d != "" {
		t.Errorf("imported (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"local"}, res.NotFound); d != "" {
		t.Errorf("not found (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]Skip{
		{Name: "cheap", Source: "too-fine", Reason: "bad price",
			Detail: `input_cost_per_token is 1.5e-13: finer than 1 pico-dollar per token (Sluice's unit: micro-dollars per 1M tokens)`},
		{Name: "painter", Source: "image-model", Reason: "no per-token input price"},
	}, res.Skipped); d != "" {
		t.Errorf("skipped (-want +got):\n%s", d)
	}
}

// checkRoundTrip: the YAML written reads back (as sluice.yaml's loader
// reads it) as exactly the models' prices.
func checkRoundTrip(t testing.TB, out []byte, models []Model) {
	t.Helper()
	var doc struct {
		Pricing map[string]map[string]any `yaml:"pricing"`
	}
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatalf("the output is not YAML: %v\n%s", err, out)
	}
	want := map[string]map[string]any{}
	for _, m := range models {
		want[m.Name] = priceMap(m.Price)
	}
	if len(want) == 0 {
		want = map[string]map[string]any{}
	}
	got := doc.Pricing
	if got == nil {
		got = map[string]map[string]any{}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("read back (-want +got):\n%s\n%s", d, out)
	}
}

// priceMap is p as YAML decodes it into untyped values.
func priceMap(p Price) map[string]any {
	m := map[string]any{}
	put := func(m map[string]any, k string, v *int64) {
		if v != nil {
			m[k] = int(*v)
		}
	}
	put(m, "input", p.Input)
	put(m, "cached_input", p.CachedInput)
	put(m, "cache_write", p.CacheWrite)
	put(m, "cache_write_1h", p.CacheWrite1h)
	put(m, "output", p.Output)
	put(m, "reasoning", p.Reasoning)
	put(m, "audio_input", p.AudioInput)
	put(m, "audio_output", p.AudioOutput)
	put(m, "per_request", p.PerRequest)
	if lc := p.LongContext; lc != nil {
		l := map[string]any{"above_input_tokens": int(lc.AboveInputTokens)}
		put(l, "input", lc.Input)
		put(l, "cached_input", lc.CachedInput)
		put(l, "cache_write", lc.CacheWrite)
		put(l, "cache_write_1h", lc.CacheWrite1h)
		put(l, "output", lc.Output)
		m["long_context"] = l
	}
	return m
}

// TestReadRefuses: a file that is not a JSON object of entries is an
// error, and so is one above the size bound (one of exactly the bound is
// read).
func TestReadRefuses(t *testing.T) {
	entry := `{"m":{"mode":"chat","input_cost_per_token":1e-6,"output_cost_per_token":2e-6}}`
	tests := []struct {
		name, in string
		max      int64
		err      string
	}{
		{"empty", "", 0, "not JSON"},
		{"array", `[{"m":{}}]`, 0, "top-level value is not an object"},
		{"string", `"prices"`, 0, "top-level value is not an object"},
		{"truncated", `{"m":{"mode":"chat",`, 0, "unexpected EOF"},
		{"truncated between entries", `{"m":{"mode":"chat"},`, 0, "EOF"},
		{"bad JSON inside an entry", `{"m":{"mode":chat}}`, 0, "invalid character"},
		{"trailing data", entry + ` {}`, 0, "data after the top-level object"},
		{"trailing garbage", entry + ` x`, 0, "invalid character"},
		{"one byte over the bound", entry, int64(len(entry)) - 1, "file too large"},
		{"exactly the bound", entry, int64(len(entry)), ""},
		{"trailing space within the bound", entry + "\n", int64(len(entry)) + 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Read(strings.NewReader(tt.in), Options{MaxBytes: tt.max})
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case tt.err == "":
				if len(res.Models) != 1 {
					t.Fatalf("%d models, want 1", len(res.Models))
				}
			case err == nil || !strings.Contains(err.Error(), tt.err):
				t.Fatalf("error %v, want one with %q", err, tt.err)
			}
			if tt.err == "file too large" && !errors.Is(err, ErrTooLarge) {
				t.Errorf("error %v is not ErrTooLarge", err)
			}
		})
	}
}

// TestDuplicateEntry: an entry the file holds twice is read as
// encoding/json would, the last one winning, and reported.
func TestDuplicateEntry(t *testing.T) {
	in := `{"m":{"mode":"chat","input_cost_per_token":1e-6,"output_cost_per_token":2e-6},` +
		`"m":{"mode":"chat","input_cost_per_token":3e-6,"output_cost_per_token":4e-6}}`
	res, err := Read(strings.NewReader(in), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Models) != 1 || *res.Models[0].Price.Input != 3_000_000 || *res.Models[0].Price.Output != 4_000_000 {
		t.Errorf("models %+v, want the last m", res.Models)
	}
	if d := cmp.Diff([]string{"m: the file holds it more than once; the last one is used"}, res.Warnings); d != "" {
		t.Errorf("warnings (-want +got):\n%s", d)
	}
}

// TestLargeFile: a file of LiteLLM's size (thousands of entries, ~1.5 MB)
// is read whole.
func TestLargeFile(t *testing.T) {
	var b strings.Builder
	b.WriteString("{\n")
	const n = 6000
	for i := range n {
		fmt.Fprintf(&b, `  "provider/model-%04d": {"input_cost_per_token": %d.5e-07, "output_cost_per_token": 1e-06, "mode": "chat", `+
			`"litellm_provider": "provider", "max_input_tokens": 128000, "supports_function_calling": true, "supports_vision": true}`, i, i%10)
		if i < n-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("}\n")
	if b.Len() < 1<<20 {
		t.Fatalf("the file is %d bytes, want at least 1 MiB", b.Len())
	}
	res, err := Read(strings.NewReader(b.String()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Models) != n || *res.Models[n-1].Price.Input != 950_000 {
		t.Errorf("%d models, the last %+v; want %d, the last at 950000", len(res.Models), res.Models[len(res.Models)-1], n)
	}
}

// TestYAMLKeys: a model name is written plain only when YAML reads it back
// as the same string; every other is quoted so that it does.
func TestYAMLKeys(t *testing.T) {
	for _, name := range []string{
		"gpt-4o", "gemini/gemini-2.5-flash", "anthropic.claude-3-haiku-20240307-v1:0", "true", "No", "null", "y", "1.5", "123",
		"-dash", "with space", "#hash", "a: b", "quote\"back\\slash", "tab\there", "line\nbreak", "nul\x00", "é and 🙂", "\u2028",
		"\ufeffbom", "del\x7f", "c1\u0085", "", "~", "*alias", "&anchor", "!tag", "%pct", "@at", "`tick", "{brace}", "[bracket]",
	} {
		one := int64(1)
		models := []Model{{Name: name, Source: name, Price: Price{Input: &one}}}
		var out bytes.Buffer
		if err := WriteYAML(&out, "f.json", models); err != nil {
			t.Fatal(err)
		}
		checkRoundTrip(t, out.Bytes(), models)
	}
}

// TestRequestFees: the input and output fees per request add up into
// per_request; a sum above $1000 is refused like a single fee would be.
func TestRequestFees(t *testing.T) {
	tests := []struct {
		fees string
		want int64 // 0: skipped as a bad price
	}{
		{`"input_cost_per_request": 0.005`, 5_000},
		{`"output_cost_per_request": 0.001`, 1_000},
		{`"input_cost_per_request": 0.005, "output_cost_per_request": 0.001`, 6_000},
		{`"input_cost_per_request": 1000, "output_cost_per_request": 0`, 1_000_000_000},
		{`"input_cost_per_request": 600, "output_cost_per_request": 400.000001`, 0},
	}
	for _, tt := range tests {
		in := `{"m":{"mode":"chat","input_cost_per_token":1e-6,"output_cost_per_token":1e-6,` + tt.fees + `}}`
		res, err := Read(strings.NewReader(in), Options{})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case tt.want == 0 && (len(res.Skipped) != 1 || res.Skipped[0].Reason != "bad price"):
			t.Errorf("%s: skipped %+v, want m as a bad price", tt.fees, res.Skipped)
		case tt.want != 0 && (len(res.Models) != 1 || res.Models[0].Price.PerRequest == nil || *res.Models[0].Price.PerRequest != tt.want):
			t.Errorf("%s: models %+v, want per_request %d", tt.fees, res.Models, tt.want)
		}
	}
}
