package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicegw/sluice/internal/sqlitedb"

	"github.com/sluicegw/sluice/internal/ledger"
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
// BenchmarkAppend (bench/README.md has the numbers).
const DefaultMaxBatch = 128

// DefaultSpoolMaxBytes is Options.SpoolMaxBytes's default.
const DefaultSpoolMaxBytes = 1 << 30

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
	// shows that waiting only adds latency; see README.md). A batch is never
	// held back past MaxWait after its first record.
	MaxWait time.Duration
	// Linger is MaxWait for loaded times only: with MaxWait 0, after a
	// batch of more than one record, the committer waits up to Linger
	// after the next batch's first record for more. A lone record (the
	// last batch held one) is committed at once, so a quiet ledger adds
	// no latency, and a busy one shares each sync among more records.
	// 0: no wait.
	Linger time.Duration
	// Spool makes records durable in the spool beside the file (spool.go)
	// rather than by a SQLite commit each: a batch costs one write and
	// one fdatasync, and the ingester moves records into SQLite in larger
	// transactions. Only one Ledger of a file has the spool, by a lock:
	// Open of another fails with an *InUseError (ErrInUse), unless it is
	// a Reader. Two writers of one file would each admit every budget in
	// full.
	Spool bool
	// Reader, with Spool, opens the ledger to read it beside the Ledger
	// that writes it (`sluice spend` beside `sluice serve`): it never
	// takes the spool, so it never keeps a writer from starting, and
	// each read first inserts what the spool holds into SQLite itself,
	// duplicates skipped, so it sees every record the writer
	// acknowledged.
	Reader bool
	// Logger is told, at error level, the damage Open's replay of the
	// spool found and skipped (spool.go). Nil: discarded.
	Logger *slog.Logger
	// OnError is told what a spooled Append can no longer return: a
	// record SQLite refused at ingestion (dropped, as a direct Append
	// would have failed), an ingestion that failed and is retried, a spool
	// that failed (the Ledger commits directly from then on). Nil: not
	// told. It is called from the ledger's goroutines and must not block.
	OnError func(error)
	// OnMigrate is told, before Open upgrades an existing file's schema,
	// the versions from and to: an upgrade rebuilds indexes and tables
	// from every record, which takes minutes on a large ledger. It is not
	// told when Open creates the schema. Nil: not told.
	OnMigrate func(from, to int)
	// Fault injects faults, for tests: it is called before every spool
	// write (op "spool") and every SQLite transaction of records (op
	// "commit"), and an error it returns fails that write as the disk's
	// would (syscall.ENOSPC for a full disk); a delay in it delays the
	// write. Nil: none.
	Fault func(op string) error
	// SpoolMaxBytes bounds the spool while SQLite is behind: once the
	// spool's frames run past it and SQLite does not hold them all,
	// Degraded says so (new requests are refused) until SQLite catches
	// up. The records of requests already answered are still spooled.
	// 0 means DefaultSpoolMaxBytes.
	SpoolMaxBytes int64

	// spoolFile, for tests, wraps the spool's file when Open opens it:
	// the seam through which they watch its writes and syncs.
	spoolFile func(spoolFile) spoolFile
}

