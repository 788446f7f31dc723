package sqlite

import (
	"database/sql"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/sqlitedb"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/tokens"
)

// insertV1 writes r as the releases before schema version 3 did: the
// first schema's 22 columns, request_id holding the client's x-request-id,
// and the cost in whole micro-dollars (r.CostPico must be a multiple of
// 10⁶).
func insertV1(t *testing.T, db *sql.DB, r ledger.Record) {
	t.Helper()
	const v1 = `INSERT INTO spend (request_id, key_id, team, org, endpoint, model, provider, upstream_model,
	input_tokens, cached_input_tokens, cache_creation_tokens, output_tokens, reasoning_tokens,
	cost_micros, priced, status, outcome, estimated, stream, started_at, finished_at, ttft)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	if _, err := db.ExecContext(t.Context(), v1, v1Args(t, r)...); err != nil {
		t.Fatal(err)
	}
}

// insertV3 writes r as schema version 3 did: insertV1's columns, then
// client_request_id and error_type.
func insertV3(t *testing.T, db *sql.DB, r ledger.Record) {
	t.Helper()
	const v3 = `INSERT INTO spend (request_id, key_id, team, org, endpoint, model, provider, upstream_model,
	input_tokens, cached_input_tokens, cache_creation_tokens, output_tokens, reasoning_tokens,
	cost_micros, priced, status, outcome, estimated, stream, started_at, finished_at, ttft,
	client_request_id, error_type)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	if _, err := db.ExecContext(t.Context(), v3, append(v1Args(t, r), r.ClientRequestID, r.ErrorType)...); err != nil {
		t.Fatal(err)
	}
}

// v1Args are the first schema's 22 values of r, its cost in micro-dollars.
func v1Args(t *testing.T, r ledger.Record) []any {
	t.Helper()
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	if r.CostPico%money.PicoPerMicro != 0 {
		t.Fatalf("%s: cost %d p$ is not whole micro-dollars, which the old schemas held", r.RequestID, r.CostPico)
	}
	return []any{
		r.RequestID, r.KeyID, r.Team, r.Org, r.Endpoint, r.Model, r.Provider, r.UpstreamModel,
		r.Tokens[tokens.Input], r.Tokens[tokens.CachedInput], r.Tokens[tokens.CacheWrite], r.Tokens[tokens.Output], r.Tokens[tokens.Reasoning],
		r.CostPico / money.PicoPerMicro, r.Priced, int64(r.Status), r.Outcome, r.Estimated, r.Stream,
		r.StartedAt.UnixNano(), r.FinishedAt.UnixNano(), int64(r.TTFT),
	}
}

