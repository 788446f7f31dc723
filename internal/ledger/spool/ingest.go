package spool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// With a spool, a batch goes from the committer to the ingester, which
// owns the sink's Writer: spooled batches (acknowledged, durable in
// the spool) are merged into transactions of up to ingestBatch records,
// at most Options.IngestDelay after the first arrived unless a read is waiting;
// direct batches (the spool failed) are committed as without a spool,
// their Appends told the outcome.
//
// Options.IngestDelay sizes the transactions under load, and a larger one
// costs less CPU a record (the SQLite ledger's BenchmarkIngest: 128
// records 14.8–85.9 µs each, 1,024 records 10.9–60.5 µs): 250 ms holds
// about 600 records at 2,500 a second. Nothing waits on it: a read and
// a rewind ask for what they need at once, and the records are durable
// in the spool meanwhile.
const ingestBatch = 1024

const (
	// retryFirst and retryMax bound the wait between two attempts to
	// ingest records the sink failed as a whole; at Run's end, stopAttempts
	// attempts are made before the rest is left to the next Open's replay.
	retryFirst   = 50 * time.Millisecond
	retryMax     = 5 * time.Second
	stopAttempts = 3
)

// ingestState is what the committer, the ingester and readers share.
type ingestState struct {
	mu sync.Mutex
	q  []ingestItem
	// written counts the records spooled (and acknowledged), ingested
	// those the sink holds or refused; a read waits until ingested reaches
	// the written it saw. progress is closed (and replaced) when ingested
	// grows.
	written, ingested int64
	progress          chan struct{}
	first             time.Time // when q's first item arrived
	urgent            bool      // a read waits: do not delay
	running           bool      // the ingester runs
	broken            bool      // the spool failed: batches go direct
	wake              chan struct{}
	dropped           int64
	// marks are the spooled batches the sink does not hold yet, oldest
	// first: each with written after it and when it was spooled, for
	// OldestSpooled.
	marks []spoolMark
}

type spoolMark struct {
	upTo int64
	at   time.Time
}

type ingestItem struct {
	p      *pending
	direct bool // p.done is the Append's: commit as without a spool
}

func (s *ingestState) init() {
	s.progress = make(chan struct{})
	s.wake = make(chan struct{}, 1)
}

func (s *ingestState) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// recoverSpool replays the frames of the spool Open took (and locked,
// before the database was opened: another Ledger holding it failed Open
// with *InUseError) into the sink, and rewinds it; nil sp (a system that
// cannot lock files) means no spool. A spool in which replay found damage
// is copied aside first (keepAside), and what was found is logged and
// counted.
func (l *Ledger) recoverSpool(ctx context.Context, sp *spool) error {
	if sp == nil {
		return nil
	}
	rep, err := l.replay(ctx, sp, l.report)
	if err == nil && rep.damaged() {
		err = l.keepAside(sp, rep)
	}
	if err == nil {
		err = sp.rewind(true)
	}
	if err != nil {
		return errors.Join(err, sp.close())
	}
	sp.fault = l.opts.Fault
	l.sp = sp
	return nil
}

// keepAside copies the damaged spool to <spool>-damaged-<unix time>,
// synced with its directory entry, logs what replay found and counts it.
// It fails (and so Open, leaving the spool as it is) if the copy cannot
// be made.
func (l *Ledger) keepAside(sp *spool, rep replayReport) error {
	kept, err := copyAside(sp, time.Now())
	if err != nil {
		return fmt.Errorf("replay found damage in %s, and it cannot be kept aside before it is rewound (it is left as it is): %w", sp.path, err)
	}
	l.damaged.Add(rep.damagedFrames())
	log := l.opts.Logger.With("spool", sp.path, "kept_as", kept, "generation", rep.gen, "frames_replayed", rep.frames)
	if rep.headerBad && rep.genRecovered {
		log.Error("the spool's header does not verify; its generation was taken from the first frame, and its frames replayed")
	}
	if rep.lostGen {
		log.Error("the spool's header and first frame do not verify, so the generation of its frames is unknown and none was replayed; the copy holds them")
	}
	for _, s := range rep.skips {
		log.Error("damaged spool frame skipped", "offset", s.at, "bytes_skipped", s.n, "frames_recovered_after", s.frames)
	}
	if rep.tornTail > 0 {
		log.Warn("the spool's last frame does not verify: torn by a crash while it was written (never acknowledged), or damaged (acknowledged, lost)", "offset", rep.tornTail)
	}
	return nil
}