func (o Options) withDefaults() (Options, error) {
	var errs []error
	if o.MaxBatch < 0 {
		errs = append(errs, fmt.Errorf("max_batch: %d is negative", o.MaxBatch))
	}
	if o.MaxWait < 0 {
		errs = append(errs, fmt.Errorf("max_wait: %v is negative", o.MaxWait))
	}
	if o.Linger < 0 {
		errs = append(errs, fmt.Errorf("linger: %v is negative", o.Linger))
	}
	if o.SpoolMaxBytes < 0 {
		errs = append(errs, fmt.Errorf("spool_max_bytes: %d is negative", o.SpoolMaxBytes))
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.SpoolMaxBytes == 0 {
		o.SpoolMaxBytes = DefaultSpoolMaxBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, errors.Join(errs...)
}

// Ledger is the SQLite ledger.Ledger and ledger.Reader. Its Run must be
// running for Append to return: see Run. It is safe for concurrent use.
// Several Ledgers (in one process or several) may share a file, though
// only one committer writes at a time; with Options.Spool, only one of
// them writes (see Options.Reader).
type Ledger struct {
	db       *sql.DB
	maxBatch int
	maxWait  time.Duration // 0: no wait
	linger   time.Duration // 0: no wait

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
	// low is why the spool is writing into its reserve (spool.low), as
	// the committer last saw it; Degraded reads it.
	low atomic.Pointer[error]
	// spoolEnd is where the spool's frames end (sp.off, as the committer
	// last left it), and spoolMax its bound: Degraded compares them.
	spoolEnd     atomic.Int64
	spoolMax     int64
	nCheckpoints atomic.Int64 // idle checkpoints (see checkpointIdle)

	// With a spool (nil without): see spool.go and ingest.go.
	sp        *spool
	spoolPath string // "" without Options.Spool
	onError   func(error)
	fault     func(op string) error
	ing       ingestState
	log       *slog.Logger
	damaged   atomic.Int64 // DamagedFrames
}

// Open opens the ledger in the SQLite file at path, creating the file and
// its parent directories if missing, and migrates its schema to the
// current version. It fails if the file is not a SQLite database, if its
// schema is newer than this code knows, if opts is invalid, or, with
// Options.Spool and not Options.Reader, if another Ledger writes the file
// (*InUseError). It starts no goroutine: the committer is Run.
func Open(ctx context.Context, path string, opts Options) (*Ledger, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("ledger/sqlite: options: %w", err)
	}
	// The writer's lock first: a second writer must learn that it is one
	// before it touches the database (a newer binary would otherwise
	// migrate the schema under the running writer).
	var sp *spool
	if opts.Spool && !opts.Reader {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("ledger/sqlite: %w", err)
		}
		if sp, err = openSpool(path+spoolSuffix, opts.spoolFile); err != nil {
			return nil, fmt.Errorf("ledger/sqlite: spool: %w", err)
		}
	}
	db, err := sqlitedb.Open(ctx, path, pragmas, migrations, "ledger", opts.OnMigrate)
	if err != nil {
		if sp != nil {
			err = errors.Join(err, sp.close())
		}
		return nil, fmt.Errorf("ledger/sqlite: %w", err)
	}
	l := &Ledger{
		db:       db,
		maxBatch: opts.MaxBatch,
		maxWait:  opts.MaxWait,
		linger:   opts.Linger,
		slots:    make(chan struct{}, max(4*opts.MaxBatch, 1024)),
		wake:     make(chan struct{}, 1),
		onError:  opts.OnError,
		fault:    opts.Fault,
		spoolMax: opts.SpoolMaxBytes,
		log:      opts.Logger,
	}
	l.ing.init()
	if opts.Spool {
		l.spoolPath = path + spoolSuffix
		if opts.Reader {
			return l, nil
		}
		if err := l.recoverSpool(ctx, sp); err != nil {
			return nil, errors.Join(fmt.Errorf("ledger/sqlite: spool: %w", err), db.Close())
		}
	}
	return l, nil
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
	var errs []error
	if l.sp != nil {
		errs = append(errs, l.sp.close())
		l.sp = nil
	}
	return errors.Join(append(errs, l.db.Close())...)
}

// Stats reports how many records this Ledger has committed (duplicates
// that were skipped included) and in how many commits: records/commits is
// the mean batch size.
func (l *Ledger) Stats() (records, commits int64) {
	return l.nRecords.Load(), l.nCommits.Load()
}

// Degraded is nil while the ledger takes records as it should, else why
// it should take no new requests' records: the disk is full and the spool
// is writing into its reserve, which holds the records of requests
// already answered but not many more. The committer grows the reserve
// again every second until the disk has room.
//
// It is also not nil while SQLite is behind the spool by more than
// Options.SpoolMaxBytes allows: the spool's frames run past the bound and
// SQLite does not hold them all. Once it does, the next batch rewinds the
// spool.
func (l *Ledger) Degraded() error {
	if e := l.low.Load(); e != nil {
		return fmt.Errorf("ledger/sqlite: the spool %s cannot grow and is writing into its reserve: %w", l.spoolPath, *e)
	}
	if end := l.spoolEnd.Load(); end > l.spoolMax {
		if backlog := l.Backlog(); backlog > 0 {
			return fmt.Errorf("ledger/sqlite: the database is behind: the spool %s holds %d MiB of frames, past its bound of %d MiB (ledger.spool_max_bytes), with %d records the database does not have yet",
				l.spoolPath, end>>20, l.spoolMax>>20, backlog)
		}
	}
	return nil
}

// noteLow publishes the spool's state for Degraded.
func (l *Ledger) noteLow() {
	l.spoolEnd.Store(l.sp.off)
	if l.sp.low == nil {
		l.low.Store(nil)
		return
	}
	err := l.sp.low
	l.low.Store(&err)
}

// injected is Options.Fault's outcome for op: nil without one.
func (l *Ledger) injected(op string) error {
	if l.fault == nil {
		return nil
	}
	return l.fault(op)
}

func sqliteCode(err error) int { return sqlitedb.Code(err) }

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