// TestMigrationClientRequestID opens a ledger of schema version 2, whose
// request_id was the client's x-request-id: the upgrade in place keeps
// every row, with its id as both RequestID and ClientRequestID and no
// error type; new records then carry their own of each, and a client
// request id the old rows used does not make a new record a duplicate.
func TestMigrationClientRequestID(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.sqlite")
	old, err := sqlitedb.Open(t.Context(), path, pragmas, migrations[:2], "ledger", nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b := record("client-id-a"), record("client-id-b")
	b.StartedAt = b.StartedAt.Add(-1)
	b.Outcome, b.Status = "upstream_error", 529
	insertV1(t, old, a)
	insertV1(t, old, b)
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	l := openTest(t, path, Options{})
	start(t, l)
	// A new record whose client sent an id an old row holds as its
	// identity: a separate record.
	c := record("0190a4b2-0000-7000-8000-000000000001")
	c.ClientRequestID, c.ErrorType = "client-id-a", "overloaded_error"
	c.StartedAt = c.StartedAt.Add(1)
	if err := l.Append(testctx.Deadline(t), c); err != nil {
		t.Fatal(err)
	}
	got, err := l.Records(t.Context(), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	a.ClientRequestID, b.ClientRequestID = a.RequestID, b.RequestID
	if diff := cmp.Diff([]ledger.Record{c, a, b}, got); diff != "" {
		t.Errorf("Records after the migration (-want +got):\n%s", diff)
	}
	ts, err := l.Totals(t.Context(), ledger.Filter{}, ledger.ByNone)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || ts[0].Requests != 3 {
		t.Errorf("Totals = %+v; want 3 requests", ts)
	}
}

// TestMigrationPico opens a ledger of schema version 3, whose costs were
// whole micro-dollars, with real rows and their aggregates: the upgrade
// in place makes every record's cost its micro-dollars × 10⁶ pico-dollars
// (a cost too large for that saturating, rather than failing the
// migration), the new token counts 0, and keeps the aggregates, whose
// micro-dollars were exact; records appended afterwards are exact to the
// pico-dollar, and add to the same aggregate rows.
func TestMigrationPico(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.sqlite")
	old, err := sqlitedb.Open(t.Context(), path, pragmas, migrations[:3], "ledger", nil)
	if err != nil {
		t.Fatal(err)
	}
	var recs []ledger.Record
	for i, micros := range []int64{0, 1, 450, 2_500_000, 9_223_372_036_854} {
		r := record(fmt.Sprintf("req_v3_%d", i))
		r.ClientRequestID, r.ErrorType = fmt.Sprintf("client-%d", i), "overloaded_error"
		r.StartedAt = r.StartedAt.Add(time.Duration(i) * time.Second)
		r.CostPico = micros * money.PicoPerMicro // the largest that fits an int64 of pico-dollars
		insertV3(t, old, r)
		recs = append(recs, r)
	}
	// A cost of more than $9.2M in one record: its pico-dollars saturate.
	huge := ledger.Record{RequestID: "req_v3_huge", ClientRequestID: "client-huge", Model: "gpt-4o",
		Priced: true, Status: 200, Outcome: "ok", StartedAt: record("").StartedAt.Add(-time.Second)}
	if _, err := old.ExecContext(t.Context(), `INSERT INTO spend (request_id, key_id, team, org, endpoint, model, provider, upstream_model,
	input_tokens, cached_input_tokens, cache_creation_tokens, output_tokens, reasoning_tokens,
	cost_micros, priced, status, outcome, estimated, stream, started_at, finished_at, ttft, client_request_id, error_type)
	VALUES (?, '', '', '', '', 'gpt-4o', '', '', 0, 0, 0, 0, 0, 9223372036854775807, 1, 200, 'ok', 0, 0, ?, 0, 0, ?, '')`,
		huge.RequestID, huge.StartedAt.UnixNano(), huge.ClientRequestID); err != nil {
		t.Fatal(err)
	}
	// The aggregates of version 3, written as its committer did.
	for _, r := range recs {
		a := aggregateOf(r)
		for _, sc := range []struct {
			scope, id string
		}{{"key", a.key}, {"team", a.team}, {"org", a.org}} {
			if _, err := old.ExecContext(t.Context(), `INSERT INTO spend_agg (scope, id, model, bucket, cost_micros, input_tokens, cached_input_tokens, output_tokens, requests)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1)
				ON CONFLICT (scope, id, model, bucket) DO UPDATE SET cost_micros = cost_micros + excluded.cost_micros,
					input_tokens = input_tokens + excluded.input_tokens, cached_input_tokens = cached_input_tokens + excluded.cached_input_tokens,
					output_tokens = output_tokens + excluded.output_tokens, requests = requests + 1`,
				sc.scope, sc.id, a.model, a.bucket, r.CostPico/money.PicoPerMicro, r.Tokens[tokens.Input], r.Tokens[tokens.CachedInput], r.Tokens[tokens.Output]); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	l := openTest(t, path, Options{})
	got, err := l.Records(t.Context(), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	huge.CostPico = math.MaxInt64
	want := []ledger.Record{recs[4], recs[3], recs[2], recs[1], recs[0], huge}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Records after the migration (-want +got):\n%s", diff)
	}
	life, err := l.Lifetime(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	wantLife := money.FromMicros(0 + 1 + 450 + 2_500_000 + 9_223_372_036_854)
	for _, a := range life {
		if a.Scope == ledger.ScopeKey && a.ID == "key_1" && a.Cost != wantLife {
			t.Errorf("key_1's lifetime aggregate after the migration = %v; want %v", a.Cost, wantLife)
		}
	}

	// New records are exact to the pico-dollar, and land in the old rows.
	start(t, l)
	tiny := record("req_v4_tiny")
	tiny.CostPico, tiny.Tokens[tokens.CacheWrite1h], tiny.Tokens[tokens.AudioInput], tiny.Tokens[tokens.AudioOutput] = 140_000, 3, 4, 5
	tiny.Tokens[tokens.CacheWrite], tiny.Tokens[tokens.Input] = 7, 100
	if err := l.Append(testctx.Deadline(t), tiny); err != nil {
		t.Fatal(err)
	}
	got, err = l.Records(t.Context(), ledger.Filter{KeyID: "key_1", Since: tiny.StartedAt, Until: tiny.StartedAt.Add(1)})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]ledger.Record{recs[0], tiny}, got, cmpopts.SortSlices(func(a, b ledger.Record) bool { return a.RequestID < b.RequestID })); diff != "" {
		t.Errorf("Records at the first record's time (-want +got):\n%s", diff)
	}
	checkAggregates(t, l)
	ts, err := l.Totals(t.Context(), ledger.Filter{KeyID: "key_1"}, ledger.ByNone)
	if err != nil {
		t.Fatal(err)
	}
	if want := wantLife.AddPico(140_000); len(ts) != 1 || ts[0].Cost != want || ts[0].Tokens[tokens.CacheWrite1h] != 3 {
		t.Errorf("Totals of key_1 = %+v; want a cost of %v and 3 1-hour cache writes", ts, want)
	}
}

// TestMigrationDayIndexes: migration 5 replaces the four filter indexes
// of a schema-4 file with ones led by the day, keeping every record, and
// the filters read the same records through them, old and new.
func TestMigrationDayIndexes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.sqlite")
	old, err := sqlitedb.Open(t.Context(), path, pragmas, migrations[:4], "ledger", nil)
	if err != nil {
		t.Fatal(err)
	}
	var recs []ledger.Record
	for i := range 6 {
		r := record(fmt.Sprintf("req_%d", i))
		r.StartedAt = r.StartedAt.Add(time.Duration(i) * 20 * time.Hour) // over five days
		r.FinishedAt = r.StartedAt.Add(time.Second)
		r.KeyID = fmt.Sprintf("key_%d", i%2)
		args, err := encode(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := old.ExecContext(t.Context(), insert, args...); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	var told [][2]int
	onMigrate := func(from, to int) { told = append(told, [2]int{from, to}) }
	l := openTest(t, path, Options{OnMigrate: onMigrate})
	if want := [][2]int{{4, len(migrations)}}; !slices.Equal(told, want) {
		t.Errorf("OnMigrate was told %v, want %v", told, want)
	}
	told = nil
	openTest(t, path, Options{OnMigrate: onMigrate})
	if told != nil {
		t.Errorf("OnMigrate was told %v on a current file", told)
	}
	openTest(t, filepath.Join(t.TempDir(), "new.sqlite"), Options{OnMigrate: onMigrate})
	if told != nil {
		t.Errorf("OnMigrate was told %v on a new file", told)
	}
	indexes := map[string]string{}
	rows, err := l.db.QueryContext(t.Context(), `SELECT name, sql FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'spend' AND sql IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, sql string
		if err := rows.Scan(&name, &sql); err != nil {
			t.Fatal(err)
		}
		indexes[name] = sql
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"spend_started": "CREATE INDEX spend_started ON spend (started_at)",
		"spend_key":     "CREATE INDEX spend_key   ON spend (started_at / 86400000000000, key_id, started_at)",
		"spend_team":    "CREATE INDEX spend_team  ON spend (started_at / 86400000000000, team, started_at)",
		"spend_org":     "CREATE INDEX spend_org   ON spend (started_at / 86400000000000, org, started_at)",
		"spend_model":   "CREATE INDEX spend_model ON spend (started_at / 86400000000000, model, started_at)",
	}
	if diff := cmp.Diff(want, indexes); diff != "" {
		t.Errorf("indexes after the migration (-want +got):\n%s", diff)
	}

	start(t, l)
	late := record("req_late")
	late.StartedAt = recs[5].StartedAt.Add(time.Minute)
	late.FinishedAt = late.StartedAt.Add(time.Second)
	late.KeyID = "key_1"
	if err := l.Append(testctx.Deadline(t), late); err != nil {
		t.Fatal(err)
	}
	got, err := l.Records(t.Context(), ledger.Filter{KeyID: "key_1", Since: recs[1].StartedAt.Add(1)})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]ledger.Record{late, recs[5], recs[3]}, got); diff != "" {
		t.Errorf("key_1's records after the first (-want +got):\n%s", diff)
	}
}

// TestNewerSchemaStopsWrites: once a newer sluice has upgraded the file
// (its user_version beyond this code's), the committer writes nothing,
// and says why: directly, the Append fails; spooled, the record stays in
// the spool, the failure is reported and retried, and the record lands
// once the schema is this code's again.
func TestNewerSchemaStopsWrites(t *testing.T) {
	setVersion := func(t *testing.T, l *Ledger, v int) {
		t.Helper()
		if _, err := l.db.ExecContext(t.Context(), fmt.Sprintf("PRAGMA user_version = %d", v)); err != nil {
			t.Fatal(err)
		}
	}
	inTable := func(t *testing.T, l *Ledger) []string {
		t.Helper()
		rows, err := l.db.QueryContext(t.Context(), `SELECT request_id FROM spend ORDER BY request_id`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var got []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			got = append(got, id)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return got
	}
	const why = "a newer sluice upgraded the file"

	t.Run("direct", func(t *testing.T) {
		l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{})
		start(t, l)
		if err := l.Append(testctx.Deadline(t), record("before")); err != nil {
			t.Fatal(err)
		}
		setVersion(t, l, len(migrations)+1)
		if err := l.Append(testctx.Deadline(t), record("newer")); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("Append to a newer schema: %v, want %q", err, why)
		}
		if got := inTable(t, l); !slices.Equal(got, []string{"before"}) {
			t.Errorf("stored %v, want only before", got)
		}
		setVersion(t, l, len(migrations))
		if err := l.Append(testctx.Deadline(t), record("again")); err != nil {
			t.Fatal(err)
		}
		if got := inTable(t, l); !slices.Equal(got, []string{"again", "before"}) {
			t.Errorf("stored %v, want again and before", got)
		}
	})

	t.Run("spooled", func(t *testing.T) {
		reported := make(chan error, 100)
		l := openTest(t, filepath.Join(t.TempDir(), "ledger.sqlite"), Options{Spool: true, OnError: func(err error) {
			select {
			case reported <- err:
			default:
			}
		}})
		start(t, l)
		setVersion(t, l, len(migrations)+1)
		if err := l.Append(testctx.Deadline(t), record("spooled")); err != nil {
			t.Fatalf("spooled Append: %v", err) // durable in the spool
		}
		select {
		case err := <-reported:
			if !strings.Contains(err.Error(), why) {
				t.Errorf("reported %v, want %q", err, why)
			}
		case <-testctx.Deadline(t).Done():
			t.Fatal("no failure reported")
		}
		if got := inTable(t, l); got != nil {
			t.Errorf("stored %v under a newer schema", got)
		}
		setVersion(t, l, len(migrations))
		ctx := testctx.Deadline(t)
		for !slices.Equal(inTable(t, l), []string{"spooled"}) {
			select {
			case <-ctx.Done():
				t.Fatalf("the spooled record never landed: %v", inTable(t, l))
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
}
