package spool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
)

// Sink is the database behind the spool: what a ledger backend gives the
// spool to put records in.
type Sink interface {
	// Name names the database in messages ("SQLite", "PostgreSQL").
	Name() string
	// Prepare validates r and turns it into what the sink's Writer
	// inserts. An error refuses the Append (wrap ledger.ErrInvalid).
	Prepare(r ledger.Record) (any, error)
	// Open returns a Writer: a connection with its statements, used by
	// one goroutine at a time (the committer, or the ingester, or a
	// replay).
	Open(ctx context.Context) (Writer, error)
	// RecordFault reports whether err, from Writer.Write, may be one
	// record's fault (a constraint, a sum that would overflow), so that
	// the batch is tried again without that record (or one record per
	// transaction, when Write could not say which). Any other error
	// fails the whole batch, to be tried again.
	RecordFault(err error) bool
}

// Writer writes batches of prepared records.
type Writer interface {
	// Write stores batch (values Prepare returned) in one transaction,
	// durably once it returns nil, a record whose RequestID is already
	// stored skipped and not counted again, the first of a batch's
	// records sharing a RequestID the one stored. If one record is to
	// blame for a failure it returns that record's index with the
	// error, else -1; the transaction is rolled back either way.
	Write(ctx context.Context, batch []any) (bad int, err error)
	// Idle is called once the writer has had nothing to write for
	// Options.IdleAfter after writing (SQLite checkpoints its WAL). Its
	// error is reported, not returned.
	Idle(ctx context.Context) error
	// Close gives the connection back.
	Close() error
}

// Suffix is what a ledger appends to its database file's path to name its
// spool (SQLite: "ledger.sqlite-spool").
const Suffix = "-spool"

// Defaults of Options.
const (
	DefaultMaxBatch    = 128
	DefaultMaxBytes    = 1 << 30
	DefaultRewindAt    = 1 << 20
	DefaultRewindWait  = 100 * time.Millisecond
	DefaultIngestDelay = 250 * time.Millisecond
	DefaultIdleAfter   = time.Second
)

// Options configure a Ledger. The zero value is the defaults, without a
// spool (Path "").
type Options struct {
	// Path is the spool's file. "": no spool: each batch is committed to
	// the Sink before its Appends return.
	Path string
	// Reader, with Path, opens the ledger to read beside the Ledger that
	// writes it: it never takes the spool, and Visible first inserts what
	// the spool holds into the sink itself, duplicates skipped.
	Reader bool
	// MaxBatch caps the records committed (or spooled) at once; 0 means
	// DefaultMaxBatch.
	MaxBatch int
	// MaxWait is how long the committer waits, after the first record of
	// a batch arrived, for the batch to fill. 0, the default, means no
	// wait: what arrives during a commit is the next batch.
	MaxWait time.Duration
	// Linger is MaxWait for loaded times only: after a batch of more than
	// one record, the committer waits up to Linger after the next batch's
	// first record for more. 0: no wait.
	Linger time.Duration
	// MaxBytes bounds the spool while the sink is behind: once the
	// spool's frames run past it and the sink does not hold them all,
	// Degraded says so until the sink catches up. 0 means
	// DefaultMaxBytes.
	MaxBytes int64
	// RewindAt is how far the spool grows before it is rewound once the
	// sink holds all of it; 0 means DefaultRewindAt.
	RewindAt int64
	// RewindWait bounds how long the committer waits for the ingester
	// before it rewinds the spool; 0 means DefaultRewindWait.
	RewindWait time.Duration
	// IngestDelay is how long the ingester waits after a spooled batch
	// arrived for more before it writes them to the sink (a read or a
	// rewind asks at once); 0 means DefaultIngestDelay.
	IngestDelay time.Duration
	// IdleAfter is how long a Writer has nothing to write before its Idle
	// is called; 0 means DefaultIdleAfter.
	IdleAfter time.Duration
	// Name prefixes errors and reports ("ledger/sqlite").
	Name string
	// Logger is told, at error level, the damage Open's replay of the
	// spool found and skipped. Nil: discarded.
	Logger *slog.Logger
	// OnError is told what a spooled Append can no longer return: a
	// record the sink refused at ingestion (dropped), an ingestion that
	// failed and is retried, a spool that failed (the Ledger commits
	// directly from then on). It must not block. Nil: not told.
	OnError func(error)
	// Fault injects faults, for tests: it is called before every spool
	// write (op "spool"), every sink transaction (op "commit") and every
	// growth of the spool (op "grow"); an error it returns fails that
	// operation as the disk's or the database's would. Nil: none.
	Fault func(op string) error
	// File, for tests, wraps each file the spool opens — the spool, its
	// directory when it is synced, a damaged spool's copy: the seam
	// through which they watch writes and syncs.
	File func(File) File
}

func (o Options) withDefaults() (Options, error) {
	var errs []error
	for _, n := range []struct {
		name string
		v    int64
	}{{"max_batch", int64(o.MaxBatch)}, {"spool_max_bytes", o.MaxBytes}, {"rewind_at", o.RewindAt}} {
		if n.v < 0 {
			errs = append(errs, fmt.Errorf("%s: %d is negative", n.name, n.v))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"max_wait", o.MaxWait}, {"linger", o.Linger}, {"rewind_wait", o.RewindWait},
		{"ingest_delay", o.IngestDelay}, {"idle_after", o.IdleAfter}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s: %v is negative", d.name, d.v))
		}
	}
	o.MaxBatch = or(o.MaxBatch, DefaultMaxBatch)
	o.MaxBytes = or(o.MaxBytes, DefaultMaxBytes)
	o.RewindAt = or(o.RewindAt, DefaultRewindAt)
	o.RewindWait = or(o.RewindWait, DefaultRewindWait)
	o.IngestDelay = or(o.IngestDelay, DefaultIngestDelay)
	o.IdleAfter = or(o.IdleAfter, DefaultIdleAfter)
	if o.Name == "" {
		o.Name = "ledger"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, errors.Join(errs...)
}

