package policies

import "testing"

// TestModelNameRunes: a model name or alias may hold ASCII letters,
// digits and -_.:/@, the ranges' ends included, and nothing next to
// them.
func TestModelNameRunes(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"a", true}, {"z", true}, {"A", true}, {"Z", true}, {"0", true}, {"9", true},
		{"gpt-4o_mini.v1:x/y@z", true},
		{"`", false}, {"{", false}, {"@", true}, {"[", false}, {"/", true}, {":", true},
		{"é", false}, {"a b", false}, {"*", false},
	} {
		if got := checkModelName(tt.name) == ""; got != tt.ok {
			t.Errorf("checkModelName(%q) valid %v, want %v", tt.name, got, tt.ok)
		}
	}
}

// TestWeightedRouteOfOne: a weighted model with one provider routes to
// it, whatever the draw.
func TestWeightedRouteOfOne(t *testing.T) {
	r := &ModelRoute{Name: "m", Routing: RoutingWeighted, Targets: []Target{{Provider: &Provider{Name: "only"}, Upstream: "u"}}}
	for _, n := range []uint64{0, 1, 1 << 62} {
		if tg, routing := r.Route(n); tg.Provider.Name != "only" || routing != "only" {
			t.Errorf("Route(%d) = %s, %q; want the only provider", n, tg.Provider.Name, routing)
		}
	}
}

// TestModelOutputCap: a model's max_output_tokens is what admission
// reserves for a reply that sets no max_tokens; a model without one gets
// gateway.default_max_output_tokens.
func TestModelOutputCap(t *testing.T) {
	doc := `
gateway: {default_max_output_tokens: 2048}
providers:
  - {name: local, kind: openai-compatible, base_url: "http://127.0.0.1:8000"}
models:
  - {name: capped, provider: local, max_output_tokens: 100}
  - {name: default, provider: local}
`
	cfg, err := Parse([]byte(doc), "sluice.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := Compile(cfg, "sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for model, want := range map[string]int64{"capped": 100, "default": 2048} {
		r, ok := snap.Model(model)
		if !ok {
			t.Fatalf("model %s missing", model)
		}
		if r.MaxOutputTokens != want {
			t.Errorf("model %s: MaxOutputTokens %d, want %d", model, r.MaxOutputTokens, want)
		}
	}
}
