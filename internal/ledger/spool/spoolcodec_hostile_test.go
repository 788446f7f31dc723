package spool

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/tokens"
)

// attackV1Frame is TestRecordEncodingV1's frame: a record spooled by the
// build whose Record had a field per kind of token.
const attackV1Frame = "01057265715f3106636c69656e74056b65795f61047465616d036f7267086d6573736167657306636c6175646509616e7468726f70696308636c617564652d78026f6b00a413d40344ee088601185a7086808080804090038a80b4bdb6f6da983180d0e0b0c5f6da983180c6868f0103"

// attackRecord is a record with every field set and each kind of token a
// count of its own.
func attackRecord(counts tokens.Counts) ledger.Record {
	return ledger.Record{RequestID: "req_\x00é\xff", ClientRequestID: "c", KeyID: "key_a", Team: "t", Org: "o", Endpoint: "chat",
		Model: "m", Provider: "p", UpstreamModel: "u", Outcome: "ok", ErrorType: "e",
		Tokens: counts, CostPico: math.MaxInt64, Priced: true, Estimated: true, Stream: true, Status: 599,
		StartedAt:  time.Unix(0, math.MinInt64).UTC(),
		FinishedAt: time.Unix(0, math.MaxInt64).UTC(), TTFT: math.MinInt64}
}

// attackFrames are valid frames to damage: the version-1 frame pinned by
// the older build, and frames this build writes with the largest and
// smallest counts (ten-byte varints).
func attackFrames(t *testing.T) map[string][]byte {
	t.Helper()
	v1, err := hex.DecodeString(attackV1Frame)
	if err != nil {
		t.Fatal(err)
	}
	var maxes, mins tokens.Counts
	for k := range maxes {
		maxes[k], mins[k] = math.MaxInt64, math.MinInt64
	}
	hi, lo := attackRecord(maxes), attackRecord(mins)
	return map[string][]byte{"v1": v1, "current max": appendRecord(nil, &hi), "current min": appendRecord(nil, &lo)}
}

// decodeOrRoundTrip decodes b, which must not panic, and returns "" when
// it is refused or decodes to a record that encodes and decodes to itself.
func decodeOrRoundTrip(b []byte) (msg string) {
	defer func() {
		if p := recover(); p != nil {
			msg = fmt.Sprintf("decodeRecord panicked: %v", p)
		}
	}()
	r, err := decodeRecord(b)
	if err != nil {
		return ""
	}
	again := appendRecord(nil, &r)
	r2, err := decodeRecord(again)
	if err != nil {
		return fmt.Sprintf("decoded to a record whose encoding does not decode: %v", err)
	}
	if diff := cmp.Diff(r, r2); diff != "" {
		return "decoded to a record that does not round-trip (-first +again):\n" + diff
	}
	return ""
}

// TestAttackDecodeRecordEveryTruncation: every strict prefix of a valid
// frame, and the frame with a byte more, is refused, without a panic.
func TestAttackDecodeRecordEveryTruncation(t *testing.T) {
	for name, frame := range attackFrames(t) {
		t.Run(name, func(t *testing.T) {
			if _, err := decodeRecord(frame); err != nil {
				t.Fatalf("the whole frame: %v", err)
			}
			for n := range len(frame) {
				if msg := decodeOrRoundTrip(frame[:n]); msg != "" {
					t.Fatalf("the first %d of %d bytes: %s", n, len(frame), msg)
				}
				if _, err := decodeRecord(frame[:n]); err == nil {
					t.Errorf("the first %d of %d bytes decoded", n, len(frame))
				}
			}
			for _, extra := range []byte{0, 1, 0x80, 0xff} {
				if _, err := decodeRecord(append(bytes.Clone(frame), extra)); err == nil {
					t.Errorf("the frame and a byte %#x more decoded", extra)
				}
			}
		})
	}
}

// TestAttackDecodeRecordEveryByteChange: every value of every byte of a
// valid frame either is refused or decodes to a record that round-trips;
// none panics.
func TestAttackDecodeRecordEveryByteChange(t *testing.T) {
	for name, frame := range attackFrames(t) {
		t.Run(name, func(t *testing.T) {
			b := bytes.Clone(frame)
			accepted := 0
			for i := range b {
				orig := b[i]
				for v := range 256 {
					if byte(v) == orig {
						continue
					}
					b[i] = byte(v)
					if msg := decodeOrRoundTrip(b); msg != "" {
						t.Fatalf("byte %d set to %#x: %s", i, v, msg)
					}
					if _, err := decodeRecord(b); err == nil {
						accepted++
					}
				}
				b[i] = orig
			}
			t.Logf("%d of %d single-byte changes decode (to records that round-trip)", accepted, len(b)*255)
		})
	}
}

