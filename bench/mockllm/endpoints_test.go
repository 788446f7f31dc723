package mockllm

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The prompts below are sized by hand with the documented rule
// (⌈runes/4⌉ per text piece), so these tests do not trust TextTokens:
//
//	"You are terse."        14 runes → 4 tokens
//	"Say hi in one word 🙂"  20 runes → 5 tokens
//	"abcdefgh"               8 runes → 2 tokens
const (
	chatBody = `{"model":"gpt-test",STREAM"messages":[
		{"role":"system","content":"You are terse."},
		{"role":"user","content":"Say hi in one word 🙂"},
		{"role":"user","content":[{"type":"text","text":"abcdefgh"},{"type":"image_url","image_url":{"url":"http://x/y.png"}}]}]}`
	messagesBody = `{"model":"claude-test","max_tokens":1024,STREAM"system":"You are terse.","messages":[
		{"role":"user","content":"Say hi in one word 🙂"},
		{"role":"assistant","content":[{"type":"text","text":"abcdefgh"}]}]}`
	responsesBody = `{"model":"gpt-test",STREAM"instructions":"You are terse.","input":[
		{"role":"user","content":[{"type":"input_text","text":"Say hi in one word 🙂"}]},
		{"role":"user","content":"abcdefgh"}]}`
	completionsBody = `{"model":"babbage-test",STREAM"prompt":["Say hi in one word 🙂","abcdefgh","You are terse."]}`
	promptTokens11  = 11 // each body above: 4 + 5 + 2

	// Text(5) and its two stream chunks.
	fiveWords = "Héllo 🙂 from Sluice's mock"
)

var fiveWordChunks = []string{"Héllo 🙂", " from Sluice's mock"}

// sizeHeaders ask for 5 words in 2 chunks, 3 cached, 2 cache-written
// and 4 reasoning tokens.
var sizeHeaders = []string{
	"x-mock-words", "5", "x-mock-chunks", "2",
	"x-mock-cached-tokens", "3", "x-mock-cache-write-tokens", "2", "x-mock-reasoning-tokens", "4",
}

func withStream(body string, stream string) string {
	return strings.Replace(body, "STREAM", stream, 1)
}

// wantOpenAIUsage is the chat/completions usage for the bodies above with
// sizeHeaders: P=11, K=3, W=5, R=4.
var wantOpenAIUsage = map[string]any{
	"prompt_tokens": 11.0, "completion_tokens": 9.0, "total_tokens": 20.0,
	"prompt_tokens_details":     map[string]any{"cached_tokens": 3.0},
	"completion_tokens_details": map[string]any{"reasoning_tokens": 4.0},
}

