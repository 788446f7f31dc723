package sqlite

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/tokens"
)

// pending is one queued Append.
type pending struct {
	args    []any    // the insert's arguments, encoded by Append
	agg     aggInput // what the record adds to its aggregates
	payload []byte   // the record as spooled; nil without a spool
	// done receives the outcome once; buffered, so the committer never
	// waits for an Append that gave up.
	done chan error
}

// Append queues r for the committer and returns once the transaction that
// holds it committed (WAL synced, synchronous=FULL) — with a spool, once
// the spool write that holds it was synced (fdatasync) — or with that
// transaction's or write's error, in which case the caller may Append r
// again.
//
// Run must be running: Append never writes by itself. If ctx ends first,
// Append returns an error wrapping ctx.Err(); r stays queued and is
// committed when the committer reaches it (if the ledger is closed before,
// it is not). If ctx is already done, nothing is queued. Once Run has
// returned, or Close was called, Append returns ledger.ErrClosed.
func (l *Ledger) Append(ctx context.Context, r ledger.Record) error {
	args, err := encode(r)
	if err != nil {
		return fmt.Errorf("ledger/sqlite: append: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ledger/sqlite: append %s: %w", r.RequestID, err)
	}
	p := &pending{args: args, agg: aggregateOf(r), done: make(chan error, 1)}
	if l.sp != nil {
		p.payload = appendRecord(make([]byte, 0, 256), &r)
	}
	select {
	case l.slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("ledger/sqlite: append %s: queue full: %w", r.RequestID, ctx.Err())
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		<-l.slots
		return fmt.Errorf("ledger/sqlite: append %s: %w", r.RequestID, ledger.ErrClosed)
	}
	l.queue = append(l.queue, p)
	n := len(l.queue)
	if n == 1 {
		l.first = time.Now()
	}
	l.mu.Unlock()
	if n == 1 || n == l.maxBatch {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}

	select {
	case err = <-p.done:
	case <-ctx.Done():
		select {
		case err = <-p.done: // it finished meanwhile: report that
		default:
			return fmt.Errorf("ledger/sqlite: append %s: waiting for commit: %w", r.RequestID, ctx.Err())
		}
	}
	if err != nil {
		return fmt.Errorf("ledger/sqlite: append %s: %w", r.RequestID, err)
	}
	return nil
}

// encode validates r and turns it into the insert's arguments, in the
// order of columns.
func encode(r ledger.Record) ([]any, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	started, err := nanos("started_at", r.StartedAt)
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", r.RequestID, err)
	}
	finished, err := nanos("finished_at", r.FinishedAt)
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

