package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/tokens"
)

// Backend is a ledger under test: what every backend is.
type Backend interface {
	ledger.Ledger
	ledger.Reader
	ledger.Aggregates
}

// Run runs the contract suite, one subtest per property. open must return
// a new, empty ledger, isolated from every other it returned, ready for
// Append (a backend with a committer has it running); open releases it
// when the subtest ends (t.Cleanup).
func Run(t *testing.T, open func(t *testing.T) Backend) {
	// lr adapts a test of the records alone.
	lr := func(fn func(t *testing.T, l ledger.Ledger, r ledger.Reader)) func(*testing.T, Backend) {
		return func(t *testing.T, b Backend) { fn(t, b, b) }
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, b Backend)
	}{
		{"RoundTrip", lr(testRoundTrip)},
		{"MinimalRecord", lr(testMinimalRecord)},
		{"DuplicateRequestID", lr(testDuplicateRequestID)},
		{"ConcurrentDuplicates", lr(testConcurrentDuplicates)},
		{"SharedClientRequestID", testSharedClientRequestID},
		{"InvalidRecord", lr(testInvalidRecord)},
		{"Empty", testEmpty},
		{"Totals", lr(testTotals)},
		{"ExactCosts", testExactCosts},
		{"Filters", lr(testFilters)},
		{"FiltersAcrossDays", lr(testFiltersAcrossDays)},
		{"InvalidQueries", lr(testInvalidQueries)},
		{"ConcurrentAppends", lr(testConcurrentAppends)},
		{"CanceledContext", testCanceledContext},
		{"Aggregates", testAggregates},
		{"AggregatesMatchRecords", testAggregatesMatchRecords},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, open(t))
		})
	}
}

// appendTimeout bounds every Append of the suite, so that a backend whose
// Append never returns fails instead of hanging the test binary.
const appendTimeout = 20 * time.Second

func appendAll(t *testing.T, l ledger.Ledger, recs ...ledger.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), appendTimeout)
	defer cancel()
	for _, r := range recs {
		if err := l.Append(ctx, r); err != nil {
			t.Fatalf("Append(%s): %v", r.RequestID, err)
		}
	}
}

func records(t *testing.T, r ledger.Reader, f ledger.Filter) []ledger.Record {
	t.Helper()
	recs, err := r.Records(t.Context(), f)
	if err != nil {
		t.Fatalf("Records(%+v): %v", f, err)
	}
	return recs
}

func totals(t *testing.T, r ledger.Reader, f ledger.Filter, by ledger.GroupBy) []ledger.Total {
	t.Helper()
	ts, err := r.Totals(t.Context(), f, by)
	if err != nil {
		t.Fatalf("Totals(%+v, %s): %v", f, by, err)
	}
	return ts
}

// fullRecord has every field set, each to a different value, times in a
// zone other than UTC and to the nanosecond.
func fullRecord(id string, startedAt time.Time) ledger.Record {
	return ledger.Record{
		RequestID:       id,
		ClientRequestID: "client-" + id,
		KeyID:           "key_" + id,
		Team:            "team-" + id,
		Org:             "org-" + id,
		Endpoint:        "chat_completions",
		Model:           "gpt-4o",
		Provider:        "openai",
		UpstreamModel:   "gpt-4o-2024-08-06",
		Tokens: tokens.Counts{
			tokens.Input:       1234,
			tokens.CachedInput: 234,
			tokens.CacheWrite:  34,
			tokens.Output:      567,
			tokens.Reasoning:   67,
			// The other token kinds, each a part of what holds it.
			tokens.CacheWrite1h: 12,
			tokens.AudioInput:   45,
			tokens.AudioOutput:  56,
		},
		// 8,901.234567 µ$: a cost to the pico-dollar.
		CostPico:   8_901_234_567,
		Priced:     true,
		Status:     200,
		Outcome:    "ok",
		ErrorType:  "overloaded_error",
		Estimated:  true,
		Stream:     true,
		StartedAt:  startedAt,
		FinishedAt: startedAt.Add(1234567891 * time.Nanosecond),
		TTFT:       345678912 * time.Nanosecond,
	}
}

var zone = time.FixedZone("UTC+5:30", 5*3600+1800)