func TestChatCompletions(t *testing.T) {
	_, base := start(t, Options{})
	c := client(t, false)
	url := base + "/v1/chat/completions"

	t.Run("json", func(t *testing.T) {
		r := post(t, c, url, withStream(chatBody, ""), sizeHeaders...)
		if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("status %d, content-type %q: %s", r.status, r.header.Get("Content-Type"), r.body)
		}
		m := obj(t, r.body)
		if diff := cmp.Diff(wantOpenAIUsage, m["usage"]); diff != "" {
			t.Errorf("usage (-want +got):\n%s", diff)
		}
		for _, check := range []struct {
			path []any
			want any
		}{
			{[]any{"model"}, "gpt-test"},
			{[]any{"object"}, "chat.completion"},
			{[]any{"choices", 0, "message", "content"}, fiveWords},
			{[]any{"choices", 0, "message", "role"}, "assistant"},
			{[]any{"choices", 0, "finish_reason"}, "stop"},
		} {
			if got := dig(m, check.path...); got != check.want {
				t.Errorf("%v = %v, want %v", check.path, got, check.want)
			}
		}
	})

	for _, tc := range []struct {
		name       string
		stream     string
		headers    []string
		wantUsage  bool // a usage chunk before [DONE]
		usageNulls bool // "usage":null on the other chunks
	}{
		{"stream without include_usage", `"stream":true,`, nil, false, false},
		{"stream with include_usage", `"stream":true,"stream_options":{"include_usage":true},`, nil, true, true},
		{"include_usage but usage omitted", `"stream":true,"stream_options":{"include_usage":true},`, []string{"x-mock-usage", "omit"}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := post(t, c, url, withStream(chatBody, tc.stream), append(tc.headers, sizeHeaders...)...)
			if r.status != 200 || r.header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
				t.Fatalf("status %d, content-type %q", r.status, r.header.Get("Content-Type"))
			}
			events := parseSSE(t, r.body)
			if last := events[len(events)-1]; last.data != "[DONE]" || last.name != "" {
				t.Fatalf("last event %+v, want data: [DONE]", last)
			}
			chunks := events[:len(events)-1]
			var usageChunk map[string]any
			if tc.wantUsage {
				usageChunk = obj(t, []byte(chunks[len(chunks)-1].data))
				chunks = chunks[:len(chunks)-1]
				if diff := cmp.Diff(wantOpenAIUsage, usageChunk["usage"]); diff != "" {
					t.Errorf("usage chunk usage (-want +got):\n%s", diff)
				}
				if ch, ok := usageChunk["choices"].([]any); !ok || len(ch) != 0 {
					t.Errorf("usage chunk choices = %v, want []", usageChunk["choices"])
				}
			}
			// role chunk, 2 content chunks, finish chunk
			if len(chunks) != 4 {
				t.Fatalf("%d chunks before usage/[DONE], want 4: %s", len(chunks), r.body)
			}
			var content []string
			for i, e := range chunks {
				m := obj(t, []byte(e.data))
				u, has := m["usage"]
				if has != tc.usageNulls || (has && u != nil) {
					t.Errorf("chunk %d usage = %v (present %v), want present-and-null %v", i, u, has, tc.usageNulls)
				}
				if m["model"] != "gpt-test" || m["object"] != "chat.completion.chunk" {
					t.Errorf("chunk %d model/object = %v/%v", i, m["model"], m["object"])
				}
				switch i {
				case 0:
					if dig(m, "choices", 0, "delta", "role") != "assistant" {
						t.Errorf("first chunk has no assistant role: %s", e.data)
					}
				case len(chunks) - 1:
					if dig(m, "choices", 0, "finish_reason") != "stop" {
						t.Errorf("last chunk finish_reason: %s", e.data)
					}
				default:
					s, _ := dig(m, "choices", 0, "delta", "content").(string)
					content = append(content, s)
				}
			}
			if diff := cmp.Diff(fiveWordChunks, content); diff != "" {
				t.Errorf("content chunks (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("json usage omitted", func(t *testing.T) {
		r := post(t, c, url, withStream(chatBody, ""), append([]string{"x-mock-usage", "omit"}, sizeHeaders...)...)
		if _, has := obj(t, r.body)["usage"]; has || r.status != 200 {
			t.Errorf("status %d, usage present: %s", r.status, r.body)
		}
	})

	t.Run("max_completion_tokens caps the reply", func(t *testing.T) {
		body := withStream(chatBody, `"max_completion_tokens":2,"max_tokens":99,`)
		m := obj(t, post(t, c, url, body).body)
		if got := dig(m, "choices", 0, "message", "content"); got != "Héllo 🙂" {
			t.Errorf("content %q", got)
		}
		if dig(m, "choices", 0, "finish_reason") != "length" || dig(m, "usage", "completion_tokens") != 2.0 {
			t.Errorf("finish/usage: %v", m)
		}
	})

	t.Run("default size", func(t *testing.T) {
		m := obj(t, post(t, c, url, withStream(chatBody, "")).body)
		want := "Héllo 🙂 from Sluice's mock provider — a test double, not a model."
		if got := dig(m, "choices", 0, "message", "content"); got != want {
			t.Errorf("content %q, want %q", got, want)
		}
		if got := dig(m, "usage", "completion_tokens"); got != 13.0 {
			t.Errorf("completion_tokens %v, want 13", got)
		}
	})
}

