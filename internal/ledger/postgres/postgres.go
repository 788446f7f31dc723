package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/pgmigrate"
)

var (
	_ ledger.Reader     = (*Ledger)(nil)
	_ ledger.Aggregates = (*Ledger)(nil)
)

// Options tune a Ledger.
type Options struct {
	// MaxConns bounds the connection pool; 0 is pgxpool's default (the
	// larger of 4 and the number of CPUs).
	MaxConns int32
	// Log receives the partitions made on demand; nil discards it.
	Log *slog.Logger
}

// Ledger is the PostgreSQL spend ledger's database side: Insert for the
// spool's ingester, the ledger.Reader and ledger.Aggregates reads, and the
// partitions' upkeep. It is safe for concurrent use, and any number of
// Ledgers (one per replica) may share one database.
type Ledger struct {
	pool *pgxpool.Pool
	log  *slog.Logger

	// inTx, for tests, runs inside each Insert transaction just before
	// its commit: the seam through which they see the transaction's
	// settings.
	inTx func(ctx context.Context, tx pgx.Tx) error
}

// Open connects to the database at url, checks that the ledger's schema
// is the one this code needs — a *pgmigrate.VersionError if it is older
// (run `sluice migrate`) or newer (upgrade sluice); it never migrates —
// and makes the partitions of this month and the next three.
func Open(ctx context.Context, url string, opts Options) (*Ledger, error) {
	pool, err := pgmigrate.Pool(ctx, url, opts.MaxConns)
	if err != nil {
		return nil, fmt.Errorf("postgres ledger: %w", err)
	}
	if _, _, err := pgmigrate.Check(ctx, pool, component, migrations); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres ledger: %w", err)
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Ledger{pool: pool, log: log.With("component", "ledger")}
	if err := l.EnsurePartitions(ctx, time.Now()); err != nil {
		pool.Close()
		return nil, err
	}
	return l, nil
}

// Migrate brings the ledger's schema in the database at url to the
// version this code needs, under the migration lock (see pgmigrate), and
// returns the versions it found and left. log may be nil. It makes no
// partition: Open does.
func Migrate(ctx context.Context, url string, log *slog.Logger) (from, to int, err error) {
	from, to, err = pgmigrate.MigrateURL(ctx, url, component, migrations, log)
	if err != nil {
		return from, to, fmt.Errorf("postgres ledger: %w", err)
	}
	return from, to, nil
}

// Close closes the pool. It is safe to call more than once.
func (l *Ledger) Close() error {
	l.pool.Close()
	return nil
}

// rollback rolls tx back on a context that ctx's end does not cancel: ctx
// may be why the transaction failed.
func rollback(ctx context.Context, tx pgx.Tx) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := tx.Rollback(rctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return err
	}
	return nil
}
