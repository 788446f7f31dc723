package policies

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestDecodeBoundReportsOnlyItself: a document cut short by the bound on
// expansion is reported as too large and nothing else — not the problems
// of what decoding left out (a key without its sha256), nor those of the
// value at the bound (here the last one, badly typed) — at every bound
// below the document's size, the exact size included. The document's
// sections come from a merge key, so every value in them counts.
func TestDecodeBoundReportsOnlyItself(t *testing.T) {
	doc := []byte(base + "<<: {teams: [{name: t, models: [llama3]}], keys: [{name: k, team: t, sha256: \"" + strings.Repeat("a", 64) + "\"}], " +
		"gateway: {default_max_output_tokens: lots}}\n")
	const bad = "default_max_output_tokens"
	if _, err := parse(doc, "f.yaml", nil, maxDecodeSteps); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("the whole document: %v, want its one problem, at %s", err, bad)
	}
	// The document's size, counted by the decoder without a bound that
	// matters: it must decode at exactly that bound and be refused, as
	// holding more than size-1 values, at one less.
	counter := newDecoder(nil, maxDecodeSteps)
	docs, err := parseDocuments(doc)
	if err != nil {
		t.Fatal(err)
	}
	counter.decode(nil, docs[0].Content[0], reflect.ValueOf(Default()).Elem())
	values := counter.steps
	size := 0 // the smallest bound at which the whole document decodes
	for m := 1; m < 1000; m++ {
		_, err := parse(doc, "f.yaml", nil, m)
		if err == nil {
			t.Fatalf("bound %d: no problem, want the badly typed %s", m, bad)
		}
		if strings.Contains(err.Error(), bad) {
			if strings.Contains(err.Error(), "too large") {
				t.Fatalf("bound %d: %v, want only that the document is too large", m, err)
			}
			size = m
			break
		}
		if want := fmt.Sprintf("f.yaml: document too large: aliases and merge keys expand to more than %d values", m); err.Error() != want {
			t.Fatalf("bound %d: %v, want only %q", m, err, want)
		}
	}
	if size < 10 {
		t.Fatalf("the document fits a bound of %d values: the test does not cut it", size)
	}
	if size != values {
		t.Errorf("the document of %d values decodes from a bound of %d, want exactly %d", values, size, values)
	}
}

// TestEmptyDocuments: a file with no document, or an empty one, decodes
// to the defaults and is judged as such (without panicking).
func TestEmptyDocuments(t *testing.T) {
	for _, doc := range []string{"", "# nothing\n", "---\n", "--- \n...\n"} {
		_, err := Parse([]byte(doc), "f.yaml", nil)
		if err == nil || !strings.Contains(err.Error(), "providers") {
			t.Errorf("Parse(%q) = %v, want the defaults' problems (no providers)", doc, err)
		}
	}
}

// TestBodySizes: Envoy's per-connection buffer holds the largest body
// plus 64 KiB, and the gRPC receive limit that buffer plus 1 MiB, at the
// smallest and a large body limit alike.
func TestBodySizes(t *testing.T) {
	for _, limit := range []int64{1, 4 << 20, maxBodyLimit} {
		g := Gateway{MaxRequestBodyBytes: limit}
		if got, want := g.BodyBufferBytes(), limit+64<<10; got != want {
			t.Errorf("limit %d: BodyBufferBytes %d, want %d", limit, got, want)
		}
		if got, want := g.GRPCRecvBytes(), limit+64<<10+1<<20; got != want {
			t.Errorf("limit %d: GRPCRecvBytes %d, want %d", limit, got, want)
		}
	}
}

// TestIsZero: the limit types are zero exactly when nothing is limited.
func TestIsZero(t *testing.T) {
	for _, tt := range []struct {
		name string
		zero bool
		got  bool
	}{
		{"no rate", true, RateLimits{}.IsZero()},
		{"a daily rate", false, RateLimits{PerDay: 1}.IsZero()},
		{"no token window", true, TokenLimits{}.IsZero()},
		{"an output window", false, TokenLimits{Output: RateLimits{PerMinute: 1}}.IsZero()},
	} {
		if tt.got != tt.zero {
			t.Errorf("%s: IsZero %v, want %v", tt.name, tt.got, tt.zero)
		}
	}
}

