package ledger

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/tokens"
)

// TestRecordJSON: a record's JSON has a field per kind of token, named
// from tokens' table, and reads back as the same record; a field no
// record has is refused.
func TestRecordJSON(t *testing.T) {
	r := Record{RequestID: "r", KeyID: "k", Model: "m", CostPico: 5, Priced: true, Status: 200, Outcome: "ok",
		StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), TTFT: time.Second}
	for _, k := range tokens.All() {
		r.Tokens[k] = int64(k) + 1
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range tokens.All() {
		if !strings.Contains(string(b), `"`+k.Names().Field+`":`) {
			t.Errorf("no %s in %s", k.Names().Field, b)
		}
	}
	var got Record
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if err := json.Unmarshal([]byte(`{"RequestID":"r","Tokens":[1]}`), &got); err == nil {
		t.Error("an unknown field was accepted")
	}
}
