package admission

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
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
				InputTokens: 10, OutputTokens: 10, CostPico: each * micro, Priced: true, Status: 200, Outcome: "ok", StartedAt: at, FinishedAt: at.Add(time.Second)}
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

// TestSettleReleasesTheDifference: a reservation is the worst case; what
// was not used comes back at settle, and a use above it is charged.
func TestSettleReleasesTheDifference(t *testing.T) {
	l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
	p := principal(policies.Limits{
		Tokens:  policies.TokenLimits{Total: policies.RateLimits{PerMinute: 1000}},
		Budgets: []policies.Budget{{MicroUSD: 1000, Period: policies.PeriodLifetime}},
	}, policies.Limits{}, policies.Limits{})
	ctx := context.Background()
	g, err := l.Admit(ctx, Claim{Principal: p, InputTokens: 100, MaxOutputTokens: 800, CostPico: 900 * micro, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	if g.Remaining.Tokens != 100 || g.Remaining.Budget != 100 {
		t.Errorf("remaining after the reservation: %+v", g.Remaining)
	}
	// While it is held, a second worst case does not fit.
	if _, err := l.Admit(ctx, Claim{Principal: p, InputTokens: 100, MaxOutputTokens: 800, CostPico: 900 * micro, At: t0.Add(time.Second)}); err == nil {
		t.Fatal("a second reservation fitted while the first is held")
	}
	l.Settle(ctx, g, Actual{InputTokens: 100, OutputTokens: 50, CostPico: 150 * micro, At: t0.Add(2 * time.Second)})
	l.Settle(ctx, g, Actual{InputTokens: 100, OutputTokens: 50, CostPico: 150 * micro, At: t0.Add(2 * time.Second)}) // twice: no effect
	g2, err := l.Admit(ctx, Claim{Principal: p, InputTokens: 100, MaxOutputTokens: 700, CostPico: 800 * micro, At: t0.Add(3 * time.Second)})
	if err != nil {
		t.Fatalf("after settling 150 of 900, 800 more must fit: %v", err)
	}
	if g2.Remaining.Tokens != 1000-150-800 || g2.Remaining.Budget != 1000-150-800 {
		t.Errorf("remaining %+v", g2.Remaining)
	}
	// The provider reported more than was reserved: it is charged.
	l.Settle(ctx, g2, Actual{InputTokens: 100, OutputTokens: 760, CostPico: 860 * micro, At: t0.Add(4 * time.Second)})
	d := denialOf(t, func() error {
		_, err := l.Admit(ctx, Claim{Principal: p, InputTokens: 1, CostPico: 1 * micro, At: t0.Add(5 * time.Second)})
		return err
	}())
	if d.Code != "insufficient_quota" || !strings.Contains(d.Message, "lifetime budget of key key_a") {
		t.Errorf("denial %+v", d)
	}
}

// TestDeniedRequestReservesNothing: one limit refusing leaves every other
// covering limit untouched.
func TestDeniedRequestReservesNothing(t *testing.T) {
	l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
	p := principal(
		policies.Limits{Tokens: policies.TokenLimits{Input: policies.RateLimits{PerMinute: 100}}},
		policies.Limits{Budgets: []policies.Budget{{MicroUSD: 50, Period: policies.PeriodDay}}},
		policies.Limits{Tokens: policies.TokenLimits{Output: policies.RateLimits{PerHour: 10}}},
	)
	ctx := context.Background()
	_, err := l.Admit(ctx, Claim{Principal: p, InputTokens: 50, MaxOutputTokens: 20, CostPico: 10 * micro, At: t0})
	d := denialOf(t, err)
	if d.Code != "tokens_rate_limited" || !strings.Contains(d.Message, "org o") || !strings.Contains(d.Message, "at all") {
		t.Fatalf("denial %+v; want the org's output-token limit, impossible", d)
	}
	// Nothing was reserved: the full key window and budget are there.
	g, err := l.Admit(ctx, Claim{Principal: p, InputTokens: 100, MaxOutputTokens: 10, CostPico: 50 * micro, At: t0})
	if err != nil {
		t.Fatalf("the refused request reserved something: %v", err)
	}
	if g.Remaining.Budget != 0 {
		t.Errorf("remaining budget %d", g.Remaining.Budget)
	}
}

func TestTokenLimitRetryAfter(t *testing.T) {
	l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
	p := principal(policies.Limits{Tokens: policies.TokenLimits{Total: policies.RateLimits{PerMinute: 100}}}, policies.Limits{}, policies.Limits{})
	ctx := context.Background()
	if _, err := l.Admit(ctx, Claim{Principal: p, InputTokens: 40, MaxOutputTokens: 40, At: t0}); err != nil {
		t.Fatal(err)
	}
	_, err := l.Admit(ctx, Claim{Principal: p, InputTokens: 40, MaxOutputTokens: 40, At: t0.Add(10 * time.Second)})
	d := denialOf(t, err)
	if d.Status != 429 || d.Code != "tokens_rate_limited" || d.RetryAfter <= 49*time.Second || d.RetryAfter > 51*time.Second {
		t.Errorf("denial %+v; want 429 with retry-after about 50s (when the first reservation leaves the minute)", d)
	}
}

// TestBudgetPeriods: calendar budgets reset at their boundary in the
// configured time zone; lifetime ones never; rolling ones slide.
func TestBudgetPeriods(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	spend := func(l *Local, p *keyring.Principal, at time.Time, cost int64) error {
		g, err := l.Admit(ctx, Claim{Principal: p, CostPico: cost * micro, At: at})
		if err == nil {
			l.Settle(ctx, g, Actual{CostPico: cost * micro, At: at})
		}
		return err
	}
	tests := []struct {
		name        string
		budget      policies.Budget
		first, full time.Time // spend the budget at first; still full at full
		reset       time.Time // free again
	}{
		// 23:30 Berlin on Monday is 22:30 UTC; the day ends at 23:00 UTC.
		{"day in Berlin", policies.Budget{MicroUSD: 100, Period: policies.PeriodDay},
			time.Date(2026, 11, 30, 10, 0, 0, 0, berlin), time.Date(2026, 11, 30, 22, 59, 59, 0, time.UTC), time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC)},
		{"week from Monday", policies.Budget{MicroUSD: 100, Period: policies.PeriodWeek},
			time.Date(2026, 12, 2, 9, 0, 0, 0, berlin), time.Date(2026, 12, 6, 23, 59, 0, 0, berlin), time.Date(2026, 12, 7, 0, 0, 0, 0, berlin)},
		{"month", policies.Budget{MicroUSD: 100, Period: policies.PeriodMonth},
			time.Date(2026, 12, 1, 0, 0, 0, 0, berlin), time.Date(2026, 12, 31, 23, 59, 0, 0, berlin), time.Date(2027, 1, 1, 0, 0, 0, 0, berlin)},
		{"rolling 24h", policies.Budget{MicroUSD: 100, Period: policies.PeriodRolling, Window: 24 * time.Hour},
			t0, t0.Add(23 * time.Hour), t0.Add(24*time.Hour + 30*time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLocal(limits.New(limits.Options{}), LocalOptions{TimeZone: berlin})
			p := principal(policies.Limits{Budgets: []policies.Budget{tt.budget}}, policies.Limits{}, policies.Limits{})
			if err := spend(l, p, tt.first, 100); err != nil {
				t.Fatal(err)
			}
			err := spend(l, p, tt.full, 1)
			if d := denialOf(t, err); d.Code != "insufficient_quota" {
				t.Fatalf("denial %+v", d)
			} else if tt.budget.Period != policies.PeriodRolling {
				if want := tt.reset.Sub(tt.full); d.RetryAfter != want {
					t.Errorf("retry-after %v, want %v (until the period resets)", d.RetryAfter, want)
				}
			}
			if err := spend(l, p, tt.reset, 100); err != nil {
				t.Errorf("at the reset (%v) the budget is still spent: %v", tt.reset, err)
			}
		})
	}
	t.Run("lifetime", func(t *testing.T) {
		l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
		p := principal(policies.Limits{Budgets: []policies.Budget{{MicroUSD: 100, Period: policies.PeriodLifetime}}}, policies.Limits{}, policies.Limits{})
		if err := spend(l, p, t0, 100); err != nil {
			t.Fatal(err)
		}
		if err := spend(l, p, t0.AddDate(5, 0, 0), 1); err == nil {
			t.Error("a lifetime budget reset")
		}
	})
}

// TestPerModelAndOrgLimits: a model's limits apply to that model only, on
// top of the scope's own; an org's request limit is counted here.
func TestPerModelAndOrgLimits(t *testing.T) {
	l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
	team := policies.Limits{Models: map[string]policies.Limits{"big": {Budgets: []policies.Budget{{MicroUSD: 10, Period: policies.PeriodDay}}}}}
	org := policies.Limits{Requests: policies.RateLimits{PerMinute: 3}}
	p := principal(policies.Limits{}, team, org)
	ctx := context.Background()
	if _, err := l.Admit(ctx, Claim{Principal: p, Model: "big", CostPico: 10 * micro, At: t0}); err != nil {
		t.Fatal(err)
	}
	_, err := l.Admit(ctx, Claim{Principal: p, Model: "big", CostPico: 1 * micro, At: t0})
	if d := denialOf(t, err); !strings.Contains(d.Message, "team t for model big") {
		t.Errorf("denial %+v", d)
	}
	if _, err := l.Admit(ctx, Claim{Principal: p, Model: "small", CostPico: 1000 * micro, At: t0}); err != nil {
		t.Fatalf("another model is not limited by big's budget: %v", err)
	}
	// Two admitted so far (the refused one counted nothing): one more fits.
	if _, err := l.Admit(ctx, Claim{Principal: p, Model: "small", At: t0}); err != nil {
		t.Fatalf("third request: %v", err)
	}
	_, err = l.Admit(ctx, Claim{Principal: p, Model: "small", At: t0})
	if d := denialOf(t, err); d.Code != "rate_limited" || !strings.Contains(d.Message, "org o allows 3 requests per minute") {
		t.Errorf("fourth request: %+v", d)
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

func TestBudgetsReport(t *testing.T) {
	l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
	p := principal(policies.Limits{Budgets: []policies.Budget{{MicroUSD: 100, Period: policies.PeriodDay}, {MicroUSD: 500, Period: policies.PeriodRolling, Window: time.Hour}}},
		policies.Limits{Models: map[string]policies.Limits{"m": {Budgets: []policies.Budget{{MicroUSD: 70, Period: policies.PeriodLifetime}}}}}, policies.Limits{})
	ctx := context.Background()
	g, err := l.Admit(ctx, Claim{Principal: p, Model: "m", CostPico: 40 * micro, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	l.Settle(ctx, g, Actual{CostPico: 30 * micro, At: t0})
	if _, err := l.Admit(ctx, Claim{Principal: p, Model: "m", CostPico: 20 * micro, At: t0}); err != nil {
		t.Fatal(err)
	}
	got := l.Budgets(p, t0)
	want := []BudgetStatus{
		{Scope: "key", ID: "key_a", Period: "day", Limit: 100, Spent: mu(30), Reserved: mu(20), Remaining: mu(50), Resets: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{Scope: "key", ID: "key_a", Period: "rolling", Window: time.Hour, Limit: 500, Spent: mu(50), Remaining: mu(450)},
		{Scope: "team", ID: "t", Model: "m", Period: "lifetime", Limit: 70, Spent: mu(30), Reserved: mu(20), Remaining: mu(20)},
	}
	if len(got) != len(want) {
		t.Fatalf("Budgets = %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Budgets[%d] = %+v, want %+v", i, got[i], want[i])
		}
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

// TestBudgetPeriodNeverGoesBack: a request stamped just before midnight,
// admitted after one stamped just after, must not reset the new day.
func TestBudgetPeriodNeverGoesBack(t *testing.T) {
	l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
	p := principal(policies.Limits{Budgets: []policies.Budget{{MicroUSD: 100, Period: policies.PeriodDay}}}, policies.Limits{}, policies.Limits{})
	ctx := context.Background()
	midnight := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	g, err := l.Admit(ctx, Claim{Principal: p, CostPico: 80 * micro, At: midnight.Add(time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	l.Settle(ctx, g, Actual{CostPico: 80 * micro, At: midnight.Add(time.Second)})
	if _, err := l.Admit(ctx, Claim{Principal: p, CostPico: 30 * micro, At: midnight.Add(-time.Millisecond)}); err == nil {
		t.Fatal("a late request from the old day reset the new day's budget")
	}
	if st := l.budgets[budgetScope{"key", "key_a", ""}]["day"]; !st.start.Equal(midnight) || st.spent != mu(80) {
		t.Errorf("state %+v; want the new day with 80 spent", st)
	}
}

// TestRefusedRequestIsCountedNowhere: a request ext_authz counted and
// admission refuses gives its request count back; a request that costs
// nothing passes a spent budget.
func TestRefusedRequestIsCountedNowhere(t *testing.T) {
	counters := limits.New(limits.Options{})
	l := NewLocal(counters, LocalOptions{})
	p := principal(policies.Limits{Budgets: []policies.Budget{{MicroUSD: 10, Period: policies.PeriodDay}}}, policies.Limits{}, policies.Limits{})
	p.Requests = []limits.Demand{{Key: "key/key_a/requests/1m", Period: time.Minute, Limit: 5, Amount: 1}}
	ctx := context.Background()
	authz := func() { // what ext_authz does before ext_proc
		if !counters.Admit(t0, p.Requests).Admitted {
			t.Fatal("authz refused")
		}
	}
	authz()
	if _, err := l.Admit(ctx, Claim{Principal: p, CostPico: 10 * micro, At: t0}); err != nil {
		t.Fatal(err)
	}
	authz()
	if _, err := l.Admit(ctx, Claim{Principal: p, CostPico: 1 * micro, At: t0}); err == nil {
		t.Fatal("the spent budget admitted more")
	}
	if rem := counters.Admit(t0, []limits.Demand{{Key: "key/key_a/requests/1m", Period: time.Minute, Limit: 5}}).Remaining[0]; rem != 4 {
		t.Errorf("remaining requests %d, want 4: the refused request must give its count back", rem)
	}
	authz()
	if _, err := l.Admit(ctx, Claim{Principal: p, CostPico: 0 * micro, At: t0}); err != nil {
		t.Errorf("a request that costs nothing was refused by a spent budget: %v", err)
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

// TestRemainingHeaders: each kind of limit that covers a request gets a
// complete OpenAI-style set — limit, remaining and reset (OpenAI's
// duration notation) from one limit, the tightest of any token kind — and
// a kind no limit covers gets none.
func TestRemainingHeaders(t *testing.T) {
	l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
	p := principal(policies.Limits{}, policies.Limits{Tokens: policies.TokenLimits{Input: policies.RateLimits{PerMinute: 100}}},
		policies.Limits{Tokens: policies.TokenLimits{Output: policies.RateLimits{PerHour: 1000}}})
	p.Requests = []limits.Demand{{Key: "key/key_a/requests/1m", Period: time.Minute, Limit: 10, Amount: 1}}
	at := t0.Add(500 * time.Millisecond)
	g, err := l.Admit(t.Context(), Claim{Principal: p, CountRequest: true, InputTokens: 20, MaxOutputTokens: 40, At: at})
	if err != nil {
		t.Fatal(err)
	}
	// 1 s buckets for a minute: the request's bucket [t0, t0+1s) leaves
	// the window at t0+61s, 60.5 s after it; the input window (80 left)
	// is tighter than the output one (960 left, 1 min buckets).
	want := []string{
		"x-ratelimit-limit-requests: 10", "x-ratelimit-remaining-requests: 9", "x-ratelimit-reset-requests: 1m0.5s",
		"x-ratelimit-limit-tokens: 100", "x-ratelimit-remaining-tokens: 80", "x-ratelimit-reset-tokens: 1m0.5s",
	}
	if got := g.Remaining.Headers(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("headers\n %v\nwant\n %v", got, want)
	}

	// No request limit, two token windows with as much left: the one that
	// resets later is shown, with its own size.
	p = principal(policies.Limits{Tokens: policies.TokenLimits{Total: policies.RateLimits{PerMinute: 60, PerHour: 60}}}, policies.Limits{}, policies.Limits{})
	g, err = l.Admit(t.Context(), Claim{Principal: p, InputTokens: 10, MaxOutputTokens: 10, At: at})
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"x-ratelimit-limit-tokens: 60", "x-ratelimit-remaining-tokens: 40", "x-ratelimit-reset-tokens: 1h0m59.5s"}
	if got := g.Remaining.Headers(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("headers\n %v\nwant\n %v", got, want)
	}

	// Nothing covers the request: no headers at all.
	g, err = l.Admit(t.Context(), Claim{Principal: principal(policies.Limits{}, policies.Limits{}, policies.Limits{}), InputTokens: 10, At: at})
	if err != nil {
		t.Fatal(err)
	}
	if got := g.Remaining.Headers(); len(got) != 0 {
		t.Errorf("headers %v, want none", got)
	}
}

// micro is a micro-dollar in pico-dollars, what claims and settlements
// count: budgets are configured in micro-dollars.
const micro = money.PicoPerMicro

// mu is n micro-dollars as a sum.
func mu(n int64) money.Sum { return money.FromMicros(n) }
