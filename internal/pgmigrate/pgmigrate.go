package pgmigrate

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Migration brings a component's schema from Version-1 to Version. Append
// only: a migration that has shipped is never edited, and none drops or
// renames anything, so that a replica one version behind keeps working
// against the newer schema.
type Migration struct {
	Version int
	Name    string
	// SQL runs inside the migration transaction; it may hold several
	// statements.
	SQL string
	// Concurrently holds statements of the form
	// "CREATE [UNIQUE] INDEX CONCURRENTLY IF NOT EXISTS name ON table …",
	// run after SQL, each on a second connection outside any transaction
	// (see the package documentation).
	Concurrently []string
}

// Sentinels for a schema the code does not match; a *VersionError wraps
// one of them.
var (
	// ErrTooNew: the schema is newer than the code knows. A replica must
	// refuse to start.
	ErrTooNew = errors.New("schema newer than this sluice knows")
	// ErrTooOld: the schema is older than the code needs. A replica is
	// not ready until `sluice migrate` has run.
	ErrTooOld = errors.New("schema older than this sluice needs")
)

// VersionError is a component's schema at a version other than the one
// the code needs.
type VersionError struct {
	Component string
	Have      int // the database's
	Want      int // the code's newest
}

func (e *VersionError) Error() string {
	if e.Have > e.Want {
		return fmt.Sprintf("%s schema version %d is newer than this sluice knows (%d); upgrade sluice", e.Component, e.Have, e.Want)
	}
	return fmt.Sprintf("%s schema version %d is older than this sluice needs (%d); run `sluice migrate`", e.Component, e.Have, e.Want)
}

// Unwrap is ErrTooNew or ErrTooOld.
func (e *VersionError) Unwrap() error {
	if e.Have > e.Want {
		return ErrTooNew
	}
	return ErrTooOld
}

// schemaTable is created by the first Migrate of any component.
const schemaTable = `CREATE TABLE IF NOT EXISTS sluice_schema (
	component  text PRIMARY KEY,
	version    int NOT NULL,
	updated_at timestamptz
)`

// LockKey is the pg_advisory_xact_lock key of a component's migrations:
// the 64-bit FNV-1a hash of "sluice_schema:" and its name, fixed so that
// every release of every replica takes the same lock.
func LockKey(component string) int64 {
	h := fnv.New64a()
	h.Write([]byte("sluice_schema:" + component))
	return int64(h.Sum64())
}

// undefinedTable is PostgreSQL's SQLSTATE for a relation that does not
// exist.
const undefinedTable = "42P01"

// tableKey is the lock under which sluice_schema itself is created, so
// that two components migrating a new database at once do not both
// create it. No component is named with a leading slash.
var tableKey = LockKey("/sluice_schema")

// indexForm is what a Concurrently statement must look like: its index
// name and the word CONCURRENTLY are taken from it.
var indexForm = regexp.MustCompile(`(?is)^\s*CREATE\s+(?:UNIQUE\s+)?INDEX\s+(CONCURRENTLY\s+)IF\s+NOT\s+EXISTS\s+("[^"]+"|[^\s(]+)\s+ON\s`)

// Validate checks that migs are numbered 1 to len(migs) in order and that
// each has something to do, every Concurrently statement in the form
// expected.
func Validate(migs []Migration) error {
	var errs []error
	for i, m := range migs {
		if m.Version != i+1 {
			errs = append(errs, fmt.Errorf("migrations[%d] (%s): version %d, want %d (versions run from 1 without gaps)", i, m.Name, m.Version, i+1))
		}
		if strings.TrimSpace(m.SQL) == "" && len(m.Concurrently) == 0 {
			errs = append(errs, fmt.Errorf("migrations[%d] (%s): no SQL and no index to build", i, m.Name))
		}
		for j, s := range m.Concurrently {
			if !indexForm.MatchString(s) {
				errs = append(errs, fmt.Errorf("migrations[%d] (%s).concurrently[%d]: want CREATE [UNIQUE] INDEX CONCURRENTLY IF NOT EXISTS name ON table …", i, m.Name, j))
			}
		}
	}
	return errors.Join(errs...)
}

