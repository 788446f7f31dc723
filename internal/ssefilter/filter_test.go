package ssefilter

import (
	"bytes"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/fixtures"
	"github.com/sluicegw/sluice/internal/testenv"
)

// filterChunks feeds chunks to a new Filter (bound max) and returns the
// concatenated output and the counts.
func filterChunks(t testing.TB, max int, chunks [][]byte) ([]byte, Counts) {
	t.Helper()
	f := New(max)
	var out []byte
	var counts Counts
	for i, c := range chunks {
		in := bytes.Clone(c)
		got, changed := f.Write(c, i == len(chunks)-1)
		if !bytes.Equal(c, in) {
			t.Fatalf("Write modified its input chunk %d", i)
		}
		if !changed && !sameSlice(got, c) {
			t.Fatalf("chunk %d: unchanged, but the result is not the chunk itself", i)
		}
		if changed && bytes.Equal(got, c) && len(c) > 0 {
			t.Fatalf("chunk %d: reported changed, but the output is the input %q", i, c)
		}
		out = append(out, got...)
		n := f.TakeCounts()
		counts.Removed += n.Removed
		counts.Oversized += n.Oversized
	}
	if f.Held() != 0 {
		t.Fatalf("%d bytes held after the end of the stream", f.Held())
	}
	return out, counts
}

func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// splitAt cuts s at the given offsets (ascending).
func splitAt(s []byte, cuts ...int) [][]byte {
	var out [][]byte
	prev := 0
	for _, c := range cuts {
		out = append(out, s[prev:c])
		prev = c
	}
	return append(out, s[prev:])
}

func bytewise(s []byte) [][]byte {
	out := make([][]byte, 0, len(s)+1)
	for i := range s {
		out = append(out, s[i:i+1])
	}
	return append(out, nil) // Envoy's last message can be empty
}

