package redis_test

// Adversarial tests of the Redis admission backend (TestAttack*). A test
// that fails demonstrates a bug: it asserts the correct behaviour. The
// ones that pass are guards: attacks that found nothing.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// fakeLedger is the fleet's ledger, as Options.Spent, Options.SpentBuckets
// and LocalOptions.Spent read it: every settled request once, told by
// Record (the Redis backend's and the fallback Local's).
type fakeLedger struct {
	mu   sync.Mutex
	recs []ledgerRec
}

type ledgerRec struct {
	kind, id, model string
	at              time.Time
	cost            int64
}

func (l *fakeLedger) Record(kind, id, model string, at time.Time, cost int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, ledgerRec{kind, id, model, at, cost})
}

func (l *fakeLedger) spent(kind, id, model string, since time.Time) money.Sum {
	l.mu.Lock()
	defer l.mu.Unlock()
	var s money.Sum
	for _, r := range l.recs {
		if r.kind == kind && r.id == id && (model == "" || r.model == model) && (since.IsZero() || !r.at.Before(since.Truncate(redis.SpentBucketWidth))) {
			s = s.AddPico(r.cost)
		}
	}
	return s
}

func (l *fakeLedger) Spent(_ context.Context, kind, id, model string, since time.Time) (money.Sum, error) {
	return l.spent(kind, id, model, since), nil
}

func (l *fakeLedger) SpentBuckets(_ context.Context, kind, id, model string, since time.Time) ([]redis.SpentBucket, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sums := map[time.Time]money.Sum{}
	for _, r := range l.recs {
		b := r.at.UTC().Truncate(redis.SpentBucketWidth)
		if r.kind == kind && r.id == id && (model == "" || r.model == model) && b.Add(redis.SpentBucketWidth).After(since) {
			sums[b] = sums[b].AddPico(r.cost)
		}
	}
	var out []redis.SpentBucket
	for b, c := range sums {
		out = append(out, redis.SpentBucket{Start: b, Cost: c})
	}
	return out, nil
}

func (l *fakeLedger) localSpent(kind, id, model string, since time.Time) money.Sum {
	return l.spent(kind, id, model, since)
}

// attackFailover is a Failover as serve makes it, over a backend of
// opts (the ledger's functions filled in) and a Local, both recording
// into led; Run runs until the test ends.
func attackFailover(t *testing.T, c goredis.UniversalClient, mode string, led *fakeLedger, opts redis.Options) (*admission.Failover, *redis.Backend) {
	t.Helper()
	opts.Spent, opts.SpentBuckets, opts.Record = led.Spent, led.SpentBuckets, led.Record
	if opts.Timeout == 0 {
		opts.Timeout = 50 * time.Millisecond
	}
	b := redis.New(c, opts)
	local := admission.NewLocal(limits.New(limits.Options{}), admission.LocalOptions{Spent: led.localSpent, Record: led.Record})
	f := admission.NewFailover(b, local, admission.FailoverOptions{Timeout: 50 * time.Millisecond, Mode: mode})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { f.Run(ctx, time.Hour, time.Now) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return f, b
}

func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if e, _ := apierr.As(err); e == nil || e.Code != code {
		t.Fatalf("%s: %v; want %s", what, err, code)
	}
}

func recovered(t *testing.T, f *admission.Failover) {
	t.Helper()
	testctx.Wait(t, "the failover to find Redis again and reconcile", func() bool {
		w, _ := f.Pending()
		return !f.Down() && w == 0
	})
}

