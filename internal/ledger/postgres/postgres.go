package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/ledger/spool"
	"github.com/sluicegw/sluice/internal/pgmigrate"
)

var (
	_ ledger.Ledger     = (*Ledger)(nil)
	_ ledger.Reader     = (*Ledger)(nil)
	_ ledger.Aggregates = (*Ledger)(nil)
	_ ledger.Reader     = (*DB)(nil)
	_ ledger.Aggregates = (*DB)(nil)
)

// Options tune a Ledger.
type Options struct {
	// MaxConns bounds the connection pool; 0 is pgxpool's default (the
	// larger of 4 and the number of CPUs).
	MaxConns int32
	// Log receives the partitions made on demand; nil discards it.
	Log *slog.Logger
	// Spool configures the spool in front of the database (Open only):
	// with Spool.Path, a record is acknowledged once the spool holds it
	// and the ingester moves it into PostgreSQL, retrying while the
	// database is down; without, once PostgreSQL committed it.
	Spool spool.Options
}

// Ledger is the PostgreSQL spend ledger: the spool's queue, committer and
// ingester (internal/ledger/spool) in front of the database, and the
// database's reads, which first wait until the database holds what was
// acknowledged before them. Its Run must be running for Append to return.
type Ledger struct {
	*spool.Ledger
	db *DB
}

// Open opens the database at url as OpenDB does and the spool in front of
// it (Options.Spool), replaying into the database what the spool holds:
// it fails, leaving the spool as it is, if the database is unreachable.
func Open(ctx context.Context, url string, opts Options) (*Ledger, error) {
	db, err := OpenDB(ctx, url, opts)
	if err != nil {
		return nil, err
	}
	so := opts.Spool
	if so.Name == "" {
		so.Name = "postgres ledger"
	}
	if so.Logger == nil {
		so.Logger = opts.Log
	}
	core, err := spool.Open(ctx, sink{db}, so, nil)
	if err != nil {
		return nil, errors.Join(err, db.Close())
	}
	return &Ledger{Ledger: core, db: db}, nil
}

// DB is the database side, for retention and partitions.
func (l *Ledger) DB() *DB { return l.db }

// Close closes the spool and the pool. Call it after Run returned.
func (l *Ledger) Close() error {
	return errors.Join(l.Ledger.Close(), l.db.Close())
}

// Records is DB.Records once the database holds every record acknowledged
// before the call.
func (l *Ledger) Records(ctx context.Context, f ledger.Filter) ([]ledger.Record, error) {
	if err := l.visible(ctx); err != nil {
		return nil, err
	}
	return l.db.Records(ctx, f)
}

// Totals is DB.Totals once the database holds what was acknowledged.
func (l *Ledger) Totals(ctx context.Context, f ledger.Filter, by ledger.GroupBy) ([]ledger.Total, error) {
	if err := l.visible(ctx); err != nil {
		return nil, err
	}
	return l.db.Totals(ctx, f, by)
}

// Buckets is DB.Buckets once the database holds what was acknowledged.
func (l *Ledger) Buckets(ctx context.Context, since time.Time) ([]ledger.Aggregate, error) {
	if err := l.visible(ctx); err != nil {
		return nil, err
	}
	return l.db.Buckets(ctx, since)
}

// Lifetime is DB.Lifetime once the database holds what was acknowledged.
func (l *Ledger) Lifetime(ctx context.Context) ([]ledger.Aggregate, error) {
	if err := l.visible(ctx); err != nil {
		return nil, err
	}
	return l.db.Lifetime(ctx)
}

func (l *Ledger) visible(ctx context.Context) error {
	if err := l.Visible(ctx); err != nil {
		return fmt.Errorf("postgres ledger: %w", err)
	}
	return nil
}

// sink is the database behind the spool.
type sink struct{ db *DB }

func (sink) Name() string { return "PostgreSQL" }

func (sink) Prepare(r ledger.Record) (any, error) {
	if err := validate(r); err != nil {
		return nil, err
	}
	return storable(r), nil
}

// storable is r with every text field as PostgreSQL stores text: valid
// UTF-8 without NUL. A byte sequence that is not UTF-8 (a client's
// x-request-id in Latin-1) and a NUL each become U+FFFD, so that the
// record — its cost above all — is stored rather than refused for a
// label. The SQLite ledger keeps such bytes as they are.
func storable(r ledger.Record) ledger.Record {
	for _, f := range []*string{&r.RequestID, &r.KeyID, &r.Team, &r.Org, &r.Endpoint, &r.Model, &r.Provider,
		&r.UpstreamModel, &r.Outcome, &r.ClientRequestID, &r.ErrorType} {
		if !utf8.ValidString(*f) || strings.IndexByte(*f, 0) >= 0 {
			*f = strings.ReplaceAll(strings.ToValidUTF8(*f, "\uFFFD"), "\x00", "\uFFFD")
		}
	}
	return r
}

func (s sink) Open(context.Context) (spool.Writer, error) { return writer(s), nil }

// RecordFault: Insert blames a record it finds invalid, that PostgreSQL
// refuses for its values, or whose month's partition is detached.
func (sink) RecordFault(err error) bool {
	return errors.Is(err, ledger.ErrInvalid) || errors.Is(err, errNoPartition) || refused(err)
}

// writer writes through the pool: each Write is a transaction of its own
// on any of the pool's connections.
type writer struct{ db *DB }

// writeTimeout bounds one Write: a database that does not answer (a
// network that drops packets) fails the batch, to be retried, rather
// than hold the ingester, and Run's end, forever.
const writeTimeout = 30 * time.Second

func (w writer) Write(ctx context.Context, batch []any) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	recs := make([]ledger.Record, len(batch))
	for i, p := range batch {
		recs[i] = p.(ledger.Record)
	}
	return w.db.Insert(ctx, recs)
}

func (writer) Idle(context.Context) error { return nil }
func (writer) Close() error               { return nil }

// DB is the PostgreSQL spend ledger's database side: Insert for the
// spool's ingester, the ledger.Reader and ledger.Aggregates reads, and the
// partitions' upkeep. It is safe for concurrent use, and any number of
// DBs (one per replica) may share one database.
type DB struct {
	pool *pgxpool.Pool
	log  *slog.Logger

	// dropped are the ranges of started_at whose months retention dropped
	// (ledger_dropped), as last read: Insert counts the records it skips
	// for them (lateDropped).
	dropped     atomic.Pointer[[]span]
	lateDropped atomic.Int64

	// inTx, for tests, runs inside each Insert transaction just before
	// its commit: the seam through which they see the transaction's
	// settings.
	inTx func(ctx context.Context, tx pgx.Tx) error
}

// OpenDB connects to the database at url, checks that the ledger's schema
// is the one this code needs — a *pgmigrate.VersionError if it is older
// (run `sluice migrate`) or newer (upgrade sluice); it never migrates —
// and makes the partitions of this month and the next three.
func OpenDB(ctx context.Context, url string, opts Options) (*DB, error) {
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
	l := &DB{pool: pool, log: log.With("component", "ledger")}
	if err := l.EnsurePartitions(ctx, time.Now()); err != nil {
		pool.Close()
		return nil, err
	}
	if err := l.loadDropped(ctx); err != nil {
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
func (l *DB) Close() error {
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
