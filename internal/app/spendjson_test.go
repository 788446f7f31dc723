package app

import (
	"bytes"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/tokens"
)

// TestSpendJSONBytes pins sluice spend's JSON lines byte for byte, as the
// build whose Record and Total had a field per kind of token wrote them:
// a record's token fields keep their Go names, a total's their JSON
// names, both generated from tokens' table.
func TestSpendJSONBytes(t *testing.T) {
	r := ledger.Record{RequestID: "req_1", ClientRequestID: "c<1>", KeyID: "key_a", Team: "team", Org: "org", Endpoint: "messages",
		Model: "claude", Provider: "anthropic", UpstreamModel: "claude-x", Outcome: "ok", ErrorType: "overloaded_error",
		Tokens: tokens.Counts{tokens.Input: 1234, tokens.CachedInput: 234, tokens.CacheWrite: 34, tokens.Output: 567, tokens.Reasoning: 67,
			tokens.CacheWrite1h: 12, tokens.AudioInput: 45, tokens.AudioOutput: 56},
		CostPico: 1<<40 + 3, Priced: true, Estimated: true, Status: 200, Stream: true,
		StartedAt: time.Date(2026, 3, 1, 12, 0, 0, 5, time.UTC), FinishedAt: time.Date(2026, 3, 1, 12, 0, 2, 0, time.UTC), TTFT: 150 * time.Millisecond}
	var b bytes.Buffer
	if err := writeRecords(&b, "json", []ledger.Record{r}); err != nil {
		t.Fatal(err)
	}
	const wantRecord = `{"RequestID":"req_1","ClientRequestID":"c\u003c1\u003e","KeyID":"key_a","Team":"team","Org":"org","Endpoint":"messages",` +
		`"Model":"claude","Provider":"anthropic","UpstreamModel":"claude-x","InputTokens":1234,"CachedInputTokens":234,"CacheCreationTokens":34,` +
		`"OutputTokens":567,"ReasoningTokens":67,"CacheCreation1hTokens":12,"AudioInputTokens":45,"AudioOutputTokens":56,"CostPico":1099511627779,` +
		`"Priced":true,"Status":200,"Outcome":"ok","ErrorType":"overloaded_error","Estimated":true,"Stream":true,` +
		`"StartedAt":"2026-03-01T12:00:00.000000005Z","FinishedAt":"2026-03-01T12:00:02Z","TTFT":150000000}` + "\n"
	if b.String() != wantRecord {
		t.Errorf("record:\n got %s\nwant %s", b.String(), wantRecord)
	}

	b.Reset()
	tot := ledger.Total{Group: "g", Requests: 3,
		Tokens: tokens.Counts{tokens.Input: 1, tokens.CachedInput: 2, tokens.CacheWrite: 3, tokens.Output: 4, tokens.Reasoning: 5,
			tokens.CacheWrite1h: 6, tokens.AudioInput: 7, tokens.AudioOutput: 8},
		Cost: money.FromPico(1234567), Estimated: 1, Unpriced: 2}
	if err := writeTotals(&b, "json", "key", []ledger.Total{tot}); err != nil {
		t.Fatal(err)
	}
	const wantTotal = `{"group":"g","requests":3,"input_tokens":1,"cached_input_tokens":2,"cache_creation_tokens":3,"output_tokens":4,` +
		`"reasoning_tokens":5,"cache_creation_1h_tokens":6,"audio_input_tokens":7,"audio_output_tokens":8,` +
		`"cost_micro_usd":2,"cost_pico_usd":1234567,"cost_usd":"0.000002","estimated":1,"unpriced":2}` + "\n"
	if b.String() != wantTotal {
		t.Errorf("total:\n got %s\nwant %s", b.String(), wantTotal)
	}
}