// TestAttackReconcileIntoEmptyRedisForgetsRollingSpend: Redis is lost
// (restarted empty) while a fail-open replica admits on its own; once
// Redis answers, the replica reconciles its fallback settles into the
// empty Redis, which creates the rolling budget's window with them alone
// (and sets no `since`), so the next admission finds the window and never
// reads the ledger: the spend before the outage is forgotten and the
// rolling budget is overspent.
func TestAttackReconcileIntoEmptyRedisForgetsRollingSpend(t *testing.T) {
	s := redistest.Own(t)
	led := &fakeLedger{}
	f, _ := attackFailover(t, client(t, s), policies.FailOpen, led, redis.Options{})
	ctx := testctx.Deadline(t)
	p := &keyring.Principal{KeyID: "k", Team: "t", Org: "o",
		TeamLimits: policies.Limits{Budgets: []policies.Budget{{Period: policies.PeriodRolling, Window: time.Hour, MicroUSD: 1_000_000}}}}
	admitSettle := func(micros int64) error {
		t.Helper()
		g, err := f.Admit(ctx, admission.Claim{Principal: p, CostPico: micros * micro, At: time.Now()})
		if err == nil {
			f.Settle(ctx, g, admission.Actual{CostPico: micros * micro, At: time.Now()})
		}
		return err
	}
	if err := admitSettle(500_000); err != nil {
		t.Fatal(err)
	}
	s.Halt()
	if err := admitSettle(100_000); err != nil {
		t.Fatalf("fail open, Redis down: %v", err)
	}
	if f.FallbackCount(admission.PhaseAdmit) != 1 {
		t.Fatalf("fallback admissions %d; want 1", f.FallbackCount(admission.PhaseAdmit))
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	recovered(t, f)
	// $0.60 spent in the hour (the ledger has both): $0.50 more is over
	// the $1 rolling budget.
	err := admitSettle(500_000)
	if err == nil {
		t.Fatalf("$0.50 admitted against a $1 rolling hour whose ledger holds $0.60: the fallback's reconcile created the window in the empty Redis and the ledger was never read (total now $1.10)")
	}
	wantCode(t, "$0.50 more", err, apierr.CodeInsufficientQuota)
}

// TestAttackReconcileAfterLedgerSeedCountsRollingTwice: the other order.
// Redis comes back empty, an admission seeds the rolling window from the
// ledger (which already holds the fallback request), then the replica
// reconciles that request into the window: counted twice.
func TestAttackReconcileAfterLedgerSeedCountsRollingTwice(t *testing.T) {
	s := redistest.Own(t)
	led := &fakeLedger{}
	b := redis.New(client(t, s), redis.Options{Spent: led.Spent, SpentBuckets: led.SpentBuckets, Record: led.Record})
	ctx := testctx.Deadline(t)
	p := &keyring.Principal{KeyID: "k", Team: "t", Org: "o",
		TeamLimits: policies.Limits{Budgets: []policies.Budget{{Period: policies.PeriodRolling, Window: time.Hour, MicroUSD: 1_000_000}}}}
	now := time.Now()
	// The ledger: $0.50 before the outage, $0.10 admitted by a fallback
	// while Redis was down (not yet reconciled).
	led.Record("team", "t", "", now.Add(-2*time.Second), 500_000*micro)
	led.Record("team", "t", "", now.Add(-time.Second), 100_000*micro)
	fallback := admission.Claim{Principal: p, CostPico: 100_000 * micro, At: now.Add(-time.Second)}
	// An admission of nothing seeds the window from the ledger: $0.60.
	g, err := b.Admit(ctx, admission.Claim{Principal: p, CostPico: 1, At: now})
	if err != nil {
		t.Fatal(err)
	}
	b.Settle(ctx, g, admission.Actual{At: now})
	if err := b.Reconcile(ctx, "fallback-1", fallback, admission.Actual{CostPico: 100_000 * micro, At: now}, time.Since(now.Add(-time.Second))); err != nil {
		t.Fatal(err)
	}
	bs := b.Budgets(p, time.Now())
	if len(bs) != 1 || bs[0].Spent != money.FromMicros(600_000) {
		t.Fatalf("rolling budget after the ledger seed and the reconcile: %+v; want $0.60 spent (the fallback request once)", bs)
	}
}

// TestAttackReconcileTrustsTheReplicasClock: whether a calendar or
// lifetime budget state counts a reconciled request is decided by
// comparing the state's creation time (Redis's clock, field c) with the
// replica's settle time (the replica's clock). A replica whose clock is
// ahead counts twice what the ledger already seeded; one whose clock is
// behind loses a charge Redis never had.
func TestAttackReconcileTrustsTheReplicasClock(t *testing.T) {
	p := &keyring.Principal{KeyID: "k", Team: "t", Org: "o",
		OrgLimits: policies.Limits{Budgets: []policies.Budget{{Period: policies.PeriodLifetime, MicroUSD: 1_000_000_000}}}}
	t.Run("ahead", func(t *testing.T) {
		s := redistest.Own(t)
		led := &fakeLedger{}
		b := redis.New(client(t, s), redis.Options{Spent: led.Spent, Record: led.Record})
		ctx := testctx.Deadline(t)
		// Really settled before Redis was lost: in the ledger ($50 with
		// the $20 fallback request).
		real := time.Now()
		led.Record("org", "o", "", real.Add(-time.Hour), 30_000_000*micro)
		led.Record("org", "o", "", real.Add(-time.Second), 20_000_000*micro)
		// Redis (new) seeds its lifetime state from the ledger now.
		g, err := b.Admit(ctx, admission.Claim{Principal: p, CostPico: micro, At: real})
		if err != nil {
			t.Fatal(err)
		}
		b.Settle(ctx, g, admission.Actual{At: real})
		// The replica's clock is 5 minutes ahead.
		skew := 5 * time.Minute
		c := admission.Claim{Principal: p, CostPico: 20_000_000 * micro, At: real.Add(-time.Second + skew)}
		// What the replica passes is how long ago the request settled, by
		// its monotonic clock (a minute ago, before Redis was lost),
		// whatever its wall clock says.
		if err := b.Reconcile(ctx, "r1", c, admission.Actual{CostPico: 20_000_000 * micro, At: real.Add(skew)}, time.Since(real.Add(-time.Minute))); err != nil {
			t.Fatal(err)
		}
		if bs := b.Budgets(p, time.Now()); len(bs) != 1 || bs[0].Spent != money.FromMicros(50_000_000) {
			t.Fatalf("lifetime budget: %+v; want $50 spent: the request settled before Redis made the state (seeded from the ledger, which holds it)", bs)
		}
	})
	t.Run("behind", func(t *testing.T) {
		s := redistest.Own(t)
		led := &fakeLedger{}
		b := redis.New(client(t, s), redis.Options{Spent: led.Spent, Record: led.Record})
		ctx := testctx.Deadline(t)
		real := time.Now()
		g, err := b.Admit(ctx, admission.Claim{Principal: p, CostPico: micro, At: real})
		if err != nil {
			t.Fatal(err)
		}
		b.Settle(ctx, g, admission.Actual{At: real})
		// Redis kept its state through a short outage; a fallback request
		// settled during it, on a replica whose clock is 5 minutes behind.
		skew := -5 * time.Minute
		c := admission.Claim{Principal: p, CostPico: 20_000_000 * micro, At: real.Add(skew)}
		if err := b.Reconcile(ctx, "r2", c, admission.Actual{CostPico: 20_000_000 * micro, At: real.Add(time.Second + skew)}, 0); err != nil {
			t.Fatal(err)
		}
		if bs := b.Budgets(p, time.Now()); len(bs) != 1 || bs[0].Spent != money.FromMicros(20_000_000) {
			t.Fatalf("lifetime budget: %+v; want $20 spent: Redis had the state all along and lacks the request", bs)
		}
	})
}

// TestAttackCanceledCallersTakeRedisDown: a caller whose context is
// already done (a client that hung up, Envoy resetting the ext_proc
// stream) makes the shared backend's call fail; Failover counts that as a
// failure of Redis. Three in a row and the replica takes Redis for down:
// every other tenant's request then follows its failure mode — 503 for
// the closed ones, and for the open ones admission against this
// replica's own counters, which do not hold what the fleet spent.
func TestAttackCanceledCallersTakeRedisDown(t *testing.T) {
	s := redistest.Own(t)
	c := client(t, s)
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	attacker := &keyring.Principal{KeyID: "ka", Team: "ta", Org: "attacker"}
	t.Run("closed", func(t *testing.T) {
		f, _ := attackFailover(t, c, policies.FailClosed, &fakeLedger{}, redis.Options{})
		ctx := testctx.Deadline(t)
		victim := budgetPrincipal(1_000_000, "")
		for range 3 {
			f.Admit(dead, admission.Claim{Principal: attacker, At: time.Now()})
		}
		if _, err := f.Admit(ctx, admission.Claim{Principal: victim, CostPico: micro, At: time.Now()}); err != nil {
			t.Fatalf("another org's request, Redis healthy, after three callers hung up: %v (down %v); want admitted", err, f.Down())
		}
	})
	t.Run("open", func(t *testing.T) {
		led := &fakeLedger{}
		f, _ := attackFailover(t, c, policies.FailOpen, led, redis.Options{})
		ctx := testctx.Deadline(t)
		victim := budgetPrincipal(1_000_000, "")
		victim.Org = "o-open"
		// Another replica spent the whole $1 of the org's day in Redis;
		// this replica's ledger view lags (its spool, the other replica's).
		other := redis.New(c, redis.Options{})
		g, err := other.Admit(ctx, admission.Claim{Principal: victim, CostPico: 1_000_000 * micro, At: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		other.Settle(ctx, g, admission.Actual{CostPico: 1_000_000 * micro, At: time.Now()})
		for range 3 {
			f.Admit(dead, admission.Claim{Principal: attacker, At: time.Now()})
		}
		_, err = f.Admit(ctx, admission.Claim{Principal: victim, CostPico: 500_000 * micro, At: time.Now()})
		if err == nil {
			t.Fatalf("$0.50 admitted on a $1 budget the fleet has spent, Redis healthy: three hung-up callers put the replica in fallback (down %v)", f.Down())
		}
		wantCode(t, "an exhausted budget", err, apierr.CodeInsufficientQuota)
	})
}

// TestAttackCountedInRedisReconciledAgain: ext_authz counts the request
// in Redis; its Admit meets a slow Redis and is admitted by the fallback
// (fail open); once Redis answers, Reconcile counts the request in the
// key's request windows again: one request counted twice.
func TestAttackCountedInRedisReconciledAgain(t *testing.T) {
	s := redistest.Own(t)
	f, b := attackFailover(t, client(t, s), policies.FailOpen, &fakeLedger{}, redis.Options{CallerClock: true})
	ctx := testctx.Deadline(t)
	p := budgetPrincipal(1_000_000, "")
	p.KeyLimits.Requests.PerMinute = 2
	t0 := time.Now().Truncate(time.Minute).Add(-time.Hour)
	if err := f.CountRequest(ctx, p, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Do("CLIENT", "PAUSE", "300", "ALL"); err != nil {
		t.Fatal(err)
	}
	g, err := f.Admit(ctx, admission.Claim{Principal: p, CostPico: micro, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	if f.FallbackCount(admission.PhaseAdmit) != 1 {
		t.Fatalf("fallback admissions %d; want 1", f.FallbackCount(admission.PhaseAdmit))
	}
	f.Settle(ctx, g, admission.Actual{CostPico: micro, At: t0})
	testctx.Wait(t, "Redis to answer again", func() bool { return b.Ping(ctx) == nil })
	recovered(t, f)
	// One request so far: a second fits the key's 2 a minute.
	if err := f.CountRequest(ctx, p, t0); err != nil {
		t.Fatalf("the second request of the minute: %v; want counted (the first was counted twice: by ext_authz in Redis, and by the reconcile)", err)
	}
}

// TestAttackTeamMovedToAnotherOrgEscapesRollingBudget: every key carries
// its org's hash tag, and a rolling window Redis lacks is read from the
// ledger only while the org's `since` marker is younger than the window.
// A team moved into an org that has counted for longer (a config change)
// finds no window under the new tag and no reason to read the ledger: its
// rolling budget starts empty, and the team spends it twice in one
// window. admission.Local counts the team's window whatever its org.
func TestAttackTeamMovedToAnotherOrgEscapesRollingBudget(t *testing.T) {
	s := redistest.Own(t)
	led := &fakeLedger{}
	b := redis.New(client(t, s), redis.Options{CallerClock: true, Spent: led.Spent, SpentBuckets: led.SpentBuckets, Record: led.Record})
	local := admission.NewLocal(limits.New(limits.Options{}), admission.LocalOptions{})
	ctx := testctx.Deadline(t)
	t0 := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	team := policies.Limits{Budgets: []policies.Budget{{Period: policies.PeriodRolling, Window: time.Hour, MicroUSD: 1_000_000}}}
	other := &keyring.Principal{KeyID: "k2", Team: "t2", Org: "B"}
	inA := &keyring.Principal{KeyID: "k", Team: "t", Org: "A", TeamLimits: team}
	inB := &keyring.Principal{KeyID: "k", Team: "t", Org: "B", TeamLimits: team}
	run := func(be admission.Backend, p *keyring.Principal, micros int64, at time.Time) error {
		g, err := be.Admit(ctx, admission.Claim{Principal: p, CostPico: micros * micro, At: at})
		if err == nil {
			be.Settle(ctx, g, admission.Actual{CostPico: micros * micro, At: at})
		}
		return err
	}
	for _, be := range []admission.Backend{b, local} {
		if err := run(be, other, 1, t0); err != nil { // org B counts from 09:00
			t.Fatal(err)
		}
		if err := run(be, inA, 900_000, t0.Add(2*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	errLocal := run(local, inB, 900_000, t0.Add(2*time.Hour+time.Minute))
	wantCode(t, "Local, the team's second $0.90 in its $1 rolling hour", errLocal, apierr.CodeInsufficientQuota)
	if err := run(b, inB, 900_000, t0.Add(2*time.Hour+time.Minute)); err == nil {
		t.Fatal("Redis admitted the team's second $0.90 in its $1 rolling hour after the team moved to org B ($1.80 spent in the window; Local refuses)")
	}
}

// TestAttackBudgetStateKeysCollide: a budget state's key joins the scope's
// kind, id, model and period with '/' and ':' — team "t"'s budget for
// model "m" and team "t/model/m"'s own budget are one Redis key. One
// team's spend is charged to the other's budget (admission.Local keeps
// them apart).
func TestAttackBudgetStateKeysCollide(t *testing.T) {
	s := redistest.Own(t)
	led := &fakeLedger{}
	b := redis.New(client(t, s), redis.Options{CallerClock: true, Spent: led.Spent, Record: led.Record})
	ctx := testctx.Deadline(t)
	at := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	life := []policies.Budget{{Period: policies.PeriodLifetime, MicroUSD: 1_000_000}}
	slash := &keyring.Principal{KeyID: "k1", Team: "t/model/m", Org: "o", TeamLimits: policies.Limits{Budgets: life}}
	plain := &keyring.Principal{KeyID: "k2", Team: "t", Org: "o", TeamLimits: policies.Limits{Models: map[string]policies.Limits{"m": {Budgets: life}}}}
	local := admission.NewLocal(limits.New(limits.Options{}), admission.LocalOptions{})
	for _, be := range []admission.Backend{local, b} {
		g, err := be.Admit(ctx, admission.Claim{Principal: slash, Model: "x", CostPico: 1_000_000 * micro, At: at})
		if err != nil {
			t.Fatal(err)
		}
		be.Settle(ctx, g, admission.Actual{CostPico: 1_000_000 * micro, At: at})
	}
	if _, err := local.Admit(ctx, admission.Claim{Principal: plain, Model: "m", CostPico: 500_000 * micro, At: at}); err != nil {
		t.Fatalf("Local: %v", err)
	}
	if _, err := b.Admit(ctx, admission.Claim{Principal: plain, Model: "m", CostPico: 500_000 * micro, At: at}); err != nil {
		t.Fatalf("team t's first $0.50 on model m, within its $1 lifetime budget for m: %v (team t/model/m's spend charged to it)", err)
	}
}

// TestAttackFallbackForgetsWhatRedisSettled: the fallback Local keeps the
// budget state it made in an earlier outage; what this very replica
// settled through Redis since (its ledger, its spend index, know it) never
// reaches that state, so the next outage admits against a stale spent:
// one replica alone spends more than the whole budget.
func TestAttackFallbackForgetsWhatRedisSettled(t *testing.T) {
	s := redistest.Own(t)
	led := &fakeLedger{}
	f, _ := attackFailover(t, client(t, s), policies.FailOpen, led, redis.Options{})
	ctx := testctx.Deadline(t)
	p := &keyring.Principal{KeyID: "k", Team: "t", Org: "o",
		OrgLimits: policies.Limits{Budgets: []policies.Budget{{Period: policies.PeriodLifetime, MicroUSD: 1_000_000}}}}
	admitSettle := func(micros int64) error {
		g, err := f.Admit(ctx, admission.Claim{Principal: p, CostPico: micros * micro, At: time.Now()})
		if err == nil {
			f.Settle(ctx, g, admission.Actual{CostPico: micros * micro, At: time.Now()})
		}
		return err
	}
	s.Halt()
	if err := admitSettle(100_000); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	recovered(t, f)
	if err := admitSettle(800_000); err != nil {
		t.Fatal(err)
	}
	if f.FallbackCount(admission.PhaseAdmit) != 1 {
		t.Fatalf("fallback admissions %d; want 1 (the second through Redis)", f.FallbackCount(admission.PhaseAdmit))
	}
	s.Halt()
	// The ledger holds $0.90 of the $1: $0.50 more does not fit.
	err := admitSettle(500_000)
	if err == nil {
		t.Fatalf("fallback admitted $0.50 with $0.90 of the $1 lifetime budget spent (its state from the first outage says $0.10); total $1.40 through one replica")
	}
	wantCode(t, "the second outage", err, apierr.CodeInsufficientQuota)
}

// TestAttackDifferentialAgainstLocal runs the same random calls — counts,
// admissions with odd and extreme amounts, settles above and below the
// reservation (some after the reservation expired), budget reports —
// against admission.Local and the Redis backend at the same (caller's)
// times, across day and week boundaries and small clock jitter, and
// wants the same answers: refusals (code, message, retry-after), the
// Remaining of each grant, and every budget as reported.
func TestAttackDifferentialAgainstLocal(t *testing.T) {
	s := redistest.Own(t)
	c := client(t, s)
	for seed := uint64(1); seed <= diffSeeds; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			if _, err := s.Do("FLUSHALL"); err != nil {
				t.Fatal(err)
			}
			differential(t, c, seed)
		})
	}
}

func differential(t *testing.T, c goredis.UniversalClient, seed uint64) {
	ctx := testctx.Deadline(t)
	rng := rand.New(rand.NewPCG(seed, 99))
	ttl := 30*time.Minute + time.Millisecond // odd ms: never due on the exact ms both sides disagree on
	lidx, ridx := admission.NewSpendIndex(nil, nil), admission.NewSpendIndex(nil, nil)
	local := admission.NewLocal(limits.New(limits.Options{}), admission.LocalOptions{Spent: lidx.Spent, Record: lidx.Add})
	rb := redis.New(c, redis.Options{CallerClock: true, ReservationTTL: ttl,
		Spent: func(_ context.Context, kind, id, model string, since time.Time) (money.Sum, error) {
			return ridx.Spent(kind, id, model, since), nil
		},
		Record: ridx.Add})
	variant := seed % 3
	ps := diffPrincipals(variant)
	p := ps[0]
	// Sunday 22:00 UTC: the run crosses a day and a week.
	now := time.Date(2026, 12, 6, 22, 0, 0, 0, time.UTC)
	type pair struct {
		l, r admission.Grant
		c    admission.Claim
		due  time.Time
	}
	var open []pair
	defer func() {
		for _, g := range open {
			if now.Sub(g.c.At) >= 20*time.Hour {
				t.Errorf("a grant left %v unsettled: beyond what Local and Redis keep alike", now.Sub(g.c.At))
			}
		}
	}()
	amount := func(typical int64) int64 {
		if variant == 1 && rng.IntN(3) == 0 {
			return rng.Int64()
		}
		switch rng.IntN(40) {
		case 0:
			return math.MaxInt64
		case 1:
			return -rng.Int64N(1000)
		case 2:
			return 0
		}
		return rng.Int64N(typical)
	}
	errText := func(err error) string {
		if err == nil {
			return "<nil>"
		}
		if e, ok := apierr.As(err); ok {
			return fmt.Sprintf("%d %s ra=%v %q %q", e.Status, e.Code, e.RetryAfter, e.Message, e.OpenAIMessage)
		}
		return "error: " + err.Error()
	}
	budgets := func(bs []admission.BudgetStatus) string {
		var b strings.Builder
		for _, s := range bs {
			fmt.Fprintf(&b, "%s/%s/%s/%s/%v limit %d spent %s reserved %s remaining %s resets %d\n", s.Scope, s.ID, s.Model, s.Period, s.Window,
				s.Limit, s.Spent, s.Reserved, s.Remaining, s.Resets.Unix())
		}
		return b.String()
	}
	kinds := map[string]int{}
	defer func() { t.Logf("outcomes: %v", kinds) }()
	for op := 0; op < 400; op++ {
		var step time.Duration // even ms
		switch r := rng.IntN(100); {
		case r < 8 && diffJitter:
			step = -time.Duration(rng.Int64N(1000)) * 2 * time.Millisecond // jitter back
		case r < 70 || variant == 2 && r < 93:
			step = time.Duration(rng.Int64N(1500)) * 2 * time.Millisecond
		case r < 95:
			step = time.Duration(rng.Int64N(150_000)) * 2 * time.Millisecond
		default:
			step = time.Duration(rng.Int64N(3_600_000)) * 2 * time.Millisecond
		}
		now = now.Add(step)
		local.ExpireBefore(now, now.Add(-ttl))
		p = ps[rng.IntN(len(ps))]
		// Budgets sweeps and saves: the holds due now are released before
		// the op (TestAttackSweepRefundLostOn* is the bug this avoids).
		if lb, rbs := budgets(local.Budgets(p, now)), budgets(rb.Budgets(p, now)); lb != rbs {
			t.Fatalf("seed %d op %d at %v, before the op:\nLocal budgets:\n%sRedis budgets:\n%s", seed, op, now, lb, rbs)
		}
		what := ""
		var lres, rres string
		k := rng.IntN(10)
		// Local forgets an expired hold a day after its ttl, Redis a day
		// after the sweep that released it: every grant is settled in 20h.
		forced := len(open) > 0 && now.Sub(open[0].c.At) > 17*time.Hour
		if forced {
			k = 5
		}
		switch {
		case k < 5:
			cl := admission.Claim{Principal: p, Model: []string{"", "m1", "m2"}[rng.IntN(3)], CountRequest: rng.IntN(2) == 0,
				InputTokens: amount(3000), MaxOutputTokens: amount(3000), CostPico: amount(30_000 * micro), At: now}
			what = fmt.Sprintf("admit %+v", cl)
			if !cl.CountRequest {
				le, re := local.CountRequest(ctx, p, now), rb.CountRequest(ctx, p, now)
				lres, rres = "count "+errText(le), "count "+errText(re)
				if le != nil || re != nil {
					break
				}
			}
			lg, le := local.Admit(ctx, cl)
			rg, re := rb.Admit(ctx, cl)
			lres, rres = errText(le), errText(re)
			if le == nil && re == nil {
				lres += fmt.Sprintf(" %+v", lg.Remaining)
				rres += fmt.Sprintf(" %+v", rg.Remaining)
				open = append(open, pair{lg, rg, cl, now.Add(time.Duration(rng.Int64N(int64(45 * time.Minute))))})
			}
		case k < 8 && len(open) > 0:
			i := rng.IntN(len(open))
			if forced {
				i = 0
			}
			g := open[i]
			if now.Before(g.due) && rng.IntN(3) > 0 && !forced {
				continue
			}
			open = append(open[:i], open[i+1:]...)
			a := admission.Actual{InputTokens: amount(4000), OutputTokens: amount(4000), CostPico: amount(40_000 * micro), At: now}
			if a.CostPico == math.MaxInt64 {
				a.CostPico = 50_000 * micro
			}
			what = fmt.Sprintf("settle %+v of %+v", a, g.c)
			local.Settle(ctx, g.l, a)
			rb.Settle(ctx, g.r, a)
			if rng.IntN(8) == 0 { // settled twice
				local.Settle(ctx, g.l, a)
				rb.Settle(ctx, g.r, a)
			}
		default:
			what = "budgets"
		}
		if debugDiff {
			t.Logf("op %d at %v: %s -> %s", op, now, what, lres)
		}
		kinds[strings.SplitN(strings.SplitN(lres, " ra=", 2)[0], " {", 2)[0]]++
		lb, rbs := budgets(local.Budgets(p, now)), budgets(rb.Budgets(p, now))
		if lres != rres || lb != rbs {
			t.Fatalf("seed %d op %d at %v: %s\nLocal: %s\nRedis: %s\nLocal budgets:\n%sRedis budgets:\n%s", seed, op, now, what, lres, rres, lb, rbs)
		}
	}
}

// debugDiff logs every op of a differential run.
var debugDiff = false

// TestAttackSweepRefundLostOnSeedReply: every script that touches an org
// first sweeps its expired holds: the budget reservations are released
// at once (HSET), the hold is marked released, but the window refunds
// are made in the script's in-memory counters, written only by save().
// Admit's 'seed', 'wseed' and 'clock' replies (and Settle's 'gone') return
// without save(): the refund is lost for good (the hold is marked
// released and never swept again), and the expired reservation keeps
// filling its token windows and rolling budgets. The first admission of
// a new day (a 'seed' reply) is enough.
func TestAttackSweepRefundLostOnSeedReply(t *testing.T) {
	s := redistest.Own(t)
	ctx := testctx.Deadline(t)
	ttl := 15 * time.Minute
	b := redis.New(client(t, s), redis.Options{CallerClock: true, ReservationTTL: ttl})
	local := admission.NewLocal(limits.New(limits.Options{}), admission.LocalOptions{})
	p := &keyring.Principal{KeyID: "k", Team: "t", Org: "o",
		KeyLimits: policies.Limits{Tokens: policies.TokenLimits{Total: policies.RateLimits{PerHour: 10_000}},
			Budgets: []policies.Budget{{Period: policies.PeriodDay, MicroUSD: 1_000_000}}}}
	t0 := time.Date(2026, 12, 7, 23, 50, 0, 0, time.UTC)
	// A request reserves 8,000 of the hour's 10,000 tokens, and its
	// replica dies: it is never settled.
	for _, be := range []admission.Backend{local, b} {
		if _, err := be.Admit(ctx, admission.Claim{Principal: p, InputTokens: 4000, MaxOutputTokens: 4000, CostPico: micro, At: t0}); err != nil {
			t.Fatal(err)
		}
	}
	// Past its ttl, the next day's first request: its day is new to Redis
	// ('seed'), and the sweep released the hold in that call.
	t1 := t0.Add(ttl + time.Minute)
	local.ExpireBefore(t1, t1.Add(-ttl))
	for i, be := range []admission.Backend{local, b} {
		_, err := be.Admit(ctx, admission.Claim{Principal: p, InputTokens: 4000, MaxOutputTokens: 4000, CostPico: micro, At: t1})
		if err != nil {
			t.Fatalf("%s: 8,000 tokens in an hour of 10,000 whose only other reservation expired: %v", []string{"Local", "Redis"}[i], err)
		}
	}
}

// TestAttackSweepRefundLostOnGoneSettle: the same loss through Settle: a
// grant settled twice (a retried settle whose first try did reach Redis)
// is the first call after another hold expired: the sweep's refund is
// dropped with the 'gone' reply.
func TestAttackSweepRefundLostOnGoneSettle(t *testing.T) {
	s := redistest.Own(t)
	ctx := testctx.Deadline(t)
	ttl := 15 * time.Minute
	b := redis.New(client(t, s), redis.Options{CallerClock: true, ReservationTTL: ttl})
	p := &keyring.Principal{KeyID: "k", Team: "t", Org: "o",
		KeyLimits: policies.Limits{Tokens: policies.TokenLimits{Total: policies.RateLimits{PerHour: 10_000}}}}
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	if _, err := b.Admit(ctx, admission.Claim{Principal: p, InputTokens: 4000, MaxOutputTokens: 4000, At: t0}); err != nil {
		t.Fatal(err)
	}
	g, err := b.Admit(ctx, admission.Claim{Principal: p, InputTokens: 1, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	b.Settle(ctx, g, admission.Actual{InputTokens: 1, At: t0})
	t1 := t0.Add(ttl + time.Minute)
	b.Settle(ctx, g, admission.Actual{InputTokens: 1, At: t1}) // again: 'gone'
	if _, err := b.Admit(ctx, admission.Claim{Principal: p, InputTokens: 4000, MaxOutputTokens: 4000, At: t1}); err != nil {
		t.Fatalf("8,000 tokens in an hour of 10,000 holding 1 and an expired reservation: %v", err)
	}
}

// diffSeeds is how many random runs TestAttackDifferentialAgainstLocal
// makes (300 found nothing beyond what it works around).
var diffSeeds = uint64(6)

// diffPrincipals are the principals of a differential run: three of one
// team and org (two keys, and the first again under a changed config).
// Variant 1 has extreme limits; variant 2 tight request limits.
func diffPrincipals(variant uint64) []*keyring.Principal {
	mk := func(key string, changed bool) *keyring.Principal {
		// A cent is 10⁴ micro-dollars.
		p := &keyring.Principal{KeyID: key, Team: "team-x", Org: "org-x",
			KeyLimits: policies.Limits{Requests: policies.RateLimits{PerMinute: 6},
				Tokens:  policies.TokenLimits{Total: policies.RateLimits{PerMinute: 6000}},
				Budgets: []policies.Budget{{Period: policies.PeriodRolling, Window: time.Hour, MicroUSD: 200_000}}},
			TeamLimits: policies.Limits{Requests: policies.RateLimits{PerHour: 40},
				Tokens:  policies.TokenLimits{Input: policies.RateLimits{PerHour: 30000}},
				Budgets: []policies.Budget{{Period: policies.PeriodDay, MicroUSD: 1_000_000}},
				Models: map[string]policies.Limits{"m1": {
					Requests: policies.RateLimits{PerMinute: 3},
					Tokens:   policies.TokenLimits{Output: policies.RateLimits{PerMinute: 4000}},
					Budgets:  []policies.Budget{{Period: policies.PeriodLifetime, MicroUSD: 2_000_000}}}}},
			OrgLimits: policies.Limits{Requests: policies.RateLimits{PerDay: 300},
				Budgets: []policies.Budget{{Period: policies.PeriodWeek, MicroUSD: 3_000_000}, {Period: policies.PeriodMonth, MicroUSD: 5_000_000},
					{Period: policies.PeriodRolling, Window: 24 * time.Hour, MicroUSD: 2_500_000}}}}
		switch variant {
		case 1:
			m := int64(math.MaxInt64)
			p.KeyLimits = policies.Limits{Requests: policies.RateLimits{PerMinute: m, PerDay: 3},
				// A limit of math.MaxInt64 itself: TestAttackSaturatedRetryAfter.
				Tokens:  policies.TokenLimits{Total: policies.RateLimits{PerMinute: m - 1}, Input: policies.RateLimits{PerHour: m - 2}},
				Budgets: []policies.Budget{{Period: policies.PeriodRolling, Window: time.Hour, MicroUSD: m}, {Period: policies.PeriodDay, MicroUSD: m}}}
			p.TeamLimits.Budgets = []policies.Budget{{Period: policies.PeriodLifetime, MicroUSD: m / 2}, {Period: policies.PeriodRolling, Window: time.Minute, MicroUSD: m / 1_000_000}}
			p.TeamLimits.Requests = policies.RateLimits{}
		case 2:
			p.KeyLimits.Requests = policies.RateLimits{PerMinute: 2, PerHour: 9}
			p.TeamLimits.Requests = policies.RateLimits{PerMinute: 3}
			p.OrgLimits.Requests = policies.RateLimits{PerMinute: 4}
		}
		if changed {
			p.TeamLimits.Budgets = nil
			p.OrgLimits.Budgets[0].MicroUSD = 1_500_000
			p.KeyLimits.Tokens.Total.PerMinute = 3000
		}
		return p
	}
	return []*keyring.Principal{mk("key_x", false), mk("key_y", false), mk("key_x", true)}
}

// diffJitter lets the caller's clock step back a little now and then.
// Off: Local keeps an empty counter made at a later time (its head), Redis
// does not write one, so a request at an earlier time lands a bucket or
// two apart (resets differ by as much). A clock that goes back is the
// caller's alone; Redis's clock (serve) does not.
var diffJitter = false

// TestAttackSaturatedRetryAfter: a token window of math.MaxInt64 whose
// total plus the claim saturates: the excess both backends compute is
// sat.Add(total, claim) − limit = 0, so the retry-after is the first
// bucket to leave — Local's first slot even when empty (under a second),
// Redis's first non-empty bucket — not when the room the claim needs
// comes. They disagree, and neither is right (the script's pairs could
// compute the excess exactly).
func TestAttackSaturatedRetryAfter(t *testing.T) {
	s := redistest.Own(t)
	ctx := testctx.Deadline(t)
	b := redis.New(client(t, s), redis.Options{CallerClock: true})
	local := admission.NewLocal(limits.New(limits.Options{}), admission.LocalOptions{})
	p := &keyring.Principal{KeyID: "k", Team: "t", Org: "o",
		KeyLimits: policies.Limits{Tokens: policies.TokenLimits{Total: policies.RateLimits{PerMinute: math.MaxInt64}}}}
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for i, be := range []admission.Backend{local, b} {
		name := []string{"Local", "Redis"}[i]
		for _, c := range []struct {
			at     time.Duration
			tokens int64
		}{{0, 1}, {10 * time.Second, 4e18}, {20 * time.Second, 4e18}} {
			if _, err := be.Admit(ctx, admission.Claim{Principal: p, InputTokens: c.tokens, At: t0.Add(c.at)}); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		// 8e18+1 counted, 5e18 more: the 4e18 of 12:00:10 must leave
		// first (at 12:01:11, the window counting its oldest bucket whole).
		_, err := be.Admit(ctx, admission.Claim{Principal: p, InputTokens: 5e18, At: t0.Add(30 * time.Second)})
		e, _ := apierr.As(err)
		if e == nil || e.Code != apierr.CodeTokensRateLimited {
			t.Fatalf("%s: %v; want tokens_rate_limited", name, err)
		}
		if e.RetryAfter != 41*time.Second {
			t.Errorf("%s: retry-after %v; want 41s, when the room comes", name, e.RetryAfter)
		}
	}
}

// TestAttackLedgerErrorTakesRedisDown: a ledger read that fails (a budget
// period new to Redis, PostgreSQL slow) fails the Admit with an error
// that is not a refusal: Failover counts it as Redis failing. Three in a
// row and every tenant of the replica follows its failure mode, Redis
// healthy all along.
func TestAttackLedgerErrorTakesRedisDown(t *testing.T) {
	s := redistest.Own(t)
	ctx := testctx.Deadline(t)
	victim := budgetPrincipal(1_000_000, "")
	// The victim's day is in Redis already.
	if _, err := redis.New(client(t, s), redis.Options{}).Admit(ctx, admission.Claim{Principal: victim, CostPico: micro, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	slow := redis.New(client(t, s), redis.Options{Timeout: 50 * time.Millisecond,
		Spent: func(context.Context, string, string, string, time.Time) (money.Sum, error) {
			return money.Sum{}, errors.New("ledger: timeout")
		}})
	f2 := admission.NewFailover(slow, admission.NewLocal(limits.New(limits.Options{}), admission.LocalOptions{}), admission.FailoverOptions{Mode: policies.FailClosed})
	rctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { f2.Run(rctx, time.Hour, time.Now) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	// Three requests of orgs new to Redis, whose ledger reads fail.
	for i := range 3 {
		p := budgetPrincipal(1_000_000, "")
		p.Org = fmt.Sprint("new-", i)
		f2.Admit(ctx, admission.Claim{Principal: p, CostPico: micro, At: time.Now()})
	}
	if _, err := f2.Admit(ctx, admission.Claim{Principal: victim, CostPico: micro, At: time.Now()}); err != nil {
		t.Fatalf("a request whose limits Redis has, Redis healthy, after three ledger reads failed: %v (down %v); want admitted", err, f2.Down())
	}
}

// TestAttackConcurrentReplicas (guard): 48 goroutines on two replicas of
// one Redis (the server's clock) race to admit and settle against a key's
// request window, a token window and a lifetime budget: never more
// admitted than each allows, every settled cost counted once, nothing
// left reserved.
func TestAttackConcurrentReplicas(t *testing.T) {
	s := redistest.Own(t)
	c := client(t, s)
	ctx := testctx.Deadline(t)
	replicas := []*redis.Backend{redis.New(c, redis.Options{}), redis.New(c, redis.Options{})}
	p := &keyring.Principal{KeyID: "k", Team: "t", Org: "o",
		KeyLimits: policies.Limits{Requests: policies.RateLimits{PerMinute: 60},
			Tokens: policies.TokenLimits{Total: policies.RateLimits{PerMinute: 50_000}}},
		OrgLimits: policies.Limits{Budgets: []policies.Budget{{Period: policies.PeriodLifetime, MicroUSD: 1_000_000}}}}
	var admitted, spentPico, tokens atomic.Int64
	var wg sync.WaitGroup
	for i := range 48 {
		wg.Go(func() {
			b := replicas[i%2]
			for j := range 5 {
				if err := b.CountRequest(ctx, p, time.Now()); err != nil {
					if e, _ := apierr.As(err); e == nil {
						t.Error(err)
					}
					continue
				}
				g, err := b.Admit(ctx, admission.Claim{Principal: p, InputTokens: 500, MaxOutputTokens: 500, CostPico: 30_000 * micro, At: time.Now()})
				if err != nil {
					if e, _ := apierr.As(err); e == nil {
						t.Error(err)
					}
					continue
				}
				admitted.Add(1)
				cost := int64((i*7+j)%31) * 1_000 * micro
				used := int64(100 + (i+j)%900)
				spentPico.Add(cost)
				tokens.Add(used)
				b.Settle(ctx, g, admission.Actual{InputTokens: used / 2, OutputTokens: used - used/2, CostPico: cost, At: time.Now()})
			}
		})
	}
	wg.Wait()
	if admitted.Load() > 60 {
		t.Errorf("%d requests admitted in a minute allowing 60", admitted.Load())
	}
	bs := replicas[0].Budgets(p, time.Now())
	if len(bs) != 1 || bs[0].Spent != money.FromPico(spentPico.Load()) || !bs[0].Reserved.IsZero() {
		t.Fatalf("budget %+v; want spent %s, nothing reserved", bs, money.FromPico(spentPico.Load()))
	}
	if bs[0].Spent.Cmp(money.FromMicros(1_000_000)) > 0 {
		t.Fatalf("spent %s of a $1 budget", bs[0].Spent)
	}
	// The token window holds what was used, once.
	g, err := replicas[1].Admit(ctx, admission.Claim{Principal: p, CountRequest: false, At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if want := 50_000 - tokens.Load(); g.Remaining.Tokens != want {
		t.Fatalf("token window: %d left; want %d (50,000 less %d used)", g.Remaining.Tokens, want, tokens.Load())
	}
	t.Logf("admitted %d, spent %s, tokens %d", admitted.Load(), bs[0].Spent, tokens.Load())
}

// TestAttackOddIDsOnCluster (guard): ids with hash-tag braces, colons,
// slashes, newlines, NULs and 64 KiB, principals without an org or a team,
// on a Redis Cluster: every call's keys are in one slot (no CROSSSLOT),
// and each principal's limits are its own.
func TestAttackOddIDsOnCluster(t *testing.T) {
	cl := redistest.OwnCluster(t)
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cl.Addrs(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	ctx := testctx.Deadline(t)
	led := &fakeLedger{}
	b := redis.New(c, redis.Options{Spent: led.Spent, SpentBuckets: led.SpentBuckets, Record: led.Record})
	if err := b.Load(ctx); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("{x}", 64<<10/3)
	ids := []string{"}{", "{", "}", "{}", "a:b:c", "a/model/b", "line\nbreak", "nul\x00byte", " ", long, "ünï©ødé", "*", "?"}
	lim := policies.Limits{Requests: policies.RateLimits{PerMinute: 2},
		Tokens:  policies.TokenLimits{Total: policies.RateLimits{PerHour: 1000}},
		Budgets: []policies.Budget{{Period: policies.PeriodLifetime, MicroUSD: 100}, {Period: policies.PeriodRolling, Window: time.Hour, MicroUSD: 100}}}
	for i, id := range ids {
		for _, shape := range []string{"org", "team", "key"} {
			p := &keyring.Principal{KeyID: id + "-key-" + shape}
			switch shape {
			case "org":
				p.Team, p.Org = id+"-team", id
				p.OrgLimits = lim
				p.OrgLimits.Models = map[string]policies.Limits{id: lim}
			case "team":
				p.Team = id
				p.TeamLimits = lim
			case "key":
				p.KeyLimits = lim
			}
			what := fmt.Sprintf("id %d (%.20q) as %s", i, id, shape)
			for n := range 3 {
				err := b.CountRequest(ctx, p, time.Now())
				if n < 2 && err != nil {
					t.Fatalf("%s, count %d: %v", what, n, err)
				}
				if n == 2 && shape != "org" {
					wantCode(t, what+", a third request in a minute of 2", err, apierr.CodeRateLimited)
				}
			}
			g, err := b.Admit(ctx, admission.Claim{Principal: p, Model: id, InputTokens: 400, MaxOutputTokens: 400, CostPico: 60 * micro, At: time.Now()})
			if err != nil {
				t.Fatalf("%s: admit: %v", what, err)
			}
			if err := b.TrySettle(ctx, g, admission.Actual{InputTokens: 300, OutputTokens: 300, CostPico: 50 * micro, At: time.Now()}); err != nil {
				t.Fatalf("%s: settle: %v", what, err)
			}
			_, err = b.Admit(ctx, admission.Claim{Principal: p, Model: id, CostPico: 60 * micro, At: time.Now()})
			wantCode(t, what+", $60µ more of $100µ with $50µ spent", err, apierr.CodeInsufficientQuota)
			if err := b.Reconcile(ctx, id, admission.Claim{Principal: p, Model: id, CostPico: 10 * micro, At: time.Now()}, admission.Actual{CostPico: 10 * micro, At: time.Now()}, 0); err != nil {
				t.Fatalf("%s: reconcile: %v", what, err)
			}
			bs := b.Budgets(p, time.Now())
			if len(bs) == 0 || bs[0].Spent != money.FromMicros(60) {
				t.Fatalf("%s: budgets %+v; want $60µ spent", what, bs)
			}
		}
	}
}

// TestAttackExtremeAmounts (guard): a worst case of math.MaxInt64
// pico-dollars is refused by every budget "at all"; a budget of
// math.MaxInt64 micro-dollars (9.2e24 pico, past an int64) is counted
// exactly through settles of math.MaxInt64 each, as Local counts it;
// negative amounts count as zero.
func TestAttackExtremeAmounts(t *testing.T) {
	s := redistest.Own(t)
	ctx := testctx.Deadline(t)
	b := redis.New(client(t, s), redis.Options{CallerClock: true})
	local := admission.NewLocal(limits.New(limits.Options{}), admission.LocalOptions{})
	m := int64(math.MaxInt64)
	p := &keyring.Principal{KeyID: "k", Team: "t", Org: "o",
		KeyLimits:  policies.Limits{Budgets: []policies.Budget{{Period: policies.PeriodLifetime, MicroUSD: m}}},
		TeamLimits: policies.Limits{Tokens: policies.TokenLimits{Total: policies.RateLimits{PerMinute: m - 1}}}}
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for i, be := range []admission.Backend{local, b} {
		name := []string{"Local", "Redis"}[i]
		_, err := be.Admit(ctx, admission.Claim{Principal: p, CostPico: m, At: at})
		e, _ := apierr.As(err)
		if e == nil || e.Code != apierr.CodeInsufficientQuota || e.RetryAfter != 0 {
			t.Fatalf("%s: a saturated worst case: %v; want insufficient_quota, no retry-after", name, err)
		}
		for j := range 3 {
			g, err := be.Admit(ctx, admission.Claim{Principal: p, InputTokens: -5, MaxOutputTokens: m / 8, CostPico: m / 4, At: at.Add(time.Duration(j) * time.Second)})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			be.Settle(ctx, g, admission.Actual{InputTokens: m / 8, OutputTokens: -1, CostPico: m, At: at.Add(time.Duration(j) * time.Second)})
		}
	}
	lb, rb := local.Budgets(p, at.Add(3*time.Second)), b.Budgets(p, at.Add(3*time.Second))
	if fmt.Sprint(lb) != fmt.Sprint(rb) {
		t.Fatalf("budgets after three settles of math.MaxInt64:\nLocal %+v\nRedis %+v", lb, rb)
	}
	if want := money.FromPico(m).Add(money.FromPico(m)).Add(money.FromPico(m)); lb[0].Spent != want {
		t.Fatalf("lifetime spent %s; want %s", lb[0].Spent, want)
	}
}

// TestAttackRedisLosesStateMidFlight (guard): FLUSHALL or SCRIPT FLUSH
// between admission and settle neither errs nor panics; the settle of a
// hold Redis lost changes nothing; a settle after SCRIPT FLUSH is taken;
// the budget then starts from the ledger.
func TestAttackRedisLosesStateMidFlight(t *testing.T) {
	s := redistest.Own(t)
	ctx := testctx.Deadline(t)
	led := &fakeLedger{}
	b := redis.New(client(t, s), redis.Options{Spent: led.Spent, SpentBuckets: led.SpentBuckets, Record: led.Record})
	p := budgetPrincipal(1_000_000, "")
	g, err := b.Admit(ctx, admission.Claim{Principal: p, CostPico: 300_000 * micro, At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if err := b.TrySettle(ctx, g, admission.Actual{CostPico: 200_000 * micro, At: time.Now()}); err != nil {
		t.Fatalf("settle after SCRIPT FLUSH: %v", err)
	}
	g, err = b.Admit(ctx, admission.Claim{Principal: p, CostPico: 300_000 * micro, At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	if err := b.TrySettle(ctx, g, admission.Actual{CostPico: 300_000 * micro, At: time.Now()}); err != nil {
		t.Fatalf("settle after FLUSHALL: %v", err)
	}
	// The ledger holds the $0.20 the settled request cost (the second,
	// lost with its hold, is what a flush lets through: documented).
	_, err = b.Admit(ctx, admission.Claim{Principal: p, CostPico: 810_000 * micro, At: time.Now()})
	wantCode(t, "$0.81 with $0.20 in the ledger", err, apierr.CodeInsufficientQuota)
	if _, err := b.Admit(ctx, admission.Claim{Principal: p, CostPico: 800_000 * micro, At: time.Now()}); err != nil {
		t.Fatalf("$0.80 with $0.20 in the ledger: %v", err)
	}
}

// TestAttackReconcileRace (guard): the same fallback request reconciled
// by 32 goroutines at once is counted once.
func TestAttackReconcileRace(t *testing.T) {
	s := redistest.Own(t)
	ctx := testctx.Deadline(t)
	b := redis.New(client(t, s), redis.Options{})
	p := &keyring.Principal{KeyID: "k", Team: "t", Org: "o",
		KeyLimits: policies.Limits{Requests: policies.RateLimits{PerMinute: 2}},
		OrgLimits: policies.Limits{Budgets: []policies.Budget{{Period: policies.PeriodLifetime, MicroUSD: 1_000_000}}}}
	g, err := b.Admit(ctx, admission.Claim{Principal: p, At: time.Now()}) // makes the lifetime state
	if err != nil {
		t.Fatal(err)
	}
	b.Settle(ctx, g, admission.Actual{At: time.Now()})
	c := admission.Claim{Principal: p, CostPico: 100_000 * micro, At: time.Now()}
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			if err := b.Reconcile(ctx, "one", c, admission.Actual{CostPico: 100_000 * micro, At: time.Now()}, 0); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if bs := b.Budgets(p, time.Now()); len(bs) != 1 || bs[0].Spent != money.FromMicros(100_000) {
		t.Fatalf("budgets %+v; want $0.10 spent, once", bs)
	}
	if err := b.CountRequest(ctx, p, time.Now()); err != nil {
		t.Fatalf("a second request in the minute (the reconciled one counted once): %v", err)
	}
}

// TestAttackCallerClocksFarApart (guard): two replicas counting at their
// own clocks (Options.CallerClock), an hour and a day apart: a window
// never goes back, so the late replica's requests count in the newest
// bucket and the window's limit holds for both; a budget period made by
// the replica ahead is the one both count in.
func TestAttackCallerClocksFarApart(t *testing.T) {
	s := redistest.Own(t)
	ctx := testctx.Deadline(t)
	c := client(t, s)
	ahead, behind := redis.New(c, redis.Options{CallerClock: true}), redis.New(c, redis.Options{CallerClock: true})
	p := &keyring.Principal{KeyID: "k", Team: "t", Org: "o",
		KeyLimits: policies.Limits{Requests: policies.RateLimits{PerMinute: 3}},
		OrgLimits: policies.Limits{Budgets: []policies.Budget{{Period: policies.PeriodDay, MicroUSD: 1_000_000}}}}
	t0 := time.Date(2026, 12, 7, 23, 30, 0, 0, time.UTC)
	late := t0.Add(time.Hour) // the next day
	n := 0
	for i := range 8 {
		b, at := ahead, late
		if i%2 == 1 {
			b, at = behind, t0
		}
		if b.CountRequest(ctx, p, at) == nil {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d requests counted from clocks an hour apart; want 3 (the minute's limit)", n)
	}
	for i, b := range []*redis.Backend{ahead, behind} {
		at := []time.Time{late, t0}[i]
		g, err := b.Admit(ctx, admission.Claim{Principal: p, CostPico: 600_000 * micro, At: at})
		if i == 0 && err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			wantCode(t, "$0.60 from the replica a day behind, with $0.60 reserved in the day the other made", err, apierr.CodeInsufficientQuota)
		} else {
			b.Settle(ctx, g, admission.Actual{CostPico: 600_000 * micro, At: at})
		}
	}
}

// TestAttackStatesOutsideTheRegistryAreNeverCharged: Settle (and
// Reconcile) now charge only the budget states the org's registry
// (`{tag}:holds:states`) lists, while Admit reads any state that exists.
// A state the registry lacks — the registry key lost (evicted, deleted)
// — must still be charged: an admission that uses a state registers it.
func TestAttackStatesOutsideTheRegistryAreNeverCharged(t *testing.T) {
	s := redistest.Own(t)
	ctx := testctx.Deadline(t)
	b := redis.New(client(t, s), redis.Options{CallerClock: true})
	p := &keyring.Principal{KeyID: "k", Team: "t", Org: "o",
		OrgLimits: policies.Limits{Budgets: []policies.Budget{{Period: policies.PeriodLifetime, MicroUSD: 1_000_000}}}}
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	g, err := b.Admit(ctx, admission.Claim{Principal: p, CostPico: micro, At: at})
	if err != nil {
		t.Fatal(err)
	}
	b.Settle(ctx, g, admission.Actual{At: at})
	// The state as the script before the registry left it: no entry.
	regs, err := s.Do("KEYS", "*:holds:states")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range strings.Fields(regs) {
		if _, err := s.Do("DEL", k); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		g, err := b.Admit(ctx, admission.Claim{Principal: p, CostPico: 600_000 * micro, At: at.Add(time.Duration(i+1) * time.Minute)})
		if i > 0 && err == nil {
			bs := b.Budgets(p, at.Add(time.Hour))
			t.Fatalf("$0.60 admitted (request %d) on a $1 lifetime budget, each settled for $0.60 (budget now %+v)", i+1, bs)
		}
		if i == 0 && err != nil {
			t.Fatal(err)
		}
		if err == nil {
			b.Settle(ctx, g, admission.Actual{CostPico: 600_000 * micro, At: at.Add(time.Duration(i+1) * time.Minute)})
		}
	}
}

// attackTag is the hash-tagged prefix of p's keys, as doc.go lays them
// out (redis.go's tag).
func attackTag(p *keyring.Principal) string {
	owner := "o:" + p.Org
	switch {
	case p.Org != "":
	case p.Team != "":
		owner = "t:" + p.Team
	default:
		owner = "k:" + p.KeyID
	}
	h := fnv.New64a()
	h.Write([]byte(owner))
	return redis.Prefix + "{" + strconv.FormatUint(h.Sum64(), 16) + "}:"
}
