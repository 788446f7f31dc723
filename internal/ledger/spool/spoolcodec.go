package spool

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/tokens"
)

// A spooled record is its fields in a fixed order: a version byte, the
// strings (each a uvarint length and the bytes), the integers (zigzag
// varints: the token counts in tokens.Kind's order, the cost, the status,
// then times as Unix nanoseconds, 0 for the zero time, as the spend table
// stores them, and the TTFT), and one byte of flags. A new field is added
// at the end under a new version; a decoder refuses versions it does not
// know.
const recordVersion = 1

// recordKinds is how many token counts a version-1 record holds: every
// kind there was when it was defined. A new kind changes the layout, so
// it needs a new version (and decodeRecord must go on reading version 1,
// with the new kind's count 0): this line stops the build until then.
const recordKinds = 8

var _ [recordKinds - tokens.NumKinds]struct{} // a new kind: see recordKinds

// recordInts is how many integers follow the strings: the counts, then
// cost_pico, status, started_at, finished_at and ttft.
const recordInts = recordKinds + 5

const (
	flagPriced = 1 << iota
	flagEstimated
	flagStream
)

// recordStrings are r's strings in their encoded order.
func recordStrings(r *ledger.Record) [11]*string {
	return [...]*string{&r.RequestID, &r.ClientRequestID, &r.KeyID, &r.Team, &r.Org, &r.Endpoint,
		&r.Model, &r.Provider, &r.UpstreamModel, &r.Outcome, &r.ErrorType}
}

// appendRecord appends r's encoding to b. r's times must be storable
// (the sink's Prepare checked them): they are written as ledger.Nanos gives them.
func appendRecord(b []byte, r *ledger.Record) []byte {
	b = append(b, recordVersion)
	for _, s := range recordStrings(r) {
		b = protowire.AppendString(b, *s)
	}
	for _, n := range r.Tokens {
		b = protowire.AppendVarint(b, protowire.EncodeZigZag(n))
	}
	started, _ := ledger.Nanos("started_at", r.StartedAt)
	finished, _ := ledger.Nanos("finished_at", r.FinishedAt)
	for _, n := range [...]int64{r.CostPico, int64(r.Status), started, finished, int64(r.TTFT)} {
		b = protowire.AppendVarint(b, protowire.EncodeZigZag(n))
	}
	var flags byte
	if r.Priced {
		flags |= flagPriced
	}
	if r.Estimated {
		flags |= flagEstimated
	}
	if r.Stream {
		flags |= flagStream
	}
	return append(b, flags)
}

var errRecordEncoding = errors.New("not a spooled record")

// decodeRecord is appendRecord's inverse. It checks the encoding, not the
// record: the caller validates what it decoded (encode) before storing it.
func decodeRecord(b []byte) (ledger.Record, error) {
	var r ledger.Record
	if len(b) == 0 || b[0] != recordVersion {
		return r, fmt.Errorf("%w: version %v", errRecordEncoding, b[:min(len(b), 1)])
	}
	b = b[1:]
	for i, s := range recordStrings(&r) {
		v, n := protowire.ConsumeString(b)
		if n < 0 {
			return r, fmt.Errorf("%w: string %d: %v", errRecordEncoding, i, protowire.ParseError(n))
		}
		*s, b = v, b[n:]
	}
	var ints [recordInts]int64
	for i := range ints {
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return r, fmt.Errorf("%w: integer %d: %v", errRecordEncoding, i, protowire.ParseError(n))
		}
		ints[i], b = protowire.DecodeZigZag(v), b[n:]
	}
	copy(r.Tokens[:], ints[:recordKinds])
	r.CostPico = ints[recordKinds]
	status, started, finished, ttft := ints[recordKinds+1], ints[recordKinds+2], ints[recordKinds+3], ints[recordKinds+4]
	if int64(int(status)) != status {
		return r, fmt.Errorf("%w: status %d", errRecordEncoding, status)
	}
	r.Status, r.StartedAt, r.FinishedAt, r.TTFT = int(status), ledger.FromNanos(started), ledger.FromNanos(finished), time.Duration(ttft)
	if len(b) != 1 || b[0]&^(flagPriced|flagEstimated|flagStream) != 0 {
		return r, fmt.Errorf("%w: %d bytes after the integers", errRecordEncoding, len(b))
	}
	r.Priced, r.Estimated, r.Stream = b[0]&flagPriced != 0, b[0]&flagEstimated != 0, b[0]&flagStream != 0
	return r, nil
}