// copyAside copies sp's file to its path plus "-damaged-" and now's Unix
// time (a number more if that name is taken), syncs the copy and its
// directory, and returns the copy's path.
func copyAside(sp *spool, now time.Time) (string, error) {
	base := fmt.Sprintf("%s-damaged-%d", sp.path, now.Unix())
	name := base
	var f *os.File
	for i := 2; ; i++ {
		var err error
		f, err = os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || i > 100 {
			return "", err
		}
		name = fmt.Sprintf("%s-%d", base, i)
	}
	cf := wrapFile(f, sp.wrap)
	_, err := io.Copy(io.NewOffsetWriter(cf, 0), io.NewSectionReader(sp.f, 0, sp.size))
	if err == nil {
		err = cf.Sync()
	}
	if err = errors.Join(err, cf.Close()); err == nil {
		err = syncDir(filepath.Dir(name), sp.wrap)
	}
	if err != nil {
		return "", errors.Join(err, os.Remove(name))
	}
	return name, nil
}

// DamagedFrames reports how many damaged stretches of the spool Open's
// replay skipped (each at least one frame), a header whose frames'
// generation was lost counting one: see spool.go.
func (l *Ledger) DamagedFrames() int64 { return l.damaged.Load() }

// catchUp is visible for a Reader, which does not own the spool (the
// writer, in this process or another, may): it inserts the frames the
// spool holds now into the sink itself, the ones already there skipped and
// not counted again, so that its reads see every record the owner
// acknowledged before they began. The owner may be writing meanwhile: a
// frame being written fails its CRC and ends the scan; one written but
// not yet synced is a real request's record either way. What its replay
// finds amiss is the owner's to report (the owner may be rewinding under
// it), so it reports nothing.
func (l *Ledger) catchUp(ctx context.Context) error {
	f, err := os.Open(l.spoolPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	_, err = l.replay(ctx, &spool{f: osFile{f}, path: l.spoolPath, size: st.Size(), off: frameStart}, func(error) {})
	return err
}

// replay inserts the spool's frames into the sink, ingestBatch at a time.
// A frame that does not decode, or a record the sink refuses, is dropped
// and reported; any other failure is returned (Open fails, the spool kept
// as it was).
func (l *Ledger) replay(ctx context.Context, sp *spool, report func(error)) (replayReport, error) {
	c, err := l.sink.Open(ctx)
	if err != nil {
		return replayReport{}, err
	}
	var batch []*pending
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		_, err := l.ingestOnce(ctx, c, batch, report)
		batch = batch[:0]
		return err
	}
	rep, err := sp.replay(func(payload []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		r, err := decodeRecord(payload)
		var prep any
		if err == nil {
			prep, err = l.sink.Prepare(r)
		}
		if err != nil {
			report(fmt.Errorf("spooled record dropped at replay: %w", err))
			return nil
		}
		batch = append(batch, &pending{prep: prep, done: make(chan error, 1)})
		if len(batch) == ingestBatch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	return rep, errors.Join(err, c.Close())
}

// ingestOnce commits batch, whose items' done channels are the ingester's
// own, and reads every outcome: a record the sink refuses is dropped and
// reported; the records that failed otherwise are returned with the
// error, to be tried again.
func (l *Ledger) ingestOnce(ctx context.Context, c Writer, batch []*pending, report func(error)) ([]*pending, error) {
	all := slices.Clone(batch) // commit reorders what it is given
	err := l.commitCounted(ctx, c, batch, false)
	var again []*pending
	var cause error
	for _, p := range all {
		switch e := <-p.done; {
		case e == nil:
		case l.sink.RecordFault(e):
			l.ing.mu.Lock()
			l.ing.dropped++
			l.ing.mu.Unlock()
			report(fmt.Errorf("a spend record refused by %s and dropped: %w", l.sink.Name(), e))
		default:
			again, cause = append(again, p), e
		}
	}
	if len(again) > 0 {
		return again, fmt.Errorf("ingest %d records: %w", len(again), cmpErr(cause, err))
	}
	return nil, nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// spoolBatch makes batch durable in the spool and acknowledges it, or,
// once the spool has failed, hands it to the ingester to commit directly.
func (l *Ledger) spoolBatch(batch []*pending) {
	if len(batch) == 0 {
		return
	}
	s := &l.ing
	s.mu.Lock()
	broken, behind := s.broken, s.written-s.ingested
	s.mu.Unlock()
	caughtUp := behind == 0
	var err error
	if !broken {
		if l.sp.off >= l.opts.RewindAt && !caughtUp {
			// Under steady load the ingester is never quite caught up when
			// a batch comes: ask it to catch up now, so that the spool
			// stays small. Wait for it (never long) only when one of its
			// transactions catches it up: further behind (the database
			// slow or down), waiting would hold every Append for nothing,
			// so the spool grows and a later batch asks again.
			if behind <= ingestBatch {
				caughtUp = l.awaitIngested(l.opts.RewindWait)
			} else {
				l.urge()
			}
		}
		if caughtUp && l.sp.off >= l.opts.RewindAt {
			err = l.sp.rewind(false)
		}
		if err == nil {
			payloads := make([][]byte, len(batch))
			for i, p := range batch {
				payloads[i] = p.payload
			}
			if err = l.injected("spool"); err == nil {
				err = l.sp.write(l.sp.frames(payloads))
				l.noteLow()
			}
		}
		if err != nil {
			l.report(fmt.Errorf("spool %s failed; committing to %s directly from now on: %w", l.sp.path, l.sink.Name(), err))
			broken = true
		}
	}
	items := make([]ingestItem, len(batch))
	for i, p := range batch {
		if broken {
			items[i] = ingestItem{p: p, direct: true}
		} else {
			items[i] = ingestItem{p: &pending{prep: p.prep, done: make(chan error, 1)}}
		}
	}
	s.mu.Lock()
	s.broken = broken
	if len(s.q) == 0 {
		s.first = time.Now()
	}
	s.q = append(s.q, items...)
	if !broken {
		s.written += int64(len(batch))
		s.marks = append(s.marks, spoolMark{upTo: s.written, at: time.Now()})
	}
	s.mu.Unlock()
	s.poke()
	if !broken {
		l.nCommits.Add(1)
		l.nRecords.Add(int64(len(batch)))
		finish(batch, nil) // after written grew: a read that follows waits for them
	}
}

// urge tells the ingester to go at once, without waiting for it.
func (l *Ledger) urge() {
	s := &l.ing
	s.mu.Lock()
	s.urgent = true
	s.mu.Unlock()
	s.poke()
}

// awaitIngested waits, at most d, until the sink holds every record spooled
// so far, the ingester told to go at once; it reports whether it does.
func (l *Ledger) awaitIngested(d time.Duration) bool {
	s := &l.ing
	timer := time.NewTimer(d)
	defer timer.Stop()
	s.mu.Lock()
	target := s.written
	for s.ingested < target && s.running {
		ch := s.progress
		s.urgent = true
		s.mu.Unlock()
		s.poke()
		select {
		case <-ch:
		case <-timer.C:
			return false
		}
		s.mu.Lock()
	}
	done := s.ingested >= target
	s.mu.Unlock()
	return done
}

// ingest is the ingester: it runs until stop is closed and its queue is
// empty (or, while stopping, stopAttempts attempts failed), and returns
// the error that left records in the spool, if any.
func (l *Ledger) ingest(ctx context.Context, c Writer, stop <-chan struct{}) error {
	s := &l.ing
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	idle := l.newIdle(c)
	stopping := false
	for {
		s.mu.Lock()
		n, first, urgent := len(s.q), s.first, s.urgent
		// Direct items' Appends wait for their commit: no delay, for them
		// nor for the spooled items ahead of them. Once the spool broke,
		// every batch is direct: the queue's last item says.
		direct := n > 0 && s.q[n-1].direct
		s.mu.Unlock()
		if n == 0 {
			if stopping {
				return nil
			}
			select {
			case <-s.wake:
				idle.stop()
			case <-idle.due():
				idle.checkpoint(ctx)
			case <-stop:
				idle.stop()
				stopping = true
			}
			continue
		}
		if d := time.Until(first.Add(l.opts.IngestDelay)); n < ingestBatch && !urgent && !direct && !stopping && d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-s.wake:
				timer.Stop()
				continue
			case <-stop:
				timer.Stop()
				stopping = true
			}
		}
		items := s.take()
		idle.committed()
		if err := l.ingestItems(ctx, c, items, stop); err != nil {
			// The spooled records left are replayed at the next Open;
			// the direct ones are in no spool, and their Appends wait.
			for items := s.take(); len(items) > 0; items = s.take() {
				if items[0].direct {
					_ = l.ingestItems(ctx, c, items, stop)
				}
			}
			return err
		}
		if !stopping {
			select {
			case <-stop:
				stopping = true
			default:
			}
		}
	}
}

// take removes the head of the queue: up to ingestBatch spooled items, or
// the direct items there, whichever comes first.
func (s *ingestState) take() []ingestItem {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := 0
	for k < len(s.q) && k < ingestBatch && s.q[k].direct == s.q[0].direct {
		k++
	}
	items := slices.Clone(s.q[:k])
	rest := copy(s.q, s.q[k:])
	clear(s.q[rest:])
	s.q = s.q[:rest]
	s.urgent = false
	if rest > 0 {
		s.first = time.Now() // the rest waits at most one more delay
	}
	return items
}

// ingestItems commits items (all spooled or all direct). Spooled records
// that fail as a whole are retried with backoff; once stop is closed,
// after stopAttempts attempts the rest is left in the spool and the error
// returned.
func (l *Ledger) ingestItems(ctx context.Context, c Writer, items []ingestItem, stop <-chan struct{}) error {
	batch := make([]*pending, len(items))
	for i, it := range items {
		batch[i] = it.p
	}
	if items[0].direct {
		_ = l.commitCounted(ctx, c, batch, true) // the Appends have the outcome
		return nil
	}
	done := len(batch)
	wait := retryFirst
	for attempt := 1; ; attempt++ {
		again, err := l.ingestOnce(ctx, c, batch, l.report)
		if err == nil {
			break
		}
		stopping := false
		select {
		case <-stop:
			stopping = true
		default:
		}
		if stopping && attempt >= stopAttempts {
			l.advance(int64(done - len(again)))
			return fmt.Errorf("%d acknowledged records stay in the spool, to be replayed when the ledger is next opened: %w", len(again), err)
		}
		l.report(fmt.Errorf("%w; retrying in %v", err, wait))
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
		}
		wait = min(2*wait, retryMax)
		batch = again
	}
	l.advance(int64(done))
	return nil
}