// Check reads the component's schema version and compares it with the
// newest of migs: a *VersionError (ErrTooNew, ErrTooOld) if they differ.
// A database never migrated is at version 0.
func Check(ctx context.Context, pool *pgxpool.Pool, component string, migs []Migration) (have, want int, err error) {
	if err := Validate(migs); err != nil {
		return 0, 0, fmt.Errorf("%s migrations: %w", component, err)
	}
	want = len(migs)
	err = pool.QueryRow(ctx, `SELECT coalesce((SELECT version FROM sluice_schema WHERE component = $1), 0)`, component).Scan(&have)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == undefinedTable {
		// Never migrated: not even sluice_schema exists.
		have, err = 0, nil
	}
	if err != nil {
		return 0, want, fmt.Errorf("read %s schema version: %w", component, err)
	}
	if have != want {
		return have, want, &VersionError{Component: component, Have: have, Want: want}
	}
	return have, want, nil
}

// Migrate applies the pending migrations of migs to the component's
// schema, in one transaction under the component's lock, and returns the
// versions it found and left. It refuses a schema newer than migs know
// (a *VersionError wrapping ErrTooNew). log may be nil.
func Migrate(ctx context.Context, pool *pgxpool.Pool, component string, migs []Migration, log *slog.Logger) (from, to int, err error) {
	if err := Validate(migs); err != nil {
		return 0, 0, fmt.Errorf("%s migrations: %w", component, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("schema", component)
	tx, err := lock(ctx, pool, component, log)
	if err != nil {
		return 0, 0, fmt.Errorf("migrate %s: %w", component, err)
	}
	defer func() {
		if err != nil {
			// Rolled back on a fresh context: ctx may be why it failed.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			err = errors.Join(err, ignoreClosed(tx.Rollback(rctx)))
		}
	}()
	if err := tx.QueryRow(ctx, `SELECT coalesce((SELECT version FROM sluice_schema WHERE component = $1), 0)`, component).Scan(&from); err != nil {
		return 0, 0, fmt.Errorf("migrate %s: read version: %w", component, err)
	}
	want := len(migs)
	if from > want {
		return from, from, &VersionError{Component: component, Have: from, Want: want}
	}
	if from == want {
		if err := tx.Commit(ctx); err != nil {
			return from, from, fmt.Errorf("migrate %s: %w", component, err)
		}
		return from, from, nil
	}
	log.Info("migrating schema", "from", from, "to", want)
	for _, m := range migs[from:] {
		start := time.Now()
		if err := apply(ctx, tx, pool, m, log); err != nil {
			return from, from, fmt.Errorf("migrate %s to version %d (%s): %w", component, m.Version, m.Name, err)
		}
		log.Info("applied migration", "version", m.Version, "name", m.Name, "duration", time.Since(start))
	}
	_, err = tx.Exec(ctx, `INSERT INTO sluice_schema (component, version, updated_at) VALUES ($1, $2, now())
		ON CONFLICT (component) DO UPDATE SET version = excluded.version, updated_at = excluded.updated_at`, component, want)
	if err != nil {
		return from, from, fmt.Errorf("migrate %s: record version %d: %w", component, want, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return from, from, fmt.Errorf("migrate %s: commit: %w", component, err)
	}
	return from, want, nil
}

// Lock waits start short, for a migrator about to finish, and grow to
// maxWait for one building a large index.
const (
	minWait = 10 * time.Millisecond
	maxWait = time.Second
)

// lock begins the migration transaction holding the component's lock and
// sluice_schema, which it creates if missing (under tableKey as well).
// Each attempt that finds a lock taken ends its transaction and waits in
// Go, holding nothing (see the package documentation).
func lock(ctx context.Context, pool *pgxpool.Pool, component string, log *slog.Logger) (pgx.Tx, error) {
	wait := minWait
	for logged := false; ; logged = true {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		var missing, locked bool
		err = tx.QueryRow(ctx, `SELECT to_regclass('sluice_schema') IS NULL, pg_try_advisory_xact_lock($1)`, LockKey(component)).Scan(&missing, &locked)
		if err == nil && locked && missing {
			err = tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, tableKey).Scan(&locked)
			if err == nil && locked {
				_, err = tx.Exec(ctx, schemaTable)
			}
		}
		if err == nil && locked {
			return tx, nil
		}
		if rerr := ignoreClosed(tx.Rollback(context.WithoutCancel(ctx))); err != nil || rerr != nil {
			return nil, errors.Join(err, rerr)
		}
		if !logged {
			log.Info("waiting for another migrator to finish")
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, maxWait)
	}
}

// apply runs m's SQL and builds its indexes in tx.
func apply(ctx context.Context, tx pgx.Tx, pool *pgxpool.Pool, m Migration, log *slog.Logger) error {
	if strings.TrimSpace(m.SQL) != "" {
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return err
		}
	}
	for _, stmt := range m.Concurrently {
		if err := buildIndex(ctx, tx, pool, stmt, log); err != nil {
			return err
		}
	}
	return nil
}

// buildIndex runs stmt, a Concurrently statement: on a connection of its
// own while tx waits, unless tx holds more than a read lock on any table
// (it created sluice_schema or a table, or altered or wrote one, in this
// run). Then it runs inside tx, without CONCURRENTLY: a concurrent build
// waits for every transaction older than it, and one of those could be
// waiting for tx's lock, while tx waits for the build — a cycle
// PostgreSQL cannot see. A table tx created is new and empty anyway.
func buildIndex(ctx context.Context, tx pgx.Tx, pool *pgxpool.Pool, stmt string, log *slog.Logger) error {
	sub := indexForm.FindStringSubmatchIndex(stmt)
	index := stmt[sub[4]:sub[5]]
	// In the simple protocol, so that the transaction is left with no
	// open portal: an extended-protocol query's unnamed portal lives on
	// until the next query, and with it the snapshot it ran under, which
	// the concurrent build would wait for.
	var held bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'relation'
		AND pid = pg_backend_pid() AND mode <> 'AccessShareLock')`,
		pgx.QueryExecModeSimpleProtocol).Scan(&held)
	if err != nil {
		return fmt.Errorf("index %s: %w", index, err)
	}
	if held {
		plain := stmt[:sub[2]] + stmt[sub[3]:]
		err := dropInvalid(ctx, tx, index, "")
		if err == nil {
			_, err = tx.Exec(ctx, plain)
		}
		if err != nil {
			return fmt.Errorf("index %s: %w", index, err)
		}
		return nil
	}
	// A connection of the pool's configuration but not from it: the pool
	// may have no other to give while tx holds one.
	cfg := pool.Config().ConnConfig
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("index %s: connect: %w", index, err)
	}
	defer func() { conn.Close(context.WithoutCancel(ctx)) }()
	// An INVALID index left by a build that was interrupted would make
	// IF NOT EXISTS skip the build: drop it first.
	if err := dropInvalid(ctx, conn, index, "CONCURRENTLY"); err != nil {
		return fmt.Errorf("index %s: %w", index, err)
	}
	start := time.Now()
	if _, err := conn.Exec(ctx, stmt); err != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		var derr error
		if conn.IsClosed() {
			// Closed by pgx when ctx ended during the build.
			conn, derr = pgx.ConnectConfig(dctx, cfg)
		}
		if derr == nil {
			derr = dropInvalid(dctx, conn, index, "CONCURRENTLY")
		}
		if derr != nil {
			return fmt.Errorf("index %s: %w; and dropping the invalid index it left: %v", index, err, derr)
		}
		return fmt.Errorf("index %s (the invalid index it left was dropped): %w", index, err)
	}
	log.Info("built index concurrently", "index", index, "duration", time.Since(start))
	return nil
}

// querier is a connection or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// dropInvalid drops index if it exists and is INVALID, with DROP INDEX
// and how ("CONCURRENTLY" outside a transaction, "" inside one).
func dropInvalid(ctx context.Context, q querier, index, how string) error {
	var invalid bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass($1) AND NOT indisvalid)`,
		pgx.QueryExecModeSimpleProtocol, index).Scan(&invalid)
	if err != nil || !invalid {
		return err
	}
	_, err = q.Exec(ctx, `DROP INDEX `+how+` IF EXISTS `+index)
	return err
}

func ignoreClosed(err error) error {
	if errors.Is(err, pgx.ErrTxClosed) {
		return nil
	}
	return err
}

// Pool connects a pool to the database at url, of at most maxConns
// connections (0: pgxpool's default). Its errors never show the URL's
// password (pgx redacts it).
func Pool(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := poolConfig(url, maxConns)
	if err != nil {
		return nil, err
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

func poolConfig(url string, maxConns int32) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	return cfg, nil
}

// MigrateURL is Migrate on a pool of its own to the database at url,
// closed before it returns: what `sluice migrate` runs for a component.
//
// The URL's statement_timeout does not apply: an index built on a large
// table may take longer than any request should.
func MigrateURL(ctx context.Context, url, component string, migs []Migration, log *slog.Logger) (from, to int, err error) {
	cfg, err := poolConfig(url, 2)
	if err != nil {
		return 0, 0, err
	}
	delete(cfg.ConnConfig.RuntimeParams, "statement_timeout")
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, 0, err
	}
	defer pool.Close()
	return Migrate(ctx, pool, component, migs, log)
}
