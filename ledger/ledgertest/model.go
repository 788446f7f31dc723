package ledgertest

import (
	"cmp"
	"slices"
	"time"

	"github.com/sluicegw/sluice/ledger"
)

// The reference semantics of Filter and GroupBy, written plainly: Memory
// implements them, and the suite sums its expected Totals with add.

// selects reports whether f selects r.
func selects(f ledger.Filter, r ledger.Record) bool {
	switch {
	case !f.Since.IsZero() && r.StartedAt.Before(f.Since),
		!f.Until.IsZero() && !r.StartedAt.Before(f.Until),
		f.KeyID != "" && r.KeyID != f.KeyID,
		f.Team != "" && r.Team != f.Team,
		f.Org != "" && r.Org != f.Org,
		f.Model != "" && r.Model != f.Model:
		return false
	}
	return true
}

// group is r's group under by.
func group(r ledger.Record, by ledger.GroupBy) string {
	switch by {
	case ledger.ByKey:
		return r.KeyID
	case ledger.ByTeam:
		return r.Team
	case ledger.ByOrg:
		return r.Org
	case ledger.ByModel:
		return r.Model
	case ledger.ByDay:
		return r.StartedAt.UTC().Format(time.DateOnly)
	}
	return ""
}

// add counts r into t.
func add(t *ledger.Total, r ledger.Record) {
	t.Requests++
	t.InputTokens += r.InputTokens
	t.CachedInputTokens += r.CachedInputTokens
	t.CacheCreationTokens += r.CacheCreationTokens
	t.OutputTokens += r.OutputTokens
	t.ReasoningTokens += r.ReasoningTokens
	t.CostMicros += r.CostMicros
	if r.Estimated {
		t.Estimated++
	}
	if !r.Priced {
		t.Unpriced++
	}
}

// sortTotals puts ts in Reader.Totals' order.
func sortTotals(ts []ledger.Total) {
	slices.SortFunc(ts, func(a, b ledger.Total) int {
		return cmp.Or(cmp.Compare(b.CostMicros, a.CostMicros), cmp.Compare(a.Group, b.Group))
	})
}

// utc is t in UTC, the zero time left alone.
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}
