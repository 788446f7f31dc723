package admission

import (
	"time"

	"github.com/sluicegw/sluice/ledger"
)

// SpentFrom returns a LocalOptions.Spent that answers from the ledger's
// aggregates, read once at start-up: buckets (Aggregates.Buckets since the
// earliest current period start) and lifetime (Aggregates.Lifetime). Each
// answer sums the scope's rows — over every model, or the one asked for —
// whose bucket starts at or after since; a zero since sums the lifetime
// rows. It answers from memory, as Local requires.
func SpentFrom(buckets, lifetime []ledger.Aggregate) func(kind, id, model string, since time.Time) int64 {
	type who struct{ kind, id string }
	byWho := map[who][]ledger.Aggregate{}
	for _, a := range buckets {
		w := who{string(a.Scope), a.ID}
		byWho[w] = append(byWho[w], a)
	}
	ever := map[who][]ledger.Aggregate{}
	for _, a := range lifetime {
		w := who{string(a.Scope), a.ID}
		ever[w] = append(ever[w], a)
	}
	return func(kind, id, model string, since time.Time) int64 {
		rows := byWho[who{kind, id}]
		if since.IsZero() {
			rows = ever[who{kind, id}]
		}
		var sum int64
		for _, a := range rows {
			if (model == "" || a.Model == model) && (since.IsZero() || !a.Bucket.Before(since)) {
				sum += a.CostMicros
			}
		}
		return sum
	}
}

// EarliestPeriodStart is the earliest start among the current calendar
// periods (day, week, month) at now in tz: reading the ledger's buckets
// from there covers every budget SpentFrom may be asked about.
func EarliestPeriodStart(now time.Time, tz *time.Location) time.Time {
	w, _ := periodOf("week", now, tz)
	m, _ := periodOf("month", now, tz)
	if w.Before(m) {
		return w
	}
	return m
}