func (l *Ledger) advance(n int64) {
	s := &l.ing
	s.mu.Lock()
	s.ingested += n
	k := 0
	for k < len(s.marks) && s.marks[k].upTo <= s.ingested {
		k++
	}
	s.marks = s.marks[k:]
	close(s.progress)
	s.progress = make(chan struct{})
	s.mu.Unlock()
}

// Visible returns once the sink holds (or has refused) every record whose
// Append returned before it was called, so that a read sees what was
// acknowledged. Without a spool it returns at once.
func (l *Ledger) Visible(ctx context.Context) error {
	if l.sp == nil {
		if l.spoolPath == "" {
			return nil
		}
		return l.catchUp(ctx)
	}
	s := &l.ing
	s.mu.Lock()
	target := s.written
	for s.ingested < target {
		if !s.running {
			behind := target - s.ingested
			s.mu.Unlock()
			return fmt.Errorf("%d acknowledged records are in the spool and not yet in %s (they are replayed when the ledger is next opened)", behind, l.sink.Name())
		}
		ch := s.progress
		s.urgent = true
		s.mu.Unlock()
		s.poke()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for acknowledged records to reach %s: %w", l.sink.Name(), ctx.Err())
		}
		s.mu.Lock()
	}
	s.mu.Unlock()
	return nil
}

// Backlog reports how many acknowledged records are in the spool and not
// yet in the sink.
func (l *Ledger) Backlog() int64 {
	l.ing.mu.Lock()
	defer l.ing.mu.Unlock()
	return l.ing.written - l.ing.ingested
}

// OldestSpooled is how long the oldest record durable in the spool and
// not yet in the sink has waited there (0 when the sink holds them all):
// what grows while the database is slow or failing.
func (l *Ledger) OldestSpooled() time.Duration {
	l.ing.mu.Lock()
	defer l.ing.mu.Unlock()
	if len(l.ing.marks) == 0 {
		return 0
	}
	return time.Since(l.ing.marks[0].at)
}

// Ingested counts the spooled records moved into the sink (or refused by
// it) since Open: its rate is the ingester's pace.
func (l *Ledger) Ingested() int64 {
	l.ing.mu.Lock()
	defer l.ing.mu.Unlock()
	return l.ing.ingested
}

// Dropped reports how many spooled records the sink refused.
func (l *Ledger) Dropped() int64 {
	l.ing.mu.Lock()
	defer l.ing.mu.Unlock()
	return l.ing.dropped
}
