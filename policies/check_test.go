package policies

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCheckLimitsAndModels(t *testing.T) {
	cfg, err := Parse([]byte(`
providers: [{name: local, kind: openai-compatible, base_url: "http://127.0.0.1:8000"}]
models: [{name: gpt-4o, aliases: [four], provider: local}, {name: mini, provider: local}]
`), "sluice.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Compile(cfg, "sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	msgs := func(ps Problems) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.String())
		}
		return out
	}

	good := Limits{
		Requests: RateLimits{PerMinute: 10},
		Budgets:  []Budget{{MicroUSD: 1, Period: PeriodRolling, Window: time.Hour}},
		Models:   map[string]Limits{"gpt-4o": {Tokens: TokenLimits{Total: RateLimits{PerDay: 5}}}},
	}
	if ps := s.CheckLimits("limits", good); ps != nil {
		t.Errorf("CheckLimits(good) = %v", ps)
	}
	bad := Limits{
		Requests: RateLimits{PerMinute: -1},
		Budgets:  []Budget{{MicroUSD: 0, Period: "yearly"}, {MicroUSD: 5, Period: PeriodDay, Window: time.Hour}},
		Models: map[string]Limits{
			"four": {},
			"nope": {Models: map[string]Limits{"mini": {}}},
		},
	}
	want := []string{
		"limits.budgets[0].micro_usd: must be more than 0 (micro-dollars: $50 is 50000000), got 0",
		`limits.budgets[0].period: unknown period "yearly" (one of day, week, month, rolling, lifetime)`,
		"limits.budgets[1].window: only allowed with period: rolling",
		`limits.models.four: "four" is an alias of "gpt-4o"; limit the model by its name`,
		`limits.models.nope: unknown model "nope"`,
		"limits.models.nope.models: per-model limits cannot nest",
		"limits.requests.per_minute: must not be negative, got -1",
	}
	if diff := cmp.Diff(want, msgs(s.CheckLimits("limits", bad))); diff != "" {
		t.Errorf("CheckLimits(bad) (-want +got):\n%s", diff)
	}

	if ps := s.CheckModels("models", []string{"gpt-*", "four", "mini"}); ps != nil {
		t.Errorf("CheckModels(good) = %v", ps)
	}
	want = []string{
		`models[0]: "gpt-5" matches no configured model (did you mean "gpt-4o"?)`,
		"models[1]: must not be empty",
	}
	if diff := cmp.Diff(want, msgs(s.CheckModels("models", []string{"gpt-5", ""}))); diff != "" {
		t.Errorf("CheckModels(bad) (-want +got):\n%s", diff)
	}
}