func or[T comparable](v, d T) T {
	var zero T
	if v == zero {
		return d
	}
	return v
}

// Ledger queues Appends, makes each batch durable — in the spool, or
// without one in the sink — and moves spooled records into the sink (the
// ingester). Its Run must be running for Append to return. It is safe for
// concurrent use.
type Ledger struct {
	sink Sink
	name string // Options.Name
	opts Options

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
	// last left it): Degraded compares it with Options.MaxBytes.
	spoolEnd atomic.Int64
	nIdle    atomic.Int64 // Writer.Idle calls

	// With a spool (nil without): see spool.go and ingest.go.
	sp        *spool
	spoolPath string // "" without a spool
	ing       ingestState
	damaged   atomic.Int64 // DamagedFrames
}

// Open opens a Ledger in front of sink. With Options.Path (and not
// Options.Reader) it takes the spool's lock — another Ledger holding it
// fails Open with an *InUseError — and, after check (which may open the
// database: it runs once the lock is held, so that a second writer learns
// it is one before it touches the database), replays what the spool holds
// into the sink and rewinds it. It starts no goroutine: the committer is
// Run.
func Open(ctx context.Context, sink Sink, opts Options, check func() error) (*Ledger, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("%s: options: %w", opts.Name, err)
	}
	var sp *spool
	if opts.Path != "" && !opts.Reader {
		if err := os.MkdirAll(filepath.Dir(opts.Path), 0o700); err != nil {
			return nil, fmt.Errorf("%s: %w", opts.Name, err)
		}
		if sp, err = openSpool(opts.Path, opts.File); err != nil {
			return nil, fmt.Errorf("%s: spool: %w", opts.Name, err)
		}
		if sp != nil {
			sp.rewindAt = opts.RewindAt
		}
	}
	if check != nil {
		if err := check(); err != nil {
			if sp != nil {
				err = errors.Join(err, sp.close())
			}
			return nil, err
		}
	}
	l := &Ledger{
		sink:      sink,
		name:      opts.Name,
		opts:      opts,
		slots:     make(chan struct{}, max(4*opts.MaxBatch, 1024)),
		wake:      make(chan struct{}, 1),
		spoolPath: opts.Path,
	}
	l.ing.init()
	if sp != nil {
		if err := l.recoverSpool(ctx, sp); err != nil {
			return nil, fmt.Errorf("%s: spool: %w", opts.Name, err)
		}
	}
	return l, nil
}

// Close fails the Appends still queued with ledger.ErrClosed, refuses new
// ones and closes the spool (not the sink: its owner closes it). Call it
// after Run returned. It is safe to call more than once.
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
	if l.sp != nil {
		err := l.sp.close()
		l.sp = nil
		return err
	}
	return nil
}

// Stats reports how many records this Ledger has committed (or spooled),
// duplicates included, and in how many commits (or spool writes).
func (l *Ledger) Stats() (records, commits int64) {
	return l.nRecords.Load(), l.nCommits.Load()
}

// Idles counts the Writer.Idle calls so far.
func (l *Ledger) Idles() int64 { return l.nIdle.Load() }

// Spooled reports whether the Ledger writes a spool.
func (l *Ledger) Spooled() bool { return l.sp != nil }

// Degraded is nil while the ledger takes records as it should, else why
// it should take no new requests' records: the disk is full and the spool
// is writing into its reserve, which holds the records of requests
// already answered but not many more; or the sink is behind the spool by
// more than Options.MaxBytes allows. The committer grows the reserve
// again every second until the disk has room; once the sink holds every
// record, the next batch rewinds the spool.
func (l *Ledger) Degraded() error {
	if e := l.low.Load(); e != nil {
		return fmt.Errorf("%s: the spool %s cannot grow and is writing into its reserve: %w", l.name, l.spoolPath, *e)
	}
	if end := l.spoolEnd.Load(); end > l.opts.MaxBytes {
		if backlog := l.Backlog(); backlog > 0 {
			return fmt.Errorf("%s: %s is behind: the spool %s holds %d MiB of frames, past its bound of %d MiB (ledger.spool_max_bytes), with %d records %s does not have yet",
				l.name, l.sink.Name(), l.spoolPath, end>>20, l.opts.MaxBytes>>20, backlog, l.sink.Name())
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
	if l.opts.Fault == nil {
		return nil
	}
	return l.opts.Fault(op)
}

func (l *Ledger) report(err error) {
	if l.opts.OnError != nil {
		l.opts.OnError(fmt.Errorf("%s: %w", l.name, err))
	}
}

// Queued counts the Appends waiting for the committer.
func (l *Ledger) Queued() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue)
}

// FrameBytes is how many bytes r takes in the spool: what sizes
// Options.RewindAt and Options.MaxBytes in records.
func FrameBytes(r *ledger.Record) int { return frameHeader + len(appendRecord(nil, r)) }
