package redis_test

// A second attack on the Redis admission backend, after the fixes of
// 631ca67 (TestAttack2*). A failing test demonstrates a bug (it asserts
// the correct behaviour); a passing one is a guard.

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"sort"
	"strconv"
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

// partitioned is a replica's Redis backend behind a link that can be cut
// (one replica partitioned from a Redis the rest of the fleet reaches).
type partitioned struct {
	*redis.Backend
	cut atomic.Bool
}

var errCut = errors.New("partitioned")

func (p *partitioned) CountRequest(ctx context.Context, pr *keyring.Principal, at time.Time) error {
	if p.cut.Load() {
		return errCut
	}
	return p.Backend.CountRequest(ctx, pr, at)
}

func (p *partitioned) Admit(ctx context.Context, c admission.Claim) (admission.Grant, error) {
	if p.cut.Load() {
		return admission.Grant{}, errCut
	}
	return p.Backend.Admit(ctx, c)
}

func (p *partitioned) TrySettle(ctx context.Context, g admission.Grant, a admission.Actual) error {
	if p.cut.Load() {
		return errCut
	}
	return p.Backend.TrySettle(ctx, g, a)
}

func (p *partitioned) Reconcile(ctx context.Context, id string, c admission.Claim, a admission.Actual, age time.Duration) error {
	if p.cut.Load() {
		return errCut
	}
	return p.Backend.Reconcile(ctx, id, c, a, age)
}

func (p *partitioned) Ping(ctx context.Context) error {
	if p.cut.Load() {
		return errCut
	}
	return p.Backend.Ping(ctx)
}

func (p *partitioned) Budgets(pr *keyring.Principal, at time.Time) []admission.BudgetStatus {
	if p.cut.Load() {
		return nil
	}
	return p.Backend.Budgets(pr, at)
}

