package admissiontest

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/policies"
)

// testRequestWindowNeverAdmitsMoreThanItsLimit: CountRequest, called
// every 7 s for two hours against a key's 3 per minute and its team's 10
// per hour, never admits more than a limit in any window of its length
// (the windows slide, in buckets of a 60th of their length), and a
// refusal's RetryAfter is exactly when a request fits again: not a
// nanosecond sooner.
func testRequestWindowNeverAdmitsMoreThanItsLimit(t *testing.T, open opener) {
	b := open(t, nil)
	p := principal(policies.Limits{Requests: policies.RateLimits{PerMinute: 3}}, policies.Limits{Requests: policies.RateLimits{PerHour: 10}}, policies.Limits{})
	ctx := t.Context()
	var admitted []time.Time
	retry := false // the last call was refused: this one is at its RetryAfter
	for at, end := t0, t0.Add(2*time.Hour); at.Before(end); {
		err := b.CountRequest(ctx, p, at)
		if err == nil {
			admitted = append(admitted, at)
			at, retry = at.Add(7*time.Second), false
			continue
		}
		if retry {
			t.Fatalf("at %v, the refusal's retry-after, still refused: %v", at.Sub(t0), err)
		}
		d := denialOf(t, err)
		if d.Status != 429 || d.Code != apierr.CodeRateLimited || d.RetryAfter <= 0 {
			t.Fatalf("at %v: refusal %d %s retry-after %v; want 429 rate_limited with a retry-after", at.Sub(t0), d.Status, d.Code, d.RetryAfter)
		}
		if err := b.CountRequest(ctx, p, at.Add(d.RetryAfter-time.Nanosecond)); err == nil {
			t.Fatalf("at %v: admitted a nanosecond before the retry-after %v", at.Sub(t0), d.RetryAfter)
		}
		at, retry = at.Add(d.RetryAfter), true
	}
	for _, w := range []struct {
		period time.Duration
		limit  int
	}{{time.Minute, 3}, {time.Hour, 10}} {
		for i, a := range admitted {
			n := 0
			for _, b := range admitted[:i+1] {
				if b.After(a.Add(-w.period)) {
					n++
				}
			}
			if n > w.limit {
				t.Fatalf("%d requests admitted in the %v before %v; the limit is %d", n, w.period, a.Sub(t0), w.limit)
			}
		}
	}
	// Not stricter than the buckets make it: an hour window of 10 lets 10
	// through in about every hour and a minute.
	if len(admitted) < 19 {
		t.Errorf("%d requests admitted in two hours; want at least 19", len(admitted))
	}
}

// testCountRequestAllOrNothing: a request CountRequest refuses is counted
// in none of its windows: the team's full window refusing it leaves the
// key's untouched, and the key's refusing it leaves the team's untouched.
func testCountRequestAllOrNothing(t *testing.T, open opener) {
	b := open(t, nil)
	team := policies.Limits{Requests: policies.RateLimits{PerMinute: 1}}
	a := principal(policies.Limits{Requests: policies.RateLimits{PerHour: 3}}, team, policies.Limits{})
	other := principal(policies.Limits{}, team, policies.Limits{})
	other.KeyID = "key_b"
	ctx := t.Context()
	if err := b.CountRequest(ctx, a, t0); err != nil {
		t.Fatal(err)
	}
	// Ten refusals by the team's minute.
	for i := 1; i <= 10; i++ {
		err := b.CountRequest(ctx, a, t0.Add(time.Duration(i)*time.Second))
		if d := denialOf(t, err); !strings.Contains(d.Message, "team t allows 1 requests per minute") {
			t.Fatalf("refusal %q; want the team's minute", d.Message)
		}
	}
	// The key counted one of its 3 per hour: two more fit.
	for _, at := range []time.Time{t0.Add(61 * time.Second), t0.Add(122 * time.Second)} {
		if err := b.CountRequest(ctx, a, at); err != nil {
			t.Fatalf("at %v: %v; the team's refusals counted in the key's hour", at.Sub(t0), err)
		}
	}
	at := t0.Add(183 * time.Second)
	err := b.CountRequest(ctx, a, at)
	if d := denialOf(t, err); !strings.Contains(d.Message, "key key_a allows 3 requests per hour") {
		t.Fatalf("refusal %q; want the key's hour", d.Message)
	}
	// The key's refusal did not count in the team's minute.
	if err := b.CountRequest(ctx, other, at); err != nil {
		t.Errorf("another key of the team: %v; the key's refusal counted in the team's minute", err)
	}
}

