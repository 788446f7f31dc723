package payload

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/llmapi"
)

// The recorded OpenAI requests: what Parse reads from each, the estimate
// included (README.md's formula worked through in the comments).
func TestParseFixtures(t *testing.T) {
	want := map[string]Request{
		// 3 + 4 (one message); content null costs nothing
		"chat-bad-request.yaml": {Model: "gpt-5-nano", MaxOutputTokens: 0, InputTokens: 7, N: 1},
		// 3 + 4 + ceil(6/4)
		"chat-basic.yaml": {Model: "gpt-5-nano", MaxOutputTokens: -1, InputTokens: 9, N: 1},
		// 3 + 4 + ceil(67/4) + ceil(44 bytes of response_format/4)
		"chat-json-mode.yaml": {Model: "gpt-5-nano", MaxOutputTokens: -1, InputTokens: 32, N: 1},
		// 3 + 4×4 + ceil(28/4) + ceil(6/4) + ceil(34/4) + ceil(49/4)
		"chat-multiturn.yaml": {Model: "gpt-5-nano", MaxOutputTokens: -1, InputTokens: 50, N: 1},
		"chat-streaming.yaml": {Model: "gpt-5-nano", Stream: true, MaxOutputTokens: -1, InputTokens: 9, N: 1},
		// 3 + 4 + ceil(41/4) + ceil(652 bytes of tools/4)
		"chat-tools.yaml":         {Model: "gpt-5-nano", MaxOutputTokens: -1, InputTokens: 181, N: 1},
		"chat-unknown-model.yaml": {Model: "gpt-4.1-nano-wrong", MaxOutputTokens: -1, InputTokens: 9, N: 1},
		// ceil(86/4): completions add no per-request tokens
		"completion-basic.yaml":           {Model: "babbage-002", MaxOutputTokens: 25, InputTokens: 22, N: 1},
		"completion-streaming.yaml":       {Model: "babbage-002", Stream: true, MaxOutputTokens: 25, InputTokens: 22, N: 1},
		"completion-streaming-usage.yaml": {Model: "babbage-002", Stream: true, MaxOutputTokens: 25, InputTokens: 22, IncludeUsage: true, N: 1},
		// one token id
		"embeddings-bad-request.yaml": {Model: "text-embedding-3-small", MaxOutputTokens: -1, InputTokens: 1, N: 1},
		// ceil(27/4)
		"embeddings-basic.yaml": {Model: "text-embedding-3-small", MaxOutputTokens: -1, InputTokens: 7, N: 1},
		// seven token ids
		"embeddings-tokens.yaml":        {Model: "text-embedding-3-small", MaxOutputTokens: -1, InputTokens: 7, N: 1},
		"embeddings-unknown-model.yaml": {Model: "text-embedding-4-ultra", MaxOutputTokens: -1, InputTokens: 6, N: 1},
	}
	seen := 0
	for _, r := range loadRecorded(t) {
		t.Run(r.name, func(t *testing.T) {
			got, err := Parse(r.ep, r.body)
			if err != nil {
				t.Fatalf("Parse(%v): %v", r.ep, err)
			}
			w, ok := want[r.name]
			if !ok {
				t.Fatalf("no expectation for %s; Parse read %+v", r.name, got)
			}
			seen++
			if diff := cmp.Diff(w, got); diff != "" {
				t.Errorf("Parse(%v) (-want +got):\n%s", r.ep, diff)
			}
			if est, err := referenceEstimate(r.ep, r.body); err != nil || est != got.InputTokens {
				t.Errorf("estimate recomputed from encoding/json's tokens: %d (%v), Parse: %d", est, err, got.InputTokens)
			}
			ref, err := reference(r.ep, r.body)
			if err != nil {
				t.Fatal(err)
			}
			got.InputTokens = 0
			if diff := cmp.Diff(ref, got); diff != "" {
				t.Errorf("Parse disagrees with encoding/json (-json +Parse):\n%s", diff)
			}
		})
	}
	if seen != len(want) {
		t.Errorf("%d of %d expected fixtures found", seen, len(want))
	}
}

// The estimate against the prompt_tokens the provider reported for the
// same request: within the error README.md states for English text and code.
func TestFixtureEstimates(t *testing.T) {
	n := 0
	for _, r := range loadRecorded(t) {
		if r.promptTokens <= 0 {
			continue
		}
		n++
		got, err := Parse(r.ep, r.body)
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		ratio := float64(got.InputTokens) / float64(r.promptTokens)
		t.Logf("%-32s estimate %4d, provider %4d (×%.2f)", r.name, got.InputTokens, r.promptTokens, ratio)
		if ratio < 0.6 || ratio > 1.6 {
			t.Errorf("%s: estimate %d is ×%.2f the provider's %d, outside [0.6, 1.6]", r.name, got.InputTokens, ratio, r.promptTokens)
		}
	}
	if n == 0 {
		t.Fatal("no fixture reports prompt_tokens")
	}
}

