package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	openaioption "github.com/openai/openai-go/v3/option"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/testenv"
	"github.com/sluicegw/sluice/internal/tokens"
)

// usageChunkWords is the reply size the usage-chunk tests ask the mock
// for: the exact output tokens of every request.
const usageChunkWords = 9

// sseData is the data of each event of an SSE body (LF or CRLF lines).
func sseData(body string) []string {
	var out []string
	for line := range strings.Lines(strings.ReplaceAll(body, "\r\n", "\n")) {
		if d, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// usageOnlyChunks counts the events of body whose choices are empty.
func usageOnlyChunks(t *testing.T, body string) int {
	t.Helper()
	n := 0
	for _, d := range sseData(body) {
		if d == "[DONE]" {
			continue
		}
		var c struct {
			Choices []json.RawMessage `json:"choices"`
		}
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("event %q: %v", d, err)
		}
		if len(c.Choices) == 0 {
			n++
		}
	}
	return n
}

// streamedText is the text the content chunks of an OpenAI stream carry.
func streamedText(t *testing.T, body string) string {
	t.Helper()
	var b strings.Builder
	for _, d := range sseData(body) {
		if d == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("event %q: %v", d, err)
		}
		for _, ch := range c.Choices {
			b.WriteString(ch.Text + ch.Delta.Content)
		}
	}
	return b.String()
}