func TestAzureDeployment(t *testing.T) {
	_, base := start(t, Options{})
	c := client(t, false)
	r := post(t, c, base+"/openai/deployments/my-gpt/chat/completions?api-version=2024-10-21", `{"messages":[{"role":"user","content":"abcdefgh"}]}`)
	m := obj(t, r.body)
	if r.status != 200 || m["model"] != "my-gpt" || dig(m, "usage", "prompt_tokens") != 2.0 {
		t.Errorf("status %d: %s", r.status, r.body)
	}
	r = post(t, c, base+"/openai/deployments/my-gpt/embeddings?api-version=2024-10-21", `{"input":"abcdefgh"}`)
	if m := obj(t, r.body); r.status != 200 || m["model"] != "my-gpt" {
		t.Errorf("embeddings: status %d: %s", r.status, r.body)
	}
	r = post(t, c, base+"/openai/deployments/my-gpt/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`)
	if m := obj(t, r.body); r.status != 400 || dig(m, "error", "param") != "api-version" {
		t.Errorf("without api-version: status %d: %s", r.status, r.body)
	}
}

func TestCompletions(t *testing.T) {
	_, base := start(t, Options{})
	c := client(t, false)
	url := base + "/v1/completions"

	m := obj(t, post(t, c, url, withStream(completionsBody, ""), sizeHeaders...).body)
	if diff := cmp.Diff(wantOpenAIUsage, m["usage"]); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	if dig(m, "choices", 0, "text") != fiveWords || m["object"] != "text_completion" || m["model"] != "babbage-test" {
		t.Errorf("body: %v", m)
	}

	r := post(t, c, url, withStream(completionsBody, `"stream":true,"stream_options":{"include_usage":true},`), sizeHeaders...)
	events := parseSSE(t, r.body)
	// 2 content chunks, finish chunk, usage chunk, [DONE]
	if len(events) != 5 || events[4].data != "[DONE]" {
		t.Fatalf("%d events: %s", len(events), r.body)
	}
	var text string
	for _, e := range events[:2] {
		text += dig(obj(t, []byte(e.data)), "choices", 0, "text").(string)
	}
	if text != fiveWords {
		t.Errorf("streamed text %q", text)
	}
	if got := dig(obj(t, []byte(events[2].data)), "choices", 0, "finish_reason"); got != "stop" {
		t.Errorf("finish_reason %v", got)
	}
	if diff := cmp.Diff(wantOpenAIUsage, obj(t, []byte(events[3].data))["usage"]); diff != "" {
		t.Errorf("usage chunk (-want +got):\n%s", diff)
	}

	for _, tc := range []struct {
		prompt string
		want   float64
	}{
		{`"abcd"`, 1},
		{`"abcde"`, 2},
		{`[1,2,3]`, 3},
		{`[[1,2],[3]]`, 3},
		{`["abcde",[7,8]]`, 4},
		{`""`, 0},
	} {
		m := obj(t, post(t, c, url, `{"model":"m","prompt":`+tc.prompt+`}`).body)
		if got := dig(m, "usage", "prompt_tokens"); got != tc.want {
			t.Errorf("prompt %s: prompt_tokens %v, want %v", tc.prompt, got, tc.want)
		}
	}
}

func TestEmbeddings(t *testing.T) {
	_, base := start(t, Options{Dimensions: 4})
	c := client(t, false)
	url := base + "/v1/embeddings"

	r := post(t, c, url, `{"model":"emb","input":["Say hi in one word 🙂","abcdefgh"],"stream":true}`)
	m := obj(t, r.body)
	if diff := cmp.Diff(map[string]any{"prompt_tokens": 7.0, "total_tokens": 7.0}, m["usage"]); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	data, _ := m["data"].([]any)
	if len(data) != 2 || m["object"] != "list" || m["model"] != "emb" {
		t.Fatalf("body: %s", r.body)
	}
	for i := range data {
		vec, _ := dig(data[i], "embedding").([]any)
		if len(vec) != 4 || dig(data[i], "index") != float64(i) || dig(data[i], "object") != "embedding" {
			t.Errorf("data[%d] = %v", i, data[i])
		}
		for _, x := range vec {
			if f := x.(float64); f < -1 || f >= 1 {
				t.Errorf("value %v outside [-1, 1)", f)
			}
		}
	}
	again := obj(t, post(t, c, url, `{"model":"emb","input":["Say hi in one word 🙂","abcdefgh"]}`).body)
	if diff := cmp.Diff(m["data"], again["data"]); diff != "" {
		t.Errorf("embeddings not deterministic:\n%s", diff)
	}
	if cmp.Equal(dig(m, "data", 0, "embedding"), dig(m, "data", 1, "embedding")) {
		t.Error("different inputs got the same embedding")
	}

	// base64: the same vector as little-endian float32.
	b := obj(t, post(t, c, url, `{"model":"emb","input":"Say hi in one word 🙂","encoding_format":"base64"}`).body)
	raw, err := base64.StdEncoding.DecodeString(dig(b, "data", 0, "embedding").(string))
	if err != nil || len(raw) != 16 {
		t.Fatalf("base64 embedding: %v, %d bytes", err, len(raw))
	}
	for i, want := range dig(m, "data", 0, "embedding").([]any) {
		got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		if float64(got) != float64(float32(want.(float64))) {
			t.Errorf("base64[%d] = %v, float form %v", i, got, want)
		}
	}

	for _, tc := range []struct {
		name, body string
		headers    []string
		items      int
		dims       int
		tokens     float64
	}{
		{"token array", `{"model":"e","input":[1,2,3]}`, nil, 1, 4, 3},
		{"token arrays", `{"model":"e","input":[[1,2],[3]]}`, nil, 2, 4, 3},
		{"request dimensions", `{"model":"e","input":"abcd","dimensions":3}`, nil, 1, 3, 1},
		{"header beats request", `{"model":"e","input":"abcd","dimensions":3}`, []string{"x-mock-dimensions", "5"}, 1, 5, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := obj(t, post(t, c, url, tc.body, tc.headers...).body)
			data, _ := m["data"].([]any)
			if len(data) != tc.items || len(dig(data[0], "embedding").([]any)) != tc.dims || dig(m, "usage", "prompt_tokens") != tc.tokens {
				t.Errorf("got %v", m)
			}
		})
	}
}