const (
	// An Anthropic Messages request with a cached system block, an image,
	// and fields the Messages API does not have (n, stream_options).
	anthropicBody = `{
  "model": "claude-sonnet-4-5",
  "max_tokens": 1024,
  "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
  "messages": [
    {"role": "user", "content": [
      {"type": "text", "text": "What is in this image?"},
      {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="}}
    ]},
    {"role": "assistant", "content": "A cat."},
    {"role": "user", "content": "Thanks! 谢谢"}
  ],
  "tools": [{"name": "get_weather", "description": "Weather by city", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
  "stream": true,
  "n": 3,
  "stream_options": "not a Messages field"
}`
	anthropicTools = `[{"name": "get_weather", "description": "Weather by city", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]`

	// An OpenAI Responses request: instructions, an input list with an
	// image and a tool output, max_output_tokens (max_tokens is not a
	// Responses field).
	responsesBody = `{"model":"gpt-5","instructions":"Be brief.","input":[{"role":"user","content":[{"type":"input_text","text":"Describe this."},{"type":"input_image","image_url":"https://example.com/a.png","detail":"low"}]},{"type":"function_call_output","call_id":"call_1","output":"{\"temp\":21}"}],"max_output_tokens":500,"max_tokens":7,"stream":true,"text":{"format":{"type":"text"}}}`
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		ep   llmapi.Endpoint
		body string
		want Request
	}{{
		// 3 + system ceil(14/4)=4 + 3 messages×4 + ceil(22/4)=6 + image 1600
		// + ceil(6/4)=2 + ceil((8+2×4)/4)=4 + tools by size
		name: "messages", ep: llmapi.Messages, body: anthropicBody,
		want: Request{Model: "claude-sonnet-4-5", Stream: true, MaxOutputTokens: 1024, InputTokens: 1631 + (int64(len(anthropicTools))+3)/4, N: 1},
	}, {
		// 3 + ceil(9/4)=3 + 2 items×4 + ceil(14/4)=4 + image 1600 + output
		// ceil(11/4)=3 + text by size ceil(26/4)=7
		name: "responses", ep: llmapi.Responses, body: responsesBody,
		want: Request{Model: "gpt-5", Stream: true, MaxOutputTokens: 500, InputTokens: 1628, N: 1},
	}, {
		name: "responses string input", ep: llmapi.Responses, body: `{"model":"gpt-5","input":"Hello there"}`,
		want: Request{Model: "gpt-5", MaxOutputTokens: -1, InputTokens: 3 + 3, N: 1},
	}, {
		// 3 + 2×4 + "Hi" 1 + image 1600 + "lookup" 2 + arguments ceil(9/4)=3
		name: "chat with image and tool call; larger max wins", ep: llmapi.ChatCompletions,
		body: `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA","detail":"high"}}]},{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{\"q\":\"x\"}"}}]}],"max_tokens":100,"max_completion_tokens":50,"n":2,"stream":true,"stream_options":{"include_usage":false}}`,
		want: Request{Model: "gpt-4o", Stream: true, MaxOutputTokens: 100, InputTokens: 1617, N: 2},
	}, {
		name: "completions with token ids", ep: llmapi.Completions,
		body: `{"model":"davinci-002","prompt":[[1,2,3],[4,5]],"n":2,"max_tokens":16,"max_completion_tokens":20,"stream":true,"stream_options":{"x":[1],"include_usage":true}}`,
		want: Request{Model: "davinci-002", Stream: true, MaxOutputTokens: 20, InputTokens: 5, IncludeUsage: true, N: 2},
	}, {
		name: "embeddings read neither stream nor max_tokens", ep: llmapi.Embeddings,
		body: `{"model":"text-embedding-3-small","input":["first text","second"],"stream":"x","max_tokens":"x","n":0,"Stream":1}`,
		want: Request{Model: "text-embedding-3-small", MaxOutputTokens: -1, InputTokens: 3 + 2, N: 1},
	}, {
		name: "unknown endpoint reads every field", ep: llmapi.Unknown,
		body: `{"model":"m","prompt":"abcd","input":"efgh","system":"ijkl","max_output_tokens":9,"max_tokens":3,"n":4,"stream":true,"stream_options":{"include_usage":true}}`,
		want: Request{Model: "m", Stream: true, MaxOutputTokens: 9, InputTokens: 3, IncludeUsage: true, N: 4},
	}, {
		// keys Parse does not read on the endpoint may repeat
		name: "duplicate keys Parse does not read", ep: llmapi.Embeddings,
		body: `{"model":"a","user":"x","user":"y","stream":1,"stream":2,"messages":[],"messages":[],"metadata":{"model":1,"model":2}}`,
		want: Request{Model: "a", MaxOutputTokens: -1, N: 1},
	}, {
		name: "escaped keys and values", ep: llmapi.ChatCompletions,
		body: `{"mod\u0065l":"gpt\u002d4o\u00e9\ud83d\ude00","str\u0065am":true,"\u006e":3}`,
		want: Request{Model: "gpt-4oé😀", Stream: true, MaxOutputTokens: -1, InputTokens: 3, N: 3},
	}, {
		name: "nulls are absent", ep: llmapi.ChatCompletions,
		body: `{"model":"a","stream":null,"max_tokens":null,"max_completion_tokens":null,"n":null,"stream_options":null,"messages":null}`,
		want: Request{Model: "a", MaxOutputTokens: -1, InputTokens: 3, N: 1},
	}, {
		name: "negative zero, limits, nested model", ep: llmapi.ChatCompletions,
		body: "\t{ \"metadata\" : {\"model\":5}, \"model\" :\n\"a\", \"max_tokens\": -0, \"max_completion_tokens\": 4294967295, \"n\": 128 }\r\n",
		want: Request{Model: "a", MaxOutputTokens: 4294967295, InputTokens: 3, N: 128},
	}, {
		name: "a model of the longest length", ep: llmapi.Unknown, body: `{"model":"` + strings.Repeat("m", MaxModelLen) + `"}`,
		want: Request{Model: strings.Repeat("m", MaxModelLen), MaxOutputTokens: -1, N: 1},
	}, {
		name: "an escaped model of the longest length", ep: llmapi.Unknown, body: `{"model":"` + strings.Repeat(`\u006d`, MaxModelLen) + `"}`,
		want: Request{Model: strings.Repeat("m", MaxModelLen), MaxOutputTokens: -1, N: 1},
	}, {
		name: "a space is no control character", ep: llmapi.Unknown, body: `{"model":" my model~"}`,
		want: Request{Model: " my model~", MaxOutputTokens: -1, N: 1},
	}, {
		name: "lone surrogates decode to U+FFFD", ep: llmapi.Completions,
		body: `{"model":"m\ud800x\udc00","prompt":"\ud800"}`,
		want: Request{Model: "m\uFFFDx\uFFFD", MaxOutputTokens: -1, InputTokens: 1, N: 1},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.ep, []byte(tc.body))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
			if est, err := referenceEstimate(tc.ep, []byte(tc.body)); err != nil || est != got.InputTokens {
				t.Errorf("estimate recomputed from encoding/json's tokens: %d (%v), Parse: %d", est, err, got.InputTokens)
			}
			ref, err := reference(tc.ep, []byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			got.InputTokens = 0
			if diff := cmp.Diff(ref, got); diff != "" {
				t.Errorf("Parse disagrees with encoding/json (-json +Parse):\n%s", diff)
			}
		})
	}
}

