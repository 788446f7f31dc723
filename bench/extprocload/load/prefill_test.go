package load

import (
	"io"
	"path/filepath"
	"testing"

	"github.com/sluicegw/sluice/internal/ledger"
	ledgersqlite "github.com/sluicegw/sluice/internal/ledger/sqlite"
)

// TestPrefill: prefill adds exactly the records asked for, twice over,
// readable as spend records of the past 30 days.
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
	for _, r := range recs {
		if err := r.Validate(); err != nil || r.CostPico != 42_000_000 {
			t.Fatalf("record %+v: %v", r, err)
		}
	}
	if err := Main(t.Context(), []string{"prefill", "--ledger", path}, io.Discard, io.Discard); err != ErrUsage {
		t.Errorf("prefill without --records: %v, want ErrUsage", err)
	}
}
