package hold_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/ledger/hold"
	"github.com/sluicegw/sluice/internal/testctx"
)

// fakeLedger is a hold.Appender whose Append is fn; it keeps what it
// took, by RequestID.
type fakeLedger struct {
	fn   func(ctx context.Context, r ledger.Record) error
	mu   sync.Mutex
	took map[string]int
}

func (f *fakeLedger) Append(ctx context.Context, r ledger.Record) error {
	if err := f.fn(ctx, r); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.took == nil {
		f.took = map[string]int{}
	}
	f.took[r.RequestID]++
	return nil
}

func (f *fakeLedger) has(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.took[id] > 0
}

var _ hold.Appender = (*fakeLedger)(nil)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func rec(id string) ledger.Record { return ledger.Record{RequestID: id, KeyID: "k1"} }

// TestHeldUntilTheLedgerRecovers: a full disk's Appends are held and
// acknowledged, the ledger is unavailable meanwhile, and Run writes them
// once the disk has room.
func TestHeldUntilTheLedgerRecovers(t *testing.T) {
	var mu sync.Mutex
	full := true
	f := &fakeLedger{fn: func(context.Context, ledger.Record) error {
		mu.Lock()
		defer mu.Unlock()
		if full {
			return syscall.ENOSPC
		}
		return nil
	}}
	h := hold.New(f, hold.Options{RetryFirst: time.Millisecond, RetryMax: 5 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	defer func() { cancel(); testctx.Receive(t, "Run to return", done) }()

	if err := h.Append(ctx, rec("a")); err != nil {
		t.Fatalf("Append with the disk full: %v, want nil (held)", err)
	}
	if err := h.Append(ctx, rec("b")); err != nil {
		t.Fatal(err)
	}
	if err := h.Unavailable(); err == nil || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Unavailable = %v, want one wrapping ENOSPC", err)
	}
	mu.Lock()
	full = false
	mu.Unlock()
	testctx.Wait(t, "the ledger to be available again", func() bool { return h.Unavailable() == nil })
	if !f.has("a") || !f.has("b") || h.Written() != 2 || h.Lost() != 0 {
		t.Fatalf("written a=%v b=%v, Written %d, Lost %d", f.has("a"), f.has("b"), h.Written(), h.Lost())
	}
}

// TestSlowLedgerBounded: an Append that has not returned within Wait is
// held, so the caller's reply waits no longer.
func TestSlowLedgerBounded(t *testing.T) {
	f := &fakeLedger{fn: func(ctx context.Context, _ ledger.Record) error {
		<-ctx.Done()
		return ctx.Err()
	}}
	h := hold.New(f, hold.Options{Wait: 20 * time.Millisecond})
	start := time.Now()
	if err := h.Append(context.Background(), rec("a")); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Append took %v", d)
	}
	if h.Held() != 1 {
		t.Fatalf("Held = %d, want 1", h.Held())
	}
}

// TestInvalidNotHeld: a record the ledger refuses is the caller's error.
func TestInvalidNotHeld(t *testing.T) {
	f := &fakeLedger{fn: func(context.Context, ledger.Record) error { return ledger.ErrInvalid }}
	h := hold.New(f, hold.Options{})
	if err := h.Append(context.Background(), rec("a")); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("Append = %v, want ErrInvalid", err)
	}
	if h.Unavailable() != nil {
		t.Fatal("unavailable after an invalid record")
	}
}

// TestBoundLosesAndSaysWhat: past MaxRecords a record is lost with
// ErrFull, and the log names it; at Flush's end what is still held is
// logged as lost, by id.
func TestBoundLosesAndSaysWhat(t *testing.T) {
	var logs syncBuf
	f := &fakeLedger{fn: func(context.Context, ledger.Record) error { return syscall.ENOSPC }}
	h := hold.New(f, hold.Options{MaxRecords: 2, RetryFirst: time.Millisecond, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if err := h.Append(ctx, rec(id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Append(ctx, rec("c")); !errors.Is(err, hold.ErrFull) {
		t.Fatalf("Append past the bound = %v, want ErrFull", err)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "record_id=c") {
		t.Fatalf("log does not name the lost record at error level:\n%s", logs.String())
	}
	fctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	h.Flush(fctx)
	cancel()
	for _, id := range []string{"a", "b"} {
		if !strings.Contains(logs.String(), "record_id="+id) {
			t.Errorf("record %s not logged as lost:\n%s", id, logs.String())
		}
	}
	if h.Lost() != 3 || h.Held() != 0 {
		t.Fatalf("Lost %d Held %d, want 3 and 0", h.Lost(), h.Held())
	}
}

// degradedLedger takes every record but may say it should take no new
// requests' records (sqlite.Ledger writing into its spool's reserve).
type degradedLedger struct {
	fakeLedger
	degraded atomic.Pointer[error]
}

func (d *degradedLedger) Degraded() error {
	if e := d.degraded.Load(); e != nil {
		return *e
	}
	return nil
}

// TestDegradedIsUnavailable: a ledger that still takes records but says
// it is degraded (a full disk, the spool's reserve in use) makes the held
// ledger unavailable — new requests are refused — while its Appends still
// succeed, and available again once it is not.
func TestDegradedIsUnavailable(t *testing.T) {
	d := &degradedLedger{fakeLedger: fakeLedger{fn: func(context.Context, ledger.Record) error { return nil }}}
	h := hold.New(d, hold.Options{})
	if err := h.Unavailable(); err != nil {
		t.Fatalf("unavailable before: %v", err)
	}
	low := errors.New("no space left on device")
	d.degraded.Store(&low)
	if err := h.Unavailable(); err == nil || !errors.Is(err, low) {
		t.Errorf("Unavailable = %v, want one wrapping %v", err, low)
	}
	if err := h.Append(t.Context(), rec("answered")); err != nil || !d.has("answered") {
		t.Errorf("an answered request's record while degraded: %v (written %v)", err, d.has("answered"))
	}
	d.degraded.Store(nil)
	if err := h.Unavailable(); err != nil {
		t.Errorf("still unavailable: %v", err)
	}
}
