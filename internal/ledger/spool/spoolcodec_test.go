package spool

import (
	"bytes"
	"encoding/hex"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/tokens"
)

// TestRecordEncodingV1 pins the version-1 record layout: a record spooled
// by an earlier build (this frame was written by the build whose Record
// had a field per kind of token) decodes to the same record, and encoding
// that record yields the same bytes, so a spool left by either build
// replays in the other.
func TestRecordEncodingV1(t *testing.T) {
	const v1 = "01057265715f3106636c69656e74056b65795f61047465616d036f7267086d6573736167657306636c6175646509616e7468726f70696308636c617564652d78026f6b00a413d40344ee088601185a7086808080804090038a80b4bdb6f6da983180d0e0b0c5f6da983180c6868f0103"
	want := ledger.Record{RequestID: "req_1", ClientRequestID: "client", KeyID: "key_a", Team: "team", Org: "org", Endpoint: "messages",
		Model: "claude", Provider: "anthropic", UpstreamModel: "claude-x", Outcome: "ok",
		Tokens: tokens.Counts{tokens.Input: 1234, tokens.CachedInput: 234, tokens.CacheWrite: 34, tokens.Output: 567,
			tokens.Reasoning: 67, tokens.CacheWrite1h: 12, tokens.AudioInput: 45, tokens.AudioOutput: 56},
		CostPico: 1<<40 + 3, Priced: true, Estimated: true, Status: 200,
		StartedAt: time.Date(2026, 3, 1, 12, 0, 0, 5, time.UTC), FinishedAt: time.Date(2026, 3, 1, 12, 0, 2, 0, time.UTC), TTFT: 150 * time.Millisecond}
	frame, err := hex.DecodeString(v1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeRecord(frame)
	if err != nil {
		t.Fatalf("decode a version-1 record: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
	if enc := appendRecord(nil, &want); !bytes.Equal(enc, frame) {
		t.Errorf("encoding changed:\n got %x\nwant %s", enc, v1)
	}
}
