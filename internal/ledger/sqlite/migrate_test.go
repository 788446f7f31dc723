package sqlite

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/sqlitedb"
	"github.com/sluicegw/sluice/internal/testctx"
)

// insertV1 writes r as the releases before schema version 3 did: the
// first schema's 22 columns, request_id holding the client's x-request-id.
func insertV1(t *testing.T, db *sql.DB, r ledger.Record) {
	t.Helper()
	args, err := encode(r)
	if err != nil {
		t.Fatal(err)
	}
	const v1 = `INSERT INTO spend (request_id, key_id, team, org, endpoint, model, provider, upstream_model,
	input_tokens, cached_input_tokens, cache_creation_tokens, output_tokens, reasoning_tokens,
	cost_micros, priced, status, outcome, estimated, stream, started_at, finished_at, ttft)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	if _, err := db.ExecContext(t.Context(), v1, args[:22]...); err != nil {
		t.Fatal(err)
	}
}

// TestMigrationClientRequestID opens a ledger of schema version 2, whose
// request_id was the client's x-request-id: the upgrade in place keeps
// every row, with its id as both RequestID and ClientRequestID and no
// error type; new records then carry their own of each, and a client
// request id the old rows used does not make a new record a duplicate.
func TestMigrationClientRequestID(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.sqlite")
	old, err := sqlitedb.Open(t.Context(), path, pragmas, migrations[:2], "ledger")
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
