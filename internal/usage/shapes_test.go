package usage

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/tokens"
)

// Usage shapes beyond OpenAI's and Anthropic's basic counts: Anthropic's
// cache_creation TTL breakdown, audio tokens, OpenAI-compatible
// cache_write_tokens and a total_tokens above prompt + completion, each
// at its extremes (0, negative, above 2^30, 2^63, duplicated, missing).

var (
	antJSONOpts  = Options{Endpoint: llmapi.Messages, ContentType: "application/json", Model: "claude-sonnet-4-5"}
	antSSEOpts   = Options{Endpoint: llmapi.Messages, Stream: true, ContentType: "text/event-stream", Model: "claude-sonnet-4-5"}
	respJSONOpts = Options{Endpoint: llmapi.Responses, ContentType: "application/json", Model: "gpt-5"}
	embJSONOpts  = Options{Endpoint: llmapi.Embeddings, ContentType: "application/json", Model: "text-embedding-3-small"}
)

// antUsage is an Anthropic JSON body with the given usage members.
func antUsage(members string) string {
	return `{"type":"message","content":[{"type":"text","text":"Hi"}],"usage":{` + members + `}}`
}

// chatUsage is a chat completion JSON body with the given usage members.
func chatUsage(members string) string {
	return `{"object":"chat.completion","choices":[{"index":0,"message":{"content":"Hi"}}],"usage":{` + members + `}}`
}

// antSSE is an Anthropic stream whose message_start and message_delta
// carry the given usage members.
func antSSE(start, delta string) string {
	return "event: message_start\ndata: " + `{"type":"message_start","message":{"usage":{` + start + `}}}` + "\n\n" +
		"event: content_block_delta\ndata: " + `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}` + "\n\n" +
		"event: message_delta\ndata: " + `{"type":"message_delta","usage":{` + delta + `}}` + "\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
}

