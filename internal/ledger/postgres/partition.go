package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicegw/sluice/internal/ledger"
)

// The partitions of ledger_records are UTC months of started_at, named
// ledger_records_YYYY_MM. The first month a Unix nanosecond can reach
// (1677-09) starts below math.MinInt64 and the last (2262-04) ends above
// math.MaxInt64: their outer bounds are MINVALUE and MAXVALUE.

// Ahead is how many months after the current one EnsurePartitions makes.
const Ahead = 3

// lockTimeout bounds every wait for a table lock that partition upkeep
// takes, so that it never stalls the inserts and reads queued behind it
// for longer.
const lockTimeout = "2s"

// partitionsKey is the pg_advisory_xact_lock key under which partitions
// are made and dropped, so that two replicas do not race to make the same
// month.
var partitionsKey = func() int64 {
	h := fnv.New64a()
	h.Write([]byte("sluice_ledger:partitions"))
	return int64(h.Sum64())
}()

var (
	firstStorable = time.Unix(0, math.MinInt64)
	lastStorable  = time.Unix(0, math.MaxInt64)
)

// month is a partition: the UTC month that starts at start.
type month struct{ start time.Time }

// monthOf is the month that holds t.
func monthOf(t time.Time) month {
	t = t.UTC()
	return month{time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)}
}

func (m month) next() month { return month{m.start.AddDate(0, 1, 0)} }

func (m month) name() string {
	return fmt.Sprintf("ledger_records_%04d_%02d", m.start.Year(), int(m.start.Month()))
}

// lo and last are the first and last started_at the month holds.
func (m month) lo() int64 {
	if m.start.Before(firstStorable) {
		return math.MinInt64
	}
	return m.start.UnixNano()
}

func (m month) last() int64 {
	if end := m.next().start; end.After(lastStorable) {
		return math.MaxInt64
	}
	return m.next().start.UnixNano() - 1
}

// buckets are the first and last buckets (Unix seconds) of the month's
// records. A month starts on a bucket's edge; the first and last months
// a nanosecond reaches are open at their outer end.
func (m month) buckets() (lo, last int64) {
	lo, last = math.MinInt64, math.MaxInt64
	if m.lo() != math.MinInt64 {
		lo = m.lo() / 1e9
	}
	if m.last() != math.MaxInt64 {
		last = (m.last()+1)/1e9 - 1
	}
	return lo, last
}

// bounds is the month's FOR VALUES clause.
func (m month) bounds() string {
	from, to := "MINVALUE", "MAXVALUE"
	if m.lo() != math.MinInt64 {
		from = strconv.FormatInt(m.lo(), 10)
	}
	if m.last() != math.MaxInt64 {
		to = strconv.FormatInt(m.last()+1, 10)
	}
	return "FROM (" + from + ") TO (" + to + ")"
}

// parseMonth is the month a partition's name names, and false for a name
// that is not one of ours.
func parseMonth(name string) (month, bool) {
	var y, mo int
	if n, err := fmt.Sscanf(name, "ledger_records_%04d_%02d", &y, &mo); err != nil || n != 2 || mo < 1 || mo > 12 {
		return month{}, false
	}
	m := month{time.Date(y, time.Month(mo), 1, 0, 0, 0, 0, time.UTC)}
	return m, m.name() == name
}

// EnsurePartitions makes the partitions of now's month and the Ahead
// months after it, those that do not exist yet. Open calls it; a
// long-running process should call it daily, so that Insert rarely has to
// make a partition on demand.
func (l *DB) EnsurePartitions(ctx context.Context, now time.Time) error {
	ms := []month{monthOf(now)}
	for range Ahead {
		ms = append(ms, ms[len(ms)-1].next())
	}
	if err := l.ensure(ctx, ms); err != nil {
		return fmt.Errorf("postgres ledger: partitions: %w", err)
	}
	return nil
}

