package app

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/tokens"
)

// TestAttackSpendJSONThroughTheLedger: records stored in the real ledger
// under model names with quotes, line ends, HTML and bytes that are not
// UTF-8, at costs around the micro-dollar and past an int64 of
// pico-dollars, are reported by `sluice spend --by model --format json` as
// one valid JSON object a line, each with its exact cost in pico-dollars,
// that rounded up in micro-dollars, and that in dollars.
func TestAttackSpendJSONThroughTheLedger(t *testing.T) {
	config := quickstart(t)
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	groups := []struct {
		model string
		costs []int64
	}{
		{"zero", []int64{0}},
		{"one-pico", []int64{1}},
		{"under", []int64{999_999}},
		{"micro", []int64{1_000_000}},
		{"over", []int64{1_000_001}},
		{`q"uo\te`, []int64{7}},
		{"line\nend\r", []int64{8}},
		{"<b>&amp;</b>", []int64{9}},
		{"\u2028sep\u2029", []int64{10}},
		{"bad\xffutf8\xc3", []int64{11}},
		{"huge", []int64{math.MaxInt64, math.MaxInt64, math.MaxInt64}},
	}
	var recs []ledger.Record
	for gi, g := range groups {
		for ci, c := range g.costs {
			recs = append(recs, ledger.Record{RequestID: fmt.Sprintf("r%d_%d", gi, ci), KeyID: "key_a", Team: "demo", Org: "acme",
				Model: g.model, Tokens: tokens.Counts{tokens.Input: 1, tokens.Output: 1}, CostPico: c, Priced: true,
				Status: 200, Outcome: "ok", StartedAt: start.Add(time.Duration(gi) * time.Second)})
		}
	}
	spendLedger(t, config, recs...)
	out, errOut, err := run(t, "spend", "--config", config, "--by", "model", "--format", "json",
		"--since", "2026-03-01", "--until", "2026-03-02")
	if err != nil {
		t.Fatalf("spend: %v\n%s", err, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(groups) {
		t.Fatalf("%d lines for %d groups:\n%s", len(lines), len(groups), out)
	}
	seen := map[string]bool{}
	for _, line := range lines {
		if !json.Valid([]byte(line)) || !utf8.ValidString(line) {
			t.Errorf("invalid JSON line: %q", line)
			continue
		}
		var tot struct {
			Group string      `json:"group"`
			Micro json.Number `json:"cost_micro_usd"`
			Pico  json.Number `json:"cost_pico_usd"`
			USD   string      `json:"cost_usd"`
		}
		if err := json.Unmarshal([]byte(line), &tot); err != nil {
			t.Fatal(err)
		}
		var want *big.Int
		for _, g := range groups {
			if strings.ToValidUTF8(g.model, "\uFFFD") == tot.Group {
				want = new(big.Int)
				for _, c := range g.costs {
					want.Add(want, big.NewInt(c))
				}
				seen[g.model] = true
			}
		}
		if want == nil {
			t.Errorf("a group %q no record has: %s", tot.Group, line)
			continue
		}
		if tot.Pico.String() != want.String() {
			t.Errorf("group %q: cost_pico_usd %s, want %s", tot.Group, tot.Pico, want)
		}
		micro, ok := new(big.Int).SetString(tot.Micro.String(), 10)
		if wantMicro := ceilMicro(want); !ok || micro.Cmp(wantMicro) != 0 {
			t.Errorf("group %q: cost_micro_usd %s, want %s (cost_pico_usd rounded up)", tot.Group, tot.Micro, wantMicro)
		}
		if wantUSD := fmt.Sprintf("%s.%06d", new(big.Int).Quo(micro, big.NewInt(1_000_000)), new(big.Int).Rem(micro, big.NewInt(1_000_000)).Int64()); tot.USD != wantUSD {
			t.Errorf("group %q: cost_usd %s, want %s (cost_micro_usd in dollars)", tot.Group, tot.USD, wantUSD)
		}
	}
	if len(seen) != len(groups) {
		t.Errorf("groups reported: %v", seen)
	}
}

func ceilMicro(p *big.Int) *big.Int {
	q, m := new(big.Int).QuoRem(p, big.NewInt(1_000_000), new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q
}