// TestParseReadsEachFieldOnItsEndpoints: every top-level key Parse reads
// counts on exactly the endpoints whose API has it, and on an unknown
// endpoint, which reads them all; anywhere else it is an unread member
// (validated, free). The estimate's fields are told apart by the tokens
// they add: a text field its string, a size field its raw JSON.
func TestParseReadsEachFieldOnItsEndpoints(t *testing.T) {
	const (
		unknown = llmapi.Unknown
		chat    = llmapi.ChatCompletions
		compl   = llmapi.Completions
		embed   = llmapi.Embeddings
		resp    = llmapi.Responses
		msgs    = llmapi.Messages
	)
	text := func(r *Request) { r.InputTokens += 2 } // "abcdefgh"
	size := func(r *Request) { r.InputTokens += 4 } // 13 bytes of JSON
	for _, tc := range []struct {
		key, val string
		on       []llmapi.Endpoint
		read     func(*Request)
	}{
		{"stream", `true`, []llmapi.Endpoint{unknown, chat, compl, resp, msgs}, func(r *Request) { r.Stream = true }},
		{"max_tokens", `7`, []llmapi.Endpoint{unknown, chat, compl, msgs}, func(r *Request) { r.MaxOutputTokens = 7 }},
		{"max_completion_tokens", `7`, []llmapi.Endpoint{unknown, chat, compl}, func(r *Request) { r.MaxOutputTokens = 7 }},
		{"max_output_tokens", `7`, []llmapi.Endpoint{unknown, resp}, func(r *Request) { r.MaxOutputTokens = 7 }},
		{"n", `3`, []llmapi.Endpoint{unknown, chat, compl}, func(r *Request) { r.N = 3 }},
		{"stream_options", `{"include_usage":true}`, []llmapi.Endpoint{unknown, chat, compl}, func(r *Request) { r.IncludeUsage = true }},
		{"messages", `"abcdefgh"`, []llmapi.Endpoint{unknown, chat, msgs}, text},
		{"input", `"abcdefgh"`, []llmapi.Endpoint{unknown, embed, resp}, text},
		{"prompt", `"abcdefgh"`, []llmapi.Endpoint{unknown, compl}, text},
		{"suffix", `"abcdefgh"`, []llmapi.Endpoint{unknown, compl}, text},
		{"system", `"abcdefgh"`, []llmapi.Endpoint{unknown, msgs}, text},
		{"instructions", `"abcdefgh"`, []llmapi.Endpoint{unknown, resp}, text},
		{"tools", `{"abcd":1234}`, []llmapi.Endpoint{unknown, chat, resp, msgs}, size},
		{"functions", `{"abcd":1234}`, []llmapi.Endpoint{unknown, chat}, size},
		{"response_format", `{"abcd":1234}`, []llmapi.Endpoint{unknown, chat}, size},
		{"text", `{"abcd":1234}`, []llmapi.Endpoint{unknown, resp}, size},
		{"background", `true`, []llmapi.Endpoint{unknown, resp}, func(r *Request) { r.Background = true }},
		{"previous_response_id", `"resp_1"`, []llmapi.Endpoint{unknown, resp}, func(r *Request) { r.ByReference = RefPreviousResponseID }},
		{"conversation", `{"id":"conv_1"}`, []llmapi.Endpoint{unknown, resp}, func(r *Request) { r.ByReference = RefConversation }},
	} {
		for _, ep := range []llmapi.Endpoint{unknown, chat, compl, embed, resp, msgs} {
			want := Request{Model: "m", MaxOutputTokens: -1, N: 1}
			if ep == chat || ep == resp || ep == msgs {
				want.InputTokens = perRequestTokens
			}
			if slices.Contains(tc.on, ep) {
				tc.read(&want)
			}
			if tc.key == "prompt" && ep == resp {
				want.ByReference = RefStoredPrompt // a stored prompt's id, not text
			}
			body := `{"model":"m","` + tc.key + `":` + tc.val + `}`
			got, err := Parse(ep, []byte(body))
			if err != nil {
				t.Errorf("Parse(%v, %s): %v", ep, body, err)
			} else if got != want {
				t.Errorf("Parse(%v, %s) = %+v, want %+v", ep, body, got, want)
			}
		}
	}
}

