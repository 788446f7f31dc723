package usage

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type sseEvent struct {
	Name, Data string
	Kept       bool
}

// recorder is an sseSink that records events and skips those named
// "skip".
type recorder struct{ events []sseEvent }

func (r *recorder) keep(name []byte) bool { return string(name) != "skip" }
func (r *recorder) event(name, data []byte, kept bool) {
	r.events = append(r.events, sseEvent{string(name), string(data), kept})
}

// parseSSE feeds in at the given cut offsets and finishes.
func parseSSE(in string, max int, cuts ...int) ([]sseEvent, string) {
	var r recorder
	s := sseParser{max: max}
	prev := 0
	for _, c := range append(cuts, len(in)) {
		if !s.feed([]byte(in[prev:c]), &r) {
			break
		}
		prev = c
	}
	s.finish(&r)
	return r.events, s.err
}

func TestSSEParser(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int
		want []sseEvent
		err  string
	}{
		{name: "one event", in: "data: a\n\n", want: []sseEvent{{"", "a", true}}},
		{name: "CRLF", in: "data:a\r\n\r\ndata:b\r\n\r\n", want: []sseEvent{{"", "a", true}, {"", "b", true}}},
		{name: "CR only", in: "data: a\r\rdata: b\r\r", want: []sseEvent{{"", "a", true}, {"", "b", true}}},
		{name: "mixed endings", in: "data: a\r\n\rdata: b\n\r\n", want: []sseEvent{{"", "a", true}, {"", "b", true}}},
		{name: "data lines join with LF", in: "data: a\ndata: b\ndata:\n\n", want: []sseEvent{{"", "a\nb\n", true}}},
		{name: "only one leading space is stripped", in: "data:  two\n\n", want: []sseEvent{{"", " two", true}}},
		{name: "field without colon", in: "data\n\n", want: []sseEvent{{"", "", true}}},
		{name: "comments and blank lines dispatch nothing", in: ": hi\n\n\n: there\ndata: x\n\n", want: []sseEvent{{"", "x", true}}},
		{name: "named event", in: "event: message_start\ndata: {}\n\n", want: []sseEvent{{"message_start", "{}", true}}},
		{name: "name after data still names it", in: "data: {}\nevent: late\n\n", want: []sseEvent{{"late", "{}", true}}},
		{name: "name resets after an event", in: "event: a\ndata: 1\n\ndata: 2\n\n", want: []sseEvent{{"a", "1", true}, {"", "2", true}}},
		{name: "name resets after an empty event", in: "event: a\n\ndata: 2\n\n", want: []sseEvent{{"", "2", true}}},
		{name: "id retry and unknown fields ignored", in: "id: 7\nretry: 10\nfoo: bar\nDATA: no\ndata : no\ndata: yes\n\n", want: []sseEvent{{"", "yes", true}}},
		{name: "skipped event keeps no data", in: "event: skip\ndata: secret\ndata: more\n\ndata: x\n\n", want: []sseEvent{{"skip", "", false}, {"", "x", true}}},
		{name: "unterminated last event is dispatched", in: "data: a\n\ndata: b", want: []sseEvent{{"", "a", true}, {"", "b", true}}},
		{name: "last event without blank line", in: "data: a\n", want: []sseEvent{{"", "a", true}}},
		{name: "trailing CR", in: "data: a\r", want: []sseEvent{{"", "a", true}}},
		{name: "event too large", in: "data: ok\n\ndata: 0123456789\n\ndata: after\n\n", max: 8,
			want: []sseEvent{{"", "ok", true}}, err: CodeEventTooLarge},
		{name: "event too large across lines", in: "data: 0123\ndata: 4567\n\n", max: 8, err: CodeEventTooLarge},
		{name: "exactly the bound", in: "data: 0123\ndata: 456\n\n", max: 8, want: []sseEvent{{"", "0123\n456", true}}},
		{name: "one line of exactly the bound", in: "data: 01234567\n\n", max: 8, want: []sseEvent{{"", "01234567", true}}},
		{name: "one line over the bound", in: "data: 012345678\n\n", max: 8, err: CodeEventTooLarge},
		{name: "large skipped event is fine", in: "event: skip\ndata: " + strings.Repeat("x", 100) + "\n\ndata: y\n\n", max: 8,
			want: []sseEvent{{"skip", "", false}, {"", "y", true}}},
		{name: "long comment is fine", in: ":" + strings.Repeat("c", 10000) + "\ndata: y\n\n", want: []sseEvent{{"", "y", true}}},
		{name: "long event name is nobody's", in: "event: " + strings.Repeat("n", 200) + "\ndata: y\n\n",
			want: []sseEvent{{"\x00", "y", true}}},
		{name: "event name of exactly the bound is kept", in: "event: " + strings.Repeat("n", maxEventName) + "\ndata: y\n\n",
			want: []sseEvent{{strings.Repeat("n", maxEventName), "y", true}}},
		{name: "event name one byte over is nobody's", in: "event: " + strings.Repeat("n", maxEventName+1) + "\ndata: y\n\n",
			want: []sseEvent{{"\x00", "y", true}}},
		{name: "event name without a space", in: "event:" + strings.Repeat("n", maxEventName) + "\ndata: y\n\n",
			want: []sseEvent{{strings.Repeat("n", maxEventName), "y", true}}},
		{name: "invalid UTF-8 passes through", in: "data: \xff\xfe\n\n", want: []sseEvent{{"", "\xff\xfe", true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			max := tt.max
			if max == 0 {
				max = 1 << 20
			}
			got, err := parseSSE(tt.in, max)
			if d := cmp.Diff(tt.want, got); d != "" || err != tt.err {
				t.Fatalf("whole: err %q want %q; events (-want +got):\n%s", err, tt.err, d)
			}
			for i := 1; i < len(tt.in); i++ {
				got, err := parseSSE(tt.in, max, i)
				if d := cmp.Diff(tt.want, got); d != "" || err != tt.err {
					t.Fatalf("split at %d: err %q want %q; events (-want +got):\n%s", i, err, tt.err, d)
				}
			}
			cuts := make([]int, 0, len(tt.in))
			for i := 1; i < len(tt.in); i++ {
				cuts = append(cuts, i)
			}
			got, err = parseSSE(tt.in, max, cuts...)
			if d := cmp.Diff(tt.want, got); d != "" || err != tt.err {
				t.Fatalf("1-byte chunks: err %q want %q; events (-want +got):\n%s", err, tt.err, d)
			}
		})
	}
}

