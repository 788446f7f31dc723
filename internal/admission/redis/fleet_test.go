package redis_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/admission/redis"
	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/testenv/redistest"
	"github.com/sluicegw/sluice/policies"
)

const micro = money.PicoPerMicro

func client(t *testing.T, s *redistest.Server) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

func budgetPrincipal(micros int64, mode string) *keyring.Principal {
	return &keyring.Principal{KeyID: "k", Team: "t", Org: "o",
		OrgLimits: policies.Limits{Budgets: []policies.Budget{{MicroUSD: micros, Period: policies.PeriodDay}}, FailureMode: mode}}
}

// TestOneRoundTripPerPhase: once the script is loaded, CountRequest,
// Admit and Settle are each one EVALSHA and nothing else, counted by the
// server itself; a server that lost the script (SCRIPT FLUSH) is given it
// again within the call.
func TestOneRoundTripPerPhase(t *testing.T) {
	s := redistest.Own(t)
	b := redis.New(client(t, s), redis.Options{})
	ctx := testctx.Deadline(t)
	if err := b.Load(ctx); err != nil {
		t.Fatal(err)
	}
	p := &keyring.Principal{KeyID: "k", Team: "t", Org: "o",
		KeyLimits:  policies.Limits{Requests: policies.RateLimits{PerMinute: 100}, Tokens: policies.TokenLimits{Total: policies.RateLimits{PerMinute: 1e6}}},
		TeamLimits: policies.Limits{Budgets: []policies.Budget{{MicroUSD: 1e9, Period: policies.PeriodDay}, {MicroUSD: 1e9, Period: policies.PeriodRolling, Window: time.Hour}}},
		OrgLimits:  policies.Limits{Requests: policies.RateLimits{PerHour: 1000}}}
	// The day's budget period is new to Redis: the first admission asks
	// for its start, once.
	warm, err := b.Admit(ctx, admission.Claim{Principal: p, Model: "m", InputTokens: 10, MaxOutputTokens: 10, CostPico: micro, At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	b.Settle(ctx, warm, admission.Actual{InputTokens: 5, OutputTokens: 5, CostPico: micro, At: time.Now()})
	mon := s.Monitor(t)
	if err := b.CountRequest(ctx, p, time.Now()); err != nil {
		t.Fatal(err)
	}
	g, err := b.Admit(ctx, admission.Claim{Principal: p, Model: "m", InputTokens: 10, MaxOutputTokens: 10, CostPico: micro, At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	b.Settle(ctx, g, admission.Actual{InputTokens: 5, OutputTokens: 5, CostPico: micro, At: time.Now()})
	sent := mon.Stop()
	if len(sent) != 3 || !strings.HasPrefix(strings.ToLower(sent[0]), `"evalsha"`) || !strings.HasPrefix(strings.ToLower(sent[1]), `"evalsha"`) || !strings.HasPrefix(strings.ToLower(sent[2]), `"evalsha"`) {
		t.Fatalf("commands clients sent for a counted, admitted and settled request (MONITOR):\n%s\nwant three EVALSHA and nothing else", strings.Join(sent, "\n"))
	}

	if _, err := s.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Admit(ctx, admission.Claim{Principal: p, Model: "m", CostPico: micro, At: time.Now()}); err != nil {
		t.Fatalf("Admit after SCRIPT FLUSH: %v", err)
	}
}

// TestServerClock: by default the scripts count at Redis's clock, not
// the caller's: two replicas whose clocks differ by an hour share one
// minute window.
func TestServerClock(t *testing.T) {
	s := redistest.Own(t)
	b := redis.New(client(t, s), redis.Options{})
	ctx := testctx.Deadline(t)
	p := &keyring.Principal{KeyID: "k", KeyLimits: policies.Limits{Requests: policies.RateLimits{PerMinute: 2}}}
	for i, at := range []time.Time{time.Now(), time.Now().Add(time.Hour), time.Now().Add(-time.Hour)} {
		err := b.CountRequest(ctx, p, at)
		if i < 2 && err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		if i == 2 {
			var e *apierr.Error
			if e, _ = apierr.As(err); e == nil || e.Code != apierr.CodeRateLimited || e.RetryAfter <= 0 || e.RetryAfter > time.Minute+time.Second {
				t.Fatalf("a third request in the server's minute, from a clock an hour behind: %v; want rate_limited within a minute", err)
			}
		}
	}
}

// TestDeadReplicasReservationsExpire: a replica that admits and dies
// leaves its reservation in Redis; another replica's next call for the
// same org releases it once the reservation's ttl has passed.
func TestDeadReplicasReservationsExpire(t *testing.T) {
	s := redistest.Own(t)
	c := client(t, s)
	ctx := testctx.Deadline(t)
	p := budgetPrincipal(100, "")
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	dead := redis.New(c, redis.Options{CallerClock: true, ReservationTTL: time.Minute})
	if _, err := dead.Admit(ctx, admission.Claim{Principal: p, CostPico: 100 * micro, At: t0}); err != nil {
		t.Fatal(err)
	}
	live := redis.New(c, redis.Options{CallerClock: true, ReservationTTL: time.Minute})
	if _, err := live.Admit(ctx, admission.Claim{Principal: p, CostPico: micro, At: t0.Add(59 * time.Second)}); err == nil {
		t.Fatal("admitted while the dead replica's reservation holds the whole budget")
	}
	g, err := live.Admit(ctx, admission.Claim{Principal: p, CostPico: 100 * micro, At: t0.Add(61 * time.Second)})
	if err != nil {
		t.Fatalf("past the reservation's ttl: %v; want it released", err)
	}
	live.Settle(ctx, g, admission.Actual{CostPico: 40 * micro, At: t0.Add(62 * time.Second)})
	bs := live.Budgets(p, t0.Add(63*time.Second))
	if len(bs) != 1 || bs[0].Spent != money.FromMicros(40) || !bs[0].Reserved.IsZero() {
		t.Fatalf("budgets %+v; want 40 spent, nothing reserved", bs)
	}
}

// failover is a Failover over a Redis backend and a Local of its own, as
// serve makes it.
func failover(t *testing.T, c goredis.UniversalClient, mode string) (*admission.Failover, *redis.Backend) {
	idx := admission.NewSpendIndex(nil, nil)
	b := redis.New(c, redis.Options{
		Timeout: 50 * time.Millisecond,
		Spent: func(_ context.Context, kind, id, model string, since time.Time) (money.Sum, error) {
			return idx.Spent(kind, id, model, since), nil
		},
		Record: idx.Add,
	})
	local := admission.NewLocal(limits.New(limits.Options{}), admission.LocalOptions{Spent: idx.Spent, Record: idx.Add})
	f := admission.NewFailover(b, local, admission.FailoverOptions{Timeout: 50 * time.Millisecond, Mode: mode})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { f.Run(ctx, time.Minute, time.Now) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return f, b
}

// TestFailureModes: with Redis stopped, a principal whose mode is closed
// is refused with 503 admission_unavailable and a retry-after, at once
// (no timeout waited per request once Redis is known down); one whose
// org declares open is admitted against the replica's own counters.
func TestFailureModes(t *testing.T) {
	s := redistest.Own(t)
	f, _ := failover(t, client(t, s), policies.FailClosed)
	ctx := testctx.Deadline(t)
	closed, open := budgetPrincipal(1000, ""), budgetPrincipal(1000, policies.FailOpen)
	closed.KeyLimits.Requests.PerMinute = 100
	open.OrgLimits.FailureMode, open.Org = policies.FailOpen, "o2"
	if _, err := f.Admit(ctx, admission.Claim{Principal: closed, CostPico: micro, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	s.Halt()
	for i := range 6 {
		start := time.Now()
		_, err := f.Admit(ctx, admission.Claim{Principal: closed, CostPico: micro, At: time.Now()})
		e, _ := apierr.As(err)
		if e == nil || e.Status != 503 || e.Code != apierr.CodeAdmissionUnavailable || e.RetryAfter <= 0 {
			t.Fatalf("closed, Redis down, call %d: %v; want 503 admission_unavailable with retry-after", i, err)
		}
		// Three failures in a row take Redis for down; from then on no
		// call tries it.
		if i >= 3 && time.Since(start) > 40*time.Millisecond {
			t.Errorf("call %d took %v: Redis is known down, no timeout should be waited", i, time.Since(start))
		}
		if i == 2 && !f.Down() {
			t.Fatal("three calls in a row failed, and Redis is not taken for down")
		}
		if err := f.CountRequest(ctx, closed, time.Now()); err == nil {
			t.Fatal("CountRequest closed, Redis down: admitted")
		}
	}
	for i := range 5 {
		g, err := f.Admit(ctx, admission.Claim{Principal: open, CostPico: 100 * micro, At: time.Now()})
		if i < 10 && err != nil {
			t.Fatalf("open, Redis down, request %d: %v; want admitted by the replica's counters", i, err)
		}
		f.Settle(ctx, g, admission.Actual{CostPico: 100 * micro, At: time.Now()})
	}
	// The replica's own counters still hold the budget: a sixth $100 of
	// $1000 fits, the eleventh does not.
	for i := 5; i < 11; i++ {
		g, err := f.Admit(ctx, admission.Claim{Principal: open, CostPico: 100 * micro, At: time.Now()})
		if i < 10 && err != nil {
			t.Fatalf("open fallback, request %d: %v", i, err)
		}
		if i == 10 {
			if e, _ := apierr.As(err); e == nil || e.Code != apierr.CodeInsufficientQuota {
				t.Fatalf("open fallback past the budget: %v; want insufficient_quota", err)
			}
			break
		}
		f.Settle(ctx, g, admission.Actual{CostPico: 100 * micro, At: time.Now()})
	}
	if f.FallbackCount(admission.PhaseAdmit) != 10 || f.FallbackCount(admission.PhaseRefuse) < 6 {
		t.Errorf("fallback admissions %d, refusals %d; want 10 and at least 6", f.FallbackCount(admission.PhaseAdmit), f.FallbackCount(admission.PhaseRefuse))
	}
}

// TestReconcileAfterOutage: Redis that did not answer for a while (paused,
// its state kept) is given, once it answers, what the open fallback
// admitted meanwhile, each request once; Redis that lost its state
// (restarted empty) takes none of it: its budget periods start from the
// ledger, which holds those requests.
func TestReconcileAfterOutage(t *testing.T) {
	s := redistest.Own(t)
	c := client(t, s)
	f, b := failover(t, c, policies.FailOpen)
	ctx := testctx.Deadline(t)
	p := budgetPrincipal(1000, "")
	admitSettle := func(cost int64) {
		t.Helper()
		g, err := f.Admit(ctx, admission.Claim{Principal: p, CostPico: cost * micro, At: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		f.Settle(ctx, g, admission.Actual{CostPico: cost * micro, At: time.Now()})
	}
	admitSettle(100)
	// Redis stops answering (it keeps its state): the next calls time out
	// and fall back.
	if _, err := s.Do("CLIENT", "PAUSE", "1500", "ALL"); err != nil {
		t.Fatal(err)
	}
	admitSettle(30)
	admitSettle(15)
	admitSettle(5)
	if !f.Down() {
		t.Fatal("Redis paused, but the failover does not know it")
	}
	testctx.Wait(t, "the failover to find Redis again and reconcile", func() bool {
		w, _ := f.Pending()
		return !f.Down() && w == 0
	})
	bs := b.Budgets(p, time.Now())
	if len(bs) != 1 || bs[0].Spent != money.FromMicros(150) {
		t.Fatalf("Redis's budget after the outage: %+v; want the 100 before and the 50 during it", bs)
	}
	// Reconciling the same request again counts nothing.
	g := admission.Claim{Principal: p, CostPico: 5 * micro, At: time.Now()}
	for range 2 {
		if err := b.Reconcile(ctx, "same", g, admission.Actual{CostPico: 5 * micro, At: time.Now()}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if bs := b.Budgets(p, time.Now()); bs[0].Spent != money.FromMicros(155) {
		t.Fatalf("after reconciling one request twice: %+v; want it counted once (155)", bs)
	}

	// Redis lost: what the fallback admits while it is down is not
	// reconciled into the Redis that comes back empty; that one's budget
	// period starts from the ledger (here the spend index every settle
	// records into), which holds it: counted once.
	s.Halt()
	admitSettle(25)
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	testctx.Wait(t, "the failover to find the new Redis", func() bool {
		w, _ := f.Pending()
		return !f.Down() && w == 0
	})
	// 175: the 100, 30, 20 and 25 settled (the request reconciled by
	// hand above was never settled, so the ledger lacks it).
	if bs := b.Budgets(p, time.Now()); len(bs) != 1 || bs[0].Spent != money.FromMicros(175) {
		t.Fatalf("the budget in a Redis restarted empty: %+v; want 175, from the ledger, nothing counted twice", bs)
	}
	g2, err := f.Admit(ctx, admission.Claim{Principal: p, CostPico: 826 * micro, At: time.Now()})
	if e, _ := apierr.As(err); e == nil || e.Code != apierr.CodeInsufficientQuota {
		t.Fatalf("$826 of a $1000 budget with 175 spent: %v, %v; want insufficient_quota", g2, err)
	}
}

// TestRollingBudgetFromTheLedger: a rolling budget's window that Redis
// lacks (new, flushed) starts from the ledger's buckets, each counted at
// its end, read once: while Redis has the window, the ledger is not read
// again.
func TestRollingBudgetFromTheLedger(t *testing.T) {
	s := redistest.Own(t)
	ctx := testctx.Deadline(t)
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	var reads int
	b := redis.New(client(t, s), redis.Options{CallerClock: true,
		SpentBuckets: func(_ context.Context, kind, id, model string, since time.Time) ([]redis.SpentBucket, error) {
			reads++
			if kind != "team" || id != "t" || model != "" || !since.Equal(t0.Add(-time.Hour)) {
				t.Errorf("SpentBuckets(%s %s %q since %v); want team t, every model, since an hour ago", kind, id, model, since)
			}
			// $0.35 in the bucket 11:00–11:15 (leaves the window at
			// 12:15), $0.25 in 11:45–12:00 (leaves at 13:00).
			return []redis.SpentBucket{
				{Start: t0.Add(-time.Hour), Cost: money.FromMicros(350_000)},
				{Start: t0.Add(-15 * time.Minute), Cost: money.FromMicros(250_000)},
			}, nil
		}})
	p := &keyring.Principal{KeyID: "k", Team: "t", Org: "o",
		TeamLimits: policies.Limits{Budgets: []policies.Budget{{Period: policies.PeriodRolling, Window: time.Hour, MicroUSD: 1_000_000}}}}
	admit := func(micros int64, at time.Time) error {
		g, err := b.Admit(ctx, admission.Claim{Principal: p, CostPico: micros * micro, At: at})
		if err == nil {
			b.Settle(ctx, g, admission.Actual{CostPico: micros * micro, At: at})
		}
		return err
	}
	if err := admit(450_000, t0); err == nil {
		t.Fatal("$0.45 admitted against a $1 rolling hour whose ledger holds $0.60")
	}
	if err := admit(400_000, t0); err != nil {
		t.Fatalf("$0.40 against $0.60 of $1: %v", err)
	}
	if reads != 1 {
		t.Fatalf("the ledger read %d times; want once", reads)
	}
	// Counted in the window's bucket of 11:15, the first ledger bucket
	// leaves as that bucket does (a window counts its oldest bucket whole:
	// at 12:16); $0.25 and $0.40 remain.
	if err := admit(350_000, t0.Add(16*time.Minute-time.Second)); err == nil {
		t.Fatal("$0.35 admitted at 12:15:59 with the ledger's first bucket still in the window")
	}
	if err := admit(350_000, t0.Add(16*time.Minute)); err != nil {
		t.Fatalf("after the ledger's first bucket left the window: %v", err)
	}
	// Three hours on, the window Redis keeps is not read from the ledger
	// again, and the old spend has left it.
	if err := admit(1_000_000, t0.Add(3*time.Hour)); err != nil {
		t.Fatalf("three hours on: %v", err)
	}
	if reads != 1 {
		t.Errorf("the ledger read %d times; want once", reads)
	}
}