// ensure makes the partitions of ms that do not exist yet, except those
// of a range retention dropped (a record there is never stored again).
//
// Each is made as a table of ledger_records' shape, then attached:
// CREATE TABLE … PARTITION OF waits for an ACCESS EXCLUSIVE lock on
// ledger_records, which every insert and read in flight holds off and
// which, while waited for, queues every later one; ATTACH PARTITION takes
// SHARE UPDATE EXCLUSIVE, which neither waits for them nor blocks them.
// The table is empty, so the attachment's check of its rows and the build
// of its indexes take no time. Both happen in one transaction, so a
// partition is never left unattached.
func (l *DB) ensure(ctx context.Context, ms []month) error {
	missing, err := l.missing(ctx, ms)
	if err != nil || len(missing) == 0 {
		return err
	}
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return err
	}
	err = func() error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, partitionsKey); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+lockTimeout+`'`); err != nil {
			return err
		}
		// Under the lock, what is missing now: another replica may have
		// made some in the meantime.
		missing, err = missingIn(ctx, tx, missing)
		if err != nil {
			return err
		}
		for _, m := range missing {
			_, err := tx.Exec(ctx, `CREATE TABLE `+m.name()+` (LIKE ledger_records INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
				ALTER TABLE ledger_records ATTACH PARTITION `+m.name()+` FOR VALUES `+m.bounds(), pgx.QueryExecModeSimpleProtocol)
			if err != nil {
				return fmt.Errorf("make %s: %w", m.name(), err)
			}
		}
		return nil
	}()
	if err != nil {
		return errors.Join(err, rollback(ctx, tx))
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	for _, m := range missing {
		l.log.Info("made ledger partition", "partition", m.name())
	}
	return nil
}

// missing is the months of ms (deduplicated) that have no partition and
// whose range retention did not drop.
func (l *DB) missing(ctx context.Context, ms []month) ([]month, error) {
	return missingIn(ctx, l.pool, ms)
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func missingIn(ctx context.Context, q querier, ms []month) ([]month, error) {
	slices.SortFunc(ms, func(a, b month) int { return a.start.Compare(b.start) })
	ms = slices.Compact(ms)
	names, los := make([]string, len(ms)), make([]int64, len(ms))
	for i, m := range ms {
		names[i], los[i] = m.name(), m.lo()
	}
	rows, err := q.Query(ctx, `SELECT n FROM unnest($1::text[], $2::bigint[]) AS m(n, lo)
		WHERE to_regclass(n) IS NULL AND NOT EXISTS (SELECT 1 FROM ledger_dropped d WHERE m.lo BETWEEN d.lo AND d.last)`,
		names, los)
	if err != nil {
		return nil, err
	}
	missing, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var out []month
	for _, m := range ms {
		if slices.Contains(missing, m.name()) {
			out = append(out, m)
		}
	}
	return out, nil
}

// lockNotAvailable is PostgreSQL's SQLSTATE for a lock not granted within
// lock_timeout (or NOWAIT).
const lockNotAvailable = "55P03"

// DropBefore drops the partitions whose every instant is before cutoff,
// oldest first, each in a transaction of its own under a lock_timeout of
// 2 s, and returns the names of those dropped. A partition it cannot lock
// in time (a long report reads it, or an insert or read holds
// ledger_records, whose ACCESS EXCLUSIVE lock a DROP needs) is skipped and
// named in the error, which wraps ErrSkipped, the others dropped still;
// calling DropBefore again later tries it again.
//
// With each partition go its records' request ids and the aggregates'
// buckets of its month, and its range is noted in ledger_dropped, so that
// a record of it replayed later is skipped rather than stored and counted
// again. The lifetime sums stay: they are what lifetime budgets are
// enforced against.
func (l *DB) DropBefore(ctx context.Context, cutoff time.Time) (dropped []string, err error) {
	defer func() {
		if len(dropped) > 0 {
			err = errors.Join(err, l.loadDropped(ctx))
		}
	}()
	rows, err := l.pool.Query(ctx, `SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'ledger_records'::regclass`)
	if err != nil {
		return nil, fmt.Errorf("postgres ledger: drop partitions: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres ledger: drop partitions: %w", err)
	}
	var old []month
	for _, n := range names {
		if m, ok := parseMonth(n); ok && !m.next().start.After(cutoff) {
			old = append(old, m)
		}
	}
	slices.SortFunc(old, func(a, b month) int { return a.start.Compare(b.start) })
	var errs []error
	for _, m := range old {
		err := l.drop(ctx, m)
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			dropped = append(dropped, m.name())
		case errors.As(err, &pgErr) && pgErr.Code == lockNotAvailable:
			errs = append(errs, fmt.Errorf("%s: %w (%v)", m.name(), ErrSkipped, err))
		default:
			return dropped, fmt.Errorf("postgres ledger: drop %s: %w", m.name(), errors.Join(append(errs, err)...))
		}
	}
	if len(errs) > 0 {
		return dropped, fmt.Errorf("postgres ledger: drop partitions: %w", errors.Join(errs...))
	}
	return dropped, nil
}

