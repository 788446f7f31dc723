package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

// TestDatabase: each call gives a database of its own, on a server that
// takes connections, with synchronous_commit on (what the ledger relies
// on) although fsync is off.
func TestDatabase(t *testing.T) {
	ctx := context.Background()
	a, b := Database(t), Database(t)
	if a == b {
		t.Fatalf("two calls gave the same database %s", a)
	}
	for _, url := range []string{a, b} {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		var sc string
		if err := conn.QueryRow(ctx, "SHOW synchronous_commit").Scan(&sc); err != nil || sc != "on" {
			t.Errorf("%s: synchronous_commit %q, %v", url, sc, err)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE t (x int)"); err != nil {
			t.Errorf("%s: %v", url, err)
		}
		conn.Close(ctx)
	}
}
