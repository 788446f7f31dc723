package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/ledger/spool"
	"github.com/sluicegw/sluice/internal/sqlitedb"
	"github.com/sluicegw/sluice/internal/tokens"
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
const DefaultMaxBatch = spool.DefaultMaxBatch

// DefaultSpoolMaxBytes is Options.SpoolMaxBytes's default.
const DefaultSpoolMaxBytes = spool.DefaultMaxBytes

// ErrInUse and InUseError are the spool's (spool.ErrInUse): another
// Ledger writes the file.
var ErrInUse = spool.ErrInUse

// InUseError says which spool is in use, and by which process.
type InUseError = spool.InUseError

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
	// Spool makes records durable in the spool beside the file
	// (internal/ledger/spool) rather than by a SQLite commit each: a batch
	// costs one write and one fdatasync, and the ingester moves records
	// into SQLite in larger transactions. Only one Ledger of a file has
	// the spool, by a lock: Open of another fails with an *InUseError
	// (ErrInUse), unless it is a Reader. Two writers of one file would
	// each admit every budget in full.
	Spool bool
	// Reader, with Spool, opens the ledger to read it beside the Ledger
	// that writes it (`sluice spend` beside `sluice serve`): it never
	// takes the spool, so it never keeps a writer from starting, and
	// each read first inserts what the spool holds into SQLite itself,
	// duplicates skipped, so it sees every record the writer
	// acknowledged.
	Reader bool
	// Logger is told, at error level, the damage Open's replay of the
	// spool found and skipped. Nil: discarded.
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

	// tune, for tests, adjusts the spool's options (its file, its rewind
	// point, the ingester's pace) before Open opens it.
	tune func(*spool.Options)
}

// Ledger is the SQLite ledger.Ledger and ledger.Reader: the spool's
// queue, committer and ingester (internal/ledger/spool) in front of a
// SQLite file, and the reads of that file. Its Run must be running for
// Append to return: see Run. It is safe for concurrent use. Several
// Ledgers (in one process or several) may share a file, though only one
// committer writes at a time; with Options.Spool, only one of them writes
// (see Options.Reader).
type Ledger struct {
	*spool.Ledger
	db *sql.DB
}

// Open opens the ledger in the SQLite file at path, creating the file and
// its parent directories if missing, and migrates its schema to the
// current version. It fails if the file is not a SQLite database, if its
// schema is newer than this code knows, if opts is invalid, or, with
// Options.Spool and not Options.Reader, if another Ledger writes the file
// (*InUseError). It starts no goroutine: the committer is Run.
func Open(ctx context.Context, path string, opts Options) (*Ledger, error) {
	so := spool.Options{
		Reader:   opts.Reader,
		MaxBatch: opts.MaxBatch,
		MaxWait:  opts.MaxWait,
		Linger:   opts.Linger,
		MaxBytes: opts.SpoolMaxBytes,
		Name:     "ledger/sqlite",
		Logger:   opts.Logger,
		OnError:  opts.OnError,
		Fault:    opts.Fault,
	}
	if opts.Spool {
		so.Path = path + spool.Suffix
	}
	if opts.tune != nil {
		opts.tune(&so)
	}
	s := &sink{}
	// The spool's lock first (spool.Open takes it before check): a second
	// writer must learn that it is one before it touches the database (a
	// newer binary would otherwise migrate the schema under the running
	// writer).
	core, err := spool.Open(ctx, s, so, func() error {
		db, err := sqlitedb.Open(ctx, path, pragmas, migrations, "ledger", opts.OnMigrate)
		if err != nil {
			return fmt.Errorf("ledger/sqlite: %w", err)
		}
		s.db = db
		return nil
	})
	if err != nil {
		if s.db != nil {
			err = errors.Join(err, s.db.Close())
		}
		return nil, err
	}
	return &Ledger{Ledger: core, db: s.db}, nil
}

// Close fails the Appends still queued with ledger.ErrClosed, refuses new
// ones and closes the spool and the database. Call it after Run returned
// (Run commits what is queued before it returns, so then nothing is
// queued). It is safe to call more than once.
func (l *Ledger) Close() error {
	return errors.Join(l.Ledger.Close(), l.db.Close())
}

// visible returns once SQLite holds what was acknowledged before the
// call: see spool.Ledger.Visible.
func (l *Ledger) visible(ctx context.Context) error {
	if err := l.Visible(ctx); err != nil {
		return fmt.Errorf("ledger/sqlite: %w", err)
	}
	return nil
}

// sink is the SQLite database behind the spool.
type sink struct{ db *sql.DB }

// prepared is a record as the committer inserts it.
type prepared struct {
	args []any    // the insert's arguments, encoded by encode
	agg  aggInput // what the record adds to its aggregates
}

func (*sink) Name() string { return "SQLite" }

func (*sink) Prepare(r ledger.Record) (any, error) {
	args, err := encode(r)
	if err != nil {
		return nil, err
	}
	return &prepared{args: args, agg: aggregateOf(r)}, nil
}

func (s *sink) Open(ctx context.Context) (spool.Writer, error) { return newCommitter(ctx, s.db) }

func (*sink) RecordFault(err error) bool { return recordFault(err) }

// recordFault reports whether err may be one record's fault: a constraint
// (of the spend table, or of an aggregate row, which an overflow breaks),
// or a batch sum that would overflow.
func recordFault(err error) bool {
	return sqliteCode(err)&0xff == sqlite3.SQLITE_CONSTRAINT || errors.Is(err, errOverflow)
}

// encode validates r and turns it into the insert's arguments, in the
// order of columns.
func encode(r ledger.Record) ([]any, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	started, err := ledger.Nanos("started_at", r.StartedAt)
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", r.RequestID, err)
	}
	finished, err := ledger.Nanos("finished_at", r.FinishedAt)
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", r.RequestID, err)
	}
	args := append(make([]any, 0, numColumns),
		r.RequestID, r.KeyID, r.Team, r.Org, r.Endpoint, r.Model, r.Provider, r.UpstreamModel,
		r.Priced, int64(r.Status), r.Outcome, r.Estimated, r.Stream,
		started, finished, int64(r.TTFT),
		r.ClientRequestID, r.ErrorType, r.CostPico)
	for _, v := range r.Tokens {
		args = append(args, v)
	}
	return args, nil
}

// tokenColumns is the spend table's token columns, in tokens.Kind's
// order, each formatted with format ("sum(%s)"), joined by commas.
func tokenColumns(format string) string {
	var b strings.Builder
	for _, k := range tokens.All() {
		if k > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, format, k.Names().Column)
	}
	return b.String()
}

func sqliteCode(err error) int { return sqlitedb.Code(err) }
