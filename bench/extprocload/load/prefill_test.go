package load

import (
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/ledger/ledgertest"
	ledgersqlite "github.com/sluicegw/sluice/internal/ledger/sqlite"
)

// TestPrefill: prefill adds exactly the records asked for, twice over,
// readable as spend records of the 30 days before today, with request ids
// that sort as Sluice's own UUIDv7s of their times.
func TestPrefill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	for range 2 {
		if err := Main(t.Context(), []string{"prefill", "--ledger", path, "--records", "1500"}, io.Discard, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	l, err := ledgersqlite.Open(t.Context(), path, ledgersqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	recs, err := l.Records(t.Context(), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3000 {
		t.Fatalf("%d records, want 3000", len(recs))
	}
	today := time.Now().UTC().Truncate(24 * time.Hour)
	later := uuid.Must(uuid.NewV7()).String() // what a request gets now
	for _, r := range recs {
		if err := r.Validate(); err != nil || r.CostPico != 42_000_000 {
			t.Fatalf("record %+v: %v", r, err)
		}
		if !r.StartedAt.Before(today) || r.StartedAt.Before(today.Add(-30*24*time.Hour)) {
			t.Fatalf("record %s started at %v, not in the 30 days before %v", r.RequestID, r.StartedAt, today)
		}
		id, err := uuid.Parse(r.RequestID)
		if err != nil || id.Version() != 7 {
			t.Fatalf("request id %q is not a UUIDv7 (%v)", r.RequestID, err)
		}
		if sec, nsec := id.Time().UnixTime(); time.Unix(sec, nsec).UnixMilli() != r.StartedAt.UnixMilli() {
			t.Fatalf("request id %s holds %v, the record started at %v", r.RequestID, time.Unix(sec, nsec).UTC(), r.StartedAt)
		}
		if r.RequestID >= later {
			t.Fatalf("request id %s sorts after a new request's %s", r.RequestID, later)
		}
	}
	// The aggregates are the records' sums, as the ledger's own would be.
	buckets, err := l.Buckets(t.Context(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ledgertest.ExpectedBuckets(recs, time.Time{}), buckets); diff != "" {
		t.Errorf("Buckets are not the records' sums (-want +got):\n%s", diff)
	}
	life, err := l.Lifetime(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ledgertest.ExpectedLifetime(recs), life); diff != "" {
		t.Errorf("Lifetime is not the records' sums (-want +got):\n%s", diff)
	}
	if err := Main(t.Context(), []string{"prefill", "--ledger", path}, io.Discard, io.Discard); err != ErrUsage {
		t.Errorf("prefill without --records: %v, want ErrUsage", err)
	}
}