// TestAttackRecordCountsAtTheEdges: each kind's count at 0, -1, 1,
// MaxInt64 and MinInt64, with the others set apart, encodes and decodes
// unchanged, every other field too.
func TestAttackRecordCountsAtTheEdges(t *testing.T) {
	for _, k := range tokens.All() {
		for _, v := range []int64{0, -1, 1, math.MaxInt64, math.MinInt64} {
			var c tokens.Counts
			for j := range c {
				c[j] = int64(j+1) * 1_000_003
			}
			c[k] = v
			r := attackRecord(c)
			got, err := decodeRecord(appendRecord(nil, &r))
			if err != nil {
				t.Errorf("%s = %d: %v", k, v, err)
				continue
			}
			if diff := cmp.Diff(r, got); diff != "" {
				t.Errorf("%s = %d (-want +got):\n%s", k, v, diff)
			}
		}
	}
}

// appendOlderRecord is the record encoding of the build whose Record had
// a field per kind of token, as it wrote it: each kind's count from its
// own field, in the order of those fields, then the cost, the status, the
// times and the TTFT.
func appendOlderRecord(b []byte, strs [11]string, input, cachedInput, cacheCreation, output, reasoning,
	cacheCreation1h, audioInput, audioOutput, costPico, status, started, finished, ttft int64, flags byte) []byte {
	b = append(b, 1)
	for _, s := range strs {
		b = protowire.AppendString(b, s)
	}
	for _, n := range []int64{input, cachedInput, cacheCreation, output, reasoning, cacheCreation1h, audioInput, audioOutput,
		costPico, status, started, finished, ttft} {
		b = protowire.AppendVarint(b, protowire.EncodeZigZag(n))
	}
	return append(b, flags)
}

// TestAttackRecordFromTheOlderBuild: a record the older build spooled,
// with every kind a different count (and each kind in turn at the
// extremes), decodes with each count under its own kind, the cost and
// everything after it in place.
func TestAttackRecordFromTheOlderBuild(t *testing.T) {
	strs := [11]string{"req", "client", "key", "team", "org", "chat", "model", "prov", "up", "ok", "err"}
	base := [8]int64{101, 202, 303, 404, 505, 606, 707, 808}
	for i := -1; i < len(base); i++ {
		for _, edge := range []int64{math.MaxInt64, math.MinInt64, -1, 0} {
			v := base
			if i >= 0 {
				v[i] = edge
			}
			frame := appendOlderRecord(nil, strs, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7],
				987654321, 201, 1_700_000_000_000_000_001, 1_700_000_000_500_000_000, 42, flagPriced|flagStream)
			got, err := decodeRecord(frame)
			if err != nil {
				t.Fatalf("older frame with count %d = %d: %v", i, edge, err)
			}
			want := ledger.Record{RequestID: "req", ClientRequestID: "client", KeyID: "key", Team: "team", Org: "org", Endpoint: "chat",
				Model: "model", Provider: "prov", UpstreamModel: "up", Outcome: "ok", ErrorType: "err",
				Tokens: tokens.Counts{tokens.Input: v[0], tokens.CachedInput: v[1], tokens.CacheWrite: v[2], tokens.Output: v[3],
					tokens.Reasoning: v[4], tokens.CacheWrite1h: v[5], tokens.AudioInput: v[6], tokens.AudioOutput: v[7]},
				CostPico: 987654321, Status: 201, Priced: true, Stream: true,
				StartedAt: time.Unix(0, 1_700_000_000_000_000_001).UTC(), FinishedAt: time.Unix(0, 1_700_000_000_500_000_000).UTC(), TTFT: 42}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("older frame with count %d = %d (-want +got):\n%s", i, edge, diff)
			}
			if again := appendRecord(nil, &got); !bytes.Equal(again, frame) {
				t.Errorf("older frame with count %d = %d: this build encodes it otherwise:\n got %x\nwant %x", i, edge, again, frame)
			}
			if i < 0 {
				break
			}
		}
	}
}