func testRoundTrip(t *testing.T, l ledger.Ledger, rd ledger.Reader) {
	base := time.Date(2025, 3, 1, 12, 0, 0, 123456789, zone)
	a := fullRecord("req_a", base)
	b := fullRecord("req_b", base.Add(time.Nanosecond))
	b.Endpoint, b.Provider, b.UpstreamModel = "messages", "anthropic", "claude-sonnet-4-5"
	b.Priced, b.Estimated, b.Stream = false, false, false
	b.CostPico, b.Status, b.Outcome = 0, 502, "upstream_error"
	b.ClientRequestID, b.ErrorType = "", "" // both optional
	// Values a float64 would round: stored as integers, they come back
	// exact.
	c := fullRecord("req_c", base.Add(-time.Hour))
	c.Tokens[tokens.Input], c.CostPico = 1<<53+1, 1<<62+1
	c.Status, c.Outcome, c.TTFT = 0, "cancelled", 0
	// Unicode and SQL-looking text round trip as they are.
	d := fullRecord("req_d", base.Add(time.Hour))
	d.Team, d.Model = "équipe 'δ'; --", "モデル/x"
	appendAll(t, l, a, b, c, d)

	got := records(t, rd, ledger.Filter{})
	want := []ledger.Record{d, b, a, c}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Records (-want +got):\n%s", diff)
	}
	for _, r := range got {
		if r.StartedAt.Location() != time.UTC || r.FinishedAt.Location() != time.UTC {
			t.Errorf("%s: times in %v and %v; want UTC", r.RequestID, r.StartedAt.Location(), r.FinishedAt.Location())
		}
	}
}

func testMinimalRecord(t *testing.T, l ledger.Ledger, rd ledger.Reader) {
	want := ledger.Record{RequestID: "req_min", StartedAt: time.Date(2025, 3, 1, 0, 0, 0, 1, time.UTC)}
	appendAll(t, l, want)
	if diff := cmp.Diff([]ledger.Record{want}, records(t, rd, ledger.Filter{})); diff != "" {
		t.Errorf("Records (-want +got):\n%s", diff)
	}
	wantTotal := []ledger.Total{{Group: "", Requests: 1, Unpriced: 1}}
	if diff := cmp.Diff(wantTotal, totals(t, rd, ledger.Filter{}, ledger.ByNone)); diff != "" {
		t.Errorf("Totals by none (-want +got):\n%s", diff)
	}
}

func testDuplicateRequestID(t *testing.T, l ledger.Ledger, rd ledger.Reader) {
	first := fullRecord("req_dup", time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC))
	second := fullRecord("req_dup", first.StartedAt.Add(time.Minute))
	second.CostPico, second.KeyID = 1, "key_other"
	appendAll(t, l, first, second, first)
	if diff := cmp.Diff([]ledger.Record{first}, records(t, rd, ledger.Filter{})); diff != "" {
		t.Errorf("Records after appending req_dup three times (-want +got):\n%s", diff)
	}
	ts := totals(t, rd, ledger.Filter{}, ledger.ByNone)
	if len(ts) != 1 || ts[0].Requests != 1 || ts[0].Cost != money.FromPico(first.CostPico) {
		t.Errorf("Totals by none = %+v; want 1 request costing %d p$", ts, first.CostPico)
	}
}

// testConcurrentDuplicates appends one RequestID from many goroutines at
// once, each with its own cost: exactly one of them is kept.
func testConcurrentDuplicates(t *testing.T, l ledger.Ledger, rd ledger.Reader) {
	const n = 16
	ctx, cancel := context.WithTimeout(t.Context(), appendTimeout)
	defer cancel()
	start := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := fullRecord("req_race", start)
			r.CostPico = int64(1000 + i)
			errs[i] = l.Append(ctx, r)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	got := records(t, rd, ledger.Filter{})
	if len(got) != 1 {
		t.Fatalf("%d records; want 1", len(got))
	}
	if c := got[0].CostPico; c < 1000 || c >= 1000+n {
		t.Errorf("kept CostPico %d; want one of the appended", c)
	}
}

