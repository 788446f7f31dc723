package usage

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/tokens"
)

// Equivalent mutants gremlins leaves alive in this package:
//   - decode.go, addText: "len(raw) <= 2" as "< 2": a raw value of length
//     2 has no text between its quotes, and textCounter.add ignores empty
//     text.
//   - decode.go, bodyText: "i++" and "j++" as "--" (three for Responses,
//     one for Anthropic): the item and part indexes are only channel keys,
//     compared for equality; counting down keeps them distinct.
//   - decode.go, feedJSON: "end >= 0" as "end > 0" (both): jsonScan.scan
//     returns 0 only when called after the value ended, and feedJSON is
//     never called again once it has (it sets m.done); otherwise it returns
//     -1 or an index past a byte, at least 1.
//   - inflate.go, inflate: "n > 0" as "n >= 0": feeding an empty piece
//     changes no state and returns true (m.done is false there, since the
//     loop returns as soon as feed reports done).
//   - jsonscan.go, scan: "s.depth >= 2" as "> 2": at depth 2 a byte that is
//     not a quote or bracket does nothing on the general path either: ':'
//     and ',' act only at depth 1, and no value is awaiting capture below
//     depth 1.
//   - lex.go, text: "len(raw) < 2" as "<= 2": for a raw value of length 2
//     it returns nil instead of an empty slice, and every caller only uses
//     the bytes (a string conversion or a length).
//   - lex.go, parseIndex: "len(raw) > 0" as ">= 0" and as "<= 0": ok means
//     raw is a whole integer, so it is not empty, and a negative one is
//     clamped to 0 by parseDigits anyway.
//   - sse.go, finish: "len(s.line) > 0" as ">= 0": processing an empty line
//     is a dispatch, which finish does next when there is data, and which
//     dispatches nothing when there is none.
//   - sse.go, processLine: "c >= 0" as "c > 0": a line starting with ':' is
//     a comment and returned above, so the colon is never at index 0.
//   - text.go, flush: "cut > 0" as ">= 0": tokenizing no bytes counts 0
//     tokens and moves nothing.
//   - text.go, codecFor: "enc == tokenizer.Cl100kBase" negated: encodingFor
//     returns only the two encodings, so the slots merely swap, each still
//     built for and used by a single encoding.
//   - usage.go, sniff: "len(b)-i < 3" as "len(b)+i < 3" (ARITHMETIC_BASE
//     and INVERT_NEGATIVES): it breaks only where the original does, and
//     where only the original breaks the loop ends two lines below anyway,
//     as the BOM check needs 3 bytes.
//   - usage.go, sniff: "len(b)-i >= 3" as "len(b)+i >= 3" (both mutators):
//     with final=false it is reached only when len(b)-i >= 3 (the break
//     above); with final=true b is the kept head, which starts with its
//     first non-space byte, so i is 0.
//   - usage.go, sniff: "len(m.head) > 0" as ">= 0" where the format is
//     decided: head is nil whenever it is empty (TestSniffLetsGoOfHead),
//     so setting it to nil changes nothing.
//   - usage.go, finish: "m.format == fmtJSON" negated: the head kept until
//     the end is a prefix of a BOM or of an SSE field name, so the final
//     sniff decides SSE or rejects the body (JSON is decided by its first
//     byte, never there), and feedJSON(nil) on a rejected body does
//     nothing.

