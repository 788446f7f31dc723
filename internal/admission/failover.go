package admission

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/policies"
)

// Shared is a backend a fleet shares (internal/admission/redis), which
// can fail to answer: Failover puts each request's failure mode in front
// of it.
type Shared interface {
	Backend
	// TrySettle is Settle that says whether the backend took it.
	TrySettle(ctx context.Context, g Grant, a Actual) error
	// Reconcile counts, once for id whatever is retried, what a request
	// this replica admitted on its own (while the shared backend could not
	// answer) used: in its windows, and in the budgets that the shared
	// backend made before the request settled, age ago by this replica's
	// monotonic clock (a budget made later started from the ledger, which
	// holds the request).
	Reconcile(ctx context.Context, id string, c Claim, a Actual, age time.Duration) error
	// Ping reports whether the backend answers.
	Ping(ctx context.Context) error
}

// ErrLedger marks a shared backend's failure that is the ledger's, not
// its own (where a budget period starts could not be read): the request
// follows its failure mode, but the backend is not taken for down.
var ErrLedger = errors.New("the ledger could not be read")

// FailoverOptions configure a Failover.
type FailoverOptions struct {
	// Timeout bounds Run's probes of the shared backend; the backend
	// bounds its own calls (admission/redis.Options.Timeout).
	Timeout time.Duration
	// Mode is admission.failure_mode: policies.FailClosed or FailOpen, for
	// principals whose limits declare none.
	Mode string
	// Logger is told when the shared backend fails and recovers.
	Logger *slog.Logger
	// MaxPending bounds the settles kept for the shared backend while it
	// is down (what Run reconciles once it answers); 0 means 100,000.
	MaxPending int
}

// Failover admits through a shared backend and, when it fails (an error
// that is not a refusal, or no answer within the timeout), follows the
// request's failure mode: closed refuses it with 503
// admission_unavailable and retry-after; open admits it against this
// replica's own Local. Once calls fail three times in a row the shared
// backend is taken for down: calls go straight to the failure mode (no
// timeout waited per request) and Run probes it; once it answers, Run
// reconciles into it what was settled meanwhile, each once.
type Failover struct {
	shared Shared
	local  *Local
	opts   FailoverOptions

	down      atomic.Bool
	streak    atomic.Int64    // calls in a row that failed
	fallbacks [3]atomic.Int64 // by phase: count, admit, refused (closed)
	failures  atomic.Int64
	dropped   atomic.Int64

	mu      sync.Mutex
	pending []pendingSettle
	seq     uint64
	replica string // makes reconciled requests' ids unique across replicas
}

// pendingSettle is a settle the shared backend has not taken: a shared
// grant's (retried as a settle) or a fallback one's (reconciled).
type pendingSettle struct {
	g       Grant
	a       Actual
	settled time.Time // when, by this replica's monotonic clock
	id      string
	seq     uint64
}

// NewFailover returns a Failover of shared, falling back on local.
func NewFailover(shared Shared, local *Local, opts FailoverOptions) *Failover {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = 100_000
	}
	if opts.Mode == "" {
		opts.Mode = policies.FailClosed
	}
	var id [8]byte
	rand.Read(id[:])
	return &Failover{shared: shared, local: local, opts: opts, replica: hex.EncodeToString(id[:])}
}

var _ Backend = (*Failover)(nil)

// Phases, for FallbackCount.
const (
	PhaseCount  = 0 // a request counted by the fallback
	PhaseAdmit  = 1 // a request admitted by the fallback
	PhaseRefuse = 2 // a request refused because the shared backend failed (closed)
)

// FallbackCount reports how many requests the failure modes admitted
// (PhaseCount, PhaseAdmit) or refused (PhaseRefuse) since the start.
func (f *Failover) FallbackCount(phase int) int64 { return f.fallbacks[phase].Load() }

// Failures reports how many calls to the shared backend failed.
func (f *Failover) Failures() int64 { return f.failures.Load() }

// Pending reports the settles waiting for the shared backend, and how
// many were dropped past MaxPending.
func (f *Failover) Pending() (waiting int, dropped int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pending), f.dropped.Load()
}

// Down reports whether the shared backend failed and has not answered
// since.
func (f *Failover) Down() bool { return f.down.Load() }

// mode is p's failure mode: its key's limits', else its team's, else its
// org's, else the default.
func (f *Failover) mode(p *keyring.Principal) string {
	for _, m := range []string{p.KeyLimits.FailureMode, p.TeamLimits.FailureMode, p.OrgLimits.FailureMode} {
		if m != "" {
			return m
		}
	}
	return f.opts.Mode
}

// failed reports whether err, from the shared backend, is a failure (not
// a refusal, nor the caller hanging up; a caller's deadline that passed
// while the backend was asked is one), and marks the backend down if it
// is its own, downAfter times in a row.
func (f *Failover) failed(ctx context.Context, err error) bool {
	if err == nil {
		f.streak.Store(0)
		return false
	}
	if _, ok := apierr.As(err); ok {
		f.streak.Store(0)
		return false
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return false // the caller hung up: nothing to say of the backend
	}
	if errors.Is(err, ErrLedger) {
		return true // the ledger's failure: this request's, not the backend's
	}
	f.failures.Add(1)
	// One slow answer under load is not an outage: the backend is taken
	// for down after downAfter failures in a row, and only a probe (Run)
	// brings it back.
	if f.streak.Add(1) >= downAfter && !f.down.Swap(true) {
		f.opts.Logger.Error("admission: the shared counters (Redis) do not answer; requests follow their failure mode until they do", "err", err)
	}
	return true
}

// downAfter is how many calls in a row must fail before the shared
// backend is taken for down.
const downAfter = 3