// testSharedClientRequestID appends records that share a
// ClientRequestID — the client's x-request-id, which a client may reuse
// or leave empty — each with its own RequestID: every one is kept and
// counted, in the records, the totals and the aggregates. Identity is the
// RequestID alone.
func testSharedClientRequestID(t *testing.T, b Backend) {
	l, rd := ledger.Ledger(b), ledger.Reader(b)
	const n = 50
	start := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	var recs []ledger.Record
	for i := range n {
		r := fullRecord(fmt.Sprintf("req_%03d", i), start.Add(time.Duration(i)*time.Second))
		r.ClientRequestID = "reused"
		if i%5 == 0 {
			r.ClientRequestID = "" // none sent: still a record
		}
		r.CostPico = int64(100 + i)
		recs = append(recs, r)
	}
	appendAll(t, l, recs...)
	got := records(t, rd, ledger.Filter{})
	if len(got) != n {
		t.Fatalf("%d records; want %d (one per RequestID, whatever the client request id)", len(got), n)
	}
	var cost int64
	for _, r := range recs {
		cost += r.CostPico
	}
	ts := totals(t, rd, ledger.Filter{}, ledger.ByNone)
	if len(ts) != 1 || ts[0].Requests != n || ts[0].Cost != money.FromPico(cost) {
		t.Errorf("Totals by none = %+v; want %d requests costing %d p$", ts, n, cost)
	}
	life, err := b.Lifetime(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var counted int64
	for _, a := range life {
		if a.Scope == ledger.ScopeTeam {
			counted += a.Requests
		}
	}
	if counted != n {
		t.Errorf("the teams' lifetime aggregates count %d requests; want %d", counted, n)
	}
	// The first record of a RequestID still wins, whatever its client
	// request id: a retried Append is the same record.
	again := recs[1]
	again.ClientRequestID, again.CostPico = "other", 1
	appendAll(t, l, again)
	if got := records(t, rd, ledger.Filter{}); len(got) != n {
		t.Errorf("%d records after appending a RequestID again; want %d", len(got), n)
	}
}

func testInvalidRecord(t *testing.T, l ledger.Ledger, rd ledger.Reader) {
	start := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	with := func(f func(*ledger.Record)) ledger.Record {
		r := fullRecord("req_bad", start)
		f(&r)
		return r
	}
	for name, r := range map[string]ledger.Record{
		"empty request id":       with(func(r *ledger.Record) { r.RequestID = "" }),
		"zero started at":        with(func(r *ledger.Record) { r.StartedAt = time.Time{} }),
		"negative input tokens":  with(func(r *ledger.Record) { r.Tokens[tokens.Input] = -1 }),
		"negative cached tokens": with(func(r *ledger.Record) { r.Tokens[tokens.CachedInput] = -1 }),
		"negative cache writes":  with(func(r *ledger.Record) { r.Tokens[tokens.CacheWrite] = -1 }),
		"negative output tokens": with(func(r *ledger.Record) { r.Tokens[tokens.Output] = -1 }),
		"negative reasoning":     with(func(r *ledger.Record) { r.Tokens[tokens.Reasoning] = -1 }),
		"negative cost":          with(func(r *ledger.Record) { r.CostPico = -1 }),
		"negative 1h writes":     with(func(r *ledger.Record) { r.Tokens[tokens.CacheWrite1h] = -1 }),
		"negative audio input":   with(func(r *ledger.Record) { r.Tokens[tokens.AudioInput] = -1 }),
		"negative audio output":  with(func(r *ledger.Record) { r.Tokens[tokens.AudioOutput] = -1 }),
		"negative ttft":          with(func(r *ledger.Record) { r.TTFT = -time.Nanosecond }),
	} {
		if err := l.Append(testctx.Deadline(t), r); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("%s: Append = %v; want ErrInvalid", name, err)
		}
	}
	// A refused record is not written, and does not stop the next one.
	good := fullRecord("req_good", start)
	appendAll(t, l, good)
	if diff := cmp.Diff([]ledger.Record{good}, records(t, rd, ledger.Filter{})); diff != "" {
		t.Errorf("Records (-want +got):\n%s", diff)
	}
}

func testEmpty(t *testing.T, b Backend) {
	if got := records(t, b, ledger.Filter{}); len(got) != 0 {
		t.Errorf("Records of an empty ledger = %+v; want none", got)
	}
	for _, by := range ledger.GroupBys() {
		if got := totals(t, b, ledger.Filter{}, by); len(got) != 0 {
			t.Errorf("Totals by %s of an empty ledger = %+v; want none", by, got)
		}
	}
	if got := buckets(t, b, time.Time{}); len(got) != 0 {
		t.Errorf("Buckets of an empty ledger = %+v; want none", got)
	}
	if got := lifetime(t, b); len(got) != 0 {
		t.Errorf("Lifetime of an empty ledger = %+v; want none", got)
	}
}