func TestParseErrors(t *testing.T) {
	deep := strings.Repeat(`{"a":`, 129) + "1" + strings.Repeat("}", 129)
	tooDeep := `{"model":"m","x":` + strings.Repeat("[", 128) + strings.Repeat("]", 128) + "}"
	for _, tc := range []struct {
		ep         llmapi.Endpoint
		body, code string
		msg        string
	}{
		{0, "", apierr.CodeEmptyBody, "the request body is empty"},
		{0, " \r\n\t", apierr.CodeEmptyBody, "the request body is empty"},

		{0, `[]`, apierr.CodeNotAnObject, "the request body must be a JSON object, got an array"},
		{0, ` "x" `, apierr.CodeNotAnObject, "the request body must be a JSON object, got a string"},
		{0, `12`, apierr.CodeNotAnObject, "the request body must be a JSON object, got a number"},
		{0, `null`, apierr.CodeNotAnObject, "the request body must be a JSON object, got null"},
		{0, `true`, apierr.CodeNotAnObject, "the request body must be a JSON object, got a boolean"},

		{0, `{"model":"a",}`, apierr.CodeInvalidJSON, "invalid JSON at byte 13: invalid character '}' looking for beginning of object key string"},
		{0, `{"model":"a"`, apierr.CodeInvalidJSON, "invalid JSON at byte 12: unexpected end of input"},
		// cut short wherever the scanner looks at the next byte (an
		// object's first member, a key's colon, a value, a media string's
		// content, an array's first and next element, a number's digits):
		// the end is reported, nothing past it is read
		{0, `{`, apierr.CodeInvalidJSON, "invalid JSON at byte 1: unexpected end of input"},
		{0, `{"model"`, apierr.CodeInvalidJSON, "invalid JSON at byte 8: unexpected end of input"},
		{0, `{"model":`, apierr.CodeInvalidJSON, "invalid JSON at byte 9: unexpected end of input"},
		{0, `{"x":`, apierr.CodeInvalidJSON, "invalid JSON at byte 5: unexpected end of input"},
		{llmapi.ChatCompletions, `{"messages":[{"url":"x"`, apierr.CodeInvalidJSON, "invalid JSON at byte 23: unexpected end of input"},
		{llmapi.ChatCompletions, `{"messages":[`, apierr.CodeInvalidJSON, "invalid JSON at byte 13: unexpected end of input"},
		{0, `{"x":[1`, apierr.CodeInvalidJSON, "invalid JSON at byte 7: unexpected end of input"},
		{0, `{"x":1.`, apierr.CodeInvalidJSON, "invalid JSON at byte 7: unexpected end of input"},
		{0, `{"model":"a`, apierr.CodeInvalidJSON, "invalid JSON at byte 11: unexpected end of input"},
		{0, `{"model":"a"} x`, apierr.CodeInvalidJSON, "invalid JSON at byte 14: invalid character 'x' after top-level value"},
		{0, `[1] {`, apierr.CodeInvalidJSON, "invalid JSON at byte 4: invalid character '{' after top-level value"},
		{0, `{"model":tru}`, apierr.CodeInvalidJSON, "invalid JSON at byte 12: invalid character '}' in literal true (expecting 'e')"},
		{0, `{"model":"a","n":01}`, apierr.CodeInvalidJSON, "invalid JSON at byte 18: invalid character '1' after object key:value pair"},
		{0, `{"model":"a","x":1.}`, apierr.CodeInvalidJSON, "invalid JSON at byte 19: invalid character '}' after decimal point in numeric literal"},
		{0, `{"model":"a","x":1e+}`, apierr.CodeInvalidJSON, "invalid JSON at byte 20: invalid character '}' in exponent of numeric literal"},
		{0, `{"model":"a","x":-a}`, apierr.CodeInvalidJSON, "invalid JSON at byte 18: invalid character 'a' in numeric literal"},
		{0, `{"model":"a","x":+1}`, apierr.CodeInvalidJSON, "invalid JSON at byte 17: invalid character '+' looking for beginning of value"},
		{0, `{"model":"a\x"}`, apierr.CodeInvalidJSON, `invalid JSON at byte 12: invalid character 'x' in string escape code`},
		{0, `{"model":"\u12G4"}`, apierr.CodeInvalidJSON, `invalid JSON at byte 14: invalid character 'G' in \u hexadecimal character escape`},
		{0, "{\"model\":\"a\nb\"}", apierr.CodeInvalidJSON, "invalid JSON at byte 11: invalid character byte 0x0A in string literal"},
		{0, `{"model" "a"}`, apierr.CodeInvalidJSON, "invalid JSON at byte 9: invalid character '\"' after object key"},
		{0, `{"a":[1 2]}`, apierr.CodeInvalidJSON, "invalid JSON at byte 8: invalid character '2' after array element"},
		{0, `{"a":}`, apierr.CodeInvalidJSON, "invalid JSON at byte 5: invalid character '}' looking for beginning of value"},
		{0, `{'a':1}`, apierr.CodeInvalidJSON, `invalid JSON at byte 1: invalid character '\'' looking for beginning of object key string`},
		{0, "\xef\xbb\xbf{}", apierr.CodeInvalidJSON, "invalid JSON at byte 0: invalid character byte 0xEF looking for beginning of value"},
		{0, tooDeep, apierr.CodeInvalidJSON, "invalid JSON at byte 144: nested too deeply (more than 128 levels)"},
		{0, deep, apierr.CodeInvalidJSON, "invalid JSON at byte 640: nested too deeply (more than 128 levels)"},
		// a syntax error anywhere wins over a bad field before it
		{0, `{"model":5,"stream":"x",`, apierr.CodeInvalidJSON, "invalid JSON at byte 24: unexpected end of input"},

		{0, "{\"model\":\"a\xffb\"}", apierr.CodeInvalidUTF8, "invalid UTF-8 in a string at byte 11"},
		{0, "{\"a\xc0\xaf\":1}", apierr.CodeInvalidUTF8, "invalid UTF-8 in a string at byte 3"},        // overlong '/'
		{0, "{\"a\":\"\xed\xa0\x80\"}", apierr.CodeInvalidUTF8, "invalid UTF-8 in a string at byte 6"}, // a surrogate
		{0, "{\"a\":\"\xe4\xb8\"}", apierr.CodeInvalidUTF8, "invalid UTF-8 in a string at byte 6"},     // cut short

		{0, `{}`, apierr.CodeMissingModel, `the request body has no "model" field`},
		{llmapi.Messages, `{"messages":[{"model":"x"}]}`, apierr.CodeMissingModel, `the request body has no "model" field`},

		{0, `{"model":5}`, apierr.CodeInvalidType, `"model" must be a string, got a number`},
		{0, `{"model":null}`, apierr.CodeInvalidType, `"model" must be a string, got null`},
		{0, `{"model":{"name":"a"}}`, apierr.CodeInvalidType, `"model" must be a string, got an object`},
		{0, `{"model":["a"]}`, apierr.CodeInvalidType, `"model" must be a string, got an array`},
		{0, `{"model":""}`, apierr.CodeMissingModel, `"model" must not be empty`},
		{0, `{"model":"","model":"a"}`, apierr.CodeMissingModel, `"model" must not be empty`},
		{0, `{"model":"a","model":false}`, apierr.CodeDuplicateField, `"model" occurs more than once in the request body; send it once`},
		{0, `{"model":"` + strings.Repeat("m", 257) + `"}`, apierr.CodeInvalidModel, `"model" is longer than 256 bytes`},
		{0, `{"model":"` + strings.Repeat(`\u006d`, 257) + `"}`, apierr.CodeInvalidModel, `"model" is longer than 256 bytes`},
		{0, `{"model":"a\nb"}`, apierr.CodeInvalidModel, `"model" contains a control character (U+000A)`},
		{0, `{"model":"a\u007f"}`, apierr.CodeInvalidModel, `"model" contains a control character (U+007F)`},

		{llmapi.ChatCompletions, `{"model":"a","stream":"yes"}`, apierr.CodeInvalidType, `"stream" must be a boolean, got a string`},
		{llmapi.Messages, `{"model":"a","stream":1}`, apierr.CodeInvalidType, `"stream" must be a boolean, got a number`},
		{llmapi.ChatCompletions, `{"model":"a","max_tokens":-1}`, apierr.CodeIntegerBelowMin, `"max_tokens" must be a non-negative integer (at most 4294967295), got -1`},
		{llmapi.ChatCompletions, `{"model":"a","max_tokens":1.5}`, apierr.CodeInvalidType, `"max_tokens" must be a non-negative integer (at most 4294967295), got 1.5`},
		{llmapi.ChatCompletions, `{"model":"a","max_tokens":1e3}`, apierr.CodeInvalidType, `"max_tokens" must be a non-negative integer (at most 4294967295), got 1e3`},
		{llmapi.ChatCompletions, `{"model":"a","max_tokens":"10"}`, apierr.CodeInvalidType, `"max_tokens" must be a non-negative integer (at most 4294967295), got a string`},
		{llmapi.ChatCompletions, `{"model":"a","max_tokens":4294967296}`, apierr.CodeIntegerAboveMax, `"max_tokens" must be a non-negative integer (at most 4294967295), got 4294967296`},
		{llmapi.ChatCompletions, `{"model":"a","max_tokens":123456789012345678901234567890123456789}`, apierr.CodeIntegerAboveMax, `"max_tokens" must be a non-negative integer (at most 4294967295), got 12345678901234567890123456789012…`},
		// 32 bytes are quoted whole
		{llmapi.ChatCompletions, `{"model":"a","max_tokens":12345678901234567890123456789012}`, apierr.CodeIntegerAboveMax, `"max_tokens" must be a non-negative integer (at most 4294967295), got 12345678901234567890123456789012`},
		{llmapi.Completions, `{"model":"a","max_completion_tokens":true}`, apierr.CodeInvalidType, `"max_completion_tokens" must be a non-negative integer (at most 4294967295), got a boolean`},
		{llmapi.Responses, `{"model":"a","max_output_tokens":[]}`, apierr.CodeInvalidType, `"max_output_tokens" must be a non-negative integer (at most 4294967295), got an array`},
		{llmapi.Messages, `{"model":"a","max_tokens":{}}`, apierr.CodeInvalidType, `"max_tokens" must be a non-negative integer (at most 4294967295), got an object`},
		{llmapi.ChatCompletions, `{"model":"a","n":0}`, apierr.CodeIntegerBelowMin, `"n" must be an integer from 1 to 128, got 0`},
		{llmapi.Completions, `{"model":"a","n":129}`, apierr.CodeIntegerAboveMax, `"n" must be an integer from 1 to 128, got 129`},
		{llmapi.ChatCompletions, `{"model":"a","stream_options":"x"}`, apierr.CodeInvalidType, `"stream_options" must be an object, got a string`},
		{llmapi.ChatCompletions, `{"model":"a","stream_options":{"include_usage":1}}`, apierr.CodeInvalidType, `"stream_options.include_usage" must be a boolean, got a number`},
		{llmapi.ChatCompletions, `{"Model":"a","model":"b"}`, apierr.CodeInvalidField, `top-level key "Model" differs from "model" only in case; send "model"`},
		{llmapi.ChatCompletions, `{"model":"b","ſtream":true}`, apierr.CodeInvalidField, `top-level key "ſtream" differs from "stream" only in case; send "stream"`},
		{llmapi.Messages, `{"model":"b","max_to\u212aens":9}`, apierr.CodeInvalidField, "top-level key \"max_to\u212aens\" differs from \"max_tokens\" only in case; send \"max_tokens\""},
		{llmapi.Completions, `{"model":"b","N":2}`, apierr.CodeInvalidField, `top-level key "N" differs from "n" only in case; send "n"`},
		{llmapi.ChatCompletions, `{"model":"b","Stream_Options":{}}`, apierr.CodeInvalidField, `top-level key "Stream_Options" differs from "stream_options" only in case; send "stream_options"`},
		// the first bad field is reported
		{llmapi.ChatCompletions, `{"model":"a","n":0,"stream":0}`, apierr.CodeIntegerBelowMin, `"n" must be an integer from 1 to 128, got 0`},
		{llmapi.ChatCompletions, `{"stream":0}`, apierr.CodeInvalidType, `"stream" must be a boolean, got a number`},
	} {
		t.Run(tc.code+"/"+clip([]byte(tc.body), 40), func(t *testing.T) {
			body := []byte(tc.body)
			body = body[:len(body):len(body)] // no spare capacity to read into
			_, err := Parse(tc.ep, body)
			var e *apierr.Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse(%q) = %v, want an *apierr.Error", tc.body, err)
			}
			if e.Status != 400 || e.Code != tc.code || e.Message != tc.msg {
				t.Errorf("Parse(%q):\n got %d %s: %s\nwant 400 %s: %s", tc.body, e.Status, e.Code, e.Message, tc.code, tc.msg)
			}
			if e.Error() != e.Message {
				t.Errorf("Error() = %q, want the message", e.Error())
			}
		})
	}
	if _, err := Parse(0, []byte(`{"model":"m","x":`+strings.Repeat("[", 127)+strings.Repeat("]", 127)+"}")); err != nil {
		t.Errorf("128 levels of nesting: %v", err)
	}
}