// ErrSkipped is wrapped by DropBefore's error for each partition it could
// not lock in time.
var ErrSkipped = errors.New("partition in use, skipped")

// drop drops m's partition, its request ids and its buckets. The
// partition is locked first, so that a partition in use is given up
// before any work is done; the DROP then waits, within the same timeout,
// for ledger_records itself.
func (l *DB) drop(ctx context.Context, m month) error {
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return err
	}
	err = func() error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, partitionsKey); err != nil {
			return err
		}
		batch := &pgx.Batch{}
		batch.Queue(`SET LOCAL lock_timeout = '` + lockTimeout + `'`)
		batch.Queue(`LOCK TABLE ` + m.name() + ` IN ACCESS EXCLUSIVE MODE`)
		batch.Queue(`DELETE FROM ledger_ids i USING ` + m.name() + ` r
			WHERE i.request_id = r.request_id AND i.started_at = r.started_at`)
		batch.Queue(`DROP TABLE ` + m.name())
		lo, last := m.buckets()
		batch.Queue(`DELETE FROM ledger_buckets WHERE bucket BETWEEN $1 AND $2`, lo, last)
		batch.Queue(`INSERT INTO ledger_dropped (lo, last, name) VALUES ($1, $2, $3) ON CONFLICT (lo) DO NOTHING`,
			m.lo(), m.last(), m.name())
		return tx.SendBatch(ctx, batch).Close()
	}()
	if err != nil {
		return errors.Join(err, rollback(ctx, tx))
	}
	return tx.Commit(ctx)
}

// span is a range of started_at, inclusive: a dropped month's.
type span struct{ lo, last int64 }

// loadDropped reads ledger_dropped into l.dropped.
func (l *DB) loadDropped(ctx context.Context) error {
	rows, err := l.pool.Query(ctx, `SELECT lo, last FROM ledger_dropped ORDER BY lo`)
	if err != nil {
		return fmt.Errorf("postgres ledger: dropped months: %w", err)
	}
	spans, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (span, error) {
		var s span
		return s, r.Scan(&s.lo, &s.last)
	})
	if err != nil {
		return fmt.Errorf("postgres ledger: dropped months: %w", err)
	}
	l.dropped.Store(&spans)
	return nil
}

// noteLate counts and logs the records of recs whose months retention
// dropped before they arrived: Insert skips them (their request ids went
// with the month, so a record counted before cannot be told from one
// never counted), and their spend is in no total.
func (l *DB) noteLate(recs []ledger.Record) {
	spans := l.dropped.Load()
	if spans == nil || len(*spans) == 0 {
		return
	}
	n := 0
	for _, r := range recs {
		at := r.StartedAt.UnixNano()
		for _, s := range *spans {
			if at >= s.lo && at <= s.last {
				n++
				break
			}
		}
	}
	if n > 0 {
		l.lateDropped.Add(int64(n))
		l.log.Warn("spend records of months retention dropped arrived late and were skipped: their spend is in no total (a replica's spool replayed after longer than ledger.retention?)", "records", n)
	}
}

// LateDropped counts the records Insert skipped because retention had
// dropped their month before they arrived.
func (l *DB) LateDropped() int64 { return l.lateDropped.Load() }