// dataset is the ledger that Totals and Filters query. Newest first it is
// f, d, c, b, e, a. Costs tie on purpose: model gpt-4o and claude-sonnet
// at 3500, days 2025-03-02 and 2025-03-03 at 500.
func dataset() map[string]ledger.Record {
	rec := func(id, key, team, org, model string, at time.Time, in, cachedIn, cacheWrite, out, reasoning, cost int64, priced, estimated bool) ledger.Record {
		return ledger.Record{
			RequestID: id, KeyID: key, Team: team, Org: org, Endpoint: "chat_completions",
			Model: model, Provider: "p", UpstreamModel: model,
			Tokens:   tokens.Counts{tokens.Input: in, tokens.CachedInput: cachedIn, tokens.CacheWrite: cacheWrite, tokens.Output: out, tokens.Reasoning: reasoning},
			CostPico: cost, Priced: priced, Status: 200, Outcome: "ok", Estimated: estimated,
			StartedAt: at, FinishedAt: at.Add(time.Second),
		}
	}
	utcAt := func(s string) time.Time {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			panic(err) // programmer error: a bad literal below
		}
		return t
	}
	recs := []ledger.Record{
		rec("a", "key_a1", "search", "acme", "gpt-4o", utcAt("2025-03-01T10:00:00Z"), 100, 10, 0, 50, 0, 1000, true, false),
		rec("b", "key_a1", "search", "acme", "claude-sonnet", utcAt("2025-03-01T23:59:59.999999999Z"), 200, 0, 20, 80, 5, 3000, true, true),
		rec("c", "key_a2", "search", "acme", "gpt-4o", utcAt("2025-03-02T00:00:00Z"), 300, 30, 0, 0, 0, 500, true, false),
		rec("d", "key_b1", "ads", "acme", "llama-local", utcAt("2025-03-02T12:00:00Z"), 400, 0, 0, 100, 0, 0, false, true),
		// 2025-03-02 in its own zone, 2025-03-01 in UTC: ByDay is UTC.
		rec("e", "key_g1", "ml", "globex", "gpt-4o", utcAt("2025-03-02T01:00:00+05:00"), 50, 0, 0, 25, 10, 2000, true, false),
		rec("f", "key_g1", "ml", "globex", "claude-sonnet", utcAt("2025-03-03T08:00:00Z"), 10, 0, 0, 10, 0, 500, true, false),
	}
	m := map[string]ledger.Record{}
	for _, r := range recs {
		m[r.RequestID] = r
	}
	return m
}

// loadDataset appends the dataset in an order unrelated to its times.
func loadDataset(t *testing.T, l ledger.Ledger) map[string]ledger.Record {
	t.Helper()
	ds := dataset()
	for _, id := range []string{"c", "a", "f", "e", "b", "d"} {
		appendAll(t, l, ds[id])
	}
	return ds
}

// sumOf is the Total of the named records.
func sumOf(ds map[string]ledger.Record, group string, ids ...string) ledger.Total {
	t := ledger.Total{Group: group}
	for _, id := range ids {
		add(&t, ds[id])
	}
	return t
}