// Run is the committer: it takes up to MaxBatch queued records (waiting at
// most MaxWait after the first arrived for more), inserts them in one
// transaction with prepared statements (committer.go), commits, and tells
// each Append the outcome. It blocks until ctx ends; then it stops taking
// Appends (they get ledger.ErrClosed), commits everything already queued,
// and returns nil, or the error of a commit that failed while draining.
//
// With a spool, Run writes each batch to the spool instead and acknowledges
// it, and runs the ingester, which inserts the spooled records into SQLite
// (ingest.go); when ctx ends it spools what is queued, lets the ingester
// finish, and returns the error that left records in the spool (they are
// replayed at the next Open), if any.
//
// Run must be running for Appends to return, and may run once per Ledger.
// A commit that fails fails only its batch: Run goes on with the next.
// Run returns early, failing what is queued, only if it cannot set up its
// connection.
func (l *Ledger) Run(ctx context.Context) error {
	l.mu.Lock()
	switch {
	case l.closed:
		l.mu.Unlock()
		return fmt.Errorf("ledger/sqlite: run: %w", ledger.ErrClosed)
	case l.running:
		l.mu.Unlock()
		return errors.New("ledger/sqlite: run: already running")
	}
	l.running = true
	l.mu.Unlock()

	// The database work goes on after ctx ends: what is queued must be
	// committed, and a half-done commit must not be interrupted.
	dbctx := context.WithoutCancel(ctx)
	c, err := newCommitter(dbctx, l.db)
	if err != nil {
		err = fmt.Errorf("ledger/sqlite: run: %w", err)
		l.stop(dbctx, nil, err)
		return err
	}
	commit := func(batch []*pending) { _ = l.commit(dbctx, c, batch) }
	var ingested chan error
	var stopIngest chan struct{}
	if l.sp != nil {
		// The ingester owns c; this goroutine only spools.
		ingested, stopIngest = make(chan error, 1), make(chan struct{})
		l.ing.mu.Lock()
		l.ing.running = true
		l.ing.mu.Unlock()
		go func() { ingested <- l.ingest(dbctx, c, stopIngest) }()
		commit = l.spoolBatch
	}
	stop := func() error {
		if l.sp == nil {
			return l.stop(dbctx, c, nil)
		}
		return l.stopSpooled(dbctx, c, stopIngest, ingested)
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	idle := l.newIdle(c)
	lastBatch := 0
	for {
		if ctx.Err() != nil {
			return stop()
		}
		l.mu.Lock()
		n, first := len(l.queue), l.first
		l.mu.Unlock()
		if n == 0 {
			// While the spool writes into its reserve, grow it again
			// every second, on this goroutine, which alone writes it.
			var regrow <-chan time.Time
			if l.sp != nil && l.sp.low != nil {
				regrow = time.After(time.Second)
			}
			select {
			case <-l.wake:
				idle.stop()
				continue
			case <-regrow:
				l.sp.regrow()
				l.noteLow()
				continue
			case <-idle.due():
				idle.checkpoint(dbctx)
				continue
			case <-ctx.Done():
				idle.stop()
				return stop()
			}
		}
		wait := l.maxWait
		if wait == 0 && lastBatch > 1 {
			wait = l.linger // there is load: let the batch fill a little
		}
		if n < l.maxBatch && wait > 0 {
			if d := time.Until(first.Add(wait)); d > 0 {
				timer.Reset(d)
				select {
				case <-timer.C:
				case <-l.wake: // maybe full now: look again
					timer.Stop()
					continue
				case <-ctx.Done():
					timer.Stop()
					return stop()
				}
			}
		}
		// A failed batch's error went to its Appends, whose callers may
		// retry; the committer goes on with the next batch.
		batch := l.take()
		lastBatch = len(batch)
		commit(batch)
		if l.sp == nil {
			idle.committed() // with a spool, the ingester commits
		}
	}
}

// checkpointIdle is how long a committer (the ingester, with a spool)
// waits, once it has nothing to commit, before it checkpoints the WAL:
// its commits checkpoint only every committerCheckpoint pages, so that a
// page changed by several commits is copied once, and when the load stops
// what is left is copied then rather than stay in the WAL until more
// commits come. Under load the committer is never idle that long, so
// this adds no checkpoint. A variable for tests.
var checkpointIdle = time.Second

// idleCheckpoint is a committer's idle checkpoint: due once checkpointIdle
// has passed since the committer last went idle after committing.
type idleCheckpoint struct {
	l       *Ledger
	c       *committer
	timer   *time.Timer
	pending bool // committed since the last checkpoint
	armed   bool // timer runs
}

func (l *Ledger) newIdle(c *committer) *idleCheckpoint {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &idleCheckpoint{l: l, c: c, timer: t}
}

// committed notes a commit.
func (i *idleCheckpoint) committed() { i.pending = true }

// due arms the timer if a checkpoint is pending and returns its channel;
// nil (never ready) if none is.
func (i *idleCheckpoint) due() <-chan time.Time {
	if !i.pending {
		return nil
	}
	if !i.armed {
		i.timer.Reset(checkpointIdle)
		i.armed = true
	}
	return i.timer.C
}

// stop disarms the timer: there is work again.
func (i *idleCheckpoint) stop() {
	i.timer.Stop()
	i.armed = false
}

// checkpoint checkpoints the WAL; a failure is reported, and the next
// commits checkpoint as usual.
func (i *idleCheckpoint) checkpoint(ctx context.Context) {
	i.pending, i.armed = false, false
	if _, _, err := i.c.checkpoint(ctx); err != nil {
		i.l.report(fmt.Errorf("checkpoint when idle: %w", err))
	}
	i.l.nCheckpoints.Add(1)
}

// stopSpooled is stop with a spool: it refuses new Appends, spools what
// is queued, lets the ingester finish, and rewinds the spool if SQLite
// holds all of it. It returns the error that left records in the spool.
func (l *Ledger) stopSpooled(ctx context.Context, c *committer, stopIngest chan struct{}, ingested chan error) error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	for {
		batch := l.take()
		if len(batch) == 0 {
			break
		}
		l.spoolBatch(batch)
	}
	close(stopIngest)
	err := <-ingested
	s := &l.ing
	s.mu.Lock()
	s.running = false
	caughtUp, broken := s.ingested == s.written, s.broken
	close(s.progress) // a read still waiting sees the ingester gone
	s.progress = make(chan struct{})
	s.mu.Unlock()
	if err == nil && caughtUp && !broken {
		err = l.sp.rewind(true)
	}
	if err != nil {
		err = fmt.Errorf("ledger/sqlite: run: %w", err)
	}
	return errors.Join(err, c.close())
}

