package hold

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
)

// Appender is the ledger records are written to: Append returns once r is
// durable, and appending a record again (same RequestID) is a no-op that
// succeeds (ledger.Record).
type Appender interface {
	Append(ctx context.Context, r ledger.Record) error
}

// ErrFull is returned by Append for a record the ledger could not take
// when the held records are at their bound: the record is lost (and
// logged, by id, at error level).
var ErrFull = errors.New("spend ledger unavailable and the held records are at their bound: record lost")

// Defaults of Options.
const (
	DefaultWait       = 2 * time.Second
	DefaultMaxRecords = 16 << 10
	DefaultMaxBytes   = 16 << 20
	DefaultRetryFirst = 100 * time.Millisecond
	DefaultRetryMax   = 2 * time.Second
)

// retryBatch is how many held records one retry appends at once (each on
// its own goroutine, so the ledger's group commit takes them together).
const retryBatch = 256

// Options bound what is held and how it is retried. The zero value is the
// defaults.
type Options struct {
	// Wait is how long Append waits for the ledger before it holds the
	// record and returns: the most a final reply waits on the ledger.
	Wait time.Duration
	// MaxRecords and MaxBytes bound the held records (their size
	// estimated from their fields).
	MaxRecords int
	MaxBytes   int64
	// RetryFirst and RetryMax bound the backoff between two attempts to
	// write held records.
	RetryFirst, RetryMax time.Duration
	// Log is told when the ledger becomes unavailable and available
	// again, and of every record lost; nil discards.
	Log *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Wait <= 0 {
		o.Wait = DefaultWait
	}
	if o.MaxRecords <= 0 {
		o.MaxRecords = DefaultMaxRecords
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.RetryFirst <= 0 {
		o.RetryFirst = DefaultRetryFirst
	}
	if o.RetryMax < o.RetryFirst {
		o.RetryMax = max(DefaultRetryMax, o.RetryFirst)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// Ledger holds the records its ledger cannot take. It is safe for
// concurrent use; Run must be running for held records to be written.
type Ledger struct {
	next Appender
	o    Options
	wake chan struct{}

	// pass serialises the attempts to write held records (Run's, Flush's).
	pass sync.Mutex

	mu    sync.Mutex
	held  []ledger.Record // oldest first; only a retry removes, from the head
	bytes int64
	cause error // why the ledger last refused

	lost    atomic.Int64
	written atomic.Int64 // held records written later
}

// New returns a Ledger in front of next. It starts nothing: see Run.
func New(next Appender, o Options) *Ledger {
	return &Ledger{next: next, o: o.withDefaults(), wake: make(chan struct{}, 1)}
}

// Append writes r to the ledger, waiting at most Options.Wait. If the
// ledger fails or does not answer in time, r is held in memory and Append
// returns nil: the caller's reply goes out, and Run writes r when the
// ledger takes records again (an Append that was only slow may still
// commit r: writing it again is a no-op). While records are held, r is
// held at once, behind them, without waiting. A record the ledger refuses
// as invalid is returned with its error, not held; one beyond the bound
// is lost: logged at error level and ErrFull returned.
func (h *Ledger) Append(ctx context.Context, r ledger.Record) error {
	// Behind records already held, never before them. (A degraded
	// ledger still takes records: only new requests are refused.)
	if h.Held() > 0 {
		return h.hold(r, nil)
	}
	actx, cancel := context.WithTimeout(ctx, h.o.Wait)
	err := h.next.Append(actx, r)
	cancel()
	if err == nil || errors.Is(err, ledger.ErrInvalid) {
		return err
	}
	return h.hold(r, err)
}

func (h *Ledger) hold(r ledger.Record, cause error) error {
	size := recordSize(&r)
	h.mu.Lock()
	if len(h.held) >= h.o.MaxRecords || h.bytes+size > h.o.MaxBytes {
		n, why := len(h.held), h.cause
		h.mu.Unlock()
		h.lost.Add(1)
		h.o.Log.Error("spend record lost: the ledger cannot take it and the held records are at their bound",
			"record_id", r.RequestID, "client_request_id", r.ClientRequestID, "key_id", r.KeyID, "cost_pico", r.CostPico,
			"held", n, "err", errors.Join(cause, why))
		return fmt.Errorf("hold: %s: %w", r.RequestID, ErrFull)
	}
	first := len(h.held) == 0
	h.held = append(h.held, r)
	h.bytes += size
	if cause != nil {
		h.cause = cause
	}
	why := h.cause
	h.mu.Unlock()
	if first {
		h.o.Log.Warn("spend ledger unavailable: holding the records of answered requests and refusing new requests until it takes them",
			"record_id", r.RequestID, "err", why)
	}
	h.o.Log.Debug("spend record held", "record_id", r.RequestID)
	select {
	case h.wake <- struct{}{}:
	default:
	}
	return nil
}

// Unavailable is nil while no record is held, else why the ledger is
// unavailable: new requests must not be admitted (they could not be
// recorded).
func (h *Ledger) Unavailable() error {
	h.mu.Lock()
	n, cause := len(h.held), h.cause
	h.mu.Unlock()
	if n > 0 {
		return fmt.Errorf("spend ledger unavailable: %d records held: %w", n, cause)
	}
	// A ledger that still takes records but is near its end (a full disk,
	// the spool writing into its reserve) takes no new requests' records.
	if d, ok := h.next.(degrader); ok {
		if err := d.Degraded(); err != nil {
			return fmt.Errorf("spend ledger unavailable: %w", err)
		}
	}
	return nil
}

// degrader is a ledger that can tell it should take no new requests'
// records although it still takes the answered ones' (sqlite.Ledger).
type degrader interface {
	Degraded() error
}

// Held reports how many records are held; Lost how many were lost (beyond
// the bound, or still held at Flush's end); Written how many held records
// were written later.
func (h *Ledger) Held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held)
}

func (h *Ledger) Lost() int64    { return h.lost.Load() }
func (h *Ledger) Written() int64 { return h.written.Load() }

// Run writes held records until ctx ends, retrying with backoff
// (Options.RetryFirst to RetryMax) while the ledger refuses them. It
// returns nil when ctx ends; what is still held then is Flush's.
func (h *Ledger) Run(ctx context.Context) error {
	wait := h.o.RetryFirst
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		if h.Held() == 0 {
			wait = h.o.RetryFirst
			select {
			case <-h.wake:
				continue
			case <-ctx.Done():
				return nil
			}
		}
		t.Reset(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil
		}
		if h.retry(ctx) {
			wait = h.o.RetryFirst
		} else {
			wait = min(2*wait, h.o.RetryMax)
		}
	}
}