func testTotals(t *testing.T, l ledger.Ledger, rd ledger.Reader) {
	ds := loadDataset(t, l)

	// One Total written out by hand, so that sumOf is checked too.
	keyA1 := ledger.Total{
		Group: "key_a1", Requests: 2, Tokens: tokens.Counts{tokens.Input: 300, tokens.CachedInput: 10, tokens.CacheWrite: 20, tokens.Output: 130, tokens.Reasoning: 5}, Cost: money.FromPico(4000), Estimated: 1, Unpriced: 0,
	}
	if diff := cmp.Diff(keyA1, sumOf(ds, "key_a1", "a", "b")); diff != "" {
		t.Fatalf("the suite's own sumOf is wrong (-want +got):\n%s", diff)
	}

	tests := []struct {
		by   ledger.GroupBy
		f    ledger.Filter
		want []ledger.Total
	}{
		{ledger.ByKey, ledger.Filter{}, []ledger.Total{
			keyA1,
			sumOf(ds, "key_g1", "e", "f"),
			sumOf(ds, "key_a2", "c"),
			sumOf(ds, "key_b1", "d"),
		}},
		{ledger.ByTeam, ledger.Filter{}, []ledger.Total{
			sumOf(ds, "search", "a", "b", "c"),
			sumOf(ds, "ml", "e", "f"),
			sumOf(ds, "ads", "d"),
		}},
		{ledger.ByOrg, ledger.Filter{}, []ledger.Total{
			sumOf(ds, "acme", "a", "b", "c", "d"),
			sumOf(ds, "globex", "e", "f"),
		}},
		{ledger.ByModel, ledger.Filter{}, []ledger.Total{
			sumOf(ds, "claude-sonnet", "b", "f"), // ties with gpt-4o at 3500
			sumOf(ds, "gpt-4o", "a", "c", "e"),
			sumOf(ds, "llama-local", "d"),
		}},
		{ledger.ByDay, ledger.Filter{}, []ledger.Total{
			sumOf(ds, "2025-03-01", "a", "b", "e"),
			sumOf(ds, "2025-03-02", "c", "d"), // ties with 2025-03-03 at 500
			sumOf(ds, "2025-03-03", "f"),
		}},
		{ledger.ByBucket, ledger.Filter{}, []ledger.Total{
			sumOf(ds, "2025-03-01T23:45:00Z", "b"),
			sumOf(ds, "2025-03-01T20:00:00Z", "e"),
			sumOf(ds, "2025-03-01T10:00:00Z", "a"),
			sumOf(ds, "2025-03-02T00:00:00Z", "c"), // ties with f at 500
			sumOf(ds, "2025-03-03T08:00:00Z", "f"),
			sumOf(ds, "2025-03-02T12:00:00Z", "d"),
		}},
		{ledger.ByNone, ledger.Filter{}, []ledger.Total{
			sumOf(ds, "", "a", "b", "c", "d", "e", "f"),
		}},
		{ledger.ByKey, ledger.Filter{Limit: 2}, []ledger.Total{
			keyA1,
			sumOf(ds, "key_g1", "e", "f"),
		}},
		{ledger.ByTeam, ledger.Filter{Org: "acme"}, []ledger.Total{
			sumOf(ds, "search", "a", "b", "c"),
			sumOf(ds, "ads", "d"),
		}},
		{ledger.ByDay, ledger.Filter{Model: "gpt-4o", Since: ds["e"].StartedAt}, []ledger.Total{
			sumOf(ds, "2025-03-01", "e"),
			sumOf(ds, "2025-03-02", "c"),
		}},
		{ledger.ByModel, ledger.Filter{KeyID: "nobody"}, nil},
	}
	for _, tt := range tests {
		got := totals(t, rd, tt.f, tt.by)
		if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("Totals(%+v, %s) (-want +got):\n%s", tt.f, tt.by, diff)
		}
	}
}

