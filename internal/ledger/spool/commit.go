package spool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
)

// pending is one queued Append.
type pending struct {
	prep    any    // the record as the Sink prepared it
	payload []byte // the record as spooled; nil without a spool
	// done receives the outcome once; buffered, so the committer never
	// waits for an Append that gave up.
	done chan error
}

// Append queues r for the committer and returns once the sink's
// transaction that holds it committed (durably) — with a spool, once the
// spool write that holds it was synced (fdatasync) — or with that
// transaction's or write's error, in which case the caller may Append r
// again.
//
// Run must be running: Append never writes by itself. If ctx ends first,
// Append returns an error wrapping ctx.Err(); r stays queued and is
// committed when the committer reaches it (if the ledger is closed before,
// it is not). If ctx is already done, nothing is queued. Once Run has
// returned, or Close was called, Append returns ledger.ErrClosed.
func (l *Ledger) Append(ctx context.Context, r ledger.Record) error {
	prep, err := l.sink.Prepare(r)
	if err != nil {
		return fmt.Errorf("%s: append: %w", l.name, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: append %s: %w", l.name, r.RequestID, err)
	}
	p := &pending{prep: prep, done: make(chan error, 1)}
	if l.sp != nil {
		p.payload = appendRecord(make([]byte, 0, 256), &r)
	}
	select {
	case l.slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%s: append %s: queue full: %w", l.name, r.RequestID, ctx.Err())
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		<-l.slots
		return fmt.Errorf("%s: append %s: %w", l.name, r.RequestID, ledger.ErrClosed)
	}
	l.queue = append(l.queue, p)
	n := len(l.queue)
	if n == 1 {
		l.first = time.Now()
	}
	l.mu.Unlock()
	if n == 1 || n == l.opts.MaxBatch {
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
			return fmt.Errorf("%s: append %s: waiting for commit: %w", l.name, r.RequestID, ctx.Err())
		}
	}
	if err != nil {
		return fmt.Errorf("%s: append %s: %w", l.name, r.RequestID, err)
	}
	return nil
}

// Run is the committer: it takes up to MaxBatch queued records (waiting at
// most MaxWait after the first arrived for more), writes them in one of
// the sink's transactions, and tells each Append the outcome. It blocks until ctx ends; then it stops taking
// Appends (they get ledger.ErrClosed), commits everything already queued,
// and returns nil, or the error of a commit that failed while draining.
//
// With a spool, Run writes each batch to the spool instead and acknowledges
// it, and runs the ingester, which writes the spooled records to the sink
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
		return fmt.Errorf("%s: run: %w", l.name, ledger.ErrClosed)
	case l.running:
		l.mu.Unlock()
		return fmt.Errorf("%s: run: already running", l.name)
	}
	l.running = true
	l.mu.Unlock()

	// The database work goes on after ctx ends: what is queued must be
	// committed, and a half-done commit must not be interrupted.
	dbctx := context.WithoutCancel(ctx)
	c, err := l.sink.Open(dbctx)
	if err != nil {
		err = fmt.Errorf("%s: run: %w", l.name, err)
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
		wait := l.opts.MaxWait
		if wait == 0 && lastBatch > 1 {
			wait = l.opts.Linger // there is load: let the batch fill a little
		}
		if n < l.opts.MaxBatch && wait > 0 {
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

// idleCheckpoint calls a Writer's Idle once Options.IdleAfter has passed
// since the committer (the ingester, with a spool) last went idle after
// committing. Under load the committer is never idle that long, so this
// adds no call.
type idleCheckpoint struct {
	l       *Ledger
	c       Writer
	timer   *time.Timer
	pending bool // committed since the last checkpoint
	armed   bool // timer runs
}

func (l *Ledger) newIdle(c Writer) *idleCheckpoint {
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
		i.timer.Reset(i.l.opts.IdleAfter)
		i.armed = true
	}
	return i.timer.C
}

// stop disarms the timer: there is work again.
func (i *idleCheckpoint) stop() {
	i.timer.Stop()
	i.armed = false
}

// checkpoint calls the Writer's Idle; a failure is reported.
func (i *idleCheckpoint) checkpoint(ctx context.Context) {
	i.pending, i.armed = false, false
	if err := i.c.Idle(ctx); err != nil {
		i.l.report(fmt.Errorf("when idle: %w", err))
	}
	i.l.nIdle.Add(1)
}

// stopSpooled is stop with a spool: it refuses new Appends, spools what
// is queued, lets the ingester finish, and rewinds the spool if the sink
// holds all of it. It returns the error that left records in the spool.
func (l *Ledger) stopSpooled(ctx context.Context, c Writer, stopIngest chan struct{}, ingested chan error) error {
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
		err = fmt.Errorf("%s: run: %w", l.name, err)
	}
	return errors.Join(err, c.Close())
}

// stop refuses new Appends, then commits what is queued with c, or, if c
// is nil, fails it with cause. It returns the first commit error, wrapped.
func (l *Ledger) stop(ctx context.Context, c Writer, cause error) error {
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
			first = fmt.Errorf("%s: run: commit queued records: %w", l.name, err)
		}
	}
	if c == nil {
		return nil
	}
	return errors.Join(first, c.Close())
}

// take removes up to MaxBatch records from the head of the queue and gives
// back their slots. If records are left, they are due at once: the queue
// was more than full.
func (l *Ledger) take() []*pending {
	l.mu.Lock()
	k := min(l.opts.MaxBatch, len(l.queue))
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
func (l *Ledger) commit(ctx context.Context, c Writer, batch []*pending) error {
	return l.commitCounted(ctx, c, batch, l.sp == nil)
}

// noRecord is a Writer's bad when no one record is to blame.
const noRecord = -1

// commitCounted is commit; count says whether Stats counts the commit
// (with a spool, Stats counts what is spooled: see spoolBatch).
func (l *Ledger) commitCounted(ctx context.Context, c Writer, batch []*pending, count bool) error {
	for len(batch) > 0 {
		bad, err := noRecord, l.injected("commit")
		if err == nil {
			preps := make([]any, len(batch))
			for i, p := range batch {
				preps[i] = p.prep
			}
			bad, err = c.Write(ctx, preps)
		}
		switch {
		case err == nil:
			if count {
				l.nCommits.Add(1)
				l.nRecords.Add(int64(len(batch)))
			}
			finish(batch, nil)
			return nil
		case !l.sink.RecordFault(err):
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