func TestResponses(t *testing.T) {
	_, base := start(t, Options{})
	c := client(t, false)
	url := base + "/v1/responses"
	wantUsage := map[string]any{
		"input_tokens": 11.0, "input_tokens_details": map[string]any{"cached_tokens": 3.0},
		"output_tokens": 9.0, "output_tokens_details": map[string]any{"reasoning_tokens": 4.0},
		"total_tokens": 20.0,
	}

	m := obj(t, post(t, c, url, withStream(responsesBody, ""), sizeHeaders...).body)
	if diff := cmp.Diff(wantUsage, m["usage"]); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	if m["status"] != "completed" || m["model"] != "gpt-test" || dig(m, "output", 0, "content", 0, "text") != fiveWords {
		t.Errorf("body: %v", m)
	}

	r := post(t, c, url, withStream(responsesBody, `"stream":true,`), sizeHeaders...)
	events := parseSSE(t, r.body)
	var names []string
	var deltas []string
	for i, e := range events {
		names = append(names, e.name)
		d := obj(t, []byte(e.data))
		if d["type"] != e.name || d["sequence_number"] != float64(i) {
			t.Errorf("event %d: type %v, sequence_number %v", i, d["type"], d["sequence_number"])
		}
		if e.name == "response.output_text.delta" {
			deltas = append(deltas, d["delta"].(string))
		}
	}
	wantNames := []string{
		"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed",
	}
	if diff := cmp.Diff(wantNames, names); diff != "" {
		t.Fatalf("event names (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(fiveWordChunks, deltas); diff != "" {
		t.Errorf("deltas (-want +got):\n%s", diff)
	}
	final := obj(t, []byte(events[len(events)-1].data))
	if diff := cmp.Diff(wantUsage, dig(final, "response", "usage")); diff != "" {
		t.Errorf("response.completed usage (-want +got):\n%s", diff)
	}
	if got := dig(obj(t, []byte(events[0].data)), "response", "usage"); got != nil {
		t.Errorf("response.created usage = %v, want null", got)
	}

	capped := obj(t, post(t, c, url, withStream(responsesBody, `"max_output_tokens":3,`)).body)
	if capped["status"] != "incomplete" || dig(capped, "incomplete_details", "reason") != "max_output_tokens" || dig(capped, "usage", "output_tokens") != 3.0 {
		t.Errorf("capped: %v", capped)
	}
	capStream := parseSSE(t, post(t, c, url, withStream(responsesBody, `"stream":true,"max_output_tokens":3,`)).body)
	if last := capStream[len(capStream)-1]; last.name != "response.incomplete" {
		t.Errorf("capped stream ends with %q", last.name)
	}
	omitted := parseSSE(t, post(t, c, url, withStream(responsesBody, `"stream":true,`), "x-mock-usage", "omit").body)
	if got, has := dig(obj(t, []byte(omitted[len(omitted)-1].data)), "response").(map[string]any)["usage"]; !has || got != nil {
		t.Errorf("omitted usage: %v (present %v), want null", got, has)
	}
}

func TestMessages(t *testing.T) {
	_, base := start(t, Options{})
	c := client(t, false)
	url := base + "/v1/messages"
	wantUsage := map[string]any{
		"input_tokens": 6.0, "cache_read_input_tokens": 3.0, "cache_creation_input_tokens": 2.0, "output_tokens": 9.0,
	}

	m := obj(t, post(t, c, url, withStream(messagesBody, ""), sizeHeaders...).body)
	if diff := cmp.Diff(wantUsage, m["usage"]); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	want := map[string]any{
		"id": m["id"], "type": "message", "role": "assistant", "model": "claude-test",
		"content":     []any{map[string]any{"type": "text", "text": fiveWords}},
		"stop_reason": "end_turn", "stop_sequence": nil, "usage": wantUsage,
	}
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("message (-want +got):\n%s", diff)
	}

	r := post(t, c, url, withStream(messagesBody, `"stream":true,`), sizeHeaders...)
	events := parseSSE(t, r.body)
	var names, texts []string
	for _, e := range events {
		names = append(names, e.name)
		d := obj(t, []byte(e.data))
		if d["type"] != e.name {
			t.Errorf("event %q has type %v", e.name, d["type"])
		}
		if e.name == "content_block_delta" {
			if dig(d, "delta", "type") != "text_delta" {
				t.Errorf("delta type %v", dig(d, "delta", "type"))
			}
			texts = append(texts, dig(d, "delta", "text").(string))
		}
	}
	wantNames := []string{"message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta",
		"content_block_stop", "message_delta", "message_stop"}
	if diff := cmp.Diff(wantNames, names); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(fiveWordChunks, texts); diff != "" {
		t.Errorf("texts (-want +got):\n%s", diff)
	}
	startUsage := map[string]any{"input_tokens": 6.0, "cache_read_input_tokens": 3.0, "cache_creation_input_tokens": 2.0, "output_tokens": 1.0}
	if diff := cmp.Diff(startUsage, dig(obj(t, []byte(events[0].data)), "message", "usage")); diff != "" {
		t.Errorf("message_start usage (-want +got):\n%s", diff)
	}
	delta := obj(t, []byte(events[6].data))
	if diff := cmp.Diff(map[string]any{"output_tokens": 9.0}, delta["usage"]); diff != "" {
		t.Errorf("message_delta usage (-want +got):\n%s", diff)
	}
	if dig(delta, "delta", "stop_reason") != "end_turn" {
		t.Errorf("stop_reason %v", dig(delta, "delta", "stop_reason"))
	}

	capped := obj(t, post(t, c, url, strings.Replace(withStream(messagesBody, ""), `"max_tokens":1024`, `"max_tokens":2`, 1)).body)
	if capped["stop_reason"] != "max_tokens" || dig(capped, "usage", "output_tokens") != 2.0 || dig(capped, "content", 0, "text") != "Héllo 🙂" {
		t.Errorf("capped: %v", capped)
	}
	omitted := parseSSE(t, post(t, c, url, withStream(messagesBody, `"stream":true,`), "x-mock-usage", "omit").body)
	for _, e := range omitted {
		if strings.Contains(e.data, `"usage"`) {
			t.Errorf("usage in %s with x-mock-usage: omit: %s", e.name, e.data)
		}
	}
}

