package usage

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sluicegw/sluice/internal/tokens"
)

// TestStreamEndingInProviderError takes recorded streams, cuts each where
// a provider that fails mid-stream would, and ends it with the error the
// provider sends then — Anthropic's `event: error` (overloaded_error),
// OpenAI's {"error":{…}} as a data event. The meter reports the error and
// what was delivered up to it: the counts the provider reported so far
// (Anthropic's message_start) and the tokenizer's count of the text
// streamed. Split at every byte offset, the result is the same.
func TestStreamEndingInProviderError(t *testing.T) {
	dir := filepath.Join(fixturesDir(t), "..", "thirdparty")
	tests := []struct {
		file, cutBefore, tail string
		delivered             string // the text streamed before the cut
		want                  Result
	}{{
		file:      "anthropic/agw-messages-stream-basic.yaml",
		cutBefore: "event: content_block_stop",
		tail:      "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
		delivered: "Hi there! How are you doing today? Is there anything I can help you with?",
		// message_start reported 15 input tokens and a provisional 5
		// output tokens; message_delta, with the final count, never came.
		want: Result{Usage: Usage{tokens.Input: 15}, Reported: true, Estimated: true, OutputEstimated: true, Events: 9,
			ProviderError: "overloaded_error"},
	}, {
		file:      "openai/agw-chat-stream.yaml",
		cutBefore: `data: {"id":"chatcmpl-DFnKV81lMKGBRRh35sxZO8I88ireo","object":"chat.completion.chunk","created":1772656915,"model":"gpt-5-nano-2025-08-07","service_tier":"default","system_fingerprint":null,"choices":[{"index":0,"delta":{"content":" How"}`,
		tail:      "data: {\"error\":{\"message\":\"The server had an error while processing your request.\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n",
		delivered: "Hi there!",
		want:      Result{Usage: Usage{tokens.Input: 5}, Estimated: true, OutputEstimated: true, Events: 5, ProviderError: "server_error"},
	}}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			cs := readCassettes(t, filepath.Dir(filepath.Join(dir, tt.file)))
			var c *cassette
			for i := range cs {
				if cs[i].Name+".yaml" == filepath.Base(tt.file) {
					c = &cs[i]
				}
			}
			if c == nil {
				t.Fatalf("no cassette %s in %s", tt.file, dir)
			}
			i := strings.Index(c.Body, tt.cutBefore)
			if i < 0 {
				t.Fatalf("%s: %q not in the recorded body", tt.file, tt.cutBefore)
			}
			body := []byte(c.Body[:i] + tt.tail)
			want := tt.want
			want.Usage[tokens.Output] = o200k(t, tt.delivered) // above Anthropic's provisional 5
			want.OutputTextRunes = runes(tt.delivered)
			opts := c.options()
			opts.Model = "gpt-4o" // o200k_base, as o200k counts
			whole := feedChunks(opts, body, nil, true)
			if diff := cmp.Diff(want, whole); diff != "" {
				t.Fatalf("result (-want +got):\n%s", diff)
			}
			for cut := 1; cut < len(body); cut++ {
				if got := feedChunks(opts, body, []int{cut}, true); !cmp.Equal(whole, got) {
					t.Fatalf("cut at %d (-whole +cut):\n%s", cut, cmp.Diff(whole, got))
				}
			}
		})
	}
}