// TestSSEParserBounded: a stream of any length leaves the parser holding
// no more than the current event, and lines that need not be read are not
// held at all.
func TestSSEParserBounded(t *testing.T) {
	var r recorder
	s := sseParser{max: 1 << 10}
	ev := []byte("data: " + strings.Repeat("x", 500) + "\n\n")
	for range 10000 {
		s.feed(ev[:100], &r)
		s.feed(ev[100:], &r)
	}
	if len(r.events) != 10000 || s.err != "" {
		t.Fatalf("%d events, err %q", len(r.events), s.err)
	}
	if cap(s.line) > 1<<10 || cap(s.data) > 1<<10 {
		t.Errorf("buffers grew: line %d, data %d", cap(s.line), cap(s.data))
	}
	// A 1 MiB comment, a 1 MiB skipped event, a 1 MiB line of an unknown
	// field and a 1 MiB event name, in 1 KiB chunks, are never buffered.
	for _, prefix := range []string{":", "event: skip\ndata: ", "unknown: ", "event: "} {
		s.feed([]byte(prefix), &r)
		chunk := []byte(strings.Repeat("y", 1<<10))
		for range 1 << 10 {
			s.feed(chunk, &r)
		}
		s.feed([]byte("\n\n"), &r)
		if cap(s.line) > 1<<10 || s.err != "" {
			t.Errorf("%q line: buffered %d bytes, err %q", prefix, cap(s.line), s.err)
		}
	}
	// A 1 MiB data line of a kept event, in 1 KiB chunks, stops the parser
	// before a second KiB of it is held.
	s = sseParser{max: 1 << 10}
	s.feed([]byte("data: "), &r)
	chunk := []byte(strings.Repeat("z", 1<<10))
	for range 1 << 10 {
		s.feed(chunk, &r)
	}
	if cap(s.line) > 3<<10 || s.err != CodeEventTooLarge {
		t.Errorf("kept data line: buffered %d bytes, err %q", cap(s.line), s.err)
	}
}

// TestSSEParserStopsEarly: an event too large is refused at the byte of
// its data line that proves it (the event's data so far, a separator if
// this is not its first line, and this line less the six bytes of
// "data: " exceed the bound), not at the end of the line. Fed a byte at a
// time, the parser stops (feed returns false) at exactly that byte.
func TestSSEParserStopsEarly(t *testing.T) {
	tests := []struct {
		name string
		in   string
		stop int // index of the byte whose feed returns false; -1: none
	}{
		{name: "first line", in: "data: 0123456789\n\n", stop: len("data: 012345678") - 1},
		// Six bytes are allowed for "data: " even when the space is
		// missing: one byte later than strictly needed, never too early.
		{name: "first line without a space", in: "data:0123456789\n\n", stop: len("data:0123456789") - 1},
		{name: "second line", in: "data: 0123\ndata: 456789\n\n", stop: len("data: 0123\ndata: 4567") - 1},
		{name: "first line of exactly the bound", in: "data: 01234567\n\n", stop: -1},
		{name: "second line to exactly the bound", in: "data: 0123\ndata: 456\n\n", stop: -1},
		{name: "skipped event", in: "event: skip\ndata: 0123456789\n\n", stop: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r recorder
			s := sseParser{max: 8}
			stop := -1
			for i := range len(tt.in) {
				if !s.feed([]byte(tt.in[i:i+1]), &r) {
					stop = i
					break
				}
			}
			if stop != tt.stop {
				t.Errorf("stopped at byte %d, want %d", stop, tt.stop)
			}
		})
	}
}

// TestSSEParserDataBufferReuse: the event data buffer is kept for the next
// event while its capacity is at most shrinkData, and let go above it, so
// that one huge event does not pin its memory for the rest of the stream.
func TestSSEParserDataBufferReuse(t *testing.T) {
	tests := []struct {
		name     string
		dataLen  int
		wantKept bool
	}{
		{name: "small", dataLen: 100, wantKept: true},
		{name: "exactly shrinkData", dataLen: shrinkData, wantKept: true},
		{name: "one byte more", dataLen: shrinkData + 1, wantKept: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r recorder
			s := sseParser{max: 1 << 20}
			// The line ends in this feed and the blank line in the next: in
			// between, the event's data is copied into the buffer.
			s.feed([]byte("data: "+strings.Repeat("d", tt.dataLen)+"\n"), &r)
			c := cap(s.data)
			if c < tt.dataLen || (c > shrinkData) == tt.wantKept {
				t.Fatalf("buffer capacity %d for %d bytes: the test does not exercise the bound", c, tt.dataLen)
			}
			s.feed([]byte("\n"), &r)
			if len(r.events) != 1 || len(r.events[0].Data) != tt.dataLen {
				t.Fatalf("%d events", len(r.events))
			}
			if kept := cap(s.data) == c; kept != tt.wantKept || !kept && cap(s.data) != 0 {
				t.Errorf("capacity %d after the event, %d before; want kept %v", cap(s.data), c, tt.wantKept)
			}
		})
	}
}