func (f *Failover) unavailable() error {
	f.fallbacks[PhaseRefuse].Add(1)
	return &apierr.Error{Status: http.StatusServiceUnavailable, Code: apierr.CodeAdmissionUnavailable, RetryAfter: time.Second,
		Message: "limits cannot be checked right now (the shared counters do not answer); retry"}
}

func (f *Failover) call(ctx context.Context) (context.Context, context.CancelFunc) {
	if f.opts.Timeout > 0 {
		return context.WithTimeout(ctx, f.opts.Timeout)
	}
	return ctx, func() {}
}

// CountRequest counts p's request in the shared backend, or as p's
// failure mode says.
func (f *Failover) CountRequest(ctx context.Context, p *keyring.Principal, at time.Time) error {
	if !f.down.Load() {
		err := f.shared.CountRequest(ctx, p, at)
		if !f.failed(ctx, err) {
			return err
		}
	}
	if f.mode(p) != policies.FailOpen {
		return f.unavailable()
	}
	err := f.local.CountRequest(ctx, p, at)
	if err == nil {
		f.fallbacks[PhaseCount].Add(1)
	}
	return err
}

// Admit admits c through the shared backend, or as its failure mode says.
func (f *Failover) Admit(ctx context.Context, c Claim) (Grant, error) {
	if !f.down.Load() {
		g, err := f.shared.Admit(ctx, c)
		if !f.failed(ctx, err) {
			return g, err
		}
	}
	if c.Principal == nil {
		return Grant{}, fmt.Errorf("admission: claim without a principal")
	}
	if f.mode(c.Principal) != policies.FailOpen {
		return Grant{}, f.unavailable()
	}
	// Where ext_authz counted the request (c.CountRequest false), it
	// counted it in whichever backend answered it: the request windows
	// are checked here, not counted again.
	g, err := f.local.Admit(ctx, c)
	if err != nil {
		return g, err
	}
	f.fallbacks[PhaseAdmit].Add(1)
	g.fallback = true
	return g, nil
}

// Settle settles g where it was admitted; what the shared backend cannot
// take now is kept for Run to reconcile once it answers.
func (f *Failover) Settle(ctx context.Context, g Grant, a Actual) {
	if a.At.IsZero() {
		a.At = g.Claim.At
	}
	if g.fallback {
		f.local.Settle(ctx, g, a)
		f.keep(pendingSettle{g: g, a: a, settled: time.Now()})
		return
	}
	if !f.down.Load() {
		// A settle outlives its caller: the request was served, and its
		// cost counts whether or not the stream is still there.
		sctx := context.WithoutCancel(ctx)
		err := f.shared.TrySettle(sctx, g, a)
		if f.failed(sctx, err); err == nil {
			return
		} else if _, refused := apierr.As(err); refused {
			return
		}
	}
	f.keep(pendingSettle{g: g, a: a, settled: time.Now()})
}

func (f *Failover) keep(p pendingSettle) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	p.seq = f.seq
	if p.g.fallback {
		p.id = fmt.Sprintf("%s-%d", f.replica, f.seq)
	}
	if len(f.pending) >= f.opts.MaxPending {
		f.pending = f.pending[1:]
		f.dropped.Add(1)
	}
	f.pending = append(f.pending, p)
}

// Budgets reports p's budgets from the shared backend, or from this
// replica's own counters while it is down.
func (f *Failover) Budgets(p *keyring.Principal, at time.Time) []BudgetStatus {
	if !f.down.Load() {
		if bs := f.shared.Budgets(p, at); bs != nil || len(BudgetsOf(p)) == 0 {
			return bs
		}
	}
	return f.local.Budgets(p, at)
}

// Run releases the fallback's expired reservations, and probes the
// shared backend while it is down: once it answers, the settles kept
// meanwhile are reconciled into it, oldest first, and calls go to it
// again.
func (f *Failover) Run(ctx context.Context, ttl time.Duration, now func() time.Time) error {
	go f.local.Run(ctx, ttl, now)
	go f.shared.Run(ctx, ttl, now)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if !f.down.Load() && !f.hasPending() {
			continue
		}
		pctx, cancel := f.call(ctx)
		err := f.shared.Ping(pctx)
		cancel()
		if err != nil {
			continue
		}
		if err := f.reconcile(ctx); err != nil {
			continue
		}
		f.streak.Store(0)
		// The fallback was used: its budgets would hold what it saw then,
		// not what is settled through the shared backend from now on.
		// The next outage starts them again from what is recorded.
		f.local.ForgetBudgets()
		if f.down.Swap(false) {
			f.opts.Logger.Info("admission: the shared counters (Redis) answer again; what was settled meanwhile is reconciled")
		}
	}
}

func (f *Failover) hasPending() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pending) > 0
}

// reconcile hands the kept settles to the shared backend, oldest first;
// it stops at the first that fails, to be tried again.
func (f *Failover) reconcile(ctx context.Context) error {
	for {
		f.mu.Lock()
		if len(f.pending) == 0 {
			f.mu.Unlock()
			return nil
		}
		p := f.pending[0]
		f.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, max(f.opts.Timeout, time.Second))
		var err error
		if p.g.fallback {
			err = f.shared.Reconcile(cctx, p.id, p.g.Claim, p.a, time.Since(p.settled))
		} else {
			err = f.shared.TrySettle(cctx, p.g, p.a)
		}
		cancel()
		if err != nil {
			return errors.Join(errors.New("admission: reconciling into the shared counters"), err)
		}
		f.mu.Lock()
		// keep may have dropped it meanwhile (past MaxPending).
		if len(f.pending) > 0 && f.pending[0].seq == p.seq {
			f.pending = f.pending[1:]
		}
		f.mu.Unlock()
	}
}