// TestParseRefusesBadIntegersAndDuplicates: n outside OpenAI's 1–128, the
// output caps below 0, non-integers, and any field Parse reads given twice
// (top level, or include_usage inside stream_options) are refused with 400
// in OpenAI's shape: the field in Param, OpenAI's codes for a bound.
func TestParseRefusesBadIntegersAndDuplicates(t *testing.T) {
	const (
		below = apierr.CodeIntegerBelowMin
		above = apierr.CodeIntegerAboveMax
		typ   = apierr.CodeInvalidType
		dup   = apierr.CodeDuplicateField
	)
	for _, tc := range []struct {
		ep          llmapi.Endpoint
		body        string
		code, param string
	}{
		{llmapi.ChatCompletions, `{"model":"a","n":0}`, below, "n"},
		{llmapi.ChatCompletions, `{"model":"a","n":-1}`, below, "n"},
		{llmapi.ChatCompletions, `{"model":"a","n":-9223372036854775809}`, below, "n"},
		{llmapi.ChatCompletions, `{"model":"a","n":129}`, above, "n"},
		{llmapi.Completions, `{"model":"a","n":1000}`, above, "n"},
		{llmapi.ChatCompletions, `{"model":"a","n":9223372036854775808}`, above, "n"}, // 2^63
		{llmapi.Unknown, `{"model":"a","n":99999999999999999999999}`, above, "n"},
		{llmapi.ChatCompletions, `{"model":"a","n":1.5}`, typ, "n"},
		{llmapi.ChatCompletions, `{"model":"a","n":1e2}`, typ, "n"},
		{llmapi.ChatCompletions, `{"model":"a","n":"2"}`, typ, "n"},
		{llmapi.ChatCompletions, `{"model":"a","n":2,"n":1}`, dup, "n"},
		{llmapi.ChatCompletions, `{"model":"a","max_tokens":-1}`, below, "max_tokens"},
		{llmapi.Messages, `{"model":"a","max_tokens":-9223372036854775808}`, below, "max_tokens"},
		{llmapi.ChatCompletions, `{"model":"a","max_completion_tokens":-5}`, below, "max_completion_tokens"},
		{llmapi.Responses, `{"model":"a","max_output_tokens":-1}`, below, "max_output_tokens"},
		{llmapi.Responses, `{"model":"a","max_output_tokens":9223372036854775808}`, above, "max_output_tokens"},
		{llmapi.ChatCompletions, `{"model":"a","max_tokens":"1"}`, typ, "max_tokens"},
		{llmapi.ChatCompletions, `{"model":"a","stream":"yes"}`, typ, "stream"},
		{llmapi.ChatCompletions, `{"model":"a","stream_options":{"include_usage":1}}`, typ, "stream_options.include_usage"},
		{llmapi.ChatCompletions, `{"model":5}`, typ, "model"},
		{llmapi.ChatCompletions, `{}`, apierr.CodeMissingModel, ""}, // as OpenAI: param null
		// two models: the provider may run the one Sluice did not meter
		{llmapi.ChatCompletions, `{"model":"cheap","model":"expensive"}`, dup, "model"},
		{llmapi.ChatCompletions, `{"model":"cheap","mod\u0065l":"expensive"}`, dup, "model"},
		{llmapi.Messages, `{"model":"a","stream":false,"stream":true}`, dup, "stream"},
		{llmapi.ChatCompletions, `{"model":"a","stream":null,"stream":true}`, dup, "stream"},
		{llmapi.ChatCompletions, `{"model":"a","max_tokens":5,"max_tokens":null}`, dup, "max_tokens"},
		{llmapi.Completions, `{"model":"a","max_completion_tokens":5,"max_completion_tokens":6}`, dup, "max_completion_tokens"},
		{llmapi.Responses, `{"model":"a","max_output_tokens":5,"max_output_tokens":6}`, dup, "max_output_tokens"},
		{llmapi.ChatCompletions, `{"model":"a","stream_options":{},"stream_options":{"include_usage":true}}`, dup, "stream_options"},
		{llmapi.ChatCompletions, `{"model":"a","stream_options":{"include_usage":true,"include_usage":false}}`, dup, "stream_options.include_usage"},
		// the fields the estimate measures
		{llmapi.ChatCompletions, `{"model":"a","messages":[],"messages":[{"role":"user","content":"long"}]}`, dup, "messages"},
		{llmapi.Messages, `{"model":"a","system":"x","system":"y"}`, dup, "system"},
		{llmapi.Responses, `{"model":"a","input":"x","instructions":"i","input":"y"}`, dup, "input"},
		{llmapi.Completions, `{"model":"a","prompt":"x","suffix":"s","prompt":"y"}`, dup, "prompt"},
		{llmapi.ChatCompletions, `{"model":"a","tools":[],"tools":[]}`, dup, "tools"},
		{llmapi.Embeddings, `{"model":"a","input":"x","input":"y"}`, dup, "input"},
		// the first problem wins: a bad value before the duplicate
		{llmapi.ChatCompletions, `{"model":"a","n":0,"model":"b"}`, below, "n"},
	} {
		t.Run(clip([]byte(tc.body), 60), func(t *testing.T) {
			_, err := Parse(tc.ep, []byte(tc.body))
			e, ok := apierr.As(err)
			if !ok {
				t.Fatalf("Parse(%v, %s) = %v, want an *apierr.Error", tc.ep, tc.body, err)
			}
			if e.Status != 400 || e.Code != tc.code || e.Param != tc.param {
				t.Errorf("Parse(%v, %s) = %d %s param %q (%s); want 400 %s param %q", tc.ep, tc.body, e.Status, e.Code, e.Param, e.Message, tc.code, tc.param)
			}
			if !strings.Contains(e.Message, tc.param[strings.LastIndexByte(tc.param, '.')+1:]) {
				t.Errorf("message %q does not name %s", e.Message, tc.param)
			}
		})
	}
	for _, ok := range []string{`{"model":"a","n":1}`, `{"model":"a","n":128}`, `{"model":"a","n":null}`, `{"model":"a","max_tokens":0}`} {
		if _, err := Parse(llmapi.ChatCompletions, []byte(ok)); err != nil {
			t.Errorf("Parse(%s): %v", ok, err)
		}
	}
}

