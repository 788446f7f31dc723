// Package sqlitedb owns how Sluice opens its embedded SQLite files (the
// key store and the spend ledger): the file created owner-only with its
// parent directories, pragmas on every connection, schema migrations under
// PRAGMA user_version in one IMMEDIATE transaction (with a hook told
// before an existing schema is upgraded, which can take long), a clear
// error for a file that is not a database or whose schema is newer than
// this build, and the retry that SQLite's WAL switch needs when two
// processes open a fresh file at once.
//
// It must not know any schema: callers pass their migrations.
package sqlitedb

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
)

// Open opens the SQLite file at path with the given DSN query (pragmas),
// creating it (mode 0600) and its parent directories if missing, and
// migrates it to len(migrations). kind names the schema in the
// schema-too-new error ("database", "ledger"). onMigrate, if not nil, is
// told the versions from and to before an existing schema is upgraded,
// under the write lock, so a caller can say that a long upgrade is under
// way; it is not called for a new file (version 0: nothing to rebuild) or
// a current one. Errors about the file are
// *fs.PathErrors; others read "open <abs path>: …".
func Open(ctx context.Context, path, pragmas string, migrations []string, kind string, onMigrate func(from, to int)) (*sql.DB, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o750); err != nil {
		return nil, err
	}
	// Created here so that it (and the -wal and -shm files SQLite derives
	// from it) is not world-readable. An empty file is an empty database.
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	// A file: URI, so that a path holding '?', '#' or '%' is escaped
	// rather than cut.
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(abs), RawQuery: pragmas}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", abs, err)
	}
	m := migrator{migrations: migrations, kind: kind, onMigrate: onMigrate}
	if err := m.openRetrying(ctx, db); err != nil {
		if Code(err)&0xff == sqlite3.SQLITE_NOTADB {
			err = fmt.Errorf("not a SQLite database: %w", err)
		}
		return nil, errors.Join(fmt.Errorf("open %s: %w", abs, err), db.Close())
	}
	return db, nil
}

// busyWait bounds the open retry, matching a busy_timeout of 5 s.
const busyWait = 5 * time.Second

type migrator struct {
	migrations []string
	kind       string
	onMigrate  func(from, to int) // nil: not told
}

// openRetrying connects and migrates, retrying while SQLite answers
// SQLITE_BUSY: switching a new file to WAL takes an exclusive lock, and
// SQLite returns BUSY for it without consulting busy_timeout.
func (m migrator) openRetrying(ctx context.Context, db *sql.DB) error {
	deadline := time.Now().Add(busyWait)
	backoff := time.Millisecond
	for {
		err := m.open(ctx, db)
		if err == nil || Code(err)&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

func (m migrator) open(ctx context.Context, db *sql.DB) error {
	// Connect now: the pragmas run here, and a file that is not a
	// database fails here.
	if err := db.PingContext(ctx); err != nil {
		return err
	}
	latest := len(m.migrations)
	v, err := schemaVersion(ctx, db)
	if err != nil {
		return err
	}
	if err := m.checkVersion(v); err != nil || v == latest {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := m.migrateTx(ctx, tx); err != nil {
		return errors.Join(err, IgnoreDone(tx.Rollback()))
	}
	return tx.Commit()
}

func (m migrator) migrateTx(ctx context.Context, tx *sql.Tx) error {
	// Read again under the write lock: another process may have migrated
	// since.
	v, err := schemaVersion(ctx, tx)
	if err != nil {
		return err
	}
	if err := m.checkVersion(v); err != nil {
		return err
	}
	latest := len(m.migrations)
	if m.onMigrate != nil && v > 0 && v < latest {
		m.onMigrate(v, latest)
	}
	for i := v; i < latest; i++ {
		if _, err := tx.ExecContext(ctx, m.migrations[i]); err != nil {
			return fmt.Errorf("migrate to schema version %d: %w", i+1, err)
		}
	}
	// PRAGMA takes no bound parameters; latest is our own integer.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", latest)); err != nil {
		return fmt.Errorf("set schema version: %w", err)
	}
	return nil
}

func (m migrator) checkVersion(v int) error {
	if latest := len(m.migrations); v > latest {
		return fmt.Errorf("%s schema version %d is newer than this sluice (max %d); upgrade sluice", m.kind, v, latest)
	}
	return nil
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

// Code is the SQLite result code of err, 0 if it is not a SQLite error.
func Code(err error) int {
	var e *sqlitedrv.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}

// IgnoreDone drops sql.ErrTxDone, which Rollback returns when the
// context's end already rolled the transaction back.
func IgnoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}
