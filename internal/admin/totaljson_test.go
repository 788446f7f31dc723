package admin

import (
	"encoding/json"
	"testing"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/tokens"
)

// TestTotalJSONBytes pins the spend API's totals byte for byte: the
// shape of the build whose Total had a field per kind of token (the token
// fields generated from tokens' table, in its order), plus cost_usd, the
// field it shares with sluice spend --format json.
func TestTotalJSONBytes(t *testing.T) {
	tot := ledger.Total{Group: "g<", Requests: 3,
		Tokens: tokens.Counts{tokens.Input: 1, tokens.CachedInput: 2, tokens.CacheWrite: 3, tokens.Output: 4, tokens.Reasoning: 5,
			tokens.CacheWrite1h: 6, tokens.AudioInput: 7, tokens.AudioOutput: 8},
		Cost: money.FromPico(1234567), Estimated: 1, Unpriced: 2}
	got, err := json.Marshal(spendJSON{By: "key", Totals: []ledger.Total{tot}})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"by":"key","totals":[{"group":"g\u003c","requests":3,"input_tokens":1,"cached_input_tokens":2,"cache_creation_tokens":3,` +
		`"output_tokens":4,"reasoning_tokens":5,"cache_creation_1h_tokens":6,"audio_input_tokens":7,"audio_output_tokens":8,` +
		`"cost_micro_usd":2,"cost_pico_usd":1234567,"cost_usd":"0.000002","estimated":1,"unpriced":2}]}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
