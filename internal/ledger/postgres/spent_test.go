package postgres

import (
	"math"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/testctx"
)

// TestSpent: one scope's spend, for a model or all, from a time or over
// its lifetime, exact past an int64 of pico-dollars, agrees with the sum
// of its records; a scope with none spent nothing.
func TestSpent(t *testing.T) {
	ctx := testctx.Deadline(t)
	l := openTest(t, newDatabase(t))
	day := time.Date(2025, 3, 10, 0, 0, 0, 0, time.UTC)
	recs := []ledger.Record{
		record("a", 1, day.Add(-time.Hour), 100),               // key_001, team_1, org_1, claude-sonnet
		record("b", 1, day.Add(time.Hour), 200),                // the same scope, the day
		record("c", 4, day.Add(2*time.Hour), 400),              // key_004, team_4, org_1, claude-sonnet
		record("d", 7, day.Add(3*time.Hour), math.MaxInt64),    // key_007, team_0, org_1, claude-sonnet
		record("e", 10, day.Add(3*time.Hour), math.MaxInt64-1), // key_010, team_3, org_1, claude-sonnet
		record("f", 3, day.Add(4*time.Hour), 800),              // key_003, team_3, org_0, gpt-4o
	}
	insert(t, l, recs...)
	for _, c := range []struct {
		scope, id, model string
		since            time.Time
		want             money.Sum
	}{
		{"key", "key_001", "", day, money.FromPico(200)},
		{"key", "key_001", "", time.Time{}, money.FromPico(300)},
		{"key", "key_001", "claude-sonnet", day, money.FromPico(200)},
		{"key", "key_001", "gpt-4o", day, money.Sum{}},
		{"org", "org_1", "", day, money.FromPico(600).AddPico(math.MaxInt64).AddPico(math.MaxInt64 - 1)},
		{"org", "org_1", "", time.Time{}, money.FromPico(700).AddPico(math.MaxInt64).AddPico(math.MaxInt64 - 1)},
		{"team", "team_3", "gpt-4o", time.Time{}, money.FromPico(800)},
		{"team", "nobody", "", time.Time{}, money.Sum{}},
		{"key", "key_001", "", day.Add(24 * time.Hour), money.Sum{}},
	} {
		got, err := l.Spent(ctx, c.scope, c.id, c.model, c.since)
		if err != nil || got != c.want {
			t.Errorf("Spent(%s %s, model %q, since %v) = %v, %v; want %v", c.scope, c.id, c.model, c.since, got, err, c.want)
		}
	}
}

// TestSpentBuckets: one scope's spend per 15-minute bucket, oldest first,
// from the bucket that holds since.
func TestSpentBuckets(t *testing.T) {
	ctx := testctx.Deadline(t)
	l := openTest(t, newDatabase(t))
	day := time.Date(2025, 3, 10, 0, 0, 0, 0, time.UTC)
	insert(t, l,
		record("a", 1, day.Add(-time.Hour), 100),               // key_001, claude-sonnet
		record("b", 1, day.Add(5*time.Minute), 200),            // the bucket at 0:00
		record("c", 1, day.Add(14*time.Minute), 300),           // the same bucket
		record("d", 1, day.Add(16*time.Minute), 400),           // the bucket at 0:15
		record("e", 4, day.Add(16*time.Minute), 800),           // another key
		record("f", 1, day.Add(31*time.Minute), math.MaxInt64), // the bucket at 0:30
	)
	got, err := l.SpentBuckets(ctx, "key", "key_001", "", day.Add(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		at   time.Time
		cost money.Sum
	}{{day, money.FromPico(500)}, {day.Add(15 * time.Minute), money.FromPico(400)}, {day.Add(30 * time.Minute), money.FromPico(math.MaxInt64)}}
	if len(got) != len(want) {
		t.Fatalf("SpentBuckets = %+v; want %+v", got, want)
	}
	for i, w := range want {
		if !got[i].Bucket.Equal(w.at) || got[i].Cost != w.cost {
			t.Errorf("bucket %d: %v %v; want %v %v", i, got[i].Bucket, got[i].Cost, w.at, w.cost)
		}
	}
	if got, err := l.SpentBuckets(ctx, "key", "key_001", "gpt-4o", day); err != nil || len(got) != 0 {
		t.Errorf("another model: %+v, %v; want none", got, err)
	}
}