// testExactCosts: costs are pico-dollars and their sums are exact, in the
// Totals, their order and the aggregates: sub-micro-dollar remainders
// carry, totals that differ by one pico-dollar sort apart, and a sum
// beyond an int64 of pico-dollars ($9.2M) is neither refused nor wrapped.
func testExactCosts(t *testing.T, b Backend) {
	const maxPico = math.MaxInt64
	start := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	var recs []ledger.Record
	rec := func(key string, cost int64) {
		i := len(recs)
		recs = append(recs, ledger.Record{
			RequestID: fmt.Sprintf("req_%02d", i), KeyID: key, Team: "t", Org: "o", Model: "m",
			CostPico: cost, Priced: true, Status: 200, Outcome: "ok", StartedAt: start.Add(time.Duration(i) * time.Second),
		})
	}
	for range 3 {
		rec("a", 999_999) // 2.999997 µ$ together
	}
	rec("b", 2_999_998) // one pico-dollar more than a
	rec("c", 3_000_000)
	rec("d", maxPico)
	rec("d", maxPico) // together beyond an int64 of pico-dollars
	rec("e", 1)
	rec("f", 500_000)
	rec("f", 500_000) // exactly 1 µ$
	appendAll(t, b, recs...)

	d := money.FromPico(maxPico).Add(money.FromPico(maxPico))
	if got := d.PicoString(); got != "18446744073709551614" {
		t.Fatalf("the suite's own sum of d is %s", got)
	}
	want := []ledger.Total{
		{Group: "d", Requests: 2, Cost: d},
		{Group: "c", Requests: 1, Cost: money.FromPico(3_000_000)},
		{Group: "b", Requests: 1, Cost: money.FromPico(2_999_998)},
		{Group: "a", Requests: 3, Cost: money.FromPico(2_999_997)},
		{Group: "f", Requests: 2, Cost: money.FromMicros(1)},
		{Group: "e", Requests: 1, Cost: money.FromPico(1)},
	}
	if diff := cmp.Diff(want, totals(t, b, ledger.Filter{}, ledger.ByKey)); diff != "" {
		t.Errorf("Totals by key (-want +got):\n%s", diff)
	}
	all := d.AddPico(3_000_000 + 2_999_998 + 2_999_997 + 1_000_000 + 1)
	if diff := cmp.Diff([]ledger.Total{{Group: "", Requests: 10, Cost: all}}, totals(t, b, ledger.Filter{}, ledger.ByNone)); diff != "" {
		t.Errorf("Totals by none (-want +got):\n%s", diff)
	}
	wantLife := []ledger.Aggregate{
		{Scope: ledger.ScopeKey, ID: "a", Model: "m", Cost: money.FromPico(2_999_997), Requests: 3},
		{Scope: ledger.ScopeKey, ID: "b", Model: "m", Cost: money.FromPico(2_999_998), Requests: 1},
		{Scope: ledger.ScopeKey, ID: "c", Model: "m", Cost: money.FromPico(3_000_000), Requests: 1},
		{Scope: ledger.ScopeKey, ID: "d", Model: "m", Cost: d, Requests: 2},
		{Scope: ledger.ScopeKey, ID: "e", Model: "m", Cost: money.FromPico(1), Requests: 1},
		{Scope: ledger.ScopeKey, ID: "f", Model: "m", Cost: money.FromMicros(1), Requests: 2},
		{Scope: ledger.ScopeOrg, ID: "o", Model: "m", Cost: all, Requests: 10},
		{Scope: ledger.ScopeTeam, ID: "t", Model: "m", Cost: all, Requests: 10},
	}
	if diff := cmp.Diff(wantLife, lifetime(t, b)); diff != "" {
		t.Errorf("Lifetime (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(ExpectedBuckets(recs, time.Time{}), buckets(t, b, time.Time{})); diff != "" {
		t.Errorf("Buckets (-want +got):\n%s", diff)
	}
}

func testFilters(t *testing.T, l ledger.Ledger, rd ledger.Reader) {
	ds := loadDataset(t, l)
	at := func(s string) time.Time {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			panic(err)
		}
		return t
	}
	tests := []struct {
		name string
		f    ledger.Filter
		want []string // newest first
	}{
		{"all", ledger.Filter{}, []string{"f", "d", "c", "b", "e", "a"}},
		{"since is inclusive", ledger.Filter{Since: at("2025-03-02T00:00:00Z")}, []string{"f", "d", "c"}},
		{"until is exclusive", ledger.Filter{Until: at("2025-03-02T00:00:00Z")}, []string{"b", "e", "a"}},
		{"since in another zone", ledger.Filter{Since: at("2025-03-02T05:00:00+05:00")}, []string{"f", "d", "c"}},
		{"range", ledger.Filter{Since: at("2025-03-01T20:00:00Z"), Until: at("2025-03-02T12:00:00Z")}, []string{"c", "b", "e"}},
		{"since to the nanosecond", ledger.Filter{Since: at("2025-03-01T23:59:59.999999999Z")}, []string{"f", "d", "c", "b"}},
		{"until to the nanosecond", ledger.Filter{Until: at("2025-03-01T23:59:59.999999999Z")}, []string{"e", "a"}},
		{"empty range", ledger.Filter{Since: at("2025-03-02T00:00:00Z"), Until: at("2025-03-02T00:00:00Z")}, nil},
		{"far past and future", ledger.Filter{Since: at("0001-01-01T00:00:01Z"), Until: at("9999-01-01T00:00:00Z")}, []string{"f", "d", "c", "b", "e", "a"}},
		{"key", ledger.Filter{KeyID: "key_a1"}, []string{"b", "a"}},
		{"team", ledger.Filter{Team: "search"}, []string{"c", "b", "a"}},
		{"org", ledger.Filter{Org: "globex"}, []string{"f", "e"}},
		{"model", ledger.Filter{Model: "gpt-4o"}, []string{"c", "e", "a"}},
		{"team and model", ledger.Filter{Team: "search", Model: "gpt-4o"}, []string{"c", "a"}},
		{"org and range", ledger.Filter{Org: "acme", Since: at("2025-03-01T12:00:00Z"), Until: at("2025-03-02T06:00:00Z")}, []string{"c", "b"}},
		{"unknown key", ledger.Filter{KeyID: "key_none"}, nil},
		{"limit", ledger.Filter{Limit: 2}, []string{"f", "d"}},
		{"limit with filter", ledger.Filter{Org: "acme", Limit: 1}, []string{"d"}},
		{"limit above count", ledger.Filter{Team: "ml", Limit: 10}, []string{"f", "e"}},
	}
	for _, tt := range tests {
		var want []ledger.Record
		for _, id := range tt.want {
			want = append(want, ds[id])
		}
		if diff := cmp.Diff(want, records(t, rd, tt.f), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: Records(%+v) (-want +got):\n%s", tt.name, tt.f, diff)
		}
		if tt.f.Limit != 0 {
			continue // Totals' Limit counts groups, not records
		}
		// Totals select the same records.
		var wantTotals []ledger.Total
		if len(tt.want) > 0 {
			wantTotals = []ledger.Total{sumOf(ds, "", tt.want...)}
		}
		if diff := cmp.Diff(wantTotals, totals(t, rd, tt.f, ledger.ByNone), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: Totals(%+v, none) (-want +got):\n%s", tt.name, tt.f, diff)
		}
	}
}

