package usage

import (
	"strings"
	"testing"
)

// TestSniffReadsFirstChunkInPlace: a first chunk that decides the format
// is handed on as it is: sniffing it copies nothing.
func TestSniffReadsFirstChunkInPlace(t *testing.T) {
	for _, body := range []string{chatBody, "data: {}\n\n", " \r\n" + chatBody, "\ufeff" + chatBody} {
		m := NewMeter(chatJSONOpts)
		p := []byte(body)
		allocs := testing.AllocsPerRun(100, func() {
			m.format, m.head = fmtSniff, nil
			if b := m.sniff(p, false); len(b) == 0 || &b[len(b)-1] != &p[len(p)-1] {
				t.Fatalf("%.20q: sniff returned %q, not the end of the chunk", body, b)
			}
		})
		if allocs != 0 {
			t.Errorf("%.20q: sniffing allocates %v times", body, allocs)
		}
	}
}

// TestSniffLetsGoOfHead: the undecided first bytes are held only until
// the format is decided, and whitespace (after a BOM split across
// chunks) is not held at all, however long it is.
func TestSniffLetsGoOfHead(t *testing.T) {
	spaces := strings.Repeat(" ", 64<<10)
	tests := []struct {
		name   string
		chunks []string
	}{
		{name: "field name split", chunks: []string{"da", "ta: {}\n\n" + spaces}},
		{name: "BOM split", chunks: []string{"\xef\xbb", "\xbf" + chatBody}},
		{name: "BOM split then whitespace", chunks: []string{"\xef\xbb", "\xbf" + spaces, chatBody}},
		{name: "whitespace", chunks: []string{spaces, chatBody}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMeter(chatStreamOpts)
			for _, c := range tt.chunks {
				m.Write([]byte(c))
			}
			if m.format == fmtSniff || cap(m.head) != 0 {
				t.Errorf("format %d, holding %d bytes of head", m.format, cap(m.head))
			}
		})
	}
}