func TestBadRequests(t *testing.T) {
	_, base := start(t, Options{MaxBodyBytes: 1 << 10})
	c := client(t, false)
	for _, tc := range []struct {
		name, path, body string
		status           int
		param            string // OpenAI error param, or Anthropic error type
	}{
		{"no model", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`, 400, "model"},
		{"no messages", "/v1/chat/completions", `{"model":"m"}`, 400, "messages"},
		{"empty messages", "/v1/chat/completions", `{"model":"m","messages":[]}`, 400, "messages"},
		{"max_tokens 0", "/v1/chat/completions", `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, 400, "max_tokens"},
		{"stream_options without stream", "/v1/chat/completions", `{"model":"m","stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`, 400, "stream_options"},
		{"not JSON", "/v1/chat/completions", `{"model":`, 400, ""},
		{"wrong type", "/v1/completions", `{"model":"m","stream":"yes"}`, 400, ""},
		{"embeddings without input", "/v1/embeddings", `{"model":"m"}`, 400, "input"},
		{"embeddings bad format", "/v1/embeddings", `{"model":"m","input":"x","encoding_format":"hex"}`, 400, "encoding_format"},
		{"anthropic without max_tokens", "/v1/messages", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request_error"},
		{"unknown path", "/v1/nothing", `{}`, 404, ""},
		{"unknown anthropic path", "/v1/messages/batches", `{}`, 404, "not_found_error"},
		{"too large", "/v1/chat/completions", `{"model":"` + strings.Repeat("x", 2000) + `"}`, 413, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := post(t, c, base+tc.path, tc.body)
			m := obj(t, r.body)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			if strings.Contains(tc.path, "messages") {
				if m["type"] != "error" || (tc.param != "" && dig(m, "error", "type") != tc.param) {
					t.Errorf("anthropic error: %s", r.body)
				}
				return
			}
			if _, ok := dig(m, "error", "message").(string); !ok {
				t.Errorf("no error.message: %s", r.body)
			}
			if tc.param != "" && dig(m, "error", "param") != tc.param {
				t.Errorf("param %v, want %s", dig(m, "error", "param"), tc.param)
			}
		})
	}

	resp, err := c.Get(base + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

func TestControlErrors(t *testing.T) {
	_, base := start(t, Options{})
	c := client(t, false)
	for _, h := range [][]string{
		{"x-mock-latency", "soon"},
		{"x-mock-latency", "-1s"},
		{"x-mock-chunks", "0"},
		{"x-mock-words", "-3"},
		{"x-mock-status", "200"},
		{"x-mock-gzip", "maybe"},
		{"x-mock-usage", "never"},
		{"x-mock-split", "x"},
		{"x-mock-dimensions", "0"},
		{"x-mock-retry-after", "tomorrow"},
		{"x-mock-typo", "1"},
	} {
		r := post(t, c, base+"/v1/chat/completions", withStream(chatBody, ""), h...)
		m := obj(t, r.body)
		msg, _ := dig(m, "error", "message").(string)
		if r.status != 400 || dig(m, "error", "code") != "mock_control" || !strings.Contains(msg, h[0]) {
			t.Errorf("%s: %s → %d %s", h[0], h[1], r.status, r.body)
		}
	}
}

func TestHealthz(t *testing.T) {
	s, base := start(t, Options{})
	resp, err := client(t, false).Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || s.Requests() != 0 || len(s.Received()) != 0 {
		t.Errorf("healthz %d; counted %d, recorded %d", resp.StatusCode, s.Requests(), len(s.Received()))
	}
}

// TestNegativeReasoningTokens: a negative x-mock-reasoning-tokens reports
// the usage of a broken provider — a negative reasoning count and, past
// the words, a negative output — so that a gateway can be tested against
// it; below -2^40 it is refused like any malformed control.
func TestNegativeReasoningTokens(t *testing.T) {
	_, base := start(t, Options{})
	c := client(t, false)
	r := post(t, c, base+"/v1/chat/completions", withStream(chatBody, ""), "x-mock-words", "5", "x-mock-reasoning-tokens", "-20")
	m := obj(t, r.body)
	if r.status != 200 || dig(m, "usage", "completion_tokens") != -15.0 || dig(m, "usage", "completion_tokens_details", "reasoning_tokens") != -20.0 {
		t.Errorf("%d %s; want completion_tokens -15, reasoning_tokens -20", r.status, r.body)
	}
	r = post(t, c, base+"/v1/chat/completions", withStream(chatBody, ""), "x-mock-reasoning-tokens", "-1099511627777")
	if r.status != 400 || dig(obj(t, r.body), "error", "code") != "mock_control" {
		t.Errorf("below -2^40: %d %s", r.status, r.body)
	}
}

// TestCountTokens: /v1/messages/count_tokens answers the prompt tokens of
// the Messages request it is given (system included, no max_tokens
// needed), checks the Anthropic credential, and is recorded.
func TestCountTokens(t *testing.T) {
	s, base := start(t, Options{AnthropicAPIKey: "sk-ant"})
	c := client(t, false)
	url := base + "/v1/messages/count_tokens"
	body := strings.Replace(withStream(messagesBody, ""), `"max_tokens":1024,`, "", 1)
	r := post(t, c, url, body, "x-api-key", "sk-ant", "anthropic-version", "2023-06-01")
	if r.status != 200 {
		t.Fatalf("count_tokens: %d %s", r.status, r.body)
	}
	if diff := cmp.Diff(map[string]any{"input_tokens": float64(promptTokens11)}, obj(t, r.body)); diff != "" {
		t.Errorf("count_tokens body (-want +got):\n%s", diff)
	}
	if r := post(t, c, url, body, "x-api-key", "wrong", "anthropic-version", "2023-06-01"); r.status != 401 || dig(obj(t, r.body), "type") != "error" {
		t.Errorf("count_tokens with a wrong key: %d %s, want Anthropic's 401", r.status, r.body)
	}
	if r := post(t, c, url, `{"model":"claude-test","messages":[]}`, "x-api-key", "sk-ant", "anthropic-version", "2023-06-01"); r.status != 400 {
		t.Errorf("count_tokens without messages: %d %s, want 400", r.status, r.body)
	}
	if got := s.Received(); len(got) != 3 || got[0].Path != "/v1/messages/count_tokens" {
		t.Errorf("recorded %d requests, want the 3 count_tokens ones", len(got))
	}
}