func TestUsageShapes(t *testing.T) {
	ignore := chatJSONOpts
	ignore.TotalExcess = ExcessIgnored
	ignoreResp := respJSONOpts
	ignoreResp.TotalExcess = ExcessIgnored
	rep := func(u Usage) Result { return Result{Usage: u, Reported: true} }
	badUsage := Result{Usage: Usage{tokens.Input: 99, tokens.Output: 1}, Estimated: true, OutputEstimated: true, Unparsed: true,
		Err: CodeBadUsage, OutputTextRunes: 2}
	tests := []struct {
		name string
		opts Options
		body string
		want Result
	}{
		// Anthropic's cache_creation breakdown.
		{name: "anthropic breakdown agrees with the total", opts: antJSONOpts,
			body: antUsage(`"input_tokens":5,"cache_read_input_tokens":7,"cache_creation_input_tokens":100,` +
				`"cache_creation":{"ephemeral_5m_input_tokens":40,"ephemeral_1h_input_tokens":60},"output_tokens":3`),
			want: rep(Usage{tokens.Input: 112, tokens.CachedInput: 7, tokens.CacheWrite: 100, tokens.CacheWrite1h: 60, tokens.Output: 3})},
		{name: "anthropic breakdown alone is the total", opts: antJSONOpts,
			body: antUsage(`"input_tokens":5,"cache_creation":{"ephemeral_5m_input_tokens":10,"ephemeral_1h_input_tokens":30},"output_tokens":3`),
			want: rep(Usage{tokens.Input: 45, tokens.CacheWrite: 40, tokens.CacheWrite1h: 30, tokens.Output: 3})},
		{name: "anthropic total above the breakdown: the total", opts: antJSONOpts,
			body: antUsage(`"input_tokens":5,"cache_creation_input_tokens":100,` +
				`"cache_creation":{"ephemeral_5m_input_tokens":10,"ephemeral_1h_input_tokens":30},"output_tokens":3`),
			want: rep(Usage{tokens.Input: 105, tokens.CacheWrite: 100, tokens.CacheWrite1h: 30, tokens.Output: 3})},
		{name: "anthropic breakdown above the total: the breakdown", opts: antJSONOpts,
			body: antUsage(`"input_tokens":5,"cache_creation_input_tokens":10,` +
				`"cache_creation":{"ephemeral_5m_input_tokens":20,"ephemeral_1h_input_tokens":30},"output_tokens":3`),
			want: rep(Usage{tokens.Input: 55, tokens.CacheWrite: 50, tokens.CacheWrite1h: 30, tokens.Output: 3})},
		{name: "anthropic 1-hour part alone above the total", opts: antJSONOpts,
			body: antUsage(`"input_tokens":5,"cache_creation_input_tokens":10,"cache_creation":{"ephemeral_1h_input_tokens":30},"output_tokens":3`),
			want: rep(Usage{tokens.Input: 35, tokens.CacheWrite: 30, tokens.CacheWrite1h: 30, tokens.Output: 3})},
		{name: "anthropic zero breakdown under a total: all 5-minute", opts: antJSONOpts,
			body: antUsage(`"input_tokens":5,"cache_creation_input_tokens":1,` +
				`"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":3`),
			want: rep(Usage{tokens.Input: 6, tokens.CacheWrite: 1, tokens.Output: 3})},
		{name: "anthropic breakdown at the cap is clamped to one count", opts: antJSONOpts,
			body: antUsage(`"input_tokens":1073741824,"cache_read_input_tokens":1073741824,` +
				`"cache_creation":{"ephemeral_5m_input_tokens":1073741824,"ephemeral_1h_input_tokens":1073741824},"output_tokens":1073741824`),
			want: rep(Usage{tokens.Input: 3 * maxCount, tokens.CachedInput: maxCount, tokens.CacheWrite: maxCount,
				tokens.CacheWrite1h: maxCount, tokens.Output: maxCount})},
		{name: "anthropic breakdown's last duplicated key wins", opts: antJSONOpts,
			body: antUsage(`"input_tokens":5,"cache_creation":{"ephemeral_1h_input_tokens":9,"ephemeral_1h_input_tokens":4},"output_tokens":3`),
			want: rep(Usage{tokens.Input: 9, tokens.CacheWrite: 4, tokens.CacheWrite1h: 4, tokens.Output: 3})},
		{name: "anthropic duplicated breakdown: the last one whole", opts: antJSONOpts,
			body: antUsage(`"input_tokens":5,"cache_creation":{"ephemeral_1h_input_tokens":50},` +
				`"cache_creation":{"ephemeral_5m_input_tokens":6},"output_tokens":3`),
			want: rep(Usage{tokens.Input: 11, tokens.CacheWrite: 6, tokens.Output: 3})},
		{name: "anthropic breakdown that is no object is ignored", opts: antJSONOpts,
			body: antUsage(`"input_tokens":5,"cache_creation_input_tokens":2,"cache_creation":null,"output_tokens":3`),
			want: rep(Usage{tokens.Input: 7, tokens.CacheWrite: 2, tokens.Output: 3})},
		{name: "anthropic breakdown of strings is ignored", opts: antJSONOpts,
			body: antUsage(`"input_tokens":5,"cache_creation":{"ephemeral_1h_input_tokens":"30"},"output_tokens":3`),
			want: rep(Usage{tokens.Input: 5, tokens.Output: 3})},
		{name: "anthropic negative breakdown is not believed", opts: antJSONOpts,
			body: antUsage(`"input_tokens":5,"cache_creation":{"ephemeral_1h_input_tokens":-1},"output_tokens":3`),
			want: badUsage},
		{name: "anthropic 2^63 in the breakdown is not believed", opts: antJSONOpts,
			body: antUsage(`"input_tokens":5,"cache_creation":{"ephemeral_5m_input_tokens":9223372036854775808},"output_tokens":3`),
			want: badUsage},
		{name: "anthropic breakdown above 2^30 is not believed", opts: antJSONOpts,
			body: antUsage(`"input_tokens":5,"cache_creation":{"ephemeral_5m_input_tokens":1073741825},"output_tokens":3`),
			want: badUsage},
		{name: "anthropic stream: message_delta's breakdown replaces the start's field by field", opts: antSSEOpts,
			body: antSSE(`"input_tokens":5,"cache_creation_input_tokens":200,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":200},"output_tokens":1`,
				`"cache_creation":{"ephemeral_1h_input_tokens":150},"output_tokens":9`),
			want: Result{Usage: Usage{tokens.Input: 205, tokens.CacheWrite: 200, tokens.CacheWrite1h: 150, tokens.Output: 9},
				Reported: true, Events: 4, OutputTextRunes: 2}},
		{name: "anthropic stream: a breakdown in message_start alone stays", opts: antSSEOpts,
			body: antSSE(`"input_tokens":5,"cache_creation":{"ephemeral_5m_input_tokens":10,"ephemeral_1h_input_tokens":20},"output_tokens":1`,
				`"input_tokens":5,"cache_creation_input_tokens":30,"output_tokens":9`),
			want: Result{Usage: Usage{tokens.Input: 35, tokens.CacheWrite: 30, tokens.CacheWrite1h: 20, tokens.Output: 9},
				Reported: true, Events: 4, OutputTextRunes: 2}},
		{name: "anthropic stream: a breakdown in message_delta alone is the input", opts: antSSEOpts,
			body: antSSE(`"output_tokens":1`, `"cache_creation":{"ephemeral_1h_input_tokens":20},"output_tokens":9`),
			want: Result{Usage: Usage{tokens.Input: 20, tokens.CacheWrite: 20, tokens.CacheWrite1h: 20, tokens.Output: 9},
				Reported: true, Events: 4, OutputTextRunes: 2}},
		{name: "the breakdown is Anthropic's: an OpenAI body's is not read", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":50,"completion_tokens":3,"cache_creation":{"ephemeral_1h_input_tokens":20}`),
			want: rep(Usage{tokens.Input: 50, tokens.Output: 3})},

		// Audio.
		{name: "chat audio on both sides", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":50,"completion_tokens":30,"total_tokens":80,` +
				`"prompt_tokens_details":{"audio_tokens":40,"cached_tokens":0},"completion_tokens_details":{"audio_tokens":20,"reasoning_tokens":5}`),
			want: rep(Usage{tokens.Input: 50, tokens.AudioInput: 40, tokens.Output: 30, tokens.Reasoning: 5, tokens.AudioOutput: 20})},
		{name: "audio above its whole is clamped", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":50,"completion_tokens":30,` +
				`"prompt_tokens_details":{"audio_tokens":400},"completion_tokens_details":{"audio_tokens":200}`),
			want: rep(Usage{tokens.Input: 50, tokens.AudioInput: 50, tokens.Output: 30, tokens.AudioOutput: 30})},
		{name: "audio of zero", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":50,"completion_tokens":30,"prompt_tokens_details":{"audio_tokens":0},"completion_tokens_details":{"audio_tokens":0}`),
			want: rep(Usage{tokens.Input: 50, tokens.Output: 30})},
		{name: "audio without the count it is part of is not kept", opts: chatJSONOpts,
			body: chatUsage(`"completion_tokens":30,"prompt_tokens_details":{"audio_tokens":40}`),
			want: Result{Usage: Usage{tokens.Input: 99, tokens.Output: 30}, Reported: true, Estimated: true}},
		{name: "responses audio in input_ and output_tokens_details", opts: respJSONOpts,
			body: `{"object":"response","usage":{"input_tokens":50,"input_tokens_details":{"cached_tokens":10,"audio_tokens":40},` +
				`"output_tokens":30,"output_tokens_details":{"reasoning_tokens":0,"audio_tokens":25},"total_tokens":80}}`,
			want: rep(Usage{tokens.Input: 50, tokens.CachedInput: 10, tokens.AudioInput: 40, tokens.Output: 30, tokens.AudioOutput: 25})},
		{name: "audio's last duplicated key wins", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":50,"completion_tokens":30,"prompt_tokens_details":{"audio_tokens":40,"audio_tokens":4}`),
			want: rep(Usage{tokens.Input: 50, tokens.AudioInput: 4, tokens.Output: 30})},
		{name: "negative audio is not believed", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":50,"completion_tokens":30,"completion_tokens_details":{"audio_tokens":-2}`),
			want: badUsage},
		{name: "audio of 2^63 is not believed", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":50,"completion_tokens":30,"prompt_tokens_details":{"audio_tokens":9223372036854775808}`),
			want: badUsage},
		{name: "fractional audio is not believed", opts: respJSONOpts,
			body: `{"object":"response","output":[{"content":[{"text":"Hi"}]}],"usage":{"input_tokens":5,"output_tokens":3,"output_tokens_details":{"audio_tokens":1.5}}}`,
			want: badUsage},

		// cache_write_tokens.
		{name: "chat cache_write_tokens are cache creation", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":1000,"completion_tokens":10,"prompt_tokens_details":{"cached_tokens":300,"cache_write_tokens":200}`),
			want: rep(Usage{tokens.Input: 1000, tokens.CachedInput: 300, tokens.CacheWrite: 200, tokens.Output: 10})},
		{name: "cache writes above what the cache read leaves are clamped", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":1000,"completion_tokens":10,"prompt_tokens_details":{"cached_tokens":300,"cache_write_tokens":800}`),
			want: rep(Usage{tokens.Input: 1000, tokens.CachedInput: 300, tokens.CacheWrite: 700, tokens.Output: 10})},
		{name: "responses cache_write_tokens", opts: respJSONOpts,
			body: `{"object":"response","usage":{"input_tokens":30,"input_tokens_details":{"cached_tokens":4,"cache_write_tokens":6},"output_tokens":5}}`,
			want: rep(Usage{tokens.Input: 30, tokens.CachedInput: 4, tokens.CacheWrite: 6, tokens.Output: 5})},
		{name: "negative cache_write_tokens are not believed", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":1000,"completion_tokens":10,"prompt_tokens_details":{"cache_write_tokens":-200}`),
			want: badUsage},
		{name: "cache writes are no 1-hour writes", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":10,"completion_tokens":1,"prompt_tokens_details":{"cache_write_tokens":5}`),
			want: rep(Usage{tokens.Input: 10, tokens.CacheWrite: 5, tokens.Output: 1})},

		// total_tokens above prompt + completion.
		{name: "total excess is output and reasoning", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":7,"completion_tokens":12,"total_tokens":402`),
			want: rep(Usage{tokens.Input: 7, tokens.Output: 395, tokens.Reasoning: 383})},
		{name: "total excess with the rule ignore", opts: ignore,
			body: chatUsage(`"prompt_tokens":7,"completion_tokens":12,"total_tokens":402`),
			want: rep(Usage{tokens.Input: 7, tokens.Output: 12})},
		{name: "total excess above a reported reasoning count", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":7,"completion_tokens":100,"total_tokens":157,"completion_tokens_details":{"reasoning_tokens":10}`),
			want: rep(Usage{tokens.Input: 7, tokens.Output: 150, tokens.Reasoning: 50})},
		{name: "reasoning reported outside completion_tokens is the excess", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":7,"completion_tokens":100,"total_tokens":307,"completion_tokens_details":{"reasoning_tokens":200}`),
			want: rep(Usage{tokens.Input: 7, tokens.Output: 300, tokens.Reasoning: 200})},
		{name: "total equal to the sum", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":7,"completion_tokens":12,"total_tokens":19`),
			want: rep(Usage{tokens.Input: 7, tokens.Output: 12})},
		{name: "total below the sum is no excess", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":7,"completion_tokens":12,"total_tokens":3`),
			want: rep(Usage{tokens.Input: 7, tokens.Output: 12})},
		{name: "total of zero", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":0,"completion_tokens":0,"total_tokens":0`),
			want: rep(Usage{})},
		{name: "total at the cap over zero counts", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":0,"completion_tokens":0,"total_tokens":1073741824`),
			want: rep(Usage{tokens.Output: maxCount, tokens.Reasoning: maxCount})},
		{name: "total above the cap is not believed", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":7,"completion_tokens":12,"total_tokens":1073741825`),
			want: badUsage},
		{name: "total of 2^63 is not believed", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":7,"completion_tokens":12,"total_tokens":9223372036854775808`),
			want: badUsage},
		{name: "negative total is not believed", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":7,"completion_tokens":12,"total_tokens":-1`),
			want: badUsage},
		{name: "total's last duplicated key wins", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":7,"completion_tokens":12,"total_tokens":402,"total_tokens":20`),
			want: rep(Usage{tokens.Input: 7, tokens.Output: 13, tokens.Reasoning: 1})},
		// (A JSON body that carried usage is not read for text.)
		{name: "total without completion_tokens: the output is estimated", opts: chatJSONOpts,
			body: chatUsage(`"prompt_tokens":7,"total_tokens":402`),
			want: Result{Usage: Usage{tokens.Input: 7}, Reported: true, Estimated: true, OutputEstimated: true}},
		{name: "total without prompt_tokens is no excess", opts: chatJSONOpts,
			body: chatUsage(`"completion_tokens":12,"total_tokens":402`),
			want: Result{Usage: Usage{tokens.Input: 99, tokens.Output: 12}, Reported: true, Estimated: true}},
		{name: "responses total excess", opts: respJSONOpts,
			body: `{"object":"response","usage":{"input_tokens":10,"output_tokens":5,"total_tokens":40}}`,
			want: rep(Usage{tokens.Input: 10, tokens.Output: 30, tokens.Reasoning: 25})},
		{name: "responses total excess with the rule ignore", opts: ignoreResp,
			body: `{"object":"response","usage":{"input_tokens":10,"output_tokens":5,"total_tokens":40}}`,
			want: rep(Usage{tokens.Input: 10, tokens.Output: 5})},
		{name: "embeddings total above prompt is no output", opts: embJSONOpts,
			body: `{"object":"list","data":[],"usage":{"prompt_tokens":8,"total_tokens":20}}`,
			want: rep(Usage{tokens.Input: 8})},
		{name: "embeddings total above prompt + completion is no output", opts: embJSONOpts,
			body: `{"object":"list","data":[],"usage":{"prompt_tokens":8,"completion_tokens":0,"total_tokens":20}}`,
			want: rep(Usage{tokens.Input: 8})},
		{name: "chat stream: the last usage chunk's excess", opts: chatStreamOpts,
			body: "data: " + `{"choices":[{"index":0,"delta":{"content":"Hi"}}],"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":100}}` + "\n\n" +
				"data: " + `{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":10}}` + "\n\ndata: [DONE]\n\n",
			want: Result{Usage: Usage{tokens.Input: 7, tokens.Output: 3, tokens.Reasoning: 1}, Reported: true, Events: 3, OutputTextRunes: 2}},
		{name: "anthropic has no total: an OpenAI-style one is not read", opts: antJSONOpts,
			body: antUsage(`"input_tokens":5,"output_tokens":3,"total_tokens":100`),
			want: rep(Usage{tokens.Input: 5, tokens.Output: 3})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := read(tt.opts, tt.body, true, 99)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("result (-want +got):\n%s", d)
			}
			// Split anywhere, the result is the same.
			body := []byte(tt.body)
			whole := feedChunks(tt.opts, body, nil, true)
			for cut := 1; cut < len(body); cut++ {
				if s := feedChunks(tt.opts, body, []int{cut}, true); !cmp.Equal(whole, s) {
					t.Fatalf("split at %d (-whole +split):\n%s", cut, cmp.Diff(whole, s))
				}
			}
		})
	}
}

