package sqlite

import "testing"

// BenchmarkRecordCodec is a record's way from Append to the spend table
// through the spool: encoded into the spool, decoded by the ingester, and
// made into the insert's arguments.
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
		if _, err := encode(got); err != nil {
			b.Fatal(err)
		}
	}
}