func randomChunks(s []byte, rng *rand.Rand) [][]byte {
	var out [][]byte
	for len(s) > 0 {
		n := 1 + rng.IntN(min(len(s), 1+rng.IntN(64)))
		if rng.IntN(8) == 0 {
			n = 1 + rng.IntN(len(s))
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

// checkEveryChunking checks that in is filtered to want, with removed
// events removed, whole, at every split into two chunks, in one-byte
// chunks, and in random chunkings.
func checkEveryChunking(t *testing.T, in, want string, removed int) {
	t.Helper()
	b := []byte(in)
	check := func(how string, chunks [][]byte) {
		t.Helper()
		got, c := filterChunks(t, DefaultMaxEvent, chunks)
		if string(got) != want || c.Removed != removed {
			t.Fatalf("%s: removed %d, got\n%q\nwant (removing %d)\n%q", how, c.Removed, got, removed, want)
		}
	}
	check("whole", [][]byte{b})
	// Every split into two, lighter than check (a stream of n bytes has
	// n+1 of them).
	f := New(DefaultMaxEvent)
	var got []byte
	for i := 0; i <= len(b); i++ {
		got = got[:0]
		for j, c := range [][]byte{b[:i], b[i:]} {
			out, _ := f.Write(c, j == 1)
			got = append(got, out...)
		}
		if n := f.TakeCounts().Removed; string(got) != want || n != removed {
			t.Fatalf("split at %d: removed %d, got\n%q\nwant (removing %d)\n%q", i, n, got, removed, want)
		}
	}
	check("one byte at a time", bytewise(b))
	rng := rand.New(rand.NewPCG(1, uint64(len(b))))
	for range 50 {
		check("random", randomChunks(b, rng))
	}
}

// TestShapes: which events are removed, in hand-written streams, at
// every chunking.
func TestShapes(t *testing.T) {
	const (
		content = `data: {"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}` + "\n\n"
		usage   = `data: {"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}` + "\n\n"
		done    = "data: [DONE]\n\n"
	)
	for _, tc := range []struct {
		name, in, want string
		removed        int
	}{
		{"usage chunk before [DONE]", content + usage + done, content + done, 1},
		{"usage:null on content chunks is kept", content, content, 0},
		{"CRLF lines", crlf(content + usage + done), crlf(content + done), 1},
		{"CR lines", strings.ReplaceAll(content+usage+done, "\n", "\r"), strings.ReplaceAll(content+done, "\n", "\r"), 1},
		{"mixed terminators", "data: {\"choices\":[],\"usage\":{}}\r\r\n" + done, done, 1},
		{"usage chunk first and last", usage + content + usage, content, 2},
		{"members in any order, any whitespace",
			"data:{ \"usage\" : { \"total_tokens\" : 4 } ,\t\"choices\" : [ \t] , \"id\":\"x\" }\n\n" + done, done, 1},
		{"no space after the colon", `data:{"choices":[],"usage":{"a":[1,{"b":"}"}]}}` + "\n\n", "", 1},
		{"data split over lines", "data: {\"choices\":[],\ndata: \"usage\":{\"t\":1}}\n\n" + done, done, 1},
		{"escaped key", `data: {"\u0063hoices":[],"usag\u0065":{}}` + "\n\n", "", 1},
		{"nested choices do not count", `data: {"x":{"choices":[{}]},"choices":[],"usage":{"choices":[1]}}` + "\n\n", "", 1},
		{"strings with braces and escapes", `data: {"id":"{\"[\\","choices":[],"usage":{"s":"]}"}}` + "\n\n", "", 1},

		{"choices not empty", `data: {"choices":[{}],"usage":{"t":1}}` + "\n\n", "", 0},
		{"usage null", `data: {"choices":[],"usage":null}` + "\n\n", "", 0},
		{"usage not an object", `data: {"choices":[],"usage":4}` + "\n\n", "", 0},
		{"no usage", `data: {"choices":[]}` + "\n\n", "", 0},
		{"no choices", `data: {"usage":{"t":1}}` + "\n\n", "", 0},
		{"choices null", `data: {"choices":null,"usage":{}}` + "\n\n", "", 0},
		{"duplicate choices, one not empty", `data: {"choices":[],"usage":{},"choices":[1]}` + "\n\n", "", 0},
		{"duplicate usage, one null", `data: {"usage":{},"choices":[],"usage":null}` + "\n\n", "", 0},
		{"case-folded key", `data: {"choices":[],"usage":{},"Choices":[{}]}` + "\n\n", "", 0},
		{"non-ASCII key", `data: {"choices":[],"usage":{},"choiceſ":[{}]}` + "\n\n", "", 0},
		{"escaped non-ASCII key", `data: {"choices":[],"usage":{},"choice\u017f":[{}]}` + "\n\n", "", 0},
		{"invalid JSON", `data: {"choices":[],"usage":{"t":tru}}` + "\n\n", "", 0},
		{"trailing garbage", `data: {"choices":[],"usage":{}} x` + "\n\n", "", 0},
		{"two objects", "data: {\"choices\":[],\"usage\":{}}\ndata: {}\n\n", "", 0},
		{"an event line", "event: message\ndata: {\"choices\":[],\"usage\":{}}\n\n", "", 0},
		{"an id line", "data: {\"choices\":[],\"usage\":{}}\nid: 7\n\n", "", 0},
		{"a comment line", ": hi\ndata: {\"choices\":[],\"usage\":{}}\n\n", "", 0},
		{"a field named data-ish", "datax: {\"choices\":[],\"usage\":{}}\n\n", "", 0},
		{"an error event", `data: {"error":{"message":"overloaded","type":"server_error"}}` + "\n\n", "", 0},
		{"keepalive comments and blank lines", ": keepalive\n\n\n\r\n" + usage + ": ping\n\n", ": keepalive\n\n\n\r\n: ping\n\n", 1},
		{"[DONE] only", done, done, 0},
		{"unterminated usage chunk at the end is sent", content + strings.TrimSuffix(usage, "\n"), content + strings.TrimSuffix(usage, "\n"), 0},
		{"unterminated, no newline", content + strings.TrimSuffix(usage, "\n\n"), content + strings.TrimSuffix(usage, "\n\n"), 0},
		{"not SSE at all", `{"choices":[],"usage":{}}`, `{"choices":[],"usage":{}}`, 0},
		{"empty", "", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.want
			if want == "" && tc.removed == 0 {
				want = tc.in
			}
			checkEveryChunking(t, tc.in, want, tc.removed)
			if ref, n := reference([]byte(tc.in), DefaultMaxEvent); string(ref) != want || n != tc.removed {
				t.Errorf("the reference disagrees: removed %d, %q", n, ref)
			}
		})
	}
}

func crlf(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }

// recordedStream reads the response body of a recorded cassette in the
// fixtures folder (dir relative to ../shared/fixtures/openai).
func recordedStream(t *testing.T, name string) string {
	t.Helper()
	return fixtures.One(t, filepath.Join(fixtures.OpenAI(t), name)).Response.Body
}

// TestRecordedStreams: the recorded OpenAI streams with a usage chunk
// lose exactly that event — its data line and its blank line, nothing
// before or after — at every split into two chunks, in one-byte chunks
// and in random chunkings, with LF and with CRLF line ends.
func TestRecordedStreams(t *testing.T) {
	for _, name := range []string{"completion-streaming-usage.yaml", "../thirdparty/openai/agw-chat-stream.yaml"} {
		t.Run(filepath.Base(name), func(t *testing.T) {
			body := recordedStream(t, name)
			// The expectation, by hand: the one line holding "choices":[]
			// and its blank line.
			i := strings.Index(body, `"choices":[]`)
			start := strings.LastIndex(body[:i], "\n\n") + 2
			end := i + strings.Index(body[i:], "\n\n") + 2
			if strings.Count(body, `"choices":[]`) != 1 || !strings.HasPrefix(body[end:], "data: [DONE]") {
				t.Fatalf("fixture shape changed: usage chunk at %d-%d", start, end)
			}
			want := body[:start] + body[end:]
			if strings.Contains(want, `"choices":[]`) || len(want) >= len(body) || strings.Count(want, "\n\n") != strings.Count(body, "\n\n")-1 {
				t.Fatal("bad expectation")
			}
			t.Run("LF", func(t *testing.T) { checkEveryChunking(t, body, want, 1) })
			if len(body) < 8<<10 {
				t.Run("CRLF", func(t *testing.T) { checkEveryChunking(t, crlf(body), crlf(want), 1) })
			}
		})
	}
}

// TestWithoutUsageChunk: recorded streams without a usage chunk (the
// client asked for none; OpenAI sent none) pass byte for byte, whole or
// in any chunks, and a whole stream is returned unchanged.
func TestWithoutUsageChunk(t *testing.T) {
	for _, name := range []string{"chat-streaming.yaml", "completion-streaming.yaml"} {
		body := []byte(recordedStream(t, name))
		if out, changed := New(0).Write(body, true); changed || !sameSlice(out, body) {
			t.Errorf("%s: the whole stream was changed", name)
		}
		rng := rand.New(rand.NewPCG(2, 3))
		for range 20 {
			if got, c := filterChunks(t, 0, randomChunks(body, rng)); !bytes.Equal(got, body) || c.Removed != 0 {
				t.Fatalf("%s changed (%+v)", name, c)
			}
		}
	}
}

// TestHoldsOnlyACandidateTail: a chunk ending inside an event is held
// back only while that event can still be a usage chunk, and what is
// held is that event's start, exactly.
func TestHoldsOnlyACandidateTail(t *testing.T) {
	const content = `data: {"id":"c","choices":[{"delta":{"content":"hi"}}]}` + "\n\n"
	for _, tc := range []struct {
		name, first string
		held        int
	}{
		{"an event decided by its choices passes at once", content + `data: {"id":"d","choices":[{"de`, 0},
		{"[DONE] passes at once", content + "data: [DO", 0},
		{"a comment passes at once", content + ": keep", 0},
		{"the start of a possible usage chunk is held", content + `data: {"id":"d","choices":[],"usa`, len(`data: {"id":"d","choices":[],"usa`)},
		{"before its choices, an event may be one", content + `data: {"id":"d"`, len(`data: {"id":"d"`)},
		{"a half line ending is held", content + "da", 2},
		{"a complete event is never held", content, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New(0)
			in := []byte(tc.first)
			got, changed := f.Write(in, false)
			if f.Held() != tc.held || string(got) != tc.first[:len(tc.first)-tc.held] || changed != (tc.held > 0) {
				t.Errorf("held %d (want %d), sent %q, changed %v", f.Held(), tc.held, got, changed)
			}
			if tc.held > 0 && !sameSlice(got, in[:len(got)]) && len(got) > 0 {
				t.Error("the part sent is not a subslice of the chunk")
			}
			// The stream ends in this chunk: the held tail goes out as is.
			rest, _ := f.Write([]byte{}, true)
			if string(rest) != tc.first[len(tc.first)-tc.held:] || f.Held() != 0 {
				t.Errorf("at end of stream sent %q, held %d", rest, f.Held())
			}
		})
	}
}

// TestOversized: an event longer than the bound is passed unmodified,
// whether or not it arrives in one chunk, and counted; the held bytes
// never exceed the bound.
func TestOversized(t *testing.T) {
	const limit = 64
	small := `data: {"choices":[],"usage":{"t":1}}` + "\n\n"
	big := `data: {"choices":[],"usage":{"t":"` + strings.Repeat("x", limit) + `"}}` + "\n\n"
	in := []byte(small + big + small)
	want := big
	for _, chunks := range [][][]byte{{in}, bytewise(in), splitAt(in, len(small)+10), splitAt(in, len(small)+limit-5, len(small)+limit+2)} {
		f := New(limit)
		var out []byte
		maxHeld := 0
		var c Counts
		for i, ch := range chunks {
			got, _ := f.Write(ch, i == len(chunks)-1)
			out = append(out, got...)
			maxHeld = max(maxHeld, f.Held())
			n := f.TakeCounts()
			c.Removed += n.Removed
			c.Oversized += n.Oversized
		}
		if string(out) != want || c.Removed != 2 || c.Oversized != 1 || maxHeld > limit {
			t.Errorf("%d chunks: got %q, counts %+v, held up to %d; want %q, 2 removed, 1 oversized, held ≤ %d", len(chunks), out, c, maxHeld, want, limit)
		}
		if ref, _ := reference(in, limit); string(ref) != want {
			t.Errorf("the reference disagrees: %q", ref)
		}
	}
	// An event of exactly the bound (counted up to its blank line's first
	// byte: here, all of it) is removed; one byte more is not.
	shape := `data: {"choices":[],"usage":{"t":""}}` + "\n\n"
	exact := strings.Replace(shape, `""`, `"`+strings.Repeat("y", limit-len(shape))+`"`, 1)
	if len(exact) != limit {
		t.Fatalf("exact is %d bytes", len(exact))
	}
	if out, c := filterChunks(t, limit, bytewise([]byte(exact))); len(out) != 0 || c.Removed != 1 {
		t.Errorf("an event of exactly %d bytes: got %q, %+v", limit, out, c)
	}
	// The bound is crossed by the '\n' of a "\r\n" at a chunk's end.
	crlfLine := `data: {"choices":[],"usage":{"t":"` + strings.Repeat("z", limit-len(`data: {"choices":[],"usage":{"t":""}}`)-1) + `"}}` + "\r\n"
	if len(crlfLine) != limit+1 {
		t.Fatalf("crlfLine is %d bytes", len(crlfLine))
	}
	f := New(limit)
	out, _ := f.Write([]byte(crlfLine[:limit]), false)
	more, _ := f.Write([]byte("\n"), false)
	if f.Held() != 0 || string(out)+string(more) != crlfLine {
		t.Errorf("held %d after %d bytes; sent %q", f.Held(), limit+1, string(out)+string(more))
	}
	over := strings.Replace(exact, "y", "yy", 1)
	if out, c := filterChunks(t, limit, bytewise([]byte(over))); string(out) != over || c.Oversized != 1 {
		t.Errorf("an event of %d bytes: got %q, %+v", limit+1, out, c)
	}
}

// TestNoAllocationWhenNothingIsHeld: chunks that pass unchanged, whole
// events or not, cost no allocation.
func TestNoAllocationWhenNothingIsHeld(t *testing.T) {
	chunk := []byte(`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}` + "\n\n")
	split := chunk[:len(chunk)-30] // ends inside the event, after its choices
	f := New(0)
	allocs := testing.AllocsPerRun(100, func() {
		if _, changed := f.Write(chunk, false); changed {
			t.Fatal("changed")
		}
		if _, changed := f.Write(split, false); changed {
			t.Fatal("changed")
		}
		if _, changed := f.Write(chunk[len(split):], false); changed {
			t.Fatal("changed")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per run of unchanged chunks, want 0", allocs)
	}
	// A usage chunk alone, or at the end of its chunk, is cut without
	// allocating (the result is a subslice, or empty).
	usage := []byte(`data: {"choices":[],"usage":{"t":1}}` + "\n\n")
	both := append(bytes.Clone(chunk), usage...)
	var wrong bool
	allocs = testing.AllocsPerRun(100, func() {
		out, _ := f.Write(usage, false)
		wrong = wrong || len(out) != 0
		out, _ = f.Write(both, false)
		wrong = wrong || !bytes.Equal(out, chunk)
	})
	if wrong {
		t.Fatal("the usage chunk was not cut exactly")
	}
	// json.Valid's scanner comes from a sync.Pool, which the race
	// detector empties at random; the filter itself allocates nothing.
	if allocs != 0 && !testenv.Race {
		t.Errorf("%v allocations per run removing a usage chunk, want 0", allocs)
	}
}

// TestOutputOwnsItsBytes: a result that carries held bytes is a new
// slice the filter never writes again.
func TestOutputOwnsItsBytes(t *testing.T) {
	f := New(0)
	a, _ := f.Write([]byte(`data: {"id":1`), false)
	b, _ := f.Write([]byte(`,"choices":[{}]}`+"\n\n"), false)
	snapshot := string(b)
	f.Write([]byte(`data: {"id":2`), false)
	f.Write([]byte(`,"choices":[{"x":1}]}`+"\n\n"), false)
	if string(a) != "" || snapshot != `data: {"id":1,"choices":[{}]}`+"\n\n" || string(b) != snapshot {
		t.Errorf("outputs %q then %q (was %q)", a, b, snapshot)
	}
}

// TestRandomStreams: streams assembled at random from the pieces real
// and hostile providers send — content, usage and look-alike events,
// comments, blank lines, event and id lines, every line terminator,
// multi-line data, stray bytes, a cut end — filtered in random chunks,
// equal the reference at every bound.
func TestRandomStreams(t *testing.T) {
	pieces := []string{
		`{"id":"c","choices":[{"index":0,"delta":{"content":"caf\u00e9 ’"}}],"usage":null}`,
		`{"id":"c","choices":[],"usage":{"prompt_tokens":3,"total_tokens":4}}`,
		`{"usage" : {"t":[1,{"a":"}]"}]} , "choices":[ ],"x":"\"{"}`,
		`{"choices":[],"usage":null}`,
		`{"choices":[{}],"usage":{}}`,
		`{"\u0075sage":{},"choices":[]}`,
		`{"choices":[],"usage":{},"USAGE":1}`,
		`{"choices":[],"usage":{"t":1}`,
		`{"error":{"message":"boom"}}`,
		`[DONE]`,
		`{}`,
		``,
	}
	terms := []string{"\n", "\r\n", "\r"}
	rng := rand.New(rand.NewPCG(7, 11))
	for n := range 3000 {
		var b strings.Builder
		for range 1 + rng.IntN(8) {
			term := terms[rng.IntN(len(terms))]
			switch rng.IntN(10) {
			case 0:
				b.WriteString(": keepalive" + term + term)
			case 1:
				b.WriteString(term) // a stray blank line
			case 2:
				b.WriteString("event: x" + term)
			case 3: // multi-line data, cut at a comma
				p := pieces[rng.IntN(len(pieces))]
				if i := strings.Index(p, ","); i > 0 {
					b.WriteString("data: " + p[:i+1] + term + "data:" + p[i+1:] + term + term)
				}
			case 4:
				b.WriteByte(byte(rng.IntN(256)))
			default:
				sp := []string{" ", "", "  "}[rng.IntN(3)]
				b.WriteString("data:" + sp + pieces[rng.IntN(len(pieces))] + term + term)
			}
		}
		in := []byte(b.String())
		if rng.IntN(4) == 0 {
			in = in[:rng.IntN(len(in)+1)]
		}
		limit := []int{DefaultMaxEvent, 40, 90}[n%3]
		want, removed := reference(in, limit)
		got, c := filterChunks(t, limit, randomChunks(in, rng))
		if !bytes.Equal(got, want) || c.Removed != removed {
			t.Fatalf("stream %q (bound %d): got %q, removed %d; want %q, %d", in, limit, got, c.Removed, want, removed)
		}
	}
}