// Flush writes what is held, retrying until ctx ends, then logs every
// record still held as lost, at error level, by id. For shutdown: after
// the last reply was sent, before the ledger stops.
func (h *Ledger) Flush(ctx context.Context) {
	wait := h.o.RetryFirst
	for h.Held() > 0 && ctx.Err() == nil {
		if h.retry(ctx) {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		wait = min(2*wait, h.o.RetryMax)
	}
	h.mu.Lock()
	held, why := h.held, h.cause
	h.held, h.bytes = nil, 0
	h.mu.Unlock()
	for _, r := range held {
		h.lost.Add(1)
		h.o.Log.Error("spend record lost: still held when the ledger stopped",
			"record_id", r.RequestID, "client_request_id", r.ClientRequestID, "key_id", r.KeyID, "cost_pico", r.CostPico, "err", why)
	}
}

// retry appends up to retryBatch held records at once, from the oldest,
// and removes those the ledger took; it reports whether it took all it
// was given (so the next batch may go at once).
func (h *Ledger) retry(ctx context.Context) bool {
	h.pass.Lock()
	defer h.pass.Unlock()
	h.mu.Lock()
	batch := append([]ledger.Record(nil), h.held[:min(len(h.held), retryBatch)]...)
	h.mu.Unlock()
	if len(batch) == 0 {
		return true
	}
	errs := make([]error, len(batch))
	var wg sync.WaitGroup
	for i := range batch {
		wg.Go(func() {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.o.Wait)
			errs[i] = h.next.Append(actx, batch[i])
			cancel()
		})
	}
	wg.Wait()
	var keep []ledger.Record
	var cause error
	var written, freed int64
	for i, err := range errs {
		r := &batch[i]
		switch {
		case err == nil:
			written++
			freed += recordSize(r)
		case errors.Is(err, ledger.ErrInvalid):
			freed += recordSize(r)
			h.lost.Add(1)
			h.o.Log.Error("spend record lost: the ledger refused it as invalid", "record_id", r.RequestID, "key_id", r.KeyID, "err", err)
		default:
			keep, cause = append(keep, *r), err
		}
	}
	h.written.Add(written)
	h.mu.Lock()
	// Only retry removes, and only from the head: held[:len(batch)] is
	// still batch, and what was held meanwhile is after it.
	h.held = append(keep, h.held[len(batch):]...)
	h.bytes -= freed
	if cause != nil {
		h.cause = cause
	}
	left := len(h.held)
	h.mu.Unlock()
	if left == 0 {
		h.o.Log.Info("spend ledger available again: the held records are written", "written", h.written.Load())
	}
	return cause == nil
}

// recordSize estimates what a held record occupies.
func recordSize(r *ledger.Record) int64 {
	return int64(256 + len(r.RequestID) + len(r.ClientRequestID) + len(r.KeyID) + len(r.Team) + len(r.Org) +
		len(r.Endpoint) + len(r.Model) + len(r.Provider) + len(r.UpstreamModel) + len(r.Outcome) + len(r.ErrorType))
}
