package postgres

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/testctx"
)

// TestSpoolReports: the last report of each spool is kept; Behind lists
// the spools holding records the database does not have, oldest first,
// and Staleness says so for a reader; a spool that drained drops out.
func TestSpoolReports(t *testing.T) {
	ctx := testctx.Deadline(t)
	l := openTest(t, newDatabase(t))
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	report := func(spool string, backlog int64, oldest time.Time) {
		t.Helper()
		if err := l.Report(ctx, spool, backlog, oldest, now); err != nil {
			t.Fatal(err)
		}
	}
	report("a:/spool", 10, now.Add(-time.Minute))
	report("b:/spool", 0, time.Time{})
	report("c:/spool", 5, now.Add(-time.Hour))
	report("a:/spool", 12, now.Add(-2*time.Minute)) // a's latest
	got, err := l.Behind(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []SpoolState{
		{Spool: "c:/spool", Backlog: 5, OldestAt: now.Add(-time.Hour), UpdatedAt: now},
		{Spool: "a:/spool", Backlog: 12, OldestAt: now.Add(-2 * time.Minute), UpdatedAt: now},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Behind (-want +got):\n%s", diff)
	}
	msg := Staleness(got, now.Add(30*time.Second))
	if !strings.HasPrefix(msg, "17 acknowledged spend records are in 2 replicas' spools and not yet in PostgreSQL, the oldest since 2026-12-07T11:00:00Z (c:/spool, reported 30s ago)") {
		t.Errorf("Staleness = %q", msg)
	}
	report("a:/spool", 0, time.Time{})
	report("c:/spool", 0, time.Time{})
	if got, err := l.Behind(ctx); err != nil || len(got) != 0 || Staleness(got, now) != "" {
		t.Errorf("Behind after the spools drained = %v, %v; want none", got, err)
	}
}