// TestUsageShapesSplit: the shapes in streams, cut at every byte into two
// chunks and fed byte by byte, give the whole body's result.
func TestUsageShapesSplit(t *testing.T) {
	for _, sc := range shapeCases() {
		t.Run(sc.name, func(t *testing.T) {
			body := []byte(sc.body)
			whole := feedChunks(sc.opts, body, nil, true)
			if !whole.Reported || whole.Unparsed {
				t.Fatalf("the case reads no usage: %+v", whole)
			}
			var bytewise []int
			for i := 1; i < len(body); i++ {
				bytewise = append(bytewise, i)
				if got := feedChunks(sc.opts, body, []int{i}, true); !cmp.Equal(whole, got) {
					t.Fatalf("split at %d (-whole +split):\n%s", i, cmp.Diff(whole, got))
				}
			}
			if got := feedChunks(sc.opts, body, bytewise, true); !cmp.Equal(whole, got) {
				t.Fatalf("byte by byte (-whole +split):\n%s", cmp.Diff(whole, got))
			}
		})
	}
}

// shapeCases are hand-written bodies with the shapes, for the split
// tests, the chunk-split property and the fuzz seeds (see handWritten).
func shapeCases() []splitCase {
	return []splitCase{
		{"anthropic-stream-cache-ttl", antSSEOpts, crlf(antSSE(
			`"input_tokens":5,"cache_creation_input_tokens":200,"cache_creation":{"ephemeral_5m_input_tokens":50,"ephemeral_1h_input_tokens":150},"output_tokens":1`,
			`"input_tokens":5,"cache_creation_input_tokens":200,"cache_creation":{"ephemeral_5m_input_tokens":20,"ephemeral_1h_input_tokens":180},"output_tokens":9`))},
		{"anthropic-json-cache-ttl", antJSONOpts, antUsage(`"input_tokens":5,"cache_creation_input_tokens":1,` +
			`"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":3},"output_tokens":3`)},
		{"chat-stream-audio-cache-write-excess", chatStreamOpts, strings.Join([]string{
			`data: {"choices":[{"index":0,"delta":{"content":"Olá 🙂"}}],"usage":null}`,
			`data: {"choices":[],"usage":{"prompt_tokens":320,"completion_tokens":180,"total_tokens":600,` +
				`"prompt_tokens_details":{"cached_tokens":12,"cache_write_tokens":100,"audio_tokens":240},` +
				`"completion_tokens_details":{"reasoning_tokens":15,"audio_tokens":90}}}`,
			`data: [DONE]`, ``}, "\n\n")},
		{"responses-stream-audio", Options{Endpoint: llmapi.Responses, Stream: true, ContentType: "text/event-stream", Model: "gpt-5"},
			"event: response.completed\ndata: " + `{"type":"response.completed","response":{"usage":{"input_tokens":50,` +
				`"input_tokens_details":{"cached_tokens":10,"cache_write_tokens":5,"audio_tokens":40},"output_tokens":30,` +
				`"output_tokens_details":{"reasoning_tokens":3,"audio_tokens":25},"total_tokens":90}}}` + "\n\n"},
	}
}
