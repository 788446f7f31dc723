package usage

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/tokens"
)

var (
	chatJSONOpts   = Options{Endpoint: llmapi.ChatCompletions, ContentType: "application/json", Model: "gpt-4o"}
	chatStreamOpts = Options{Endpoint: llmapi.ChatCompletions, Stream: true, ContentType: "text/event-stream", Model: "gpt-4o"}
)

const chatBody = `{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"}}],"usage":{"prompt_tokens":8,"completion_tokens":3}}`

func gz(t testing.TB, s string) string {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// garbageCases are bodies a provider (or something in between) may send
// instead of what the endpoint returns. They also join the chunk-split
// property (see splitCases).
func garbageCases(t testing.TB) []struct {
	splitCase
	complete bool
	want     Result
} {
	htmlOpts := chatJSONOpts
	htmlOpts.ContentType = "text/html"
	gzOpts := chatJSONOpts
	gzOpts.ContentEncoding = "gzip"
	gzStream := chatStreamOpts
	gzStream.ContentEncoding = "gzip"
	small := chatJSONOpts
	small.MaxJSONBytes = 64
	smallStream := chatStreamOpts
	smallStream.MaxJSONBytes = 256
	huge := strings.Repeat("x", 1000)
	stream := "data: " + `{"choices":[{"index":0,"delta":{"content":"ok"}}]}` + "\n\n" +
		"data: " + `{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2}}` + "\n\n"
	// Three bytes that are no BOM, gzipped and flushed, then the stream
	// breaks off: the decoder's failure comes after the first bytes.
	var noBOM bytes.Buffer
	zw := gzip.NewWriter(&noBOM)
	if _, err := zw.Write([]byte("\xef\x00\x00")); err != nil || zw.Flush() != nil {
		t.Fatal("gzip")
	}
	fallback := Result{Usage: Usage{tokens.Input: 5}, Estimated: true, OutputEstimated: true}
	with := func(r Result, f func(*Result)) Result { f(&r); return r }
	return []struct {
		splitCase
		complete bool
		want     Result
	}{
		{splitCase{"html with 200", htmlOpts, "<!DOCTYPE html><html><body>502 Bad Gateway</body></html>"}, true,
			with(fallback, func(r *Result) { r.Unparsed, r.Err = true, CodeNotJSON })},
		{splitCase{"html for a stream", chatStreamOpts, "\n<html>oops</html>"}, true,
			with(fallback, func(r *Result) { r.Unparsed, r.Err = true, CodeNotSSE })},
		{splitCase{"plain text", chatJSONOpts, "upstream connect error or disconnect/reset before headers"}, true,
			with(fallback, func(r *Result) { r.Unparsed, r.Err = true, CodeNotJSON })},
		{splitCase{"binary", chatJSONOpts, "\x00\x01\x02\xff"}, true,
			with(fallback, func(r *Result) { r.Unparsed, r.Err = true, CodeNotJSON })},
		{splitCase{"empty", chatJSONOpts, ""}, true,
			with(fallback, func(r *Result) { r.Unparsed, r.Err = true, CodeEmptyBody })},
		{splitCase{"whitespace", chatStreamOpts, " \r\n\r\n\t"}, true,
			with(fallback, func(r *Result) { r.Unparsed, r.Err = true, CodeEmptyBody })},
		{splitCase{"prefix of a field name only", chatStreamOpts, "dat"}, false,
			with(fallback, func(r *Result) { r.Unparsed, r.Err = true, CodeNotSSE })},
		{splitCase{"a field name alone is an event", chatStreamOpts, "data"}, true,
			with(fallback, func(r *Result) { r.Unparsed, r.Events = true, 1 })},
		{splitCase{"BOM then JSON", chatJSONOpts, "\ufeff" + chatBody}, true,
			Result{Usage: Usage{tokens.Input: 8, tokens.Output: 3}, Reported: true}},
		{splitCase{"BOM then SSE", chatStreamOpts, "\ufeff" + stream}, true,
			Result{Usage: Usage{tokens.Input: 4, tokens.Output: 2}, Reported: true, Events: 2, OutputTextRunes: 2}},
		{splitCase{"SSE garbage lines", chatStreamOpts, "data: hello\n\nfoo bar\n\n: x\ndata: {not json\n\ndata: [1,2]\n\n"}, true,
			with(fallback, func(r *Result) { r.Unparsed, r.Events = true, 3 })},
		{splitCase{"SSE garbage then usage", chatStreamOpts, "data: hello\n\nrandom words\n" + stream}, true,
			Result{Usage: Usage{tokens.Input: 4, tokens.Output: 2}, Reported: true, Events: 3, OutputTextRunes: 2}},
		{splitCase{"truncated JSON", chatJSONOpts, chatBody[:60]}, false,
			with(fallback, func(r *Result) { r.Unparsed, r.Err = true, CodeTruncatedJSON })},
		{splitCase{"truncated JSON after usage", chatJSONOpts, `{"usage":{"prompt_tokens":8,"completion_tokens":3},"choices":[{"mess`}, false,
			Result{Usage: Usage{tokens.Input: 8, tokens.Output: 3}, Reported: true, Err: CodeTruncatedJSON}},
		{splitCase{"bad JSON", chatJSONOpts, `{"choices": [}, "usage": 7}`}, true,
			with(fallback, func(r *Result) { r.Unparsed, r.Err = true, CodeBadJSON })},
		{splitCase{"JSON array", chatJSONOpts, `[{"usage":{"prompt_tokens":1}}]`}, true,
			with(fallback, func(r *Result) { r.Unparsed, r.Err = true, CodeBadJSON })},
		{splitCase{"JSON then garbage", chatJSONOpts, chatBody + "<html>"}, true,
			Result{Usage: Usage{tokens.Input: 8, tokens.Output: 3}, Reported: true}},
		{splitCase{"invalid UTF-8 in JSON text", chatJSONOpts, `{"choices":[{"message":{"content":"a` + "\xff\xfe" + `b"}}]}`}, true,
			// "a\ufffd\ufffdb": encoding/json replaces each bad byte.
			with(fallback, func(r *Result) { r.Usage[tokens.Output], r.OutputTextRunes = 3, 4 })},
		{splitCase{"invalid UTF-8 in SSE text", chatStreamOpts, "data: {\"choices\":[{\"delta\":{\"content\":\"\xc3\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"\xa9 ok\"}}]}\n\n"}, false,
			// A rune split across events is two U+FFFD: "\ufffd", "\ufffd ok".
			with(fallback, func(r *Result) { r.Usage[tokens.Output], r.OutputTextRunes, r.Events = 2, 5, 2 })},
		{splitCase{"JSON over MaxJSONBytes with usage", small, `{"data":"` + huge + `","usage":{"prompt_tokens":8}}`}, true,
			Result{Usage: Usage{tokens.Input: 8}, Reported: true, Estimated: true, OutputEstimated: true, Err: CodeBodyTooLarge}},
		{splitCase{"JSON over MaxJSONBytes without usage", small, `{"choices":[{"message":{"content":"` + huge + `"}}]}`}, true,
			with(fallback, func(r *Result) { r.Unparsed, r.Err = true, CodeBodyTooLarge })},
		{splitCase{"huge event", smallStream, stream[:strings.Index(stream, "data: {\"choices\":[]")] +
			"data: {\"choices\":[{\"delta\":{\"content\":\"" + huge + "\"}}]}\n\n" + stream}, true,
			Result{Usage: Usage{tokens.Input: 5, tokens.Output: 1}, Estimated: true, OutputEstimated: true, Events: 1, OutputTextRunes: 2, Err: CodeEventTooLarge}},
		{splitCase{"unsupported encoding", Options{Endpoint: llmapi.ChatCompletions, ContentEncoding: "br"}, chatBody}, true,
			with(fallback, func(r *Result) { r.Unparsed, r.Err = true, CodeUnsupportedEncoding })},
		{splitCase{"gzip declared, plain sent", gzOpts, chatBody}, true,
			Result{Usage: Usage{tokens.Input: 8, tokens.Output: 3}, Reported: true}},
		{splitCase{"gzip", gzOpts, gz(t, chatBody)}, true,
			Result{Usage: Usage{tokens.Input: 8, tokens.Output: 3}, Reported: true}},
		{splitCase{"gzip truncated", gzOpts, gz(t, chatBody)[:40]}, true,
			with(fallback, func(r *Result) { r.Unparsed, r.Err = true, "gzip: truncated" })},
		{splitCase{"gzip stream cut", gzStream, gz(t, stream)[:len(gz(t, stream))-12]}, false,
			Result{Usage: Usage{tokens.Input: 4, tokens.Output: 2}, Reported: true, Events: 2, OutputTextRunes: 2}},
		{splitCase{"gzip stream truncated", gzStream, gz(t, stream)[:len(gz(t, stream))-4]}, true,
			Result{Usage: Usage{tokens.Input: 4, tokens.Output: 2}, Reported: true, Events: 2, OutputTextRunes: 2, Err: "gzip: truncated"}},
		{splitCase{"gzip checksum after the JSON ends is not checked", gzOpts, gz(t, chatBody)[:len(gz(t, chatBody))-8] + "\x00\x00\x00\x00" + gz(t, chatBody)[len(gz(t, chatBody))-4:]}, true,
			Result{Usage: Usage{tokens.Input: 8, tokens.Output: 3}, Reported: true}},
		{splitCase{"gzip stream checksum", gzStream, gz(t, stream)[:len(gz(t, stream))-8] + "\x00\x00\x00\x00" + gz(t, stream)[len(gz(t, stream))-4:]}, true,
			Result{Usage: Usage{tokens.Input: 4, tokens.Output: 2}, Reported: true, Events: 2, OutputTextRunes: 2, Err: "gzip: checksum"}},
		{splitCase{"gzip rejected by its first bytes before the stream breaks", gzOpts, noBOM.String()}, true,
			with(fallback, func(r *Result) { r.Unparsed, r.Err = true, CodeNotJSON })},
		{splitCase{"gzip corrupt", gzOpts, "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + "\xff\xff\xff\xff\xff\xff"}, true,
			with(fallback, func(r *Result) { r.Unparsed, r.Err = true, "gzip: corrupt" })},
		{splitCase{"gzip bad header", gzOpts, "\x1f\x8b\x07\x00\x00\x00\x00\x00\x00\xff" + "xyz"}, true,
			with(fallback, func(r *Result) { r.Unparsed, r.Err = true, "gzip: bad_header" })},
		{splitCase{"deflate garbage", Options{Endpoint: llmapi.ChatCompletions, ContentEncoding: "deflate"}, "\xff\xff\xff\xff"}, true,
			with(fallback, func(r *Result) { r.Unparsed, r.Err = true, "deflate: corrupt" })},
	}
}

func TestGarbage(t *testing.T) {
	for _, tt := range garbageCases(t) {
		t.Run(tt.name, func(t *testing.T) {
			got := read(tt.opts, tt.body, tt.complete, 5)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("result (-want +got):\n%s", d)
			}
			for i := 1; i < len(tt.body); i++ {
				m := NewMeter(tt.opts)
				m.Write([]byte(tt.body[:i]))
				m.Write([]byte(tt.body[i:]))
				if split := m.Close(tt.complete, 5); !cmp.Equal(got, split) {
					t.Fatalf("split at %d (-whole +split):\n%s", i, cmp.Diff(got, split))
				}
			}
		})
	}
}

func TestCloseTwiceAndWriteAfterClose(t *testing.T) {
	for _, enc := range []string{"", "gzip"} {
		opts := chatJSONOpts
		opts.ContentEncoding = enc
		body := chatBody
		if enc == "gzip" {
			body = gz(t, chatBody)
		}
		m := NewMeter(opts)
		m.Write([]byte(body))
		first := m.Close(true, 1)
		m.Write([]byte("garbage"))
		if second := m.Close(false, 2); !cmp.Equal(first, second) {
			t.Errorf("%q: second Close (-first +second):\n%s", enc, cmp.Diff(first, second))
		}
	}
}

// TestWriteDoesNotRetain: the caller may reuse its buffer as soon as Write
// returns (Envoy's chunk buffers are recycled).
func TestWriteDoesNotRetain(t *testing.T) {
	body := crlf(anthropicStream)
	for _, enc := range []string{"", "gzip"} {
		opts := Options{Endpoint: llmapi.Messages, Stream: true, ContentEncoding: enc}
		raw := body
		if enc == "gzip" {
			raw = gz(t, body)
		}
		want := read(opts, raw, true, 0)
		m := NewMeter(opts)
		buf := make([]byte, 7)
		for i := 0; i < len(raw); i += len(buf) {
			n := copy(buf, raw[i:])
			m.Write(buf[:n])
			for j := range buf {
				buf[j] = '#'
			}
		}
		if got := m.Close(true, 0); !cmp.Equal(want, got) {
			t.Errorf("%q: reused buffer changed the result (-want +got):\n%s", enc, cmp.Diff(want, got))
		}
	}
}

// TestStreamMemoryBounded: a long stream without usage (the tokenizer
// fallback) and a long stream with it hold bounded buffers however long
// they run.
func TestStreamMemoryBounded(t *testing.T) {
	ev := []byte("data: " + `{"choices":[{"index":0,"delta":{"content":"lorem ipsum dolor sit amet, "}}]}` + "\n\n")
	m := NewMeter(chatStreamOpts)
	const n = 20000
	for range n {
		m.Write(ev[:20])
		m.Write(ev[20:])
		if m.text.pending > textBudget+64 || cap(m.sse.line) > 1<<10 || cap(m.sse.data) > 1<<10 {
			t.Fatalf("holding text %d, line %d, data %d bytes", m.text.pending, cap(m.sse.line), cap(m.sse.data))
		}
	}
	r := m.Close(false, 0)
	if r.Reported || !r.Estimated || r.Events != n || r.OutputTextRunes != n*28 {
		t.Fatalf("result %+v", r)
	}
	// "lorem ipsum dolor sit amet," is 6 tokens, then " lorem…" repeats:
	// the count is exact despite the incremental tokenizing.
	want := o200k(t, strings.Repeat("lorem ipsum dolor sit amet, ", n))
	if r.Usage[tokens.Output] != want {
		t.Errorf("OutputTokens %d, whole-text count %d", r.Usage[tokens.Output], want)
	}
}
