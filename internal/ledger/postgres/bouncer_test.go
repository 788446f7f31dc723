package postgres

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/sluicegw/sluice/internal/ledger/ledgertest"
	"github.com/sluicegw/sluice/internal/ledger/spool"
	"github.com/sluicegw/sluice/internal/testenv"
	"github.com/sluicegw/sluice/internal/testenv/pgtest"
)

// TestContractThroughPgBouncer runs the ledger's migrations (its
// CONCURRENTLY indexes on a second connection while the transaction-scoped
// lock is held) and its contract, behind the spool, through PgBouncer in
// transaction pooling mode.
func TestContractThroughPgBouncer(t *testing.T) {
	srv := pgtest.Own(t)
	b := pgtest.StartBouncer(t, srv)
	ledgertest.Run(t, func(t *testing.T) ledgertest.Backend {
		url := b.URL(srv.NewDatabase(t, ""))
		if _, _, err := Migrate(context.Background(), url, testenv.Quiet()); err != nil {
			t.Fatalf("Migrate through PgBouncer: %v", err)
		}
		return openSpooled(t, url, spool.Options{Path: filepath.Join(t.TempDir(), "ledger-spool")})
	})
}
