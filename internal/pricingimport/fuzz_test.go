package pricingimport

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// FuzzRead feeds arbitrary bytes as a price file, read whole and for a
// selection. Invariants: no panic; an error or a result, never both;
// every imported price is within Sluice's bounds, and the YAML written
// reads back as exactly the prices imported.
func FuzzRead(f *testing.F) {
	sample, err := os.ReadFile(filepath.Join("testdata", "prices.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sample)
	for _, s := range []string{
		`{}`, `[]`, `{"m":null}`, `{"m":{"mode":"chat","input_cost_per_token":1e-6,"output_cost_per_token":2e-6}}`,
		`{"m":{"mode":"embedding","input_cost_per_token":0,"input_cost_per_token_above_1k_tokens":1}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, opts := range []Options{
			{MaxBytes: 1 << 20},
			{MaxBytes: 1 << 20, Models: []Wanted{{Name: "m", Lookup: []string{"m", "gpt-4o"}}, {Name: "x: y", Lookup: []string{"x: y"}}}},
		} {
			res, err := Read(bytes.NewReader(data), opts)
			if err != nil {
				if res != nil {
					t.Fatalf("error %v and a result", err)
				}
				continue
			}
			if opts.Models == nil && len(res.Models)+len(res.Skipped) > res.Entries {
				t.Fatalf("%d imported and %d skipped of %d entries", len(res.Models), len(res.Skipped), res.Entries)
			}
			for _, m := range res.Models {
				checkBounds(t, m)
			}
			var out bytes.Buffer
			if err := WriteYAML(&out, "f.json", res.Models); err != nil {
				t.Fatal(err)
			}
			checkRoundTrip(t, out.Bytes(), res.Models) // names are unique: entries' are, and so are the wanted ones

			res.WriteSummary(io.Discard, "f.json")
		}
	})
}

func checkBounds(t *testing.T, m Model) {
	t.Helper()
	p := m.Price
	if p.Input == nil {
		t.Fatalf("%s imported without an input price", m.Name)
	}
	tokens := []*int64{p.Input, p.CachedInput, p.CacheWrite, p.CacheWrite1h, p.Output, p.Reasoning, p.AudioInput, p.AudioOutput}
	if lc := p.LongContext; lc != nil {
		if lc.AboveInputTokens < 1000 || lc.AboveInputTokens%1000 != 0 {
			t.Fatalf("%s: long context above %d tokens", m.Name, lc.AboveInputTokens)
		}
		tokens = append(tokens, lc.Input, lc.CachedInput, lc.CacheWrite, lc.CacheWrite1h, lc.Output)
	}
	for _, v := range tokens {
		if v != nil && (*v < 0 || *v > maxPerToken) {
			t.Fatalf("%s: price %d per 1M tokens", m.Name, *v)
		}
	}
	if v := p.PerRequest; v != nil && (*v < 0 || *v > maxPerRequest) {
		t.Fatalf("%s: per_request %d", m.Name, *v)
	}
}
