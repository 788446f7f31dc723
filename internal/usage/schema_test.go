package usage

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/tiktoken-go/tokenizer"

	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/tokens"
)

// read feeds body in one Write and closes.
func read(opts Options, body string, complete bool, fallbackInput int64) Result {
	m := NewMeter(opts)
	m.Write([]byte(body))
	return m.Close(complete, fallbackInput)
}

func runes(parts ...string) int64 {
	return int64(utf8.RuneCountInString(strings.Join(parts, "")))
}

// o200k counts each text on its own with o200k_base and sums.
func o200k(t *testing.T, texts ...string) int64 {
	t.Helper()
	c, err := tokenizer.Get(tokenizer.O200kBase)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, s := range texts {
		k, err := c.Count(s)
		if err != nil {
			t.Fatal(err)
		}
		n += int64(k)
	}
	return n
}

func TestSchemas(t *testing.T) {
	anth := Options{Endpoint: llmapi.Messages, Stream: true, ContentType: "text/event-stream", Model: "claude-sonnet-4-5"}
	anthJSON := Options{Endpoint: llmapi.Messages, ContentType: "application/json", Model: "claude-sonnet-4-5"}
	resp := Options{Endpoint: llmapi.Responses, Stream: true, ContentType: "text/event-stream", Model: "gpt-5"}
	respJSON := Options{Endpoint: llmapi.Responses, ContentType: "application/json", Model: "gpt-5"}
	chat := Options{Endpoint: llmapi.ChatCompletions, Stream: true, ContentType: "text/event-stream", Model: "gpt-4o"}
	chatJSON := Options{Endpoint: llmapi.ChatCompletions, ContentType: "application/json", Model: "gpt-4o"}
	emb := Options{Endpoint: llmapi.Embeddings, ContentType: "application/json", Model: "text-embedding-3-small"}

	errorText := "Hello there, général Kenobi 🙂"
	tests := []struct {
		name     string
		opts     Options
		body     string
		complete bool
		want     Result
	}{{
		name: "anthropic stream with cache read and creation", opts: anth, body: crlf(anthropicStream), complete: true,
		want: Result{Usage: Usage{tokens.Input: 25 + 2000 + 100, tokens.CachedInput: 2000, tokens.CacheWrite: 100, tokens.Output: 42},
			Reported: true, Events: 12,
			OutputTextRunes: runes("Café crème 🙂", " — voilà, I'll check the weather.", `{"city": "Zür`, `ich"}`)},
	}, {
		name: "anthropic message_delta repeats input counts", opts: anth, body: anthropicStreamRepeat, complete: true,
		want: Result{Usage: Usage{tokens.Input: 12 + 300, tokens.CachedInput: 300, tokens.Output: 57},
			Reported: true, Events: 5, OutputTextRunes: runes("Hmm… l'été 🙂", "Bonjour!")},
	}, {
		name: "anthropic error event mid-stream", opts: anth, body: anthropicStreamError, complete: true,
		want: Result{Usage: Usage{tokens.Input: 35, tokens.CachedInput: 5, tokens.Output: o200k(t, errorText)},
			Reported: true, Estimated: true, OutputEstimated: true, Events: 4, OutputTextRunes: runes(errorText), ProviderError: "overloaded_error"},
	}, {
		name: "anthropic stream cut after message_start", opts: anth,
		body:     anthropicStream[:strings.Index(anthropicStream, "event: content_block_stop")],
		complete: false,
		want: Result{Usage: Usage{tokens.Input: 2125, tokens.CachedInput: 2000, tokens.CacheWrite: 100,
			tokens.Output: o200k(t, "Café crème 🙂 — voilà, I'll check the weather.")},
			Reported: true, Estimated: true, OutputEstimated: true, Events: 5, OutputTextRunes: runes("Café crème 🙂", " — voilà, I'll check the weather.")},
	}, {
		name: "anthropic events without names are routed by type", opts: anth,
		body: "data: " + `{"type":"message_start","message":{"usage":{"input_tokens":7,"output_tokens":1}}}` + "\n\n" +
			"data: " + `{"type":"message_delta","usage":{"output_tokens":3}}` + "\n\n",
		complete: true,
		want:     Result{Usage: Usage{tokens.Input: 7, tokens.Output: 3}, Reported: true, Events: 2},
	}, {
		name: "anthropic message_delta alone", opts: anth,
		body:     "event: message_delta\ndata: " + `{"type":"message_delta","usage":{"output_tokens":3}}` + "\n\n",
		complete: true,
		want:     Result{Usage: Usage{tokens.Input: 99, tokens.Output: 3}, Reported: true, Estimated: true, Events: 1},
	}, {
		name: "anthropic only pings", opts: anth, body: "event: ping\ndata: {\"type\": \"ping\"}\n\n", complete: false,
		want: Result{Usage: Usage{tokens.Input: 99}, Estimated: true, OutputEstimated: true, Events: 1},
	}, {
		name: "anthropic JSON", opts: anthJSON, body: anthropicJSON, complete: true,
		want: Result{Usage: Usage{tokens.Input: 2003, tokens.CachedInput: 800, tokens.CacheWrite: 1200, tokens.Output: 9}, Reported: true},
	}, {
		name: "anthropic JSON error", opts: anthJSON, body: anthropicErrorJSON, complete: true,
		want: Result{Usage: Usage{tokens.Input: 99}, Estimated: true, OutputEstimated: true, ProviderError: "not_found_error"},
	}, {
		name: "anthropic JSON without usage", opts: anthJSON, complete: true,
		body: `{"type":"message","content":[{"type":"text","text":"Hi 🙂"},{"type":"tool_use","input":{"a":1}}]}`,
		want: Result{Usage: Usage{tokens.Input: 99, tokens.Output: o200k(t, "Hi 🙂", `{"a":1}`)}, Estimated: true, OutputEstimated: true,
			OutputTextRunes: runes("Hi 🙂", `{"a":1}`)},
	}, {
		name: "responses stream", opts: resp, body: responsesStream, complete: true,
		want: Result{Usage: Usage{tokens.Input: 36, tokens.CachedInput: 4, tokens.Output: 87, tokens.Reasoning: 64},
			Reported: true, Events: 7, OutputTextRunes: runes("Déjà vu 🙂", " all over again.")},
	}, {
		name: "responses stream cut before response.completed", opts: resp, complete: false,
		body: responsesStream[:strings.Index(responsesStream, "event: response.completed")],
		want: Result{Usage: Usage{tokens.Input: 99, tokens.Output: o200k(t, "Déjà vu 🙂 all over again.")},
			Estimated: true, OutputEstimated: true, Events: 6, OutputTextRunes: runes("Déjà vu 🙂", " all over again.")},
	}, {
		name: "responses incomplete", opts: resp, complete: true,
		body: "event: response.incomplete\ndata: " + `{"type":"response.incomplete","response":{"status":"incomplete","usage":{"input_tokens":5,"output_tokens":100}}}` + "\n\n",
		want: Result{Usage: Usage{tokens.Input: 5, tokens.Output: 100}, Reported: true, Events: 1},
	}, {
		name: "responses failed", opts: resp, complete: true,
		body: "event: response.failed\ndata: " + `{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"x"},"usage":{"input_tokens":5,"output_tokens":0}}}` + "\n\n",
		want: Result{Usage: Usage{tokens.Input: 5}, Reported: true, Events: 1, ProviderError: "server_error"},
	}, {
		name: "responses events without names are routed by type", opts: resp, complete: true,
		body: "data: " + `{"type":"response.output_text.delta","output_index":0,"content_index":0,"delta":"Hi 🙂"}` + "\n\n" +
			"data: " + `{"type":"response.completed","response":{"usage":{"input_tokens":5,"output_tokens":2}}}` + "\n\n",
		want: Result{Usage: Usage{tokens.Input: 5, tokens.Output: 2}, Reported: true, Events: 2, OutputTextRunes: runes("Hi 🙂")},
	}, {
		name: "responses error event", opts: resp, complete: true,
		body: "event: error\ndata: " + `{"type":"error","code":"rate_limit_exceeded","message":"slow down","param":null}` + "\n\n",
		want: Result{Usage: Usage{tokens.Input: 99}, Estimated: true, OutputEstimated: true, Events: 1, ProviderError: "rate_limit_exceeded"},
	}, {
		name: "responses JSON", opts: respJSON, body: responsesJSON, complete: true,
		want: Result{Usage: Usage{tokens.Input: 328, tokens.CachedInput: 256, tokens.Output: 52, tokens.Reasoning: 32}, Reported: true},
	}, {
		name: "responses JSON without usage counts each output item's text", opts: respJSON, complete: true,
		body: `{"object":"response","output":[` +
			`{"type":"reasoning","summary":[{"type":"summary_text","text":"Thinking it over"},{"type":"summary_text","text":"done"}]},` +
			`{"type":"message","content":[{"type":"output_text","text":"Hi 🙂"},{"type":"refusal","refusal":"no"}]},` +
			`{"type":"function_call","arguments":"{\"a\":1}"},{"type":"custom_tool_call","input":"x y"}]}`,
		want: Result{Usage: Usage{tokens.Input: 99, tokens.Output: o200k(t, "Thinking it over", "done", "Hi 🙂", "no", `{"a":1}`, "x y")},
			Estimated: true, OutputEstimated: true, OutputTextRunes: runes("Thinking it over", "done", "Hi 🙂", "no", `{"a":1}`, "x y")},
	}, {
		name: "chat stream with usage chunk", opts: chat, body: openAIStreamUsage, complete: true,
		want: Result{Usage: Usage{tokens.Input: 1200, tokens.CachedInput: 1024, tokens.Output: 40, tokens.Reasoning: 16},
			Reported: true, Events: 6, OutputTextRunes: runes("Olá, café 🙂", `{"q":"é"}`)},
	}, {
		name: "chat stream cut before the usage chunk", opts: chat, complete: false,
		body: openAIStreamUsage[:strings.Index(openAIStreamUsage, `"choices":[]`)],
		want: Result{Usage: Usage{tokens.Input: 99, tokens.Output: o200k(t, "Olá, café 🙂", `{"q":"é"}`)}, Estimated: true, OutputEstimated: true,
			Events: 5, OutputTextRunes: runes("Olá, café 🙂", `{"q":"é"}`)},
	}, {
		name: "chat stream with cumulative usage in every chunk", opts: chat, complete: false,
		body: "data: " + `{"choices":[{"index":0,"delta":{"content":"a"}}],"usage":{"prompt_tokens":9,"completion_tokens":1}}` + "\n\n" +
			"data: " + `{"choices":[{"index":0,"delta":{"content":" b"}}],"usage":{"prompt_tokens":9,"completion_tokens":2}}` + "\n\n",
		want: Result{Usage: Usage{tokens.Input: 9, tokens.Output: 2}, Reported: true, Events: 2, OutputTextRunes: 3},
	}, {
		name: "chat stream with two choices counts each on its own", opts: chat, complete: true,
		body: "data: " + `{"choices":[{"index":0,"delta":{"content":"Hello wor"}},{"index":1,"delta":{"content":"Good"}}]}` + "\n\n" +
			"data: " + `{"choices":[{"index":1,"delta":{"content":"bye"}},{"index":0,"delta":{"content":"ld"}}]}` + "\n\n" +
			"data: [DONE]\n\n",
		want: Result{Usage: Usage{tokens.Input: 99, tokens.Output: o200k(t, "Hello world", "Goodbye")}, Estimated: true, OutputEstimated: true,
			Events: 3, OutputTextRunes: runes("Hello world", "Goodbye")},
	}, {
		name: "chat stream error chunk", opts: chat, complete: true,
		body: "data: " + `{"error":{"message":"boom","type":"server_error","code":null}}` + "\n\n",
		want: Result{Usage: Usage{tokens.Input: 99}, Estimated: true, OutputEstimated: true, Events: 1, ProviderError: "server_error"},
	}, {
		name: "chat JSON without usage counts the message", opts: chatJSON, complete: true,
		body: `{"choices":[{"index":0,"message":{"role":"assistant","content":"Bonjour 🙂","tool_calls":[{"function":{"arguments":"{}"}}]}}]}`,
		want: Result{Usage: Usage{tokens.Input: 99, tokens.Output: o200k(t, "Bonjour 🙂", "{}")}, Estimated: true, OutputEstimated: true,
			OutputTextRunes: runes("Bonjour 🙂", "{}")},
	}, {
		name: "chat JSON with array content", opts: chatJSON, complete: true,
		body: `{"choices":[{"index":0,"message":{"content":[{"type":"text","text":"x"}],"refusal":"no way"}}]}`,
		want: Result{Usage: Usage{tokens.Input: 99, tokens.Output: o200k(t, "no way")}, Estimated: true, OutputEstimated: true, OutputTextRunes: 6},
	}, {
		name: "chat JSON cached more than prompt is clamped", opts: chatJSON, complete: true,
		body: `{"usage":{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":20},"completion_tokens_details":{"reasoning_tokens":3}}}`,
		want: Result{Usage: Usage{tokens.Input: 10, tokens.CachedInput: 10, tokens.Output: 2, tokens.Reasoning: 2}, Reported: true},
	}, {
		name: "chat JSON negative count is not believed", opts: chatJSON, complete: true,
		body: `{"choices":[{"index":0,"message":{"content":"hello there"}}],"usage":{"prompt_tokens":-5,"completion_tokens":20,"total_tokens":15}}`,
		want: Result{Usage: Usage{tokens.Input: 99, tokens.Output: o200k(t, "hello there")}, Estimated: true, OutputEstimated: true, Unparsed: true,
			Err: CodeBadUsage, OutputTextRunes: 11},
	}, {
		name: "chat JSON negative detail discredits the whole usage", opts: chatJSON, complete: true,
		body: `{"usage":{"prompt_tokens":10,"completion_tokens":5,"completion_tokens_details":{"reasoning_tokens":-3}}}`,
		want: Result{Usage: Usage{tokens.Input: 99}, Estimated: true, OutputEstimated: true, Unparsed: true, Err: CodeBadUsage},
	}, {
		name: "chat JSON huge counts are not believed", opts: chatJSON, complete: true,
		body: `{"usage":{"prompt_tokens":9223372036854775807,"completion_tokens":1}}`,
		want: Result{Usage: Usage{tokens.Input: 99}, Estimated: true, OutputEstimated: true, Unparsed: true, Err: CodeBadUsage},
	}, {
		name: "chat JSON count above the cap is not believed", opts: chatJSON, complete: true,
		body: `{"usage":{"prompt_tokens":1073741825,"completion_tokens":1}}`,
		want: Result{Usage: Usage{tokens.Input: 99}, Estimated: true, OutputEstimated: true, Unparsed: true, Err: CodeBadUsage},
	}, {
		name: "chat JSON count at the cap is believed", opts: chatJSON, complete: true,
		body: `{"usage":{"prompt_tokens":1073741824,"completion_tokens":1}}`,
		want: Result{Usage: Usage{tokens.Input: maxCount, tokens.Output: 1}, Reported: true},
	}, {
		name: "chat JSON float counts are not believed", opts: chatJSON, complete: true,
		body: `{"usage":{"prompt_tokens":1.5}}`,
		want: Result{Usage: Usage{tokens.Input: 99}, Estimated: true, OutputEstimated: true, Unparsed: true, Err: CodeBadUsage},
	}, {
		name: "chat stream: a bad usage chunk discredits a later good one", opts: chat, complete: true,
		body: "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}],\"usage\":{\"prompt_tokens\":-1,\"completion_tokens\":-1}}\n\n" +
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n",
		want: Result{Usage: Usage{tokens.Input: 99, tokens.Output: o200k(t, "hi")}, Estimated: true, OutputEstimated: true, Unparsed: true,
			Err: CodeBadUsage, Events: 3, OutputTextRunes: 2},
	}, {
		name: "chat stream: a bad usage chunk after a good one keeps its output as a floor", opts: chat, complete: true,
		body: "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":30}}\n\n" +
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":-30}}\n\ndata: [DONE]\n\n",
		want: Result{Usage: Usage{tokens.Input: 99, tokens.Output: 30}, Estimated: true, OutputEstimated: true, Unparsed: true,
			Err: CodeBadUsage, Events: 3},
	}, {
		name: "anthropic stream: negative output in message_delta", opts: anth, complete: true,
		body: "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":15,\"output_tokens\":1}}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi there\"}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":-5}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
		want: Result{Usage: Usage{tokens.Input: 99, tokens.Output: o200k(t, "Hi there")}, Estimated: true, OutputEstimated: true, Unparsed: true,
			Err: CodeBadUsage, Events: 4, OutputTextRunes: 8},
	}, {
		name: "stream although stream was false", opts: chatJSON, complete: true, body: openAIStreamUsage,
		want: Result{Usage: Usage{tokens.Input: 1200, tokens.CachedInput: 1024, tokens.Output: 40, tokens.Reasoning: 16},
			Reported: true, Events: 6, OutputTextRunes: runes("Olá, café 🙂", `{"q":"é"}`)},
	}, {
		name: "JSON error although a stream was asked", opts: chat, complete: true,
		body: `{"error":{"message":"Rate limit","type":"requests","code":"rate_limit_exceeded"}}`,
		want: Result{Usage: Usage{tokens.Input: 99}, Estimated: true, OutputEstimated: true, ProviderError: "requests"},
	}, {
		name: "JSON error with a string", opts: chatJSON, complete: true, body: `{"error":"Internal Server Error"}`,
		want: Result{Usage: Usage{tokens.Input: 99}, Estimated: true, OutputEstimated: true, ProviderError: "error"},
	}, {
		name: "JSON error with a numeric code and odd characters", opts: chatJSON, complete: true,
		body: `{"error":{"code":429,"message":"x"}}`,
		want: Result{Usage: Usage{tokens.Input: 99}, Estimated: true, OutputEstimated: true, ProviderError: "429"},
	}, {
		name: "JSON error type is sanitised", opts: chatJSON, complete: true,
		body: `{"error":{"type":"Bad Thing!\"<script>"}}`,
		want: Result{Usage: Usage{tokens.Input: 99}, Estimated: true, OutputEstimated: true, ProviderError: "bad_thingscript"},
	}, {
		name: "embeddings total_tokens only", opts: emb, complete: true,
		body: `{"object":"list","data":[],"usage":{"total_tokens":12}}`,
		want: Result{Usage: Usage{tokens.Input: 12}, Reported: true},
	}, {
		name: "usage nested below the top level is not the response's", opts: chatJSON, complete: true,
		body: `{"choices":[{"index":0,"message":{"content":"hi","usage":{"prompt_tokens":5}}}]}`,
		want: Result{Usage: Usage{tokens.Input: 99, tokens.Output: 1}, Estimated: true, OutputEstimated: true, OutputTextRunes: 2},
	}, {
		name: "unknown endpoint reads OpenAI-compatible usage", complete: true,
		opts: Options{ContentType: "application/json"},
		body: `{"usage":{"prompt_tokens":4,"completion_tokens":6}}`,
		want: Result{Usage: Usage{tokens.Input: 4, tokens.Output: 6}, Reported: true},
	}, {
		name: "last usage key wins", opts: chatJSON, complete: true,
		body: `{"usage":{"prompt_tokens":1,"completion_tokens":1},"usage":{"prompt_tokens":2,"completion_tokens":3}}`,
		want: Result{Usage: Usage{tokens.Input: 2, tokens.Output: 3}, Reported: true},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := read(tt.opts, tt.body, tt.complete, 99)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("result (-want +got):\n%s", d)
			}
		})
	}
}
