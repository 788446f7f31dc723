package postgres

import (
	"context"
	"errors"
	"time"
)

// UpkeepInterval is how often Upkeep runs.
const UpkeepInterval = time.Hour

// Upkeep keeps the partitions until ctx ends: at once and then every
// UpkeepInterval, it makes the partitions of this month and the next
// ones (EnsurePartitions), and, with retention above 0, drops the months
// that end before now minus retention (DropBefore) — now by the
// database's clock, which every replica shares: a replica whose own
// clock runs ahead must not drop a month the fleet is still writing. Every replica may run
// it: the partitions' lock makes them take turns, and a month dropped or
// made already is left as it is. What fails is logged and tried again at
// the next round; it returns nil when ctx ends.
func (l *DB) Upkeep(ctx context.Context, retention time.Duration, now func() time.Time) error {
	t := time.NewTicker(UpkeepInterval)
	defer t.Stop()
	for {
		l.upkeep(ctx, retention, now())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (l *DB) upkeep(ctx context.Context, retention time.Duration, now time.Time) {
	if err := l.EnsurePartitions(ctx, now); err != nil && ctx.Err() == nil {
		l.log.Error("making the ledger's partitions ahead", "err", err)
	}
	// Another replica's retention may have dropped a month meanwhile.
	if err := l.loadDropped(ctx); err != nil && ctx.Err() == nil {
		l.log.Error("reading the months retention dropped", "err", err)
	}
	if retention <= 0 {
		return
	}
	var dbNow time.Time
	if err := l.pool.QueryRow(ctx, `SELECT now()`).Scan(&dbNow); err != nil {
		if ctx.Err() == nil {
			l.log.Error("retention: reading the database's clock", "err", err)
		}
		return
	}
	if skew := now.Sub(dbNow); skew > time.Minute || skew < -time.Minute {
		l.log.Warn("this replica's clock differs from the database's; retention goes by the database's", "skew", skew.Round(time.Second))
	}
	cutoff := dbNow.Add(-retention)
	dropped, err := l.DropBefore(ctx, cutoff)
	for _, name := range dropped {
		l.log.Info("retention dropped a month of spend records", "partition", name, "retention", retention)
	}
	switch {
	case err == nil || ctx.Err() != nil:
	case errors.Is(err, ErrSkipped):
		l.log.Warn("retention skipped a partition in use; it is tried again within the hour", "err", err)
	default:
		l.log.Error("retention", "err", err)
	}
}