// testFiltersAcrossDays: records at the ends of what a ledger stores
// (Unix nanoseconds from math.MinInt64 to math.MaxInt64), on both sides
// of the epoch and of day boundaries, each filtered by bounds at those
// same instants, a nanosecond off them and beyond what is storable, alone
// and with each column filter: Records (whole and limited) and Totals
// select what the model (Memory) selects. A backend that reads by day,
// or by any other partition of time, must find the records at either end.
func testFiltersAcrossDays(t *testing.T, l ledger.Ledger, rd ledger.Reader) {
	const day = int64(24 * time.Hour)
	ns := func(n int64) time.Time { return time.Unix(0, n).In(zone) }
	d2025 := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	instants := []int64{
		math.MinInt64, math.MinInt64 + 1, -day - 1, -day, -day + 1, -1, 1,
		day - 1, day, day + 1, d2025 - 1, d2025, d2025 + 1, math.MaxInt64 - 1, math.MaxInt64,
	}
	var m Memory
	for i, n := range instants {
		r := fullRecord(fmt.Sprintf("r%02d", i), ns(n))
		r.FinishedAt = r.StartedAt // the span's ends have no room for more
		r.KeyID, r.Team = fmt.Sprintf("key_%d", i%2), fmt.Sprintf("team-%d", i%3)
		r.Org, r.Model = fmt.Sprintf("org-%d", i%2), fmt.Sprintf("model-%d", i%3)
		appendAll(t, l, r)
		if err := m.Append(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	bounds := []time.Time{
		{}, time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC),
		ns(math.MinInt64), ns(math.MinInt64 + 1), ns(math.MinInt64 + 2), ns(-day), ns(-day + 1), ns(-1), ns(1), ns(2),
		ns(day), ns(day + 1), ns(d2025), ns(d2025 + 1), ns(math.MaxInt64 - 1), ns(math.MaxInt64),
	}
	columns := []ledger.Filter{
		{}, {KeyID: "key_1"}, {Team: "team-0"}, {Org: "org-0"}, {Model: "model-2"},
		{KeyID: "key_0", Model: "model-0"}, {KeyID: "key_none"},
	}
	for _, since := range bounds {
		for _, until := range bounds {
			if !since.IsZero() && !until.IsZero() && until.Before(since) {
				continue
			}
			for _, c := range columns {
				f := c
				f.Since, f.Until = since, until
				for _, limit := range []int{0, 1} {
					f.Limit = limit
					want, err := m.Records(t.Context(), f)
					if err != nil {
						t.Fatal(err)
					}
					if diff := cmp.Diff(want, records(t, rd, f), cmpopts.EquateEmpty()); diff != "" {
						t.Fatalf("Records(%+v) (-want +got):\n%s", f, diff)
					}
				}
				f.Limit = 0
				want, err := m.Totals(t.Context(), f, ledger.ByKey)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, totals(t, rd, f, ledger.ByKey), cmpopts.EquateEmpty()); diff != "" {
					t.Fatalf("Totals(%+v, key) (-want +got):\n%s", f, diff)
				}
			}
		}
	}
}

func testInvalidQueries(t *testing.T, _ ledger.Ledger, rd ledger.Reader) {
	ctx := t.Context()
	now := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	for name, f := range map[string]ledger.Filter{
		"negative limit":     {Limit: -1},
		"until before since": {Since: now, Until: now.Add(-time.Nanosecond)},
	} {
		if _, err := rd.Records(ctx, f); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("%s: Records = %v; want ErrInvalid", name, err)
		}
		if _, err := rd.Totals(ctx, f, ledger.ByKey); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("%s: Totals = %v; want ErrInvalid", name, err)
		}
	}
	for _, by := range []ledger.GroupBy{"", "week", "KEY", "key_id"} {
		if _, err := rd.Totals(ctx, ledger.Filter{}, by); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("Totals by %q = %v; want ErrInvalid", by, err)
		}
	}
}