// TestSecretNeverPrints: a set secret prints as [redacted] with %s, %v
// and %#v; an unset one as empty, so a missing credential shows.
func TestSecretNeverPrints(t *testing.T) {
	for _, tt := range []struct {
		s          Secret
		str, gostr string
	}{
		{"sk-live", "[redacted]", `"[redacted]"`},
		{"", "", `""`},
	} {
		if got := fmt.Sprintf("%s|%v", tt.s, tt.s); got != tt.str+"|"+tt.str {
			t.Errorf("%%s|%%v of a secret: %q", got)
		}
		if got := fmt.Sprintf("%#v", tt.s); got != tt.gostr {
			t.Errorf("%%#v of a secret: %q, want %q", got, tt.gostr)
		}
		if tt.s.Reveal() != string(tt.s) {
			t.Errorf("Reveal lost the value")
		}
	}
}

// TestDecodeProblemPosition: a problem with a value written out (null
// included) points at the value; one with a mapping or list where a
// scalar belongs, or with a value left empty, points at its key.
func TestDecodeProblemPosition(t *testing.T) {
	for _, tt := range []struct{ value, at string }{
		{"lots", "f.yaml:1:38: gateway.default_max_output_tokens: "},
		{"{a: 1}", "f.yaml:1:11: gateway.default_max_output_tokens: "},
		{"[1]", "f.yaml:1:11: gateway.default_max_output_tokens: "},
	} {
		_, err := Parse([]byte("gateway: {default_max_output_tokens: "+tt.value+"}\n"+base), "f.yaml", nil)
		if err == nil || !strings.Contains(err.Error(), tt.at) {
			t.Errorf("value %s: %v, want a problem at %q", tt.value, err, tt.at)
		}
	}
	for _, tt := range []struct{ value, at string }{
		{"null", "f.yaml:9:25: models[1].provider: "},
		{"", "f.yaml:9:15: models[1].provider: "},
	} {
		_, err := Parse([]byte(base+"  - {name: m, provider: "+tt.value+"}\n"), "f.yaml", nil)
		if err == nil || !strings.Contains(err.Error(), tt.at) {
			t.Errorf("provider %q: %v, want a problem at %q", tt.value, err, tt.at)
		}
	}
}

// TestWrittenValuesDoNotCount: values written out, however many, are not
// expansion: a document of a thousand declared keys decodes under a bound
// of ten, and is refused under it once the same keys come from an alias.
func TestWrittenValuesDoNotCount(t *testing.T) {
	var keys strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&keys, "  - {name: k%d, team: t, sha256: \"%064x\"}\n", i, i)
	}
	team := "teams:\n  - {name: t, models: [llama3]}\n"
	if _, err := parse([]byte(base+team+"keys:\n"+keys.String()), "f.yaml", nil, 10); err != nil {
		t.Errorf("a thousand keys written out, bound 10: %v", err)
	}
	aliased := base + team + "x-keys: &all\n" + keys.String() + "keys: *all\n"
	_, err := parse([]byte(aliased), "f.yaml", nil, 10)
	if err == nil || !strings.Contains(err.Error(), "document too large") {
		t.Errorf("the same keys through an alias, bound 10: %v, want the document too large", err)
	}
}