// TestProviderErrorLabel: a JSON error body's label is its error's "type",
// else its "code", as a string or a number written as the provider wrote
// it (any sign or digit may start it), and anything else — true, an
// object, null — is no label. The label is lower-cased, spaces become '_',
// other characters are dropped, and it is cut at exactly 64 bytes. With no
// label at all, a present error is "error".
func TestProviderErrorLabel(t *testing.T) {
	long := strings.Repeat("a", 63) + "bcd"
	tests := []struct{ body, want string }{
		{`{"error":{"type":"invalid_request_error","code":"x"}}`, "invalid_request_error"},
		{`{"error":{"code":"rate_limit_exceeded"}}`, "rate_limit_exceeded"},
		{`{"error":{"code":0}}`, "0"},
		{`{"error":{"code":9}}`, "9"},
		{`{"error":{"code":429}}`, "429"},
		{`{"error":{"type":-1}}`, "-1"},
		{`{"error":{"type":1.5e3}}`, "1.5e3"},
		{`{"error":{"type":true,"code":"overloaded"}}`, "overloaded"},
		{`{"error":{"type":{"a":1},"code":503}}`, "503"},
		{`{"error":{"type":null,"code":[1]}}`, "error"},
		{`{"error":{"type":false}}`, "error"},
		{`{"error":{"type":"Server Error"}}`, "server_error"},
		{`{"error":{"type":"` + long + `"}}`, long[:64]},
		{`{"error":{"type":"` + strings.Repeat("A!", 64) + `"}}`, strings.Repeat("a", 64)},
		{`{"error":{}}`, "error"},
		{`{"error":null}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.body[:min(len(tt.body), 40)], func(t *testing.T) {
			if got := read(chatJSONOpts, tt.body, true, 0).ProviderError; got != tt.want {
				t.Errorf("ProviderError %q, want %q", got, tt.want)
			}
		})
	}
}

// TestResponsesErrorEvent: a Responses stream's error event is labelled by
// its "error" object when it has one (type, else code) and by its own
// top-level "code" when it has none or a null one.
func TestResponsesErrorEvent(t *testing.T) {
	opts := Options{Endpoint: llmapi.Responses, Stream: true, ContentType: "text/event-stream", Model: "gpt-5"}
	tests := []struct{ data, want string }{
		{`{"type":"error","code":"rate_limit_exceeded","message":"slow down","param":null}`, "rate_limit_exceeded"},
		{`{"type":"error","error":{"type":"invalid_request_error","code":"x"},"code":"y"}`, "invalid_request_error"},
		{`{"type":"error","error":{"code":"server_error"}}`, "server_error"},
		{`{"type":"error","error":null,"code":"server_error"}`, "server_error"},
		{`{"type":"error","error":null}`, "error"},
		{`{"type":"error","code":500}`, "500"},
		{`{"type":"error"}`, "error"},
	}
	for _, tt := range tests {
		t.Run(tt.data, func(t *testing.T) {
			r := read(opts, "event: error\ndata: "+tt.data+"\n\n", true, 0)
			if r.ProviderError != tt.want || r.Events != 1 || r.Unparsed {
				t.Errorf("ProviderError %q, events %d, unparsed %v; want %q, 1, false", r.ProviderError, r.Events, r.Unparsed, tt.want)
			}
		})
	}
}

// TestJSONBodyBound: a JSON body of exactly MaxJSONBytes bytes is read
// whole (its text counted when it carries no usage); one byte more and it
// is too large: Err says so, and its text is not read. Bytes after the
// document's end do not count.
func TestJSONBodyBound(t *testing.T) {
	const text = `"Hello, world"`
	noUsage := `{"choices":[{"index":0,"message":{"content":` + text + `}}]}`
	withUsage := `{"usage":{"prompt_tokens":3,"completion_tokens":4}}`
	estimated := Result{Usage: Usage{tokens.Input: 9, tokens.Output: o200k(t, "Hello, world")}, Estimated: true, OutputEstimated: true,
		OutputTextRunes: 12}
	reported := Result{Usage: Usage{tokens.Input: 3, tokens.Output: 4}, Reported: true}
	tooLarge := Result{Usage: Usage{tokens.Input: 9}, Estimated: true, OutputEstimated: true, Unparsed: true, Err: CodeBodyTooLarge}
	tests := []struct {
		name string
		body string
		max  int
		cuts []int
		want Result
	}{
		{name: "exactly the bound", body: noUsage, max: len(noUsage), want: estimated},
		{name: "exactly the bound in pieces", body: noUsage, max: len(noUsage), cuts: []int{1, 20, len(noUsage) - 1}, want: estimated},
		{name: "exactly the bound then trailing bytes", body: noUsage + "\n\n  ", max: len(noUsage), want: estimated},
		{name: "one byte over", body: noUsage, max: len(noUsage) - 1, want: tooLarge},
		{name: "one byte over in pieces", body: noUsage, max: len(noUsage) - 1, cuts: []int{30, len(noUsage) - 1}, want: tooLarge},
		{name: "usage at exactly the bound", body: withUsage, max: len(withUsage), want: reported},
		{name: "usage one byte over", body: withUsage, max: len(withUsage) - 1,
			want: Result{Usage: Usage{tokens.Input: 3, tokens.Output: 4}, Reported: true, Err: CodeBodyTooLarge}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := chatJSONOpts
			opts.MaxJSONBytes = tt.max
			m := NewMeter(opts)
			prev := 0
			for _, c := range append(tt.cuts, len(tt.body)) {
				m.Write([]byte(tt.body[prev:c]))
				prev = c
			}
			if d := cmp.Diff(tt.want, m.Close(true, 9)); d != "" {
				t.Errorf("result (-want +got):\n%s", d)
			}
		})
	}
}

// TestAppendCapped: the JSON body buffer grows to at least 1 KiB, at least
// doubling, never beyond the limit, and not at all while what is appended
// fits: then it is appended in place.
func TestAppendCapped(t *testing.T) {
	tests := []struct {
		name            string
		len, cap, add   int
		limit           int
		wantCap         int
		wantSameBacking bool
	}{
		{name: "first piece", add: 10, limit: 1 << 20, wantCap: 1024},
		{name: "first piece at a small limit", add: 10, limit: 100, wantCap: 100},
		{name: "first piece fills the limit", add: 100, limit: 100, wantCap: 100},
		{name: "first large piece", add: 5000, limit: 1 << 20, wantCap: 5000},
		{name: "fits", len: 10, cap: 100, add: 50, limit: 1 << 20, wantCap: 100, wantSameBacking: true},
		{name: "fills it exactly", len: 10, cap: 100, add: 90, limit: 1 << 20, wantCap: 100, wantSameBacking: true},
		{name: "one byte more doubles", len: 10, cap: 1024, add: 1015, limit: 1 << 20, wantCap: 2048},
		{name: "doubling is capped at the limit", len: 1024, cap: 1024, add: 1, limit: 1500, wantCap: 1500},
		{name: "a large piece grows to what it needs", len: 1000, cap: 1024, add: 5000, limit: 1 << 20, wantCap: 6000},
		{name: "up to exactly the limit", len: 1000, cap: 1024, add: 500, limit: 1500, wantCap: 1500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b []byte
			if tt.cap > 0 {
				b = make([]byte, tt.len, tt.cap)
				for i := range b {
					b[i] = 'b'
				}
			}
			p := []byte(strings.Repeat("p", tt.add))
			got := appendCapped(b, p, tt.limit)
			if want := strings.Repeat("b", tt.len) + string(p); string(got) != want {
				t.Fatalf("content %d bytes, want %d", len(got), len(want))
			}
			same := cap(b) > 0 && &got[:1][0] == &b[:1][0]
			if cap(got) != tt.wantCap || same != tt.wantSameBacking {
				t.Errorf("cap %d, in place %v; want cap %d, in place %v", cap(got), same, tt.wantCap, tt.wantSameBacking)
			}
		})
	}
}