// TestAttack2ReconcileLosesRequestInFlight: a replica partitioned from
// Redis admits a request on its own (fail open). While it streams, another
// replica makes the team's rolling window and the org's lifetime state
// (new to Redis) from the ledger — which cannot hold the request yet: it
// is recorded when it settles. It settles; the partition heals; Reconcile
// skips both, since Redis made them after `before` (the replica's last
// answer). The request is in the ledger, in neither counter, and never
// will be: the fleet spends past the budgets.
func TestAttack2ReconcileLosesRequestInFlight(t *testing.T) {
	s := redistest.Own(t)
	c := client(t, s)
	ctx := testctx.Deadline(t)
	led := &fakeLedger{}
	opts := redis.Options{Spent: led.Spent, SpentBuckets: led.SpentBuckets, Record: led.Record, Timeout: time.Second}
	a := &partitioned{Backend: redis.New(c, opts)}
	local := admission.NewLocal(limits.New(limits.Options{}), admission.LocalOptions{Spent: led.localSpent, Record: led.Record})
	fa := admission.NewFailover(a, local, admission.FailoverOptions{Timeout: time.Second, Mode: policies.FailOpen})
	rctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { fa.Run(rctx, time.Hour, time.Now) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	b := redis.New(c, opts) // another replica, which reaches Redis

	p := &keyring.Principal{KeyID: "k", Team: "t", Org: "o",
		TeamLimits: policies.Limits{Budgets: []policies.Budget{{Period: policies.PeriodRolling, Window: time.Hour, MicroUSD: 1_000_000}}},
		OrgLimits:  policies.Limits{Budgets: []policies.Budget{{Period: policies.PeriodLifetime, MicroUSD: 1_000_000}}}}
	// Replica A last heard from Redis now.
	if err := a.Backend.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // Redis's clock in whole seconds
	a.cut.Store(true)
	g, err := fa.Admit(ctx, admission.Claim{Principal: p, CostPico: 600_000 * micro, At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if fa.FallbackCount(admission.PhaseAdmit) != 1 {
		t.Fatal("not admitted by the fallback")
	}
	// Replica B: the team's and the org's first request in Redis, seeded
	// from the ledger (empty: A's request is still streaming).
	gb, err := b.Admit(ctx, admission.Claim{Principal: p, CostPico: 300_000 * micro, At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	b.Settle(ctx, gb, admission.Actual{CostPico: 300_000 * micro, At: time.Now()})
	// A's request ends: recorded in the ledger, kept for Redis.
	fa.Settle(ctx, g, admission.Actual{CostPico: 600_000 * micro, At: time.Now()})
	a.cut.Store(false)
	recovered(t, fa)
	if got := led.spent("org", "o", "", time.Time{}); got != money.FromMicros(900_000) {
		t.Fatalf("ledger %s", got)
	}
	for _, st := range b.Budgets(p, time.Now()) {
		if st.Spent != money.FromMicros(900_000) {
			t.Errorf("%s %s budget: spent %s in Redis; want $0.90 (the ledger's: B's $0.30 and A's reconciled $0.60)", st.Scope, st.Period, st.Spent)
		}
	}
	if _, err := b.Admit(ctx, admission.Claim{Principal: p, CostPico: 500_000 * micro, At: time.Now()}); err == nil {
		t.Errorf("$0.50 admitted on $1 budgets with $0.90 spent: $1.40 in total")
	}
}

// TestAttack2CanceledSettleIsDropped: Failover.Settle of a grant Redis
// admitted, with a caller's context that is done (the stream reset as
// its end was processed), fails in Redis; failed() says "not a failure"
// (the caller is gone) and Settle returns without keeping it. Nothing
// retries it: the hold expires, its reservation is released and the cost
// — in the ledger — is never charged to Redis's budget periods.
func TestAttack2CanceledSettleIsDropped(t *testing.T) {
	s := redistest.Own(t)
	led := &fakeLedger{}
	f, b := attackFailover(t, client(t, s), policies.FailClosed, led, redis.Options{})
	ctx := testctx.Deadline(t)
	p := budgetPrincipal(1_000_000, "")
	g, err := f.Admit(ctx, admission.Claim{Principal: p, CostPico: 600_000 * micro, At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	dead, cancelDead := context.WithCancel(context.Background())
	cancelDead()
	f.Settle(dead, g, admission.Actual{CostPico: 600_000 * micro, At: time.Now()})
	deadline := time.Now().Add(2 * time.Second)
	for {
		bs := b.Budgets(p, time.Now())
		if len(bs) == 1 && bs[0].Spent == money.FromMicros(600_000) && bs[0].Reserved.IsZero() {
			return
		}
		if time.Now().After(deadline) {
			w, _ := f.Pending()
			t.Fatalf("a settle whose caller was gone: budget %+v, %d kept for Redis; want $0.60 spent (kept and retried, as for any settle Redis did not take)", bs, w)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAttack2CallerDeadlinesNeverTakeRedisDown: failed() ignores every
// error met after the caller's context is done — a deadline too. With
// admission.redis.timeout above the callers' deadlines (it may be up to
// 10s; ext_authz's deadline is Envoy's 200 ms), a Redis that hangs is
// never taken for down: each request waits its whole deadline, and a
// fail-open request is never admitted by the fallback. A deadline that
// passed while Redis did not answer is Redis's failure, unlike a caller
// that hung up.
func TestAttack2CallerDeadlinesNeverTakeRedisDown(t *testing.T) {
	s := redistest.Own(t)
	f, _ := attackFailover(t, client(t, s), policies.FailOpen, &fakeLedger{}, redis.Options{Timeout: 2 * time.Second})
	ctx := testctx.Deadline(t)
	p := budgetPrincipal(1_000_000, "")
	if _, err := f.Admit(ctx, admission.Claim{Principal: p, CostPico: micro, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Do("CLIENT", "PAUSE", "800", "ALL"); err != nil {
		t.Fatal(err)
	}
	var last error
	for range 4 {
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, last = f.Admit(cctx, admission.Claim{Principal: p, CostPico: micro, At: time.Now()})
		cancel()
	}
	if !f.Down() {
		t.Errorf("four calls in a row met a Redis that did not answer within their deadline: not taken for down (last error %v)", last)
	}
	time.Sleep(900 * time.Millisecond)
}

// windowInvariant checks every window key: 't' is the saturating sum of
// its buckets in [h-B, h], no bucket lies outside it, none is zero, and
// 'c' is set.
func windowInvariant(t *testing.T, s *redistest.Server, c goredis.UniversalClient, what string) {
	t.Helper()
	ctx := testctx.Deadline(t)
	keys, err := c.Keys(ctx, redis.Prefix+"*:w:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		h, err := c.HGetAll(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		head, err := strconv.ParseInt(h["h"], 10, 64)
		if err != nil {
			t.Fatalf("%s: %s has no head: %v", what, k, h)
		}
		if h["c"] == "" {
			t.Fatalf("%s: %s has no creation time", what, k)
		}
		sum := new(big.Int)
		var bad []string
		for f, v := range h {
			if f == "h" || f == "t" || f == "c" {
				continue
			}
			j, _ := strconv.ParseInt(f, 10, 64)
			a, ok := new(big.Int).SetString(v, 10)
			if !ok {
				t.Fatalf("%s: %s bucket %s=%q", what, k, f, v)
			}
			if j < head-60 || j > head || a.Sign() == 0 {
				bad = append(bad, f+"="+v)
				continue
			}
			sum.Add(sum, a)
		}
		tot, ok := new(big.Int).SetString(h["t"], 10)
		if !ok {
			t.Fatalf("%s: %s t=%q", what, k, h["t"])
		}
		if max := big.NewInt(1<<63 - 1); sum.Cmp(max) > 0 {
			sum = max
		}
		if tot.Cmp(sum) != 0 || len(bad) > 0 {
			sort.Strings(bad)
			t.Fatalf("%s: %s: t=%s, buckets in the window sum to %s; stray buckets %v (head %d)", what, k, tot, sum, bad, head)
		}
	}
}

// TestAttack2WindowTotalsHoldTheirBuckets (guard): random admissions,
// settles above and below the reservation (early, late, after expiry),
// counts and reconciles, at a caller's clock that jumps forward by a few
// buckets up to several windows and steps back, on short windows (a
// minute: 1 s buckets): after every call each window's running total is
// the sum of its buckets, and Redis agrees with Local on every answer.
func TestAttack2WindowTotalsHoldTheirBuckets(t *testing.T) {
	s := redistest.Own(t)
	c := client(t, s)
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			if _, err := s.Do("FLUSHALL"); err != nil {
				t.Fatal(err)
			}
			totals(t, s, c, seed)
		})
	}
}

func totals(t *testing.T, s *redistest.Server, c goredis.UniversalClient, seed uint64) {
	ctx := testctx.Deadline(t)
	rng := rand.New(rand.NewPCG(seed, 7))
	ttl := 20*time.Second + time.Millisecond
	rb := redis.New(c, redis.Options{CallerClock: true, ReservationTTL: ttl})
	local := admission.NewLocal(limits.New(limits.Options{}), admission.LocalOptions{})
	p := &keyring.Principal{KeyID: "k", Team: "t", Org: "o",
		KeyLimits: policies.Limits{Requests: policies.RateLimits{PerMinute: 40},
			Tokens:  policies.TokenLimits{Total: policies.RateLimits{PerMinute: 20_000}, Input: policies.RateLimits{PerHour: 200_000}},
			Budgets: []policies.Budget{{Period: policies.PeriodRolling, Window: time.Minute, MicroUSD: 50_000}}},
		TeamLimits: policies.Limits{Tokens: policies.TokenLimits{Output: policies.RateLimits{PerMinute: 15_000}}}}
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	type pair struct {
		l, r admission.Grant
		c    admission.Claim
	}
	var open []pair
	errText := func(err error) string {
		if err == nil {
			return "<nil>"
		}
		if e, ok := apierr.As(err); ok {
			return fmt.Sprintf("%s ra=%v %q", e.Code, e.RetryAfter, e.Message)
		}
		return "error: " + err.Error()
	}
	for op := range 300 {
		var step time.Duration
		switch r := rng.IntN(100); {
		case r < 60:
			step = time.Duration(rng.Int64N(1500)) * 2 * time.Millisecond
		case r < 85:
			step = time.Duration(rng.Int64N(30_000)) * 2 * time.Millisecond
		default:
			step = time.Duration(rng.Int64N(150_000)) * 2 * time.Millisecond
		}
		now = now.Add(step)
		local.ExpireBefore(now, now.Add(-ttl))
		var what, lres, rres string
		switch k := rng.IntN(10); {
		case k < 5:
			cl := admission.Claim{Principal: p, CountRequest: true, InputTokens: rng.Int64N(6000), MaxOutputTokens: rng.Int64N(6000),
				CostPico: rng.Int64N(15_000) * micro, At: now}
			what = fmt.Sprintf("admit %+v", cl)
			lg, le := local.Admit(ctx, cl)
			rg, re := rb.Admit(ctx, cl)
			lres, rres = errText(le), errText(re)
			if le == nil && re == nil {
				lres += fmt.Sprintf(" %+v", lg.Remaining)
				rres += fmt.Sprintf(" %+v", rg.Remaining)
				open = append(open, pair{lg, rg, cl})
			}
		case k < 8 && len(open) > 0:
			i := rng.IntN(len(open))
			g := open[i]
			open = append(open[:i], open[i+1:]...)
			a := admission.Actual{InputTokens: rng.Int64N(7000), OutputTokens: rng.Int64N(7000), CostPico: rng.Int64N(20_000) * micro, At: now}
			what = fmt.Sprintf("settle %+v of %+v", a, g.c)
			local.Settle(ctx, g.l, a)
			rb.Settle(ctx, g.r, a)
		default:
			what = "count"
			lres, rres = errText(local.CountRequest(ctx, p, now)), errText(rb.CountRequest(ctx, p, now))
		}
		if lres != rres {
			t.Fatalf("seed %d op %d at %v: %s\nLocal: %s\nRedis: %s", seed, op, now, what, lres, rres)
		}
		windowInvariant(t, s, c, fmt.Sprintf("seed %d op %d (%s)", seed, op, what))
		lb, rbs := fmt.Sprint(local.Budgets(p, now)), fmt.Sprint(rb.Budgets(p, now))
		if lb != rbs {
			t.Fatalf("seed %d op %d at %v: %s\nLocal budgets %s\nRedis budgets %s", seed, op, now, what, lb, rbs)
		}
	}
}

// TestAttack2MoreDifferentialSeeds (guard): the first attack's
// differential run on seeds it did not try.
func TestAttack2MoreDifferentialSeeds(t *testing.T) {
	s := redistest.Own(t)
	c := client(t, s)
	for seed := uint64(5001); seed <= 5012; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			if _, err := s.Do("FLUSHALL"); err != nil {
				t.Fatal(err)
			}
			differential(t, c, seed)
		})
	}
}