// TestMergeChain: merge keys are expanded once per mapping, so a chain in
// which each mapping merges the one before it twice (2^60 pairs, were
// every merge expanded afresh) costs a few steps per pair it holds, and a
// bound below that refuses it.
func TestMergeChain(t *testing.T) {
	var b strings.Builder
	b.WriteString(base + "teams:\n  - &l0 {name: t0}\n")
	const depth = 60
	for i := 1; i <= depth; i++ {
		fmt.Fprintf(&b, "  - &l%d {<<: [*l%d, *l%d], name: t%d}\n", i, i-1, i-1, i)
	}
	fmt.Fprintf(&b, "gateway: {<<: *l%d}\n", depth)
	doc := []byte(b.String())
	counter := newDecoder(nil, maxDecodeSteps)
	docs, err := parseDocuments(doc)
	if err != nil {
		t.Fatal(err)
	}
	counter.decode(nil, docs[0].Content[0], reflect.ValueOf(Default()).Elem())
	if counter.steps > 10*depth {
		t.Errorf("the chain counted %d steps of expansion, want at most %d", counter.steps, 10*depth)
	}
	_, err = parse(doc, "f.yaml", nil, maxDecodeSteps)
	if err == nil || strings.Contains(err.Error(), "too large") || !strings.Contains(err.Error(), "gateway.name: unknown field") {
		t.Errorf("the chain under the default bound: %v, want its unknown gateway field", err)
	}
	_, err = parse(doc, "f.yaml", nil, 2*depth)
	if err == nil || !strings.Contains(err.Error(), "document too large") {
		t.Errorf("the chain under a bound of %d: %v, want the document too large", 2*depth, err)
	}
}

// TestCycles: a merge key that brings in the mapping holding it, directly
// or through another, and an alias or a merge inside the value it brings
// in, are problems of their own, not a crash or decoding without end.
func TestCycles(t *testing.T) {
	for _, tt := range []struct{ name, yaml, want string }{
		{"itself", "gateway: &g {<<: *g}\n", "gateway.<<: a merge key must refer to a mapping or a list of mappings, none of which merges the mapping that holds it"},
		{"in a list", "gateway: &g {<<: [*g]}\n", "gateway.<<: a merge key must refer"},
		{"through another", "gateway: &g {<<: {<<: *g}}\n", "gateway.<<: a merge key must refer"},
		{"an alias of itself", "teams: &t [*t]\n", "teams[0]: must be a mapping, got a list"},
		{"an alias in the limits it refers to", "teams: [{name: t, models: [llama3], limits: &l {models: {llama3: *l}}}]\n",
			"teams[0].limits.models.llama3.models.llama3: an alias or merge key must not bring in a value that holds it"},
		{"a merge of what holds it", "teams: [{name: t, models: [llama3], limits: &l {models: {llama3: {<<: *l}}}}]\n",
			"teams[0].limits.models.llama3.models.llama3.models: an alias or merge key must not bring in a value that holds it"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse([]byte(base+tt.yaml), "f.yaml", nil, maxDecodeSteps)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("parse = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestAliasWithAPointerField: an alias whose value holds a mapping read
// into a pointer (a price's long_context) is a copy, not a cycle: both
// models get the whole price.
func TestAliasWithAPointerField(t *testing.T) {
	doc := `
providers:
  - {name: local, kind: openai-compatible, base_url: "http://127.0.0.1:8000"}
models:
  - {name: a, provider: local}
  - {name: b, provider: local}
pricing:
  a: &p {input: 3, output: 15, long_context: {above_input_tokens: 200000, input: 6, output: 22}}
  b: *p
`
	cfg, err := parse([]byte(doc), "f.yaml", nil, maxDecodeSteps)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"a", "b"} {
		p := cfg.Pricing[m]
		if lc := p.LongContext; p.Input != 3 || p.Output != 15 || lc == nil || lc.AboveInputTokens != 200000 || *lc.Input != 6 || *lc.Output != 22 {
			t.Errorf("pricing.%s = %+v (long_context %+v)", m, p, lc)
		}
	}
}

// FuzzParse: no document, however malformed or self-referring, panics,
// crashes or hangs Parse; and one that parses is valid by Validate's
// rules.
func FuzzParse(f *testing.F) {
	f.Add([]byte(base))
	f.Fuzz(func(t *testing.T, doc []byte) {
		cfg, err := Parse(doc, "f.yaml", nil)
		if err == nil {
			if ps := cfg.Validate(); len(ps) > 0 {
				t.Errorf("Parse accepted a document Validate refuses: %v", ps)
			}
		}
	})
}
