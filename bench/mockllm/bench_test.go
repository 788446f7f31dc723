package mockllm

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// benchPost sends body to url over keep-alive HTTP/1.1 b.N times and
// reads every reply to the end. Allocations include the client's.
func benchPost(b *testing.B, url, body string, header http.Header) {
	b.Helper()
	c := client(b, false)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		req.Header = header.Clone()
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// BenchmarkChatCompletion is one non-streaming chat request through real
// HTTP on loopback (client and server in this process).
func BenchmarkChatCompletion(b *testing.B) {
	_, base := start(b, Options{RecordLimit: 64})
	benchPost(b, base+"/v1/chat/completions",
		`{"model":"gpt-test","messages":[{"role":"user","content":"Say hi in one word 🙂"}]}`,
		http.Header{"Content-Type": {"application/json"}})
}

// BenchmarkStream20 is one streamed chat reply of 20 content chunks,
// each flushed, with a usage chunk.
func BenchmarkStream20(b *testing.B) {
	_, base := start(b, Options{RecordLimit: 64})
	benchPost(b, base+"/v1/chat/completions",
		`{"model":"gpt-test","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Say hi in one word 🙂"}]}`,
		http.Header{"Content-Type": {"application/json"}, "X-Mock-Chunks": {"20"}})
}
