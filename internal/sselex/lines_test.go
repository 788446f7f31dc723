package sselex

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// line is a line as a whole-stream reader sees it: its bytes and its
// terminator ("" for an unterminated last line).
type line struct{ text, term string }

// reference splits a whole stream into lines, written independently of
// Lines and as plainly as possible: a line ends at "\r\n", "\r" or "\n".
func reference(in []byte) []line {
	var out []line
	for len(in) > 0 {
		e := bytes.IndexAny(in, "\r\n")
		if e < 0 {
			return append(out, line{string(in), ""})
		}
		n := e + 1
		if in[e] == '\r' && n < len(in) && in[n] == '\n' {
			n++
		}
		out = append(out, line{string(in[:e]), string(in[e:n])})
		in = in[n:]
	}
	return out
}

// split reads chunks with one Lines as a stream's reader does and
// returns the lines it reports, checking on the way what Next promises
// of every piece: it moves on, the terminator is one, Cont is set
// exactly on a line's later pieces, and LF comes only where a chunk
// ended in '\r' and the next begins with '\n'.
func split(t *testing.T, chunks [][]byte) []line {
	t.Helper()
	var (
		l      Lines
		out    []line
		cur    []byte
		open   bool // a line has pieces in earlier chunks
		lastCR bool // the last chunk ended in a '\r' terminator
	)
	for _, p := range chunks {
		for i := 0; i < len(p); {
			stop, next, what := l.Next(p, i)
			if next <= i || stop < i || stop > next || next > len(p) {
				t.Fatalf("Next(%q, %d) = %d, %d, %b", p, i, stop, next, what)
			}
			if what == LF {
				if i != 0 || !lastCR || p[0] != '\n' || stop != 1 || next != 1 {
					t.Fatalf("LF at %d of %q (last chunk ended in CR: %v)", i, p, lastCR)
				}
				out[len(out)-1].term += "\n"
				lastCR = false
				i = next
				continue
			}
			lastCR = false
			if (what&Cont != 0) != open {
				t.Fatalf("piece %q at %d of %q: Cont %v, want %v", p[i:stop], i, p, what&Cont != 0, open)
			}
			if what&^(Cont|Ended) != 0 {
				t.Fatalf("piece %q: flags %b", p[i:stop], what)
			}
			cur = append(cur, p[i:stop]...)
			if what&Ended == 0 {
				if stop != len(p) || next != len(p) {
					t.Fatalf("unterminated piece ends at %d, %d of %d", stop, next, len(p))
				}
				open = true
				i = next
				continue
			}
			term := string(p[stop:next])
			if term != "\n" && term != "\r" && term != "\r\n" {
				t.Fatalf("terminator %q", term)
			}
			if term == "\r" && next == len(p) {
				lastCR = true
			}
			out = append(out, line{string(cur), term})
			cur, open = cur[:0], false
			i = next
		}
	}
	if open {
		out = append(out, line{string(cur), ""})
	}
	return out
}

// chunked cuts s into chunks at random, as rng says.
func chunked(s []byte, rng *rand.Rand) [][]byte {
	var out [][]byte
	for len(s) > 0 {
		n := 1 + rng.IntN(min(len(s), 1+rng.IntN(2*shortLine+4)))
		if rng.IntN(8) == 0 {
			n = 1 + rng.IntN(len(s))
		}
		if rng.IntN(16) == 0 {
			out = append(out, nil) // an empty chunk changes nothing
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

func TestLines(t *testing.T) {
	long := strings.Repeat("x", 3*shortLine)
	for _, in := range []string{
		"",
		"data: a\n\n",
		"data: a\r\n\r\n",
		"data: a\r\rdata: b\r\r",
		"event: e\ndata: {}\n\n: comment\n\ndata: [DONE]\n\n",
		"\n\r\n\r\r\n\n",
		"data: " + long + "\r\n" + long + "\r" + long + "\n\n",
		"unterminated",
		"ends in cr\r",
		"ends in crlf\r\n",
		"\xef\xbb\xbfdata: bom\n\n",
	} {
		t.Run(fmt.Sprintf("%q", in), func(t *testing.T) {
			b := []byte(in)
			want := reference(b)
			check := func(how string, chunks [][]byte) {
				t.Helper()
				if got := split(t, chunks); !slices.Equal(got, want) {
					t.Fatalf("%s: got %q, want %q", how, got, want)
				}
			}
			check("whole", [][]byte{b})
			for i := range len(b) {
				check(fmt.Sprintf("split at %d", i), [][]byte{b[:i], b[i:]})
			}
			var bytewise [][]byte
			for i := range b {
				bytewise = append(bytewise, b[i:i+1])
			}
			check("bytewise", bytewise)
		})
	}
}

// FuzzLines: for any bytes, cut into chunks anywhere (the seed picks the
// cuts), Lines reports the lines a whole-stream split finds, with the
// same terminators, every byte read once. Seeds: the hand-written
// streams of TestLines and the excerpts checked in under
// testdata/fuzz/FuzzLines.
func FuzzLines(f *testing.F) {
	for i, s := range []string{
		"data: a\n\ndata: b\r\n\r\ndata: c\r\r",
		"event: message_delta\ndata: {\"usage\":{\"output_tokens\":3}}\n\n",
		"\r\n\r\n\n\r",
		": keepalive\r\ndata:x\rdata\n\n",
	} {
		f.Add([]byte(s), uint64(i))
	}
	f.Fuzz(func(t *testing.T, in []byte, seed uint64) {
		want := reference(in)
		rng := rand.New(rand.NewPCG(seed, seed>>17))
		chunks := chunked(in, rng)
		if got := split(t, chunks); !slices.Equal(got, want) {
			t.Fatalf("in %d chunks: got %q, want %q", len(chunks), got, want)
		}
	})
}

func TestLineEnd(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"", -1},
		{"abc", -1},
		{"\n", 0},
		{"ab\ncd\r", 2},
		{"ab\rcd\n", 2},
		{"ab\r\n", 2},
	} {
		if got := LineEnd([]byte(tc.in)); got != tc.want {
			t.Errorf("LineEnd(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestField(t *testing.T) {
	for _, tc := range []struct {
		line, name, value string
	}{
		{"data: x", "data", "x"},
		{"data:x", "data", "x"},
		{"data:  x", "data", " x"},
		{"data:", "data", ""},
		{"data", "data", ""},
		{"event: a: b", "event", "a: b"},
		{": comment", "", "comment"},
		{"", "", ""},
	} {
		name, value := Field([]byte(tc.line))
		if string(name) != tc.name || string(value) != tc.value {
			t.Errorf("Field(%q) = %q, %q; want %q, %q", tc.line, name, value, tc.name, tc.value)
		}
	}
}

// BenchmarkLines reads a 20-event stream, whole and in 7-byte chunks.
func BenchmarkLines(b *testing.B) {
	var whole []byte
	for i := range 20 {
		whole = fmt.Appendf(whole, `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" word%d"},"finish_reason":null}],"usage":null}`+"\n\n", i)
	}
	for _, size := range []int{len(whole), 7} {
		var chunks [][]byte
		for s := whole; len(s) > 0; s = s[min(size, len(s)):] {
			chunks = append(chunks, s[:min(size, len(s))])
		}
		b.Run(fmt.Sprintf("chunk=%d", size), func(b *testing.B) {
			b.SetBytes(int64(len(whole)))
			b.ReportAllocs()
			for b.Loop() {
				var l Lines
				for _, p := range chunks {
					for i := 0; i < len(p); {
						_, i, _ = l.Next(p, i)
					}
				}
			}
		})
	}
}
