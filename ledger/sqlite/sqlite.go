package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	sqlitedrv "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sluicegw/sluice/ledger"
)

var (
	_ ledger.Ledger = (*Ledger)(nil)
	_ ledger.Reader = (*Ledger)(nil)
)

// pragmas are set on every connection, busy_timeout first so that the
// others (journal_mode=WAL takes a lock the first time) wait instead of
// failing. synchronous=FULL syncs the WAL at every commit: that sync is
// what makes a record durable, and what group commit amortises.
// _txlock=immediate makes the migration transaction BEGIN IMMEDIATE.
const pragmas = "_pragma=busy_timeout(5000)" +
	"&_pragma=journal_mode(WAL)" +
	"&_pragma=synchronous(FULL)" +
	"&_txlock=immediate"

// DefaultMaxBatch is Options.MaxBatch's default, chosen by
// BenchmarkAppend (see doc.go for the numbers).
const DefaultMaxBatch = 128

// Options tune group commit. The zero value is the defaults.
type Options struct {
	// MaxBatch caps the records committed in one transaction; 0 means
	// DefaultMaxBatch.
	MaxBatch int
	// MaxWait is how long the committer waits, after the first record of
	// a batch arrived, for the batch to fill before committing it anyway.
	// 0, the default, means no wait: the committer commits what is queued
	// at once, and what arrives during a commit is the next batch, so the
	// commit's own duration is the batching window (BenchmarkAppendRate
	// shows that waiting only adds latency; see doc.go). A batch is never
	// held back past MaxWait after its first record.
	MaxWait time.Duration
}

func (o Options) withDefaults() (Options, error) {
	var errs []error
	if o.MaxBatch < 0 {
		errs = append(errs, fmt.Errorf("max_batch: %d is negative", o.MaxBatch))
	}
	if o.MaxWait < 0 {
		errs = append(errs, fmt.Errorf("max_wait: %v is negative", o.MaxWait))
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	return o, errors.Join(errs...)
}

// Ledger is the SQLite ledger.Ledger and ledger.Reader. Its Run must be
// running for Append to return: see Run. It is safe for concurrent use.
// Several Ledgers (in one process or several) may share a file, though
// only one committer writes at a time.
type Ledger struct {
	db       *sql.DB
	maxBatch int
	maxWait  time.Duration // 0: no wait

	// slots bounds the queue: Append takes a slot before it queues, the
	// committer gives the slots of a batch back once it took the batch.
	slots chan struct{}
	// wake tells the committer that the queue became non-empty or full.
	wake chan struct{}

	mu      sync.Mutex
	queue   []*pending
	first   time.Time // when queue[0] arrived; zero: commit without waiting
	running bool      // Run is running
	closed  bool      // no more Appends: Run returned, or Close was called

	nRecords, nCommits atomic.Int64
}

// Open opens the ledger in the SQLite file at path, creating the file and
// its parent directories if missing, and migrates its schema to the
// current version. It fails if the file is not a SQLite database, if its
// schema is newer than this code knows, or if opts is invalid. It starts
// no goroutine: the committer is Run.
func Open(ctx context.Context, path string, opts Options) (*Ledger, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("ledger/sqlite: options: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("ledger/sqlite: open %s: %w", path, err)
	}
	// The *fs.PathErrors of these two name the path already.
	if err := os.MkdirAll(filepath.Dir(abs), 0o750); err != nil {
		return nil, fmt.Errorf("ledger/sqlite: %w", err)
	}
	// Create the file ourselves so that it (and the -wal and -shm files
	// SQLite derives from it) is not world-readable. An empty file is an
	// empty database.
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("ledger/sqlite: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("ledger/sqlite: %w", err)
	}

	db, err := sql.Open("sqlite", dsn(abs))
	if err != nil {
		return nil, fmt.Errorf("ledger/sqlite: open %s: %w", abs, err)
	}
	if err := openRetrying(ctx, db); err != nil {
		if notADatabase(err) {
			err = fmt.Errorf("not a SQLite database: %w", err)
		}
		return nil, errors.Join(fmt.Errorf("ledger/sqlite: open %s: %w", abs, err), db.Close())
	}
	return &Ledger{
		db:       db,
		maxBatch: opts.MaxBatch,
		maxWait:  opts.MaxWait,
		slots:    make(chan struct{}, max(4*opts.MaxBatch, 1024)),
		wake:     make(chan struct{}, 1),
	}, nil
}

// Close fails the Appends still queued with ledger.ErrClosed, refuses new
// ones and closes the database. Call it after Run returned (Run commits
// what is queued before it returns, so then nothing is queued). It is safe
// to call more than once.
func (l *Ledger) Close() error {
	l.mu.Lock()
	l.closed = true
	q := l.queue
	l.queue = nil
	l.mu.Unlock()
	for _, p := range q {
		p.done <- ledger.ErrClosed
		<-l.slots
	}
	return l.db.Close()
}

// Stats reports how many records this Ledger has committed (duplicates
// that were skipped included) and in how many commits: records/commits is
// the mean batch size.
func (l *Ledger) Stats() (records, commits int64) {
	return l.nRecords.Load(), l.nCommits.Load()
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
// once would otherwise fail.
func openRetrying(ctx context.Context, db *sql.DB) error {
	deadline := time.Now().Add(busyWait)
	backoff := time.Millisecond
	for {
		err := open(ctx, db)
		if err == nil || sqliteCode(err)&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
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

// busyWait bounds openRetrying, matching busy_timeout.
const busyWait = 5 * time.Second

func open(ctx context.Context, db *sql.DB) error {
	// Connect now: the pragmas run here, and a file that is not a
	// database fails here.
	if err := db.PingContext(ctx); err != nil {
		return err
	}
	return migrate(ctx, db)
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
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := migrateTx(ctx, tx, latest); err != nil {
		return errors.Join(err, ignoreDone(tx.Rollback()))
	}
	return tx.Commit()
}

func migrateTx(ctx context.Context, tx *sql.Tx, latest int) error {
	// Read again under the write lock: another process may have migrated
	// since.
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
		return fmt.Errorf("ledger schema version %d is newer than this sluice (max %d); upgrade sluice", v, latest)
	}
	return nil
}

// ignoreDone drops sql.ErrTxDone, which Rollback returns when the
// context's end already rolled the transaction back.
func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

func sqliteCode(err error) int {
	var e *sqlitedrv.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}

func notADatabase(err error) bool { return sqliteCode(err)&0xff == sqlite3.SQLITE_NOTADB }

// nanos is t as stored: Unix nanoseconds, 0 for the zero time.
func nanos(field string, t time.Time) (int64, error) {
	if t.IsZero() {
		return 0, nil
	}
	n := t.UnixNano()
	if n == 0 || !time.Unix(0, n).Equal(t) {
		return 0, fmt.Errorf("%s: %s cannot be stored (Unix nanoseconds, 1678 to 2262, not the epoch): %w",
			field, t.Format(time.RFC3339Nano), ledger.ErrInvalid)
	}
	return n, nil
}

// utc is the inverse of nanos.
func utc(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