// str's units: 1 per decoded rune below U+0800, 4 per rune at or above it,
// with every escape form decoded.
func TestStringUnits(t *testing.T) {
	for lit, want := range map[string]int64{
		`""`:                      0,
		`"Hello!"`:                6,
		`"0123456789abcdef012"`:   19, // crosses an 8-byte block
		`"a\nb\"c\\d\/e\tf"`:      11,
		`"\u0041\u00e9\u07ff"`:    3,
		`"\u0800\uffff"`:          8,
		`"\ud83d\ude00"`:          4,  // a surrogate pair is one rune
		`"\ud800"`:                4,  // lone: U+FFFD
		`"\udc00\ud800\u0041"`:    9,  // two lone surrogates, then 'A'
		`"\ud800\ud800\udc00"`:    8,  // lone high, then a pair
		"\"é中😀\"":                 9,  // raw 2-, 3- and 4-byte runes
		"\"abcdefgé中😀xyzxyzxyz\"": 25, // after a full block
	} {
		s := scanner{buf: []byte(lit)}
		got, _, ok := s.str()
		if !ok || s.pos != len(lit) {
			t.Errorf("str(%s): ok %v, pos %d of %d, err %v", lit, ok, s.pos, len(lit), s.err)
			continue
		}
		if got != want {
			t.Errorf("str(%s) = %d units, want %d", lit, got, want)
		}
	}
}

