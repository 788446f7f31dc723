package admission

import (
	"sync"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/money"
)

// SpendIndex answers "what did this scope spend since then", from memory:
// the ledger's aggregates read at start-up (ledger.Aggregates), plus every
// request settled since (Add). Local asks it when a budget period it has
// not tracked yet begins — after a restart, or when a budget is added in
// the middle of a period — so the budget starts from what was really
// spent. It is safe for concurrent use.
type SpendIndex struct {
	mu        sync.Mutex
	buckets   map[who]map[string]map[int64]money.Sum // model → bucket (unix s) → spent
	lifetime  map[who]map[string]money.Sum           // model → spent
	lastPrune time.Time
}

type who struct{ kind, id string }

// retention is how far back the per-bucket sums are kept: the longest
// calendar period (a month) and a week more.
const retention = 40 * 24 * time.Hour

// NewSpendIndex starts an index from the ledger's buckets (Buckets since
// EarliestPeriodStart, at least) and lifetime sums.
func NewSpendIndex(buckets, lifetime []ledger.Aggregate) *SpendIndex {
	x := &SpendIndex{buckets: map[who]map[string]map[int64]money.Sum{}, lifetime: map[who]map[string]money.Sum{}}
	for _, a := range buckets {
		bs, b := x.bucket(who{string(a.Scope), a.ID}, a.Model), a.Bucket.Unix()
		bs[b] = bs[b].Add(a.Cost)
	}
	for _, a := range lifetime {
		lt := x.life(who{string(a.Scope), a.ID})
		lt[a.Model] = lt[a.Model].Add(a.Cost)
	}
	return x
}

func (x *SpendIndex) bucket(w who, model string) map[int64]money.Sum {
	ms := x.buckets[w]
	if ms == nil {
		ms = map[string]map[int64]money.Sum{}
		x.buckets[w] = ms
	}
	b := ms[model]
	if b == nil {
		b = map[int64]money.Sum{}
		ms[model] = b
	}
	return b
}

func (x *SpendIndex) life(w who) map[string]money.Sum {
	m := x.lifetime[w]
	if m == nil {
		m = map[string]money.Sum{}
		x.lifetime[w] = m
	}
	return m
}

// Spent sums what scope kind/id spent on model ("" for every model) in the
// buckets that start at or after since; a zero since means ever. It is a
// LocalOptions.Spent.
func (x *SpendIndex) Spent(kind, id, model string, since time.Time) money.Sum {
	x.mu.Lock()
	defer x.mu.Unlock()
	w := who{kind, id}
	var sum money.Sum
	if since.IsZero() {
		for m, c := range x.lifetime[w] {
			if model == "" || m == model {
				sum = sum.Add(c)
			}
		}
		return sum
	}
	from := ledger.BucketOf(since).Unix()
	for m, bs := range x.buckets[w] {
		if model != "" && m != model {
			continue
		}
		for b, c := range bs {
			if b >= from {
				sum = sum.Add(c)
			}
		}
	}
	return sum
}

// Add counts a settled request's cost, in pico-dollars, for a scope, in
// the bucket of at (the time the request started, as the ledger counts
// it). It is a LocalOptions.Record.
func (x *SpendIndex) Add(kind, id, model string, at time.Time, cost int64) {
	if cost <= 0 || id == "" {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	w := who{kind, id}
	bs, b := x.bucket(w, model), ledger.BucketOf(at).Unix()
	bs[b] = bs[b].AddPico(cost)
	lt := x.life(w)
	lt[model] = lt[model].AddPico(cost)
	if at.Sub(x.lastPrune) > 24*time.Hour {
		x.prune(at.Add(-retention))
		x.lastPrune = at
	}
}

// prune drops the buckets older than cutoff; lifetime sums stay.
func (x *SpendIndex) prune(cutoff time.Time) {
	c := cutoff.Unix()
	for w, ms := range x.buckets {
		for m, bs := range ms {
			for b := range bs {
				if b < c {
					delete(bs, b)
				}
			}
			if len(bs) == 0 {
				delete(ms, m)
			}
		}
		if len(ms) == 0 {
			delete(x.buckets, w)
		}
	}
}

// EarliestPeriodStart is the earliest start among the current calendar
// periods (day, week, month) at now in tz: reading the ledger's buckets
// from there covers every budget the index may be asked about.
func EarliestPeriodStart(now time.Time, tz *time.Location) time.Time {
	w, _ := periodOf("week", now, tz)
	m, _ := periodOf("month", now, tz)
	if w.Before(m) {
		return w
	}
	return m
}
