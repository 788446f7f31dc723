package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/testenv"
	"github.com/sluicegw/sluice/internal/testenv/pgtest"
)

// TestOwnerRoleSuffices: what deploy/postgres.md asks for — a login role
// without superuser or any other attribute, owning the database — is
// enough for everything the ledger does: migrate (CONCURRENTLY indexes
// under the migration lock), make partitions at start-up and on demand,
// insert, read, drop partitions for retention, report its spool.
func TestOwnerRoleSuffices(t *testing.T) {
	srv := pgtest.Own(t)
	srv.Exec(t, "CREATE ROLE sluice_app LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
	url := fmt.Sprintf("postgres://sluice_app@127.0.0.1:%d/%s?sslmode=disable", srv.Port, srv.NewDatabase(t, "sluice_app"))
	ctx := testctx.Deadline(t)
	if _, _, err := Migrate(ctx, url, testenv.Quiet()); err != nil {
		t.Fatalf("Migrate as the owner role: %v", err)
	}
	l, err := OpenDB(ctx, url, Options{Log: testenv.Quiet()})
	if err != nil {
		t.Fatalf("OpenDB as the owner role: %v", err)
	}
	defer l.Close()
	old := time.Date(2024, 1, 10, 0, 0, 0, 0, time.UTC) // a month with no partition yet
	insert(t, l, record("req_old", 1, old, 100), record("req_now", 2, time.Now().UTC(), 200))
	if recs, err := l.Records(ctx, ledger.Filter{}); err != nil || len(recs) != 2 {
		t.Fatalf("Records = %d, %v; want 2", len(recs), err)
	}
	if dropped, err := l.DropBefore(ctx, time.Date(2024, 2, 1, 0, 0, 0, 0, time.UTC)); err != nil || len(dropped) != 1 {
		t.Fatalf("DropBefore as the owner role = %v, %v; want January 2024 dropped", dropped, err)
	}
	if err := l.Report(context.Background(), "host:/spool", 3, time.Now(), time.Now()); err != nil {
		t.Fatalf("Report as the owner role: %v", err)
	}
}
