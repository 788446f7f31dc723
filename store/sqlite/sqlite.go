package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	sqlitedrv "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sluicegw/sluice/store"
)

var _ store.Store = (*Store)(nil)

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
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	// The *fs.PathErrors of these two name the path already.
	if err := os.MkdirAll(filepath.Dir(abs), 0o750); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	// Create the file ourselves so that it (and the -wal and -shm files
	// SQLite derives from it) is not world-readable. An empty file is an
	// empty database.
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}

	db, err := sql.Open("sqlite", dsn(abs))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	s, err := openRetrying(ctx, db)
	if err != nil {
		if notADatabase(err) {
			err = fmt.Errorf("not a SQLite database: %w", err)
		}
		return nil, errors.Join(fmt.Errorf("sqlite: open %s: %w", abs, err), db.Close())
	}
	return s, nil
}

// dsn is the driver name for the file at abs: a file: URI, so that a path
// holding '?', '#' or '%' is escaped rather than cut.
func dsn(abs string) string {
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(abs), RawQuery: pragmas}
	return u.String()
}

// openRetrying is open, retried while SQLite answers SQLITE_BUSY. Switching
// a new file to WAL takes an exclusive lock, and SQLite returns BUSY for it
// without consulting busy_timeout; two processes opening a fresh file at
// once (serve and keys create on first run) would otherwise fail.
func openRetrying(ctx context.Context, db *sql.DB) (*Store, error) {
	deadline := time.Now().Add(busyWait)
	backoff := time.Millisecond
	for {
		s, err := open(ctx, db)
		if err == nil || sqliteCode(err)&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			return s, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, errors.Join(err, ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// busyWait bounds openRetrying, matching busy_timeout.
const busyWait = 5 * time.Second

func open(ctx context.Context, db *sql.DB) (*Store, error) {
	// Connect now: the pragmas run here, and a file that is not a
	// database fails here.
	if err := db.PingContext(ctx); err != nil {
		return nil, err
	}
	if err := migrate(ctx, db); err != nil {
		return nil, err
	}
	poll, err := db.PrepareContext(ctx, `SELECT rev FROM revision WHERE id = 1`)
	if err != nil {
		return nil, err
	}
	return &Store{db: db, pollRev: poll, writeSem: make(chan struct{}, 1)}, nil
}

// Close closes the database. It is safe to call more than once.
func (s *Store) Close() error {
	return errors.Join(s.pollRev.Close(), s.db.Close())
}

// migrate brings the schema to len(migrations), in one IMMEDIATE
// transaction so that two processes opening a new file at once do not both
// migrate it.
func migrate(ctx context.Context, db *sql.DB) error {
	latest := len(migrations)
	v, err := schemaVersion(ctx, db)
	if err != nil {
		return err
	}
	if err := checkVersion(v, latest); err != nil || v == latest {
		return err
	}
	return inTx(ctx, db, nil, func(tx *sql.Tx) error {
		// Read again under the write lock: another process may have
		// migrated since.
		v, err := schemaVersion(ctx, tx)
		if err != nil {
			return err
		}
		if err := checkVersion(v, latest); err != nil {
			return err
		}
		for i := v; i < latest; i++ {
			if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
				return fmt.Errorf("migrate to schema version %d: %w", i+1, err)
			}
		}
		// PRAGMA takes no bound parameters; latest is our own integer.
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", latest)); err != nil {
			return fmt.Errorf("set schema version: %w", err)
		}
		return nil
	})
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func schemaVersion(ctx context.Context, q queryer) (int, error) {
	var v int
	if err := q.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

func checkVersion(v, latest int) error {
	if v > latest {
		return fmt.Errorf("database schema version %d is newer than this sluice (max %d); upgrade sluice", v, latest)
	}
	return nil
}

// inTx runs fn in a transaction and commits it, or rolls it back if fn
// fails. With opts nil the transaction is BEGIN IMMEDIATE (see pragmas).
func inTx(ctx context.Context, db *sql.DB, opts *sql.TxOptions, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, ignoreDone(tx.Rollback()))
	}
	return tx.Commit()
}

// ignoreDone drops sql.ErrTxDone, which Rollback returns when the
// context's end already rolled the transaction back.
func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
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

func sqliteCode(err error) int {
	var e *sqlitedrv.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}

func notADatabase(err error) bool { return sqliteCode(err)&0xff == sqlite3.SQLITE_NOTADB }
