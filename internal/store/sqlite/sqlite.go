package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/sluicegw/sluice/internal/sqlitedb"
	"github.com/sluicegw/sluice/internal/store"
)

var (
	_ store.Store       = (*Store)(nil)
	_ store.KeyStreamer = (*Store)(nil)
)

// pragmas are set on every connection, busy_timeout first so that the
// others (journal_mode=WAL takes a lock the first time) wait instead of
// failing. _txlock=immediate makes every read-write transaction
// BEGIN IMMEDIATE: a writer takes the write lock before it reads the
// revision counter, so two processes can never take the same revision.
// Read-only transactions stay deferred and, in WAL mode, never block.
const pragmas = "_pragma=busy_timeout(5000)" +
	"&_pragma=journal_mode(WAL)" +
	"&_pragma=synchronous(FULL)" +
	"&_pragma=foreign_keys(ON)" +
	"&_txlock=immediate"

// Store is the SQLite store.Store. It is safe for concurrent use, and
// several Stores (in one process or several) may share one file.
type Store struct {
	db *sql.DB
	// pollRev reads the revision counter: all a Changes call costs when
	// nothing changed.
	pollRev *sql.Stmt
	// writeSem serializes this handle's writers in Go, where waiting
	// respects the context, rather than in SQLite's busy handler. Writers
	// in other handles or processes still meet at BEGIN IMMEDIATE.
	writeSem chan struct{}
}

// Open opens the store in the SQLite file at path, creating the file and
// its parent directories if missing, and migrates its schema to the
// current version. It fails if the file is not a SQLite database or if its
// schema is newer than this code knows.
func Open(ctx context.Context, path string) (*Store, error) {
	db, err := sqlitedb.Open(ctx, path, pragmas, migrations, "database", nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	poll, err := db.PrepareContext(ctx, `SELECT rev FROM revision WHERE id = 1`)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("sqlite: prepare: %w", err), db.Close())
	}
	return &Store{db: db, pollRev: poll, writeSem: make(chan struct{}, 1)}, nil
}

// Close closes the database. It is safe to call more than once.
func (s *Store) Close() error {
	return errors.Join(s.pollRev.Close(), s.db.Close())
}

// inTx runs fn in a transaction and commits it, or rolls it back if fn
// fails. With opts nil the transaction is BEGIN IMMEDIATE (see pragmas).
func inTx(ctx context.Context, db *sql.DB, opts *sql.TxOptions, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, sqlitedb.IgnoreDone(tx.Rollback()))
	}
	return tx.Commit()
}

// write runs fn in a write transaction, one writer of this handle at a
// time.
func (s *Store) write(ctx context.Context, fn func(*sql.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case s.writeSem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.writeSem }()
	return inTx(ctx, s.db, nil, fn)
}

// nextRev takes the next store-wide revision. It must run in a write
// transaction, whose lock makes it unique.
func nextRev(ctx context.Context, tx *sql.Tx) (int64, error) {
	var rev int64
	err := tx.QueryRowContext(ctx, `UPDATE revision SET rev = rev + 1 WHERE id = 1 RETURNING rev`).Scan(&rev)
	if err != nil {
		return 0, fmt.Errorf("next revision: %w", err)
	}
	return rev, nil
}

func sqliteCode(err error) int { return sqlitedb.Code(err) }