// metricValue reads one series of a /metrics page, 0 when absent.
func metricValue(page, series string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(page)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// TestUsageChunkE2E: through Envoy (the emulator, and a real Envoy where
// one is installed), a streaming chat or legacy completions request
// without include_usage reaches the mock provider with include_usage
// forced on and accept-encoding: identity, and the client's body has no
// usage-only chunk — whatever the provider's line ends and however it
// splits its writes — while the spend record has the exact usage that
// chunk reported. A client that asked for usage gets the chunk; a
// provider that ignores the flag sends none and the stream passes as it
// came (metered by the tokenizer); a provider that gzips despite
// accept-encoding: identity has its stream passed unfiltered, metered
// exactly and counted.
func TestUsageChunkE2E(t *testing.T) {
	mock, mockAddr := mockProvider(t, mockllm.Options{APIKey: openaiKey, Words: usageChunkWords})
	s := startSluice(t, gatewayConfig)
	_, key := s.createKey(t, "apps")
	const prompt = "Tell me a short story"
	wantIn := mockllm.TextTokens(prompt)
	eachProxy(t, gatewayBootstrap(t, s.grpcAddr, mockAddr), func(t *testing.T, p proxy) {
		for _, ep := range []struct{ name, path, body string }{
			{"chat", "/v1/chat/completions", `{"model":"gpt-5-nano","stream":true,"messages":[{"role":"user","content":"` + prompt + `"}]%s}`},
			{"completions", "/v1/completions", `{"model":"gpt-5-nano","stream":true,"prompt":"` + prompt + `"%s}`},
		} {
			for _, tc := range []struct {
				name      string
				options   string // more request members
				headers   map[string]string
				forced    bool // Sluice forced include_usage (and identity)
				usage     int  // usage-only chunks the client gets
				estimated bool // the provider reported no usage
			}{
				{name: "no include_usage", forced: true},
				{name: "include_usage false", options: `,"stream_options":{"include_usage":false}`, forced: true},
				// The first byte and the events delayed, so that the pieces reach
				// ext_proc as chunks of their own rather than merged behind the
				// response headers.
				{name: "split every 7 bytes, CRLF lines", headers: map[string]string{"x-mock-split": "7", "x-mock-crlf": "1", "x-mock-first-byte": "20ms", "x-mock-interval": "2ms"}, forced: true},
				{name: "one-byte writes", headers: map[string]string{"x-mock-split": "1"}, forced: true},
				{name: "gzip only if asked: identity honoured", headers: map[string]string{"x-mock-gzip": "auto"}, forced: true},
				{name: "client asked for usage", options: `,"stream_options":{"include_usage":true}`, usage: 1},
				{name: "provider ignores the flag", headers: map[string]string{"x-mock-usage": "omit"}, forced: true, estimated: true},
				{name: "provider gzips anyway: passed unfiltered", headers: map[string]string{"x-mock-gzip": "1", "x-mock-split": "7"}, forced: true, usage: 1},
			} {
				t.Run(ep.name+"/"+tc.name, func(t *testing.T) {
					if tc.headers["x-mock-split"] == "1" && testenv.Race {
						t.Skip("a round trip per byte is too slow under the race detector")
					}
					mock.Reset()
					rid := fmt.Sprintf("usagechunk-%s-%s-%s", p.name(), ep.name, strings.ReplaceAll(tc.name, " ", "-"))
					headers := map[string]string{"x-request-id": rid}
					for k, v := range tc.headers {
						headers[k] = v
					}
					status, h, body := call{path: ep.path, body: fmt.Sprintf(ep.body, tc.options), headers: headers}.do(t, p.url, key)
					if status != 200 || !strings.HasSuffix(strings.ReplaceAll(body, "\r\n", "\n"), "data: [DONE]\n\n") {
						t.Fatalf("status %d %v body %q", status, h, body)
					}
					if n := usageOnlyChunks(t, body); n != tc.usage {
						t.Errorf("the client got %d usage-only chunks, want %d:\n%s", n, tc.usage, body)
					}
					if got := streamedText(t, body); got != mockllm.Text(usageChunkWords) {
						t.Errorf("streamed text %q, want %q", got, mockllm.Text(usageChunkWords))
					}
					got := mock.Received()
					if len(got) != 1 {
						t.Fatalf("the provider received %d requests", len(got))
					}
					sent := string(got[0].Body)
					if !strings.Contains(sent, `"include_usage":true`) {
						t.Errorf("the provider received %s, without include_usage", sent)
					}
					if ae := got[0].Header.Get("Accept-Encoding"); tc.forced != (ae == "identity") {
						t.Errorf("the provider received accept-encoding %q (Sluice forced usage: %v)", ae, tc.forced)
					}
					rec := s.awaitRecord(t, rid)
					if tc.estimated {
						if !rec.Estimated || rec.Tokens[tokens.Output] == 0 || strings.Contains(body, `"usage"`) {
							t.Errorf("record %+v, body %q; want a tokenizer estimate and the provider's bytes", rec, body)
						}
						return
					}
					if rec.Tokens[tokens.Input] != wantIn || rec.Tokens[tokens.Output] != usageChunkWords || rec.Estimated || rec.Outcome != "ok" {
						t.Errorf("record %d in / %d out (estimated %v, %s); want exactly %d / %d as the provider reported", rec.Tokens[tokens.Input], rec.Tokens[tokens.Output], rec.Estimated, rec.Outcome, wantIn, usageChunkWords)
					}
				})
			}
		}
	})
	m := s.metrics(t)
	if metricValue(m, `sluice_extproc_usage_chunks_total{outcome="removed"}`) == 0 || metricValue(m, `sluice_extproc_usage_chunks_total{outcome="encoded"}`) == 0 {
		t.Errorf("/metrics lacks the removed and encoded usage chunks:\n%s", m)
	}
}

// TestUsageChunkSDK: the official OpenAI Go SDK's stream, as user code
// reads it — chunk.Choices[0] on every chunk — works through Sluice for
// chat and legacy completions without include_usage (no chunk without
// choices reaches it), and the record has the exact usage; with
// include_usage set, the SDK gets the usage chunk it asked for.
func TestUsageChunkSDK(t *testing.T) {
	_, mockAddr := mockProvider(t, mockllm.Options{APIKey: openaiKey, Words: usageChunkWords})
	s := startSluice(t, gatewayConfig)
	_, key := s.createKey(t, "apps")
	const prompt = "hello there"
	wantIn := mockllm.TextTokens(prompt)
	eachProxy(t, gatewayBootstrap(t, s.grpcAddr, mockAddr), func(t *testing.T, p proxy) {
		ctx := testctx.Deadline(t)
		oc, _ := sdkClients(p.url, key)
		checkRecord := func(t *testing.T, rid string) {
			t.Helper()
			rec := s.awaitRecord(t, rid)
			if rec.Tokens[tokens.Input] != wantIn || rec.Tokens[tokens.Output] != usageChunkWords || rec.Estimated {
				t.Errorf("record %+v; want exactly %d in / %d out, reported", rec, wantIn, usageChunkWords)
			}
		}

		t.Run("chat", func(t *testing.T) {
			rid := "sdk-chat-" + p.name()
			stream := oc.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
				Model:    "gpt-5-nano",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
			}, openaioption.WithHeader("x-request-id", rid))
			var text strings.Builder
			n := 0
			for stream.Next() {
				chunk := stream.Current()
				if len(chunk.Choices) == 0 {
					t.Fatalf("chunk %d has no choices: %s", n, chunk.RawJSON())
				}
				text.WriteString(chunk.Choices[0].Delta.Content)
				n++
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("after %d chunks: %v", n, err)
			}
			if text.String() != mockllm.Text(usageChunkWords) {
				t.Errorf("streamed %q", text.String())
			}
			checkRecord(t, rid)
		})

		t.Run("completions", func(t *testing.T) {
			rid := "sdk-completions-" + p.name()
			stream := oc.Completions.NewStreaming(ctx, openai.CompletionNewParams{
				Model:  "gpt-5-nano",
				Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
			}, openaioption.WithHeader("x-request-id", rid))
			var text strings.Builder
			n := 0
			for stream.Next() {
				chunk := stream.Current()
				if len(chunk.Choices) == 0 {
					t.Fatalf("chunk %d has no choices: %s", n, chunk.RawJSON())
				}
				text.WriteString(chunk.Choices[0].Text)
				n++
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("after %d chunks: %v", n, err)
			}
			if text.String() != mockllm.Text(usageChunkWords) {
				t.Errorf("streamed %q", text.String())
			}
			checkRecord(t, rid)
		})

		t.Run("chat with include_usage", func(t *testing.T) {
			rid := "sdk-chat-usage-" + p.name()
			stream := oc.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
				Model:         "gpt-5-nano",
				Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
				StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
			}, openaioption.WithHeader("x-request-id", rid))
			var usage []openai.CompletionUsage
			for stream.Next() {
				if chunk := stream.Current(); len(chunk.Choices) == 0 {
					usage = append(usage, chunk.Usage)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if len(usage) != 1 || usage[0].PromptTokens != wantIn || usage[0].CompletionTokens != usageChunkWords {
				t.Errorf("usage chunks %+v; want the one the SDK asked for, %d in / %d out", usage, wantIn, usageChunkWords)
			}
			checkRecord(t, rid)
		})
	})
}
