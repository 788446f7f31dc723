package admission

import (
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/policies"
)

// TestExpiryCutoffIsExclusive: ExpireBefore releases reservations made
// before the cutoff; one made exactly at it stays, one a nanosecond
// earlier goes.
func TestExpiryCutoffIsExclusive(t *testing.T) {
	l := NewLocal(limits.New(limits.Options{}), LocalOptions{})
	p := principal(policies.Limits{Budgets: []policies.Budget{{MicroUSD: 100, Period: policies.PeriodDay}}}, policies.Limits{}, policies.Limits{})
	if _, err := l.Admit(t.Context(), Claim{Principal: p, CostPico: 10 * micro, At: t0}); err != nil {
		t.Fatal(err)
	}
	if n := l.ExpireBefore(t0.Add(time.Hour), t0); n != 0 || l.Held() != 1 {
		t.Fatalf("a reservation made at the cutoff: expired %d, held %d; want it kept", n, l.Held())
	}
	if n := l.ExpireBefore(t0.Add(time.Hour), t0.Add(time.Nanosecond)); n != 1 || l.Held() != 0 {
		t.Fatalf("a reservation made before the cutoff: expired %d, held %d; want it released", n, l.Held())
	}
}

// TestSpendIsRecordedAtTheStart: a request that starts before midnight
// and ends after it is recorded in the day it started, where the ledger
// counts it; the new day's budget starts from nothing.
func TestSpendIsRecordedAtTheStart(t *testing.T) {
	idx := NewSpendIndex(nil, nil)
	l := NewLocal(limits.New(limits.Options{}), LocalOptions{Spent: idx.Spent, Record: idx.Add})
	p := principal(policies.Limits{Budgets: []policies.Budget{{MicroUSD: 100, Period: policies.PeriodDay}}}, policies.Limits{}, policies.Limits{})
	midnight := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	g, err := l.Admit(t.Context(), Claim{Principal: p, CostPico: 80 * micro, At: midnight.Add(-time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	l.Settle(t.Context(), g, Actual{CostPico: 80 * micro, At: midnight.Add(time.Hour)})
	for _, kind := range []string{"key", "team", "org"} {
		id := map[string]string{"key": "key_a", "team": "t", "org": "o"}[kind]
		if got := idx.Spent(kind, id, "", midnight); !got.IsZero() {
			t.Errorf("%s spent since midnight %d, want 0: the request started the day before", kind, got)
		}
		if got := idx.Spent(kind, id, "", midnight.AddDate(0, 0, -1)); got != mu(80) {
			t.Errorf("%s spent since the day before %d, want 80", kind, got)
		}
	}
}