// testCountRequestRefusal: CountRequest's refusal names the binding
// window, in Sluice's words and OpenAI's, with the seconds to wait.
func testCountRequestRefusal(t *testing.T, open opener) {
	for _, tt := range []struct {
		name        string
		key, team   policies.RateLimits
		msg, openai string
		retry       time.Duration
	}{
		{"key per minute", policies.RateLimits{PerMinute: 2}, policies.RateLimits{},
			"rate limit reached: key key_a allows 2 requests per minute; retry in 60s",
			"Rate limit reached for key key_a on requests per min (RPM): Limit 2, Used 2, Requested 1. Please try again in 1m0s.",
			time.Minute},
		{"team per hour", policies.RateLimits{PerMinute: 10}, policies.RateLimits{PerHour: 2},
			"rate limit reached: team t allows 2 requests per hour; retry in 3659s",
			"Rate limit reached for team t on requests per hour (RPH): Limit 2, Used 2, Requested 1. Please try again in 1h0m59s.",
			time.Hour + time.Minute - time.Second},
		{"key per day", policies.RateLimits{PerDay: 2}, policies.RateLimits{PerHour: 10},
			"rate limit reached: key key_a allows 2 requests per day; retry in 87839s",
			"Rate limit reached for key key_a on requests per day (RPD): Limit 2, Used 2, Requested 1. Please try again in 24h23m59s.",
			24*time.Hour + 24*time.Minute - time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := open(t, nil)
			p := principal(policies.Limits{Requests: tt.key}, policies.Limits{Requests: tt.team}, policies.Limits{})
			// Two requests at t0 and a second later; the third, refused,
			// fits when t0's bucket (a 60th of the window: 1 s, 1 min,
			// 24 min) has left the window entirely: a window and a bucket
			// after t0.
			second := t0.Add(time.Second)
			for _, at := range []time.Time{t0, second} {
				if err := b.CountRequest(t.Context(), p, at); err != nil {
					t.Fatal(err)
				}
			}
			err := b.CountRequest(t.Context(), p, second)
			d := denialOf(t, err)
			if d.Status != 429 || d.Code != apierr.CodeRateLimited || d.Message != tt.msg || d.OpenAIMessage != tt.openai || d.RetryAfter != tt.retry {
				t.Errorf("refusal %d %s %q %q retry-after %v;\nwant 429 rate_limited %q %q %v", d.Status, d.Code, d.Message, d.OpenAIMessage, d.RetryAfter, tt.msg, tt.openai, tt.retry)
			}
		})
	}
}

