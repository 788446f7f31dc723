package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicegw/sluice/internal/ledger"
)

// ReportInterval is how often a serving replica reports its spool.
const ReportInterval = 5 * time.Second

// SpoolState is what a replica last reported of its spool.
type SpoolState struct {
	// Spool names the spool: the replica's host and the spool's path.
	Spool string
	// Backlog counts the acknowledged records in the spool that the
	// database does not have; OldestAt is when the oldest of them was
	// spooled (zero without a backlog).
	Backlog  int64
	OldestAt time.Time
	// UpdatedAt is when the replica said so. A replica that stopped with
	// a backlog (killed, or its database down at its stop) keeps the
	// records in its spool until it starts again: its report stays.
	UpdatedAt time.Time
}

// Report records, for the spool named spool, its backlog and when its
// oldest record was spooled (zero time: none).
func (l *DB) Report(ctx context.Context, spool string, backlog int64, oldest, now time.Time) error {
	var oldestAt int64
	if !oldest.IsZero() {
		oldestAt = oldest.UnixNano()
	}
	_, err := l.pool.Exec(ctx, `INSERT INTO ledger_spools (spool, backlog, oldest_at, updated_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (spool) DO UPDATE SET backlog = excluded.backlog, oldest_at = excluded.oldest_at, updated_at = excluded.updated_at`,
		spool, backlog, oldestAt, now.UnixNano())
	if err != nil {
		return fmt.Errorf("postgres ledger: report the spool: %w", err)
	}
	return nil
}

// Behind returns the spools whose last report holds records the database
// does not have, oldest first: what a read of the database may miss.
func (l *DB) Behind(ctx context.Context) ([]SpoolState, error) {
	rows, err := l.pool.Query(ctx, `SELECT spool, backlog, oldest_at, updated_at FROM ledger_spools WHERE backlog > 0 ORDER BY oldest_at, spool`)
	if err != nil {
		return nil, fmt.Errorf("postgres ledger: spools' reports: %w", err)
	}
	states, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SpoolState, error) {
		var s SpoolState
		var oldest, updated int64
		err := r.Scan(&s.Spool, &s.Backlog, &oldest, &updated)
		s.OldestAt, s.UpdatedAt = ledger.FromNanos(oldest), ledger.FromNanos(updated)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres ledger: spools' reports: %w", err)
	}
	return states, nil
}

// ReportSpool reports this Ledger's spool as name every ReportInterval
// until ctx ends, and once more then (on a context of its own, bounded):
// a stop that leaves records in the spool says so. A report that fails
// (the database down) is tried again at the next interval.
func (l *Ledger) ReportSpool(ctx context.Context, name string) error {
	report := func(ctx context.Context) {
		var oldest time.Time
		if d := l.OldestSpooled(); d > 0 {
			oldest = time.Now().Add(-d)
		}
		if err := l.db.Report(ctx, name, l.Backlog(), oldest, time.Now()); err != nil && ctx.Err() == nil {
			l.db.log.Warn("reporting the spool's backlog", "err", err)
		}
	}
	t := time.NewTicker(ReportInterval)
	defer t.Stop()
	for {
		report(ctx)
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			report(fctx)
			cancel()
			return nil
		case <-t.C:
		}
	}
}

// Staleness says, for a reader of the database, what the spools' reports
// say it may miss; "" when nothing.
func Staleness(states []SpoolState, now time.Time) string {
	if len(states) == 0 {
		return ""
	}
	var n int64
	for _, s := range states {
		n += s.Backlog
	}
	s := states[0]
	return fmt.Sprintf("%d acknowledged spend records are in %d replicas' spools and not yet in PostgreSQL, the oldest since %s (%s, reported %s ago): what is read may miss them",
		n, len(states), s.OldestAt.Format(time.RFC3339), s.Spool, now.Sub(s.UpdatedAt).Round(time.Second))
}
