package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicegw/sluice/internal/pgmigrate"
	"github.com/sluicegw/sluice/internal/store"
)

var (
	_ store.Store       = (*Store)(nil)
	_ store.KeyStreamer = (*Store)(nil)
)

// channel is what every write transaction NOTIFYs and a Listener LISTENs
// on.
const channel = "sluice_store"

// Options tune a Store.
type Options struct {
	// MaxConns bounds the connection pool; 0 is pgxpool's default (the
	// larger of 4 and the number of CPUs).
	MaxConns int32
	// Log receives what a Listener has to say (its reconnections); nil
	// discards it.
	Log *slog.Logger
}

// Store is the PostgreSQL store.Store. It is safe for concurrent use, and
// any number of Stores (one per replica) may share one database.
type Store struct {
	pool *pgxpool.Pool
	log  *slog.Logger
}

// Open connects to the database at url and checks that the store's
// schema is the one this code needs: a *pgmigrate.VersionError if it is
// older (run `sluice migrate`) or newer (upgrade sluice). It never
// migrates.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	pool, err := pgmigrate.Pool(ctx, url, opts.MaxConns)
	if err != nil {
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	if _, _, err := pgmigrate.Check(ctx, pool, component, migrations); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{pool: pool, log: log.With("component", "store")}, nil
}

// Migrate brings the store's schema in the database at url to the version
// this code needs, under the migration lock (see pgmigrate), and returns
// the versions it found and left. log may be nil.
func Migrate(ctx context.Context, url string, log *slog.Logger) (from, to int, err error) {
	from, to, err = pgmigrate.MigrateURL(ctx, url, component, migrations, log)
	if err != nil {
		return from, to, fmt.Errorf("postgres store: %w", err)
	}
	return from, to, nil
}

// Close closes the pool. It is safe to call more than once.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// errUnchanged ends a write transaction that found nothing to change: it
// is rolled back, with the revisions it took, and the write succeeds.
var errUnchanged = errors.New("unchanged")

// write runs fn in a transaction holding the next n revisions, first to
// first+n-1, and commits it, or rolls it back if fn fails. Taking them is
// the transaction's first statement: the counter's row lock then orders
// the whole transaction after the previous writer's commit. The same
// statement queues the NOTIFY, which PostgreSQL delivers at commit and
// drops on rollback.
func (s *Store) write(ctx context.Context, n int, fn func(tx pgx.Tx, first int64) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	var last int64
	err = tx.QueryRow(ctx, `WITH c AS (UPDATE store_revision SET rev = rev + $1 WHERE id = 1 RETURNING rev)
		SELECT c.rev FROM c, LATERAL (SELECT pg_notify('`+channel+`', c.rev::text)) n`, n).Scan(&last)
	if err != nil {
		err = fmt.Errorf("next revision: %w", err)
	} else {
		err = fn(tx, last-int64(n)+1)
	}
	if err != nil {
		rerr := rollback(ctx, tx)
		if errors.Is(err, errUnchanged) {
			return rerr
		}
		return errors.Join(err, rerr)
	}
	return tx.Commit(ctx)
}

// read runs fn in a read-only transaction on one snapshot, so that what
// it reads of the three tables is consistent.
func (s *Store) read(ctx context.Context, fn func(tx pgx.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, rollback(ctx, tx))
	}
	return tx.Commit(ctx)
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

// taken maps a unique violation on a key to store.ErrExists, naming what
// was taken (the id, which is safe to show, or the hash).
func taken(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		return err
	}
	switch pgErr.ConstraintName {
	case "store_keys_pkey":
		return fmt.Errorf("id taken (%s): %w", pgErr.Detail, store.ErrExists)
	case "store_keys_hash_key":
		return fmt.Errorf("hash taken: %w", store.ErrExists)
	}
	return err
}
