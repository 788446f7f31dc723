package postgres

import (
	"context"
	"testing"

	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/internal/store/storetest"
	"github.com/sluicegw/sluice/internal/testenv"
	"github.com/sluicegw/sluice/internal/testenv/pgtest"
)

// TestContractThroughPgBouncer runs the store's migrations and its
// contract through PgBouncer in transaction pooling mode, where nothing
// of a session survives from one transaction to the next: the migration
// lock is transaction-scoped, and every write is one transaction.
func TestContractThroughPgBouncer(t *testing.T) {
	srv := pgtest.Own(t)
	b := pgtest.StartBouncer(t, srv)
	storetest.Run(t, func(t *testing.T) store.Store {
		url := b.URL(srv.NewDatabase(t, ""))
		if _, _, err := Migrate(context.Background(), url, testenv.Quiet()); err != nil {
			t.Fatalf("Migrate through PgBouncer: %v", err)
		}
		s, err := Open(t.Context(), url, Options{})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	})
}