// Parse allocates the model string and nothing that grows with the body.
func TestParseAllocs(t *testing.T) {
	for _, n := range []int{800, 1 << 20} {
		body := chatBody(t, n, true)
		allocs := testing.AllocsPerRun(5, func() {
			if _, err := Parse(llmapi.ChatCompletions, body); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > 1 {
			t.Errorf("Parse of %d bytes: %v allocations, want at most 1", len(body), allocs)
		}
	}
}

// Equivalent mutants gremlins leaves alive in this package:
//   - apply.go, Apply: "members++" as "members--": members is read only as
//     "members == 0", which holds on the first member either way and
//     never again (1, 2, … or -1, -2, …).
//   - apply.go, Apply: "runStart < 0" as "<= 0", "runStart >= 0" as "> 0"
//     (twice): runStart is -1 or a key's offset, and every key follows
//     the top-level '{', so runStart is never 0.
//   - payload.go, foldedField: "len(key) > 3*len(...)" as ">=": they differ
//     only for a 63-byte key, and the longest key equal under Unicode
//     simple folding to a field name is 24 bytes ("max_completion_tokens"
//     with U+212A for k and U+017F for s), so such a key matches none.
//   - payload.go, Parse: "MaxOutputTokens: -1" as "1" (INVERT_NEGATIVES,
//     ARITHMETIC_BASE): req.MaxOutputTokens is set from the three caps
//     before Parse returns req, and every error returns Request{}, so the
//     initial value is never read.
//   - scan.go, decodedPrefix: "r >= utf8.RuneSelf" as ">": only \u0080
//     differs, whose byte 0x80 then goes into the prefix instead of
//     ending it. The prefix is only compared with ASCII (HasPrefix with
//     "https://", "data:image/", "image/" …, and "whole &&
//     isAudioFormat(p)"), which 0x80 matches nowhere, so every comparison
//     comes out as before.

// TestParseOpenAIMessages: where OpenAI's API refuses the same body
// itself, the refusal carries OpenAI's own words (and its param, and the
// code apierr renders), so an OpenAI client reads what OpenAI would have
// told it; Sluice's words stay in Message for the other dialect.
func TestParseOpenAIMessages(t *testing.T) {
	chat, resp := llmapi.ChatCompletions, llmapi.Responses
	for _, tc := range []struct {
		ep                 llmapi.Endpoint
		body               string
		code, param, reply string
	}{
		{chat, `{"model":"a","max_tokens":-1}`, apierr.CodeIntegerBelowMin, "max_tokens",
			"Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, but got -1 instead."},
		{chat, `{"model":"a","max_completion_tokens":-5}`, apierr.CodeIntegerBelowMin, "max_completion_tokens",
			"Invalid 'max_completion_tokens': integer below minimum value. Expected a value >= 1, but got -5 instead."},
		{resp, `{"model":"a","max_output_tokens":-1}`, apierr.CodeIntegerBelowMin, "max_output_tokens",
			"Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got -1 instead."},
		{chat, `{"model":"a","n":0}`, apierr.CodeIntegerBelowMin, "n",
			"Invalid 'n': integer below minimum value. Expected a value >= 1, but got 0 instead."},
		{chat, `{"model":"a","n":129}`, apierr.CodeIntegerAboveMax, "n",
			"Invalid 'n': integer above maximum value. Expected a value <= 128, but got 129 instead."},
		{chat, `{"model":"a","max_tokens":"10"}`, apierr.CodeInvalidType, "max_tokens",
			"Invalid type for 'max_tokens': expected an integer, but got a string instead."},
		{chat, `{"model":"a","n":1.5}`, apierr.CodeInvalidType, "n",
			"Invalid type for 'n': expected an integer, but got a decimal number instead."},
		{chat, `{"model":"a","stream":"yes"}`, apierr.CodeInvalidType, "stream",
			"Invalid type for 'stream': expected a boolean, but got a string instead."},
		{chat, `{"model":"a","stream":1}`, apierr.CodeInvalidType, "stream",
			"Invalid type for 'stream': expected a boolean, but got an integer instead."},
		{chat, `{"model":"a","stream_options":[]}`, apierr.CodeInvalidType, "stream_options",
			"Invalid type for 'stream_options': expected an object, but got an array instead."},
		{chat, `{"model":7}`, apierr.CodeInvalidType, "model",
			"Invalid type for 'model': expected a string, but got an integer instead."},
		{chat, `{"messages":[]}`, apierr.CodeMissingModel, "", "you must provide a model parameter"},
		{chat, `{"model":""}`, apierr.CodeMissingModel, "", "you must provide a model parameter"},
		{chat, `{"model":"a","Model":"b"}`, apierr.CodeInvalidField, "Model",
			"Unknown parameter: 'Model'. (Keys are case-sensitive: did you mean 'model'?)"},
		{chat, `{"model":"a",}`, apierr.CodeInvalidJSON, "",
			"We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON: invalid JSON at byte 13: invalid character '}' looking for beginning of object key string.)"},
	} {
		_, err := Parse(tc.ep, []byte(tc.body))
		e, ok := apierr.As(err)
		if !ok {
			t.Fatalf("Parse(%s) = %v, want an *apierr.Error", tc.body, err)
		}
		if e.Code != tc.code || e.Param != tc.param || e.OpenAIMessage != tc.reply {
			t.Errorf("Parse(%s) = %s param %q %q\nwant %s param %q %q", tc.body, e.Code, e.Param, e.OpenAIMessage, tc.code, tc.param, tc.reply)
		}
		if e.Message == "" || e.Message == e.OpenAIMessage {
			t.Errorf("Parse(%s): Sluice's own message %q must stay for the other dialect", tc.body, e.Message)
		}
	}
	// A cap from Sluice's floor up to OpenAI's is the provider's to refuse.
	for _, body := range []string{`{"model":"a","max_tokens":0}`, `{"model":"a","max_output_tokens":15}`} {
		if _, err := Parse(resp, []byte(body)); err != nil {
			t.Errorf("Parse(%s) = %v, want it passed to the provider", body, err)
		}
	}
}
