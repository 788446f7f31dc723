package admission

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/ledger"
	ledgersqlite "github.com/sluicegw/sluice/internal/ledger/sqlite"
	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/tokens"
	"github.com/sluicegw/sluice/policies"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) // a Monday

func principal(key, team, org policies.Limits) *keyring.Principal {
	return &keyring.Principal{KeyID: "key_a", Team: "t", Org: "o", KeyLimits: key, TeamLimits: team, OrgLimits: org}
}

func denialOf(t *testing.T, err error) *apierr.Error {
	t.Helper()
	var d *apierr.Error
	if !errors.As(err, &d) {
		t.Fatalf("error %v, want an *apierr.Error", err)
	}
	return d
}

// TestBudgetUnderConcurrency: 500 concurrent requests against a budget
// that affords 100 at their worst-case cost: exactly 100 are admitted, none
// beyond, each admitted one writes its spend record to a real SQLite ledger
// before settling (as ext_proc does), and the ledger sums to the budget
// counter.
func TestBudgetUnderConcurrency(t *testing.T) {
	const each, affordable, clients = 10_000, 100, 500
	ctx, cancel := context.WithCancel(context.Background())
	led, err := ledgersqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), ledgersqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- led.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Error(err)
		}
		led.Close()
	})
	l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
	p := principal(policies.Limits{}, policies.Limits{Budgets: []policies.Budget{{MicroUSD: each * affordable, Period: policies.PeriodDay}}}, policies.Limits{})
	var admitted, denied, settled atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			at := t0.Add(time.Duration(i) * time.Millisecond)
			g, err := l.Admit(context.Background(), Claim{Principal: p, Model: "m", InputTokens: 10, MaxOutputTokens: 10, CostPico: each * micro, At: at})
			if err != nil {
				var d *apierr.Error
				if !errors.As(err, &d) || d.Code != "insufficient_quota" || d.Status != 429 {
					t.Errorf("denial %v", err)
				}
				denied.Add(1)
				return
			}
			admitted.Add(1)
			rec := ledger.Record{RequestID: fmt.Sprintf("r%d", i), KeyID: p.KeyID, Team: p.Team, Org: p.Org, Model: "m",
				Tokens: tokens.Counts{tokens.Input: 10, tokens.Output: 10}, CostPico: each * micro, Priced: true, Status: 200, Outcome: "ok", StartedAt: at, FinishedAt: at.Add(time.Second)}
			if err := led.Append(context.Background(), rec); err != nil {
				t.Errorf("append: %v", err)
			}
			l.Settle(context.Background(), g, Actual{InputTokens: 10, OutputTokens: 10, CostPico: each * micro, At: at.Add(time.Second)})
			settled.Add(each)
		}()
	}
	close(start)
	wg.Wait()
	if admitted.Load() != affordable || denied.Load() != clients-affordable {
		t.Fatalf("admitted %d, denied %d; want exactly %d admitted", admitted.Load(), denied.Load(), affordable)
	}
	st := l.budgets[budgetScope{"team", "t", ""}]["day"]
	if st.spent != mu(settled.Load()) || st.spent != mu(each*affordable) || !st.reserved.IsZero() {
		t.Errorf("budget state spent %v reserved %v; settled %d µ$", st.spent, st.reserved, settled.Load())
	}
	if l.Held() != 0 {
		t.Errorf("%d reservations still held", l.Held())
	}
	totals, err := led.Totals(context.Background(), ledger.Filter{}, ledger.ByTeam)
	if err != nil {
		t.Fatal(err)
	}
	if len(totals) != 1 || totals[0].Cost != st.spent || totals[0].Requests != affordable {
		t.Errorf("ledger totals %+v; want %d records summing to the budget counter %v", totals, affordable, st.spent)
	}
}

