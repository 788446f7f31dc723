package ssefilter

import (
	"fmt"
	"testing"
)

// benchStream is a 20-chunk chat stream with include_usage forced on:
// each chunk one event, as OpenAI flushes them, the usage chunk last
// before [DONE].
func benchStream() [][]byte {
	var chunks [][]byte
	for i := range 20 {
		chunks = append(chunks, fmt.Appendf(nil, `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1772656915,"model":"gpt-5-nano-2025-08-07","service_tier":"default","system_fingerprint":null,"choices":[{"index":0,"delta":{"content":" word%d"},"finish_reason":null}],"usage":null,"obfuscation":"Hxo8P"}`+"\n\n", i))
	}
	chunks = append(chunks, []byte(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1772656915,"model":"gpt-5-nano-2025-08-07","service_tier":"default","system_fingerprint":null,"choices":[],"usage":{"prompt_tokens":18,"completion_tokens":286,"total_tokens":304,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":192,"audio_tokens":0}},"obfuscation":"Od"}`+"\n\n"),
		[]byte("data: [DONE]\n\n"))
	return chunks
}

// BenchmarkStream filters one whole stream per iteration, one Filter per
// stream as extproc uses it.
func BenchmarkStream(b *testing.B) {
	chunks := benchStream()
	n := 0
	for _, c := range chunks {
		n += len(c)
	}
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		f := New(0)
		for i, c := range chunks {
			f.Write(c, i == len(chunks)-1)
		}
	}
}

// BenchmarkStreamSplit is the same stream cut every 7 bytes: most chunks
// end inside an event.
func BenchmarkStreamSplit(b *testing.B) {
	var whole []byte
	for _, c := range benchStream() {
		whole = append(whole, c...)
	}
	b.SetBytes(int64(len(whole)))
	var chunks [][]byte
	for len(whole) > 0 {
		n := min(7, len(whole))
		chunks = append(chunks, whole[:n])
		whole = whole[n:]
	}
	b.ReportAllocs()
	for b.Loop() {
		f := New(0)
		for i, c := range chunks {
			f.Write(c, i == len(chunks)-1)
		}
	}
}
