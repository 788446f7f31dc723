package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
	ledgersqlite "github.com/sluicegw/sluice/internal/ledger/sqlite"
	"github.com/sluicegw/sluice/internal/tokens"
)

// spendLedger writes recs into the ledger of config, as sluice serve
// would.
func spendLedger(t *testing.T, config string, recs ...ledger.Record) {
	t.Helper()
	snap, err := loadSnapshot(config, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	appendRecords(t, snap.LedgerPath(), recs...)
}

// appendRecords writes recs into the ledger at path and closes it.
func appendRecords(t *testing.T, path string, recs ...ledger.Record) {
	t.Helper()
	led, err := ledgersqlite.Open(t.Context(), path, ledgersqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- led.Run(ctx) }()
	for _, r := range recs {
		if err := led.Append(t.Context(), r); err != nil {
			t.Error(err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
	if err := led.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSpendCLI reports four records by period in zones where they fall
// in different days, weeks and months: UTC; Asia/Kolkata (+5:30);
// Asia/Kathmandu (+5:45); America/New_York, whose clocks went forward on
// 2025-03-09, the day of two of them.
func TestSpendCLI(t *testing.T) {
	config := quickstart(t)
	at := func(s string) time.Time {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			panic(err)
		}
		return t
	}
	rec := func(id, key, team, model, started string, cost int64) ledger.Record {
		return ledger.Record{
			RequestID: id, KeyID: key, Team: team, Org: "acme", Model: model,
			Tokens: tokens.Counts{tokens.Input: 100, tokens.Output: 10}, CostPico: cost * 1_000_000, Priced: true,
			Status: 200, Outcome: "ok", StartedAt: at(started),
		}
	}
	spendLedger(t, config,
		// Sunday 23:59:59 in Kolkata; Sunday in UTC.
		rec("r1", "key_a", "search", "gpt-4o", "2025-03-09T18:29:59Z", 1_000_000),
		// Monday 00:00 in Kolkata; still Sunday in UTC.
		rec("r2", "key_a", "search", "gpt-4o", "2025-03-09T18:30:00Z", 2_000_000),
		// April 1st 00:00 in Kathmandu; March 31st everywhere else here.
		rec("r3", "key_b", "ads", "claude-sonnet", "2025-03-31T18:15:00Z", 500_000),
		// February in UTC and New York; March 1st in Asia.
		rec("r4", "key_b", "ads", "claude-sonnet", "2025-02-28T23:00:00Z", 250_000),
	)
	spend := func(args ...string) (string, error) {
		out, _, err := run(t, append([]string{"spend", "--config", config}, args...)...)
		return out, err
	}
	const csvHeader = ",requests,input_tokens,cached_input_tokens,cache_creation_tokens,output_tokens,reasoning_tokens,cost_usd,estimated,unpriced\n"
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"month UTC", []string{"--by", "month", "--format", "csv"}, "month" + csvHeader +
			"2025-03,3,300,0,0,30,0,3.500000,0,0\n" +
			"2025-02,1,100,0,0,10,0,0.250000,0,0\n"},
		{"month Kolkata", []string{"--by", "month", "--tz", "Asia/Kolkata", "--format", "csv"}, "month" + csvHeader +
			"2025-03,4,400,0,0,40,0,3.750000,0,0\n"},
		{"month Kathmandu", []string{"--by", "month", "--tz", "Asia/Kathmandu", "--format", "csv"}, "month" + csvHeader +
			"2025-04,1,100,0,0,10,0,0.500000,0,0\n" +
			"2025-03,3,300,0,0,30,0,3.250000,0,0\n"},
		{"week UTC", []string{"--by", "week", "--format", "csv"}, "week" + csvHeader +
			"2025-03-31,1,100,0,0,10,0,0.500000,0,0\n" +
			"2025-03-03,2,200,0,0,20,0,3.000000,0,0\n" +
			"2025-02-24,1,100,0,0,10,0,0.250000,0,0\n"},
		{"week Kolkata", []string{"--by", "week", "--tz", "Asia/Kolkata", "--format", "csv"}, "week" + csvHeader +
			"2025-03-31,1,100,0,0,10,0,0.500000,0,0\n" +
			"2025-03-10,1,100,0,0,10,0,2.000000,0,0\n" +
			"2025-03-03,1,100,0,0,10,0,1.000000,0,0\n" +
			"2025-02-24,1,100,0,0,10,0,0.250000,0,0\n"},
		{"day New York", []string{"--by", "day", "--tz", "America/New_York", "--format", "csv"}, "day" + csvHeader +
			"2025-03-31,1,100,0,0,10,0,0.500000,0,0\n" +
			"2025-03-09,2,200,0,0,20,0,3.000000,0,0\n" +
			"2025-02-28,1,100,0,0,10,0,0.250000,0,0\n"},
		{"a date in --since is midnight in --tz", []string{"--by", "month", "--tz", "Asia/Kolkata", "--since", "2025-03-10", "--format", "csv"}, "month" + csvHeader +
			"2025-03,2,200,0,0,20,0,2.500000,0,0\n"},
		{"filter and limit", []string{"--by", "day", "--key", "key_b", "--limit", "1", "--format", "csv"}, "day" + csvHeader +
			"2025-03-31,1,100,0,0,10,0,0.500000,0,0\n"},
		{"org", []string{"--by", "model", "--org", "acme", "--format", "csv"}, "model" + csvHeader +
			"gpt-4o,2,200,0,0,20,0,3.000000,0,0\n" +
			"claude-sonnet,2,200,0,0,20,0,0.750000,0,0\n"},
		{"table", []string{"--by", "month", "--tz", "Asia/Kathmandu"}, "" +
			"    month  requests  input_tokens  cached_input_tokens  cache_creation_tokens  output_tokens  reasoning_tokens  cost_usd  estimated  unpriced\n" +
			"  2025-04         1           100                    0                      0             10                 0  0.500000          0         0\n" +
			"  2025-03         3           300                    0                      0             30                 0  3.250000          0         0\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := spend(tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			if out != tt.want {
				t.Errorf("spend %s:\n%q\nwant:\n%q", strings.Join(tt.args, " "), out, tt.want)
			}
		})
	}

	out, err := spend("--by", "week", "--tz", "Asia/Kolkata", "--format", "json", "--limit", "1")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"group":"2025-03-31","requests":1,"input_tokens":100,"cached_input_tokens":0,"cache_creation_tokens":0,` +
		`"output_tokens":10,"reasoning_tokens":0,"cache_creation_1h_tokens":0,"audio_input_tokens":0,"audio_output_tokens":0,` +
		`"cost_micro_usd":500000,"cost_pico_usd":500000000000,"cost_usd":"0.500000","estimated":0,"unpriced":0}` + "\n"
	if out != want {
		t.Errorf("spend --format json:\n%s\nwant:\n%s", out, want)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--by", "week", "--tz", "Mars/Olympus_Mons"}, `--tz: unknown time zone "Mars/Olympus_Mons"`},
		{[]string{"--by", "year"}, `--by: want key, team, org, model, day, week, month or none, got "year"`},
		{[]string{"--by", "bucket"}, `--by: want key, team, org, model, day, week, month or none, got "bucket"`},
		{[]string{"--since", "last tuesday"}, `--since: want a duration (24h), a date (2026-11-01) or an RFC 3339 time, got "last tuesday"`},
	} {
		if _, err := spend(tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("spend %v: err = %v, want %q", tt.args, err, tt.want)
		}
	}
}

// TestSpendRecords lists records with their own ids beside the client's
// x-request-id, which several share or is empty, and the provider's error
// type; the table shows a hostile client id harmlessly.
func TestSpendRecords(t *testing.T) {
	config := quickstart(t)
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	rec := func(id, client string, i int) ledger.Record {
		return ledger.Record{
			RequestID: id, ClientRequestID: client, KeyID: "key_a", Team: "search", Model: "gpt-4o",
			Tokens: tokens.Counts{tokens.Input: 100, tokens.Output: 10}, CostPico: 1000 * 1_000_000, Priced: true,
			Status: 200, Outcome: "ok", StartedAt: at.Add(time.Duration(i) * time.Second),
		}
	}
	failed := rec("rec-3", "", 3)
	failed.Outcome, failed.ErrorType = "upstream_error", "overloaded_error"
	spendLedger(t, config, rec("rec-1", "same", 1), rec("rec-2", "same", 2), failed, rec("rec-4", "a\tb\x1b[2J", 4))

	out, _, err := run(t, "spend", "--config", config, "--records", "--format", "csv")
	if err != nil {
		t.Fatal(err)
	}
	want := "started_at,request_id,client_request_id,key_id,team,model,provider,status,outcome,error_type,input,cached,cache_creation,output,reasoning,cost_usd,estimated\n" +
		"2025-03-01T12:00:04Z,rec-4,a\tb\x1b[2J,key_a,search,gpt-4o,,200,ok,,100,0,0,10,0,0.001000,false\n" +
		"2025-03-01T12:00:03Z,rec-3,,key_a,search,gpt-4o,,200,upstream_error,overloaded_error,100,0,0,10,0,0.001000,false\n" +
		"2025-03-01T12:00:02Z,rec-2,same,key_a,search,gpt-4o,,200,ok,,100,0,0,10,0,0.001000,false\n" +
		"2025-03-01T12:00:01Z,rec-1,same,key_a,search,gpt-4o,,200,ok,,100,0,0,10,0,0.001000,false\n"
	if out != want {
		t.Errorf("--records csv:\n%s\nwant:\n%s", out, want)
	}
	table, _, err := run(t, "spend", "--config", config, "--records")
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(table, "\x1b") || !strings.Contains(table, "a?b?[2J") || !strings.Contains(table, "overloaded_error") {
		t.Errorf("--records table:\n%s", table)
	}
}

// TestSpendWithoutProviderKeys: sluice spend reads the ledger of a config
// whose providers' keys are in environment variables that are not set
// where it runs (it never calls a provider); it shows the cache-creation
// and reasoning columns, costs exact to the pico-dollar in JSON and
// rounded up to the micro-dollar in the table (three embeddings of
// 0.14 µ$ are 0.42 µ$: $0.000001), and a provider error that reported no
// usage, charged nothing, is not counted as estimated.
func TestSpendWithoutProviderKeys(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(config, []byte(`providers:
  - {name: openai, kind: openai, base_url: "https://api.openai.com", api_key: "${OPENAI_API_KEY}"}
  - {name: anthropic, kind: anthropic, base_url: "https://api.anthropic.com", api_key: "${ANTHROPIC_API_KEY}"}