// TestExpireReleasesLostReservations: a reservation not settled within the
// TTL is released; if the request ends after all, it is still charged.
func TestExpireReleasesLostReservations(t *testing.T) {
	l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
	p := principal(policies.Limits{Tokens: policies.TokenLimits{Output: policies.RateLimits{PerHour: 100}},
		Budgets: []policies.Budget{{MicroUSD: 100, Period: policies.PeriodDay}}}, policies.Limits{}, policies.Limits{})
	ctx := context.Background()
	g, err := l.Admit(ctx, Claim{Principal: p, MaxOutputTokens: 100, CostPico: 100 * micro, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	if n := l.ExpireBefore(t0.Add(5*time.Minute), t0.Add(-time.Minute)); n != 0 {
		t.Fatalf("a fresh reservation expired (%d)", n)
	}
	if n := l.ExpireBefore(t0.Add(20*time.Minute), t0.Add(5*time.Minute)); n != 1 || l.Expired() != 1 || l.Held() != 0 {
		t.Fatalf("expired %d (total %d), held %d", n, l.Expired(), l.Held())
	}
	if _, err := l.Admit(ctx, Claim{Principal: p, MaxOutputTokens: 100, CostPico: 100 * micro, At: t0.Add(21 * time.Minute)}); err != nil {
		t.Fatalf("the expired reservation still holds: %v", err)
	}
	// The request ends after all: it is charged its whole use.
	l.Settle(ctx, g, Actual{OutputTokens: 100, CostPico: 100 * micro, At: t0.Add(22 * time.Minute)})
	if st := l.budgets[budgetScope{"key", "key_a", ""}]["day"]; st.spent != mu(100) || st.reserved != mu(100) {
		t.Errorf("a late settle of an expired grant: %+v; want its 100 spent (and the second request's 100 reserved)", st)
	}
	if l.Held() != 1 {
		t.Errorf("held %d, want the second request only", l.Held())
	}
}

// TestBudgetsStartFromTheLedger: after a restart, a period starts from what
// the ledger recorded in it.
func TestBudgetsStartFromTheLedger(t *testing.T) {
	var asked []string
	l := NewLocal(limits.New(limits.Options{}), LocalOptions{Spent: func(kind, id, model string, since time.Time) money.Sum {
		asked = append(asked, kind+"/"+id+"/"+model+"@"+since.Format(time.RFC3339))
		return mu(95)
	}})
	p := principal(policies.Limits{Budgets: []policies.Budget{{MicroUSD: 100, Period: policies.PeriodDay}}}, policies.Limits{}, policies.Limits{})
	ctx := context.Background()
	if _, err := l.Admit(ctx, Claim{Principal: p, CostPico: 6 * micro, At: t0}); err == nil {
		t.Fatal("95 spent before the restart + 6 fitted in 100")
	}
	if _, err := l.Admit(ctx, Claim{Principal: p, CostPico: 5 * micro, At: t0}); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || asked[0] != "key/key_a/@2026-11-30T00:00:00Z" {
		t.Errorf("ledger asked %v, want once, for today", asked)
	}
}

func BenchmarkAdmitSettle(b *testing.B) {
	l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
	p := principal(
		policies.Limits{Requests: policies.RateLimits{PerMinute: 1 << 40}, Tokens: policies.TokenLimits{Total: policies.RateLimits{PerMinute: 1 << 50}}},
		policies.Limits{Budgets: []policies.Budget{{MicroUSD: 1 << 60, Period: policies.PeriodMonth}}},
		policies.Limits{Tokens: policies.TokenLimits{Input: policies.RateLimits{PerDay: 1 << 50}}},
	)
	ctx := context.Background()
	at := t0
	b.ReportAllocs()
	for b.Loop() {
		at = at.Add(time.Millisecond)
		g, err := l.Admit(ctx, Claim{Principal: p, Model: "m", CountRequest: true, InputTokens: 500, MaxOutputTokens: 1000, CostPico: 1200 * micro, At: at})
		if err != nil {
			b.Fatal(err)
		}
		l.Settle(ctx, g, Actual{InputTokens: 500, OutputTokens: 300, CostPico: 700 * micro, At: at})
	}
}

func TestSpendIndex(t *testing.T) {
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	buckets := []ledger.Aggregate{
		{Scope: ledger.ScopeTeam, ID: "t", Model: "a", Bucket: day.Add(-15 * time.Minute), Cost: mu(1000)}, // yesterday
		{Scope: ledger.ScopeTeam, ID: "t", Model: "a", Bucket: day, Cost: mu(10)},
		{Scope: ledger.ScopeTeam, ID: "t", Model: "b", Bucket: day.Add(9 * time.Hour), Cost: mu(5)},
		{Scope: ledger.ScopeKey, ID: "t", Model: "a", Bucket: day, Cost: mu(7)}, // another scope, same id
	}
	lifetime := []ledger.Aggregate{{Scope: ledger.ScopeTeam, ID: "t", Model: "a", Cost: mu(5000)}, {Scope: ledger.ScopeTeam, ID: "t", Model: "b", Cost: mu(6)}}
	spent := NewSpendIndex(buckets, lifetime).Spent
	for _, tt := range []struct {
		model string
		since time.Time
		want  int64
	}{{"", day, 15}, {"a", day, 10}, {"b", day, 5}, {"", time.Time{}, 5006}, {"b", time.Time{}, 6}, {"", day.Add(-time.Hour), 1015}} {
		if got := spent("team", "t", tt.model, tt.since); got != mu(tt.want) {
			t.Errorf("spent(team t, model %q, since %v) = %v, want %d µ$", tt.model, tt.since, got, tt.want)
		}
	}
	if got := EarliestPeriodStart(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), time.UTC); !got.Equal(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("EarliestPeriodStart on Wed 2 Dec = %v, want Monday 30 Nov (before the month's start)", got)
	}
}

// TestBudgetAddedMidPeriod: a budget that appears in the middle of a
// period (an admin change, a reload) starts from what the scope already
// spent in it, in this process too.
func TestBudgetAddedMidPeriod(t *testing.T) {
	idx := NewSpendIndex(nil, nil)
	l := NewLocal(limits.New(limits.Options{}), LocalOptions{Spent: idx.Spent, Record: idx.Add})
	ctx := context.Background()
	free := principal(policies.Limits{}, policies.Limits{}, policies.Limits{})
	g, err := l.Admit(ctx, Claim{Principal: free, Model: "m", CostPico: 50 * micro, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	l.Settle(ctx, g, Actual{CostPico: 50 * micro, At: t0})
	// Now the team gets a daily budget of 60: 50 are already spent today.
	capped := principal(policies.Limits{}, policies.Limits{Budgets: []policies.Budget{{MicroUSD: 60, Period: policies.PeriodDay}}}, policies.Limits{})
	if _, err := l.Admit(ctx, Claim{Principal: capped, Model: "m", CostPico: 20 * micro, At: t0.Add(time.Hour)}); err == nil {
		t.Fatal("a budget added mid-day ignored what was spent earlier that day")
	}
	if _, err := l.Admit(ctx, Claim{Principal: capped, Model: "m", CostPico: 10 * micro, At: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if got := idx.Spent("org", "o", "", time.Time{}); got != mu(50) {
		t.Errorf("lifetime spend of the org %d, want 50", got)
	}
}

// The counter keys are the limits' identities in limits.Counters (shared
// with authz) and in the budget table: their format must not drift.
func TestCounterKey(t *testing.T) {
	key := scope{kind: "key", id: "key_a"}
	model := scope{kind: "team", id: "t", model: "gpt-4o"}
	for _, tt := range []struct {
		s     scope
		parts []string
		want  string
	}{
		{key, []string{"requests", "1m"}, "key/key_a/requests/1m"},
		{model, []string{"requests", "1d"}, "team/t/model/gpt-4o/requests/1d"},
		{model, []string{"tokens", "input", "1h"}, "team/t/model/gpt-4o/tokens/input/1h"},
		{scope{kind: "org", id: "o"}, []string{"budget", "rolling", (90 * time.Minute).String()}, "org/o/budget/rolling/1h30m0s"},
	} {
		if got := counterKey(&tt.s, tt.parts...); got != tt.want {
			t.Errorf("counterKey(%+v, %q) = %q, want %q", tt.s, tt.parts, got, tt.want)
		}
	}
}

// TestBudgetReaddedMidPeriod: a budget removed and re-added in the same
// period (an admin change, a reload) starts from everything its scope
// settled in the period — while it was absent too — not from the state it
// had when it went away.
func TestBudgetReaddedMidPeriod(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts func(*SpendIndex) LocalOptions
	}{
		{"with the spend index", func(idx *SpendIndex) LocalOptions { return LocalOptions{Spent: idx.Spent, Record: idx.Add} }},
		{"without one", func(*SpendIndex) LocalOptions { return LocalOptions{} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			idx := NewSpendIndex(nil, nil)
			l := NewLocal(limits.New(limits.Options{}), tt.opts(idx))
			ctx := context.Background()
			budget := policies.Limits{Budgets: []policies.Budget{{MicroUSD: 100, Period: policies.PeriodDay}}}
			capped := principal(policies.Limits{}, budget, policies.Limits{})
			free := principal(policies.Limits{}, policies.Limits{}, policies.Limits{})
			at := t0
			spend := func(p *keyring.Principal, cost int64) {
				t.Helper()
				at = at.Add(time.Minute)
				g, err := l.Admit(ctx, Claim{Principal: p, Model: "m", CostPico: cost * micro, At: at})
				if err != nil {
					t.Fatalf("admit %d: %v", cost, err)
				}
				l.Settle(ctx, g, Actual{CostPico: cost * micro, At: at})
			}
			spend(capped, 30) // with the budget
			spend(free, 40)   // removed: settled while absent
			spend(free, 0)    // nothing to count
			// A request admitted while the budget is absent and settled
			// after it is back is counted too.
			at = at.Add(time.Minute)
			inFlight, err := l.Admit(ctx, Claim{Principal: free, Model: "m", CostPico: 20 * micro, At: at})
			if err != nil {
				t.Fatal(err)
			}
			// Re-added: 70 spent, 30 left.
			st := l.Budgets(capped, at)
			if len(st) != 1 || st[0].Spent != mu(70) || st[0].Remaining != mu(30) {
				t.Fatalf("re-added budget %+v; want 70 spent, 30 left", st)
			}
			l.Settle(ctx, inFlight, Actual{CostPico: 15 * micro, At: at})
			if st := l.Budgets(capped, at); st[0].Spent != mu(85) || st[0].Remaining != mu(15) {
				t.Fatalf("after the in-flight request settled: %+v; want 85 spent, 15 left", st)
			}
			if _, err := l.Admit(ctx, Claim{Principal: capped, Model: "m", CostPico: 16 * micro, At: at}); err == nil {
				t.Fatal("the re-added budget admitted 16 with 15 left")
			} else if d := denialOf(t, err); d.Code != apierr.CodeInsufficientQuota {
				t.Errorf("refused with %q, want insufficient_quota", d.Code)
			}
			spend(capped, 15)
			if _, err := l.Admit(ctx, Claim{Principal: capped, Model: "m", CostPico: 1 * micro, At: at}); err == nil {
				t.Fatal("the spent budget admitted more")
			}
			// The next day starts empty.
			at = t0.Add(24 * time.Hour)
			spend(capped, 100)
		})
	}
}

// micro is a micro-dollar in pico-dollars, what claims and settlements
// count: budgets are configured in micro-dollars.
const micro = money.PicoPerMicro

// mu is n micro-dollars as a sum.
func mu(n int64) money.Sum { return money.FromMicros(n) }

// TestPrincipalRequests: a principal's own request limits are counted
// under the keys "key/<id>/requests/<window>" and
// "team/<name>/requests/<window>" (the counters CountRequest and Admit
// share), the key's windows then its team's; they are made once per
// principal, and counting them allocates nothing.
func TestPrincipalRequests(t *testing.T) {
	declared := &keyring.Principal{KeyID: "config:bot", Team: "red", TeamLimits: policies.Limits{Requests: policies.RateLimits{PerMinute: 10, PerDay: 100}}}
	stored := &keyring.Principal{KeyID: "key_b", Team: "blue",
		KeyLimits: policies.Limits{Requests: policies.RateLimits{PerMinute: 3}}, TeamLimits: policies.Limits{Requests: policies.RateLimits{PerHour: 7}}}
	for _, tt := range []struct {
		p    *keyring.Principal
		want []limits.Demand
	}{
		{declared, []limits.Demand{
			{Key: "team/red/requests/1m", Period: time.Minute, Limit: 10, Amount: 1},
			{Key: "team/red/requests/1d", Period: 24 * time.Hour, Limit: 100, Amount: 1},
		}},
		{stored, []limits.Demand{
			{Key: "key/key_b/requests/1m", Period: time.Minute, Limit: 3, Amount: 1},
			{Key: "team/blue/requests/1h", Period: time.Hour, Limit: 7, Amount: 1},
		}},
	} {
		r := principalRequests(tt.p)
		if fmt.Sprint(r.demands) != fmt.Sprint(tt.want) {
			t.Errorf("%s: demands\n %v\nwant\n %v", tt.p.KeyID, r.demands, tt.want)
		}
		if principalRequests(tt.p) != r {
			t.Errorf("%s: demands made again", tt.p.KeyID)
		}
	}
	l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
	ctx := context.Background()
	p := principal(policies.Limits{Requests: policies.RateLimits{PerMinute: 1 << 40}}, policies.Limits{Requests: policies.RateLimits{PerDay: 1 << 40}}, policies.Limits{})
	if err := l.CountRequest(ctx, p, t0); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(50, func() {
		if err := l.CountRequest(ctx, p, t0); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("CountRequest allocates %v times, want 0", n)
	}
}

// BenchmarkCountRequest is ext_authz's admission of a key with a request
// limit in a team with one: the principal's demands made once, two
// windows counted.
func BenchmarkCountRequest(b *testing.B) {
	l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
	p := principal(policies.Limits{Requests: policies.RateLimits{PerMinute: 1 << 40}}, policies.Limits{Requests: policies.RateLimits{PerHour: 1 << 40}}, policies.Limits{})
	ctx := context.Background()
	at := t0
	b.ReportAllocs()
	for b.Loop() {
		at = at.Add(time.Millisecond)
		if err := l.CountRequest(ctx, p, at); err != nil {
			b.Fatal(err)
		}
	}
}