// testPerModelRefusalReservesNothing: a claim refused by a per-model
// limit (the org's requests for model m) reserves nothing anywhere: not
// in the key's token window, not in the team's budget for m, not in the
// org's request window.
func testPerModelRefusalReservesNothing(t *testing.T, open opener) {
	b := open(t, nil)
	p := principal(
		policies.Limits{Tokens: policies.TokenLimits{Total: policies.RateLimits{PerMinute: 100}}},
		policies.Limits{Models: map[string]policies.Limits{"m": {Budgets: []policies.Budget{{MicroUSD: 10, Period: policies.PeriodDay}}}}},
		policies.Limits{Requests: policies.RateLimits{PerMinute: 3}, Models: map[string]policies.Limits{"m": {Requests: policies.RateLimits{PerMinute: 1}}}},
	)
	ctx := t.Context()
	if _, err := b.Admit(ctx, admission.Claim{Principal: p, Model: "m", InputTokens: 10, CostPico: 1 * micro, At: t0}); err != nil {
		t.Fatal(err)
	}
	_, err := b.Admit(ctx, admission.Claim{Principal: p, Model: "m", InputTokens: 30, CostPico: 2 * micro, At: t0})
	if d := denialOf(t, err); d.Code != apierr.CodeRateLimited || !strings.Contains(d.Message, "org o for model m allows 1 requests per minute") {
		t.Fatalf("refusal %s %q; want the org's requests for m", d.Code, d.Message)
	}
	// Another model: the key's window holds the first claim's 10 tokens
	// and this one's, the org's minute two requests.
	g, err := b.Admit(ctx, admission.Claim{Principal: p, Model: "n", InputTokens: 20, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	if g.Remaining.Tokens != 70 || g.Remaining.Requests != 1 {
		t.Errorf("remaining tokens %d, requests %d; want 70 and 1: the refused claim reserved something", g.Remaining.Tokens, g.Remaining.Requests)
	}
	for _, st := range b.Budgets(p, t0) {
		if st.Model == "m" && (st.Reserved != mu(1) || !st.Spent.IsZero()) {
			t.Errorf("budget for m %+v; want the first claim's 1 µ$ reserved, nothing more", st)
		}
	}
}

// testSettleTwice: a grant settled twice is charged once; a grant the
// backend never issued (the zero Grant) settles nothing.
func testSettleTwice(t *testing.T, open opener) {
	b := open(t, nil)
	p := principal(policies.Limits{
		Tokens:  policies.TokenLimits{Total: policies.RateLimits{PerMinute: 100}},
		Budgets: []policies.Budget{{MicroUSD: 100, Period: policies.PeriodLifetime}},
	}, policies.Limits{}, policies.Limits{})
	ctx := t.Context()
	g, err := b.Admit(ctx, admission.Claim{Principal: p, InputTokens: 50, CostPico: 50 * micro, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	b.Settle(ctx, g, admission.Actual{InputTokens: 10, CostPico: 10 * micro, At: t0})
	b.Settle(ctx, g, admission.Actual{InputTokens: 40, CostPico: 40 * micro, At: t0})
	b.Settle(ctx, admission.Grant{}, admission.Actual{InputTokens: 40, CostPico: 40 * micro, At: t0})
	b.Settle(ctx, admission.Grant{Claim: g.Claim}, admission.Actual{InputTokens: 40, CostPico: 40 * micro, At: t0})
	if st := b.Budgets(p, t0); len(st) != 1 || st[0].Spent != mu(10) || !st[0].Reserved.IsZero() {
		t.Fatalf("budget %+v; want 10 spent once, nothing reserved", st)
	}
	// Exactly what is left: 90 tokens, 90 µ$.
	g, err = b.Admit(ctx, admission.Claim{Principal: p, InputTokens: 90, CostPico: 90 * micro, At: t0})
	if err != nil {
		t.Fatalf("what is left after one settle: %v", err)
	}
	if g.Remaining.Tokens != 0 || g.Remaining.Budget != 0 {
		t.Errorf("remaining %+v; want nothing", g.Remaining)
	}
}

// testSettleAfterTheWindowMoved: a settle corrects the window bucket the
// reservation went to. What was reserved and not used comes back from
// that bucket while it is in the window, and not at all once it has left
// it (the current bucket is not touched); a use above the reservation is
// counted at the settle, in the current bucket.
func testSettleAfterTheWindowMoved(t *testing.T, open opener) {
	out := policies.Limits{Tokens: policies.TokenLimits{Output: policies.RateLimits{PerMinute: 100}}}
	ctx := context.Background()
	t.Run("refund in the window", func(t *testing.T) {
		b := open(t, nil)
		p := principal(out, policies.Limits{}, policies.Limits{})
		g, err := b.Admit(ctx, admission.Claim{Principal: p, MaxOutputTokens: 100, At: t0})
		if err != nil {
			t.Fatal(err)
		}
		b.Settle(ctx, g, admission.Actual{OutputTokens: 40, At: t0.Add(30 * time.Second)})
		if _, err := b.Admit(ctx, admission.Claim{Principal: p, MaxOutputTokens: 60, At: t0.Add(30 * time.Second)}); err != nil {
			t.Fatalf("the 60 not used: %v", err)
		}
		// t0's bucket (40) leaves the window at t0+61s; the 60 stay.
		at := t0.Add(61 * time.Second)
		if _, err := b.Admit(ctx, admission.Claim{Principal: p, MaxOutputTokens: 41, At: at}); err == nil {
			t.Fatal("41 fitted with 60 of 100 in the window: the refund went to the wrong bucket")
		}
		if _, err := b.Admit(ctx, admission.Claim{Principal: p, MaxOutputTokens: 40, At: at}); err != nil {
			t.Fatalf("40 with 60 of 100 in the window: %v", err)
		}
	})
	t.Run("refund after the window moved", func(t *testing.T) {
		b := open(t, nil)
		p := principal(out, policies.Limits{}, policies.Limits{})
		g, err := b.Admit(ctx, admission.Claim{Principal: p, MaxOutputTokens: 100, At: t0})
		if err != nil {
			t.Fatal(err)
		}
		at := t0.Add(2 * time.Minute)
		g2, err := b.Admit(ctx, admission.Claim{Principal: p, MaxOutputTokens: 50, At: at})
		if err != nil {
			t.Fatal(err)
		}
		// The reservation's bucket has left the window: its 90 unused
		// come back from nowhere (not from g2's bucket).
		b.Settle(ctx, g, admission.Actual{OutputTokens: 10, At: at})
		if _, err := b.Admit(ctx, admission.Claim{Principal: p, MaxOutputTokens: 51, At: at}); err == nil {
			t.Fatal("51 fitted with 50 of 100 held: a late refund was taken from the current bucket")
		}
		b.Settle(ctx, g2, admission.Actual{OutputTokens: 50, At: at})
	})
	t.Run("use above the reservation", func(t *testing.T) {
		b := open(t, nil)
		p := principal(out, policies.Limits{}, policies.Limits{})
		g, err := b.Admit(ctx, admission.Claim{Principal: p, MaxOutputTokens: 10, At: t0})
		if err != nil {
			t.Fatal(err)
		}
		// Settled two minutes later, at 60: the 50 above the reservation
		// are counted now.
		at := t0.Add(2 * time.Minute)
		b.Settle(ctx, g, admission.Actual{OutputTokens: 60, At: at})
		if _, err := b.Admit(ctx, admission.Claim{Principal: p, MaxOutputTokens: 51, At: at}); err == nil {
			t.Fatal("51 fitted: the use above the reservation was not counted at the settle")
		}
		if _, err := b.Admit(ctx, admission.Claim{Principal: p, MaxOutputTokens: 50, At: at}); err != nil {
			t.Fatalf("50 with 50 of 100 counted: %v", err)
		}
	})
}

// testSettleInThePeriodItStarted: a request admitted before a period's
// end and settled after it is charged to the period it started in, even
// when a request of the new period was admitted before it settled (so the
// new period's state already exists): the new period holds only its own.
// Calendar periods end at midnight in the budget time zone (a day; a
// month, in a zone half an hour off the hour); a rolling window's "period"
// is the bucket the reservation went to, which leaves the window while
// the request is still open.
func testSettleInThePeriodItStarted(t *testing.T, open opener) {
	ist := time.FixedZone("+05:30", 5*3600+1800)
	for _, tc := range []struct {
		name   string
		budget policies.Budget
		tz     *time.Location
		// start is when the old period's request is admitted, edge when
		// its period ends (the new period starts), resets when the new
		// period ends (zero for a rolling budget).
		start, edge, resets time.Time
	}{
		{"day", policies.Budget{MicroUSD: 100, Period: policies.PeriodDay}, time.UTC,
			time.Date(2026, 11, 30, 23, 59, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)},
		{"month", policies.Budget{MicroUSD: 100, Period: policies.PeriodMonth}, ist,
			time.Date(2026, 11, 30, 23, 59, 0, 0, ist), time.Date(2026, 12, 1, 0, 0, 0, 0, ist), time.Date(2027, 1, 1, 0, 0, 0, 0, ist)},
		// A 10-minute window: the request's bucket (t0's) leaves it at
		// t0+10m, and the settle comes after that.
		{"rolling", policies.Budget{MicroUSD: 100, Period: policies.PeriodRolling, Window: 10 * time.Minute}, time.UTC,
			t0, t0.Add(10 * time.Minute), time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := open(t, tc.tz)
			p := principal(policies.Limits{Budgets: []policies.Budget{tc.budget}}, policies.Limits{}, policies.Limits{})
			ctx := t.Context()
			g, err := b.Admit(ctx, admission.Claim{Principal: p, CostPico: 80 * micro, At: tc.start})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Admit(ctx, admission.Claim{Principal: p, CostPico: 21 * micro, At: tc.start.Add(time.Second)}); err == nil {
				t.Fatal("21 fitted with 80 of 100 reserved")
			}
			// The new period's first request, admitted while the old
			// period's is open.
			first, err := b.Admit(ctx, admission.Claim{Principal: p, CostPico: 10 * micro, At: tc.edge.Add(time.Minute)})
			if err != nil {
				t.Fatalf("the new period's first request: %v; the old period's reservation counted against the new period", err)
			}
			// Settled a second after the new period's first request, in
			// its bucket: the old request's refund of 10, taken from the
			// settle's bucket rather than its own, would wipe the new one.
			b.Settle(ctx, g, admission.Actual{CostPico: 70 * micro, At: tc.edge.Add(time.Minute + time.Second)})
			at := tc.edge.Add(3 * time.Minute)
			st := b.Budgets(p, at)
			if len(st) != 1 || !st[0].Resets.Equal(tc.resets) {
				t.Fatalf("budgets %+v; want one, resetting at %v", st, tc.resets)
			}
			// A rolling budget reports what it holds as spent (reserved and
			// spent together, admission.BudgetStatus).
			wantSpent, wantReserved := money.Sum{}, mu(10)
			if tc.budget.Period == policies.PeriodRolling {
				wantSpent, wantReserved = mu(10), money.Sum{}
			}
			if st[0].Spent != wantSpent || st[0].Reserved != wantReserved {
				t.Errorf("budget %+v; want %v spent and %v reserved, the new period's own 10: the old period's request was charged to it", st[0], wantSpent, wantReserved)
			}
			if _, err := b.Admit(ctx, admission.Claim{Principal: p, CostPico: 91 * micro, At: at}); err == nil {
				t.Error("91 fitted beside the new period's 10 of 100")
			}
			b.Settle(ctx, first, admission.Actual{CostPico: 10 * micro, At: at})
			if _, err := b.Admit(ctx, admission.Claim{Principal: p, CostPico: 90 * micro, At: at}); err != nil {
				t.Fatalf("the new period's remaining 90: %v; the old period's request was charged to it", err)
			}
			if _, err := b.Admit(ctx, admission.Claim{Principal: p, CostPico: 1 * micro, At: at}); err == nil {
				t.Error("1 more fitted after the new period's 100")
			}
		})
	}
}

// testConcurrentCountRequests: 200 concurrent CountRequests, 100 for
// each of two keys of one team, within one bucket: each key admits at
// most its 50 per minute, and the team exactly its 80.
func testConcurrentCountRequests(t *testing.T, open opener) {
	b := open(t, nil)
	team := policies.Limits{Requests: policies.RateLimits{PerMinute: 80}}
	keys := []*keyring.Principal{
		principal(policies.Limits{Requests: policies.RateLimits{PerMinute: 50}}, team, policies.Limits{}),
		principal(policies.Limits{Requests: policies.RateLimits{PerMinute: 50}}, team, policies.Limits{}),
	}
	keys[1].KeyID = "key_b"
	var admitted [2]atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			k := i % 2
			err := b.CountRequest(context.Background(), keys[k], t0.Add(time.Duration(i)*time.Millisecond))
			if err == nil {
				admitted[k].Add(1)
				return
			}
			var d *apierr.Error
			if e, ok := apierr.As(err); ok {
				d = e
			}
			if d == nil || d.Code != apierr.CodeRateLimited {
				t.Errorf("refusal %v; want rate_limited", err)
			}
		}()
	}
	close(start)
	wg.Wait()
	a, c := admitted[0].Load(), admitted[1].Load()
	if a > 50 || c > 50 || a+c != 80 {
		t.Errorf("admitted %d and %d; want at most 50 each, 80 together", a, c)
	}
}

// testConcurrentAdmits: 300 concurrent claims of 20 tokens and 10 µ$
// against a key's 2,000 tokens a minute (100 claims), a team's daily
// budget of 1,500 µ$ (150) and an org's rolling hour of 1,200 µ$ (120):
// exactly 100 are admitted, the rest refused by the token window; settled
// concurrently at 5 tokens and 4 µ$ each, the budgets hold exactly the
// settled sum and nothing reserved, and the window exactly the tokens
// used.
func testConcurrentAdmits(t *testing.T, open opener) {
	b := open(t, nil)
	p := principal(
		policies.Limits{Tokens: policies.TokenLimits{Total: policies.RateLimits{PerMinute: 2000}}},
		policies.Limits{Budgets: []policies.Budget{{MicroUSD: 1500, Period: policies.PeriodDay}}},
		policies.Limits{Budgets: []policies.Budget{{MicroUSD: 1200, Period: policies.PeriodRolling, Window: time.Hour}}},
	)
	var (
		lock   sync.Mutex
		grants []admission.Grant
		wg     sync.WaitGroup
	)
	start := make(chan struct{})
	for range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			g, err := b.Admit(context.Background(), admission.Claim{Principal: p, Model: "m", InputTokens: 10, MaxOutputTokens: 10, CostPico: 10 * micro, At: t0})
			if err != nil {
				if e, ok := apierr.As(err); !ok || e.Code != apierr.CodeTokensRateLimited {
					t.Errorf("refusal %v; want tokens_rate_limited", err)
				}
				return
			}
			lock.Lock()
			grants = append(grants, g)
			lock.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	if len(grants) != 100 {
		t.Fatalf("%d admitted; want exactly 100", len(grants))
	}
	for _, st := range b.Budgets(p, t0) {
		held := st.Reserved
		if st.Period == policies.PeriodRolling {
			held = st.Spent // a rolling budget's Spent holds the reserved too
		}
		if held != mu(1000) {
			t.Errorf("budget %+v; want 1000 µ$ held by the 100 admitted", st)
		}
	}
	for _, g := range grants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.Settle(context.Background(), g, admission.Actual{InputTokens: 3, OutputTokens: 2, CostPico: 4 * micro, At: t0})
		}()
	}
	wg.Wait()
	for _, st := range b.Budgets(p, t0) {
		if st.Spent != mu(400) || !st.Reserved.IsZero() {
			t.Errorf("budget %+v; want 400 µ$ spent, nothing reserved", st)
		}
	}
	g, err := b.Admit(context.Background(), admission.Claim{Principal: p, Model: "m", InputTokens: 100, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	if g.Remaining.Tokens != 2000-500-100 {
		t.Errorf("remaining tokens %d; want %d", g.Remaining.Tokens, 2000-500-100)
	}
}