models:
  - {name: text-embedding-3-small, provider: openai}
  - {name: claude, provider: anthropic}
pricing:
  text-embedding-3-small: {input: 20000}
  claude: {input: 1000000, cached_input: 100000, output: 5000000}
ledger: {sqlite: ledger.db}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadSnapshot(config, noEnv); err == nil || !strings.Contains(err.Error(), "OPENAI_API_KEY is not set") {
		t.Fatalf("loading the config with its keys: %v; want the unset variable reported", err)
	}
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	var recs []ledger.Record
	for i := range 3 {
		recs = append(recs, ledger.Record{RequestID: fmt.Sprintf("emb-%d", i), KeyID: "key_e", Model: "text-embedding-3-small",
			Tokens: tokens.Counts{tokens.Input: 7}, CostPico: 140_000, Priced: true, Status: 200, Outcome: "ok", StartedAt: at.Add(time.Duration(i) * time.Second)})
	}
	recs = append(recs,
		// 15 input, 13 written, 12 read, 21 output of which 5 thinking:
		// 15 + 16.25 + 1.2 + 105 µ$.
		ledger.Record{RequestID: "claude-1", KeyID: "key_c", Model: "claude", Tokens: tokens.Counts{tokens.Input: 40, tokens.CachedInput: 12, tokens.CacheWrite: 13, tokens.Output: 21, tokens.Reasoning: 5}, CostPico: 137_450_000, Priced: true,
			Status: 200, Outcome: "ok", StartedAt: at.Add(time.Minute)},
		// A provider's 529 that reported no usage: charged nothing, as a
		// rule rather than a count, so not estimated.
		ledger.Record{RequestID: "claude-2", KeyID: "key_c", Model: "claude", Priced: true, Status: 529,
			Outcome: "upstream_error", ErrorType: "overloaded_error", StartedAt: at.Add(2 * time.Minute)},
	)
	snap, err := loadSnapshotWithoutProviderKeys(config, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	appendRecords(t, snap.LedgerPath(), recs...)

	out, stderr, err := run(t, "spend", "--config", config, "--by", "key", "--format", "csv")
	if err != nil {
		t.Fatalf("spend without the providers' keys: %v\n%s", err, stderr)
	}
	want := "key,requests,input_tokens,cached_input_tokens,cache_creation_tokens,output_tokens,reasoning_tokens,cost_usd,estimated,unpriced\n" +
		"key_c,2,40,12,13,21,5,0.000138,0,0\n" +
		"key_e,3,21,0,0,0,0,0.000001,0,0\n"
	if out != want {
		t.Errorf("spend --by key:\n%s\nwant:\n%s", out, want)
	}
	out, _, err = run(t, "spend", "--config", config, "--by", "key", "--key", "key_e", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	wantJSON := `{"group":"key_e","requests":3,"input_tokens":21,"cached_input_tokens":0,"cache_creation_tokens":0,` +
		`"output_tokens":0,"reasoning_tokens":0,"cache_creation_1h_tokens":0,"audio_input_tokens":0,"audio_output_tokens":0,` +
		`"cost_micro_usd":1,"cost_pico_usd":420000,"cost_usd":"0.000001","estimated":0,"unpriced":0}` + "\n"
	if out != wantJSON {
		t.Errorf("spend --format json:\n%s\nwant:\n%s", out, wantJSON)
	}
	out, _, err = run(t, "spend", "--config", config, "--records", "--key", "key_c", "--format", "csv")
	if err != nil {
		t.Fatal(err)
	}
	wantRecords := "started_at,request_id,client_request_id,key_id,team,model,provider,status,outcome,error_type,input,cached,cache_creation,output,reasoning,cost_usd,estimated\n" +
		"2025-03-01T12:02:00Z,claude-2,,key_c,,claude,,529,upstream_error,overloaded_error,0,0,0,0,0,0.000000,false\n" +
		"2025-03-01T12:01:00Z,claude-1,,key_c,,claude,,200,ok,,40,12,13,21,5,0.000138,false\n"
	if out != wantRecords {
		t.Errorf("spend --records:\n%s\nwant:\n%s", out, wantRecords)
	}
}