// stop refuses new Appends, then commits what is queued with c, or, if c
// is nil, fails it with cause. It returns the first commit error, wrapped.
func (l *Ledger) stop(ctx context.Context, c *committer, cause error) error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	var first error
	for {
		batch := l.take()
		if len(batch) == 0 {
			break
		}
		if c == nil {
			finish(batch, cause)
			continue
		}
		if err := l.commit(ctx, c, batch); err != nil && first == nil {
			first = fmt.Errorf("ledger/sqlite: run: commit queued records: %w", err)
		}
	}
	if c == nil {
		return nil
	}
	return errors.Join(first, c.close())
}

// take removes up to maxBatch records from the head of the queue and gives
// back their slots. If records are left, they are due at once: the queue
// was more than full.
func (l *Ledger) take() []*pending {
	l.mu.Lock()
	k := min(l.maxBatch, len(l.queue))
	batch := make([]*pending, k)
	copy(batch, l.queue)
	rest := copy(l.queue, l.queue[k:])
	clear(l.queue[rest:])
	l.queue = l.queue[:rest]
	l.first = time.Time{}
	l.mu.Unlock()
	for range k {
		<-l.slots
	}
	return batch
}

// finish tells every Append of batch its outcome.
func finish(batch []*pending, err error) {
	for _, p := range batch {
		p.done <- err
	}
}

// commit writes batch in one transaction and tells every Append the
// outcome. A record that breaks a constraint (which Validate should have
// prevented), or whose sums would overflow an aggregate, fails alone: the
// transaction is rolled back and retried without it. When an aggregate
// row refuses the batch's sum (its stored total would overflow) and no
// single record is to blame, the records are committed one per
// transaction, so that only those that cannot be counted fail. Any other
// error fails the whole batch; it is returned.
func (l *Ledger) commit(ctx context.Context, c *committer, batch []*pending) error {
	return l.commitCounted(ctx, c, batch, l.sp == nil)
}

// commitCounted is commit; count says whether Stats counts the commit
// (with a spool, Stats counts what is spooled: see spoolBatch).
func (l *Ledger) commitCounted(ctx context.Context, c *committer, batch []*pending, count bool) error {
	for len(batch) > 0 {
		bad, err := -1, l.injected("commit")
		if err == nil {
			bad, err = c.write(ctx, batch)
		}
		switch {
		case err == nil:
			if count {
				l.nCommits.Add(1)
				l.nRecords.Add(int64(len(batch)))
			}
			finish(batch, nil)
			return nil
		case !recordFault(err):
			finish(batch, err)
			return err
		case bad >= 0:
			batch[bad].done <- err
			batch = append(batch[:bad], batch[bad+1:]...)
		case len(batch) == 1:
			finish(batch, err)
			return nil
		default:
			var first error
			for _, p := range batch {
				if err := l.commitCounted(ctx, c, []*pending{p}, count); err != nil && first == nil {
					first = err
				}
			}
			return first
		}
	}
	return nil
}

// recordFault reports whether err may be one record's fault: a constraint
// (of the spend table, or of an aggregate row, which an overflow breaks),
// or a batch sum that would overflow.
func recordFault(err error) bool {
	return sqliteCode(err)&0xff == sqlite3.SQLITE_CONSTRAINT || errors.Is(err, errOverflow)
}