// testConcurrentAppends appends from many goroutines at once: every
// Append that returned nil is there, counted once, and the sums are exact.
func testConcurrentAppends(t *testing.T, l ledger.Ledger, rd ledger.Reader) {
	const goroutines, each = 32, 50
	ctx, cancel := context.WithTimeout(t.Context(), appendTimeout)
	defer cancel()
	start := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	all := make([][]ledger.Record, goroutines)
	errs := make([]error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		for i := range each {
			r := fullRecord(fmt.Sprintf("req_%02d_%03d", g, i), start.Add(time.Duration(g*each+i)*time.Millisecond))
			r.KeyID, r.Team = fmt.Sprintf("key_%02d", g), fmt.Sprintf("team_%d", g%4)
			r.Tokens[tokens.Input], r.Tokens[tokens.Output], r.CostPico = int64(i), int64(g), int64(g*1000+i+1)
			r.Estimated, r.Priced = i%3 == 0, i%5 != 0
			all[g] = append(all[g], r)
		}
		wg.Go(func() {
			for _, r := range all[g] {
				if err := l.Append(ctx, r); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}

	got := records(t, rd, ledger.Filter{})
	if len(got) != goroutines*each {
		t.Fatalf("%d records; want %d", len(got), goroutines*each)
	}
	seen := map[string]bool{}
	for _, r := range got {
		seen[r.RequestID] = true
	}
	byKey := map[string]*ledger.Total{}
	var none ledger.Total
	for _, rs := range all {
		for _, r := range rs {
			if !seen[r.RequestID] {
				t.Errorf("%s missing", r.RequestID)
			}
			if byKey[r.KeyID] == nil {
				byKey[r.KeyID] = &ledger.Total{Group: r.KeyID}
			}
			add(byKey[r.KeyID], r)
			add(&none, r)
		}
	}
	if diff := cmp.Diff([]ledger.Total{none}, totals(t, rd, ledger.Filter{}, ledger.ByNone)); diff != "" {
		t.Errorf("Totals by none (-want +got):\n%s", diff)
	}
	var wantByKey []ledger.Total
	for _, tot := range byKey {
		wantByKey = append(wantByKey, *tot)
	}
	sortTotals(wantByKey)
	if diff := cmp.Diff(wantByKey, totals(t, rd, ledger.Filter{}, ledger.ByKey)); diff != "" {
		t.Errorf("Totals by key (-want +got):\n%s", diff)
	}
}

func testCanceledContext(t *testing.T, b Backend) {
	l, rd := ledger.Ledger(b), ledger.Reader(b)
	start := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancel2 := context.WithDeadline(t.Context(), start)
	defer cancel2()
	for _, c := range []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"canceled", canceled, context.Canceled},
		{"expired", expired, context.DeadlineExceeded},
	} {
		if err := l.Append(c.ctx, fullRecord("req_"+c.name, start)); !errors.Is(err, c.want) {
			t.Errorf("Append with a %s context = %v; want %v", c.name, err, c.want)
		}
		if _, err := rd.Records(c.ctx, ledger.Filter{}); !errors.Is(err, c.want) {
			t.Errorf("Records with a %s context = %v; want %v", c.name, err, c.want)
		}
		if _, err := rd.Totals(c.ctx, ledger.Filter{}, ledger.ByKey); !errors.Is(err, c.want) {
			t.Errorf("Totals with a %s context = %v; want %v", c.name, err, c.want)
		}
		if _, err := b.Buckets(c.ctx, time.Time{}); !errors.Is(err, c.want) {
			t.Errorf("Buckets with a %s context = %v; want %v", c.name, err, c.want)
		}
		if _, err := b.Lifetime(c.ctx); !errors.Is(err, c.want) {
			t.Errorf("Lifetime with a %s context = %v; want %v", c.name, err, c.want)
		}
	}
	// An Append whose context was done when it was called wrote nothing,
	// and the ledger still works.
	ok := fullRecord("req_ok", start)
	appendAll(t, l, ok)
	if diff := cmp.Diff([]ledger.Record{ok}, records(t, rd, ledger.Filter{})); diff != "" {
		t.Errorf("Records (-want +got):\n%s", diff)
	}
}
