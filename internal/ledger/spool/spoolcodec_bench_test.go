package spool

import "testing"

// BenchmarkRecordCodec is a record's way from Append to the sink through
// the spool: encoded into the spool, decoded by the ingester, and
// prepared for the sink (validated, its times checked: prepare, what
// the test sink's Prepare does; a database's Prepare does more).
func BenchmarkRecordCodec(b *testing.B) {
	r := record("req_codec")
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = appendRecord(buf[:0], &r)
		got, err := decodeRecord(buf)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := prepare(got); err != nil {
			b.Fatal(err)
		}
	}
}
