package payload

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/llmapi"
)

// prose returns about n bytes of English-like text with the newlines,
// quotes and tabs a real prompt holds (each becomes a JSON escape), and,
// when wide, one CJK sentence in four.
func prose(n int, wide bool) string {
	words := strings.Fields(`the gateway reserves tokens before a request reaches the provider and
		settles them when the stream ends; budgets "never" overshoot because admission is atomic
		func main() { fmt.Println(x) } return err if err != nil config: value	tab`)
	var b strings.Builder
	seed := uint32(1)
	for b.Len() < n {
		seed = seed*1664525 + 1013904223
		if wide && seed>>30 == 0 {
			b.WriteString("网关在请求到达提供方之前预留令牌，并在流结束时结算。")
			continue
		}
		b.WriteString(words[seed>>8%uint32(len(words))])
		switch seed % 13 {
		case 0:
			b.WriteString(".\n")
		case 1:
			b.WriteString(", ")
		default:
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// chatBody is a chat/completions request whose user message holds about
// n bytes of prose.
func chatBody(tb testing.TB, n int, wide bool) []byte {
	body, err := json.Marshal(map[string]any{
		"model": "gpt-4o-mini",
		"messages": []map[string]string{
			{"role": "system", "content": "You are a helpful assistant."},
			{"role": "user", "content": prose(n, wide)},
		},
		"stream":         true,
		"stream_options": map[string]bool{"include_usage": false},
		"max_tokens":     1024,
		"temperature":    0.2,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

func benchParse(b *testing.B, body []byte) {
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := Parse(llmapi.ChatCompletions, body); err != nil {
			b.Fatal(err)
		}
	}
}

func benchFullDecode(b *testing.B, body []byte) {
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParse1MB(b *testing.B)           { benchParse(b, chatBody(b, 1<<20, false)) }
func BenchmarkParse1MBFullDecode(b *testing.B) { benchFullDecode(b, chatBody(b, 1<<20, false)) }
func BenchmarkParse1MBWide(b *testing.B)       { benchParse(b, chatBody(b, 1<<20, true)) }
func BenchmarkParse1KB(b *testing.B)           { benchParse(b, chatBody(b, 800, false)) }
func BenchmarkParse1KBFullDecode(b *testing.B) { benchFullDecode(b, chatBody(b, 800, false)) }

func BenchmarkApply1MB(b *testing.B) {
	body := chatBody(b, 1<<20, false)
	rw := Rewrite{Model: "gpt-4o-mini-2024-07-18", ForceIncludeUsage: true}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := Apply(body, rw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkApply1KB(b *testing.B) {
	body := chatBody(b, 800, false)
	rw := Rewrite{Model: "gpt-4o-mini-2024-07-18", ForceIncludeUsage: true}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := Apply(body, rw); err != nil {
			b.Fatal(err)
		}
	}
}
