package postgres

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// Reconnection waits start short, for a connection killed under a live
// server, and grow to maxBackoff while the server stays away.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// Listener wakes a follower of the store when another replica (or this
// one) writes: it LISTENs on a connection of its own, outside the pool,
// and signals C on each notification. Signals are coalesced: C holds at
// most one, which stands for "something changed since you last looked",
// never for a particular revision.
//
// C is also signalled each time the listener (re)connects, because a
// notification sent while it was away is lost: the follower reads Changes
// then and misses nothing.
type Listener struct {
	cfg *pgx.ConnConfig
	log *slog.Logger
	c   chan struct{}
}

// Listener returns a listener on s's database. It starts nothing: Run
// does.
func (s *Store) Listener() *Listener {
	cfg := s.pool.Config().ConnConfig
	cfg.RuntimeParams["application_name"] = "sluice store listener"
	return &Listener{cfg: cfg, log: s.log, c: make(chan struct{}, 1)}
}

// C is signalled after each notification and each (re)connection.
func (l *Listener) C() <-chan struct{} { return l.c }

// Run listens until ctx ends, reconnecting with backoff whenever the
// connection fails or is dropped, and returns nil then.
func (l *Listener) Run(ctx context.Context) error {
	wait := minBackoff
	for {
		connected, err := l.listen(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if connected {
			wait = minBackoff
		}
		l.log.Warn("store listener lost its connection; reconnecting", "err", err, "after", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(2*wait, maxBackoff)
	}
}

// listen connects, LISTENs and signals until the connection fails or ctx
// ends; connected reports whether it got as far as LISTEN.
func (l *Listener) listen(ctx context.Context) (connected bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	if err != nil {
		return false, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		return false, err
	}
	l.signal()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return true, err
		}
		l.signal()
	}
}

func (l *Listener) signal() {
	select {
	case l.c <- struct{}{}:
	default:
	}
}
