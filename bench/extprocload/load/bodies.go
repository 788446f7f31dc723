package load

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Bodies are the request and response bodies of one scenario, built once.
type Bodies struct {
	Request []byte
	// Response is the JSON body of a non-stream response.
	Response []byte
	// Chunks are the SSE chunks of a stream response, one per ext_proc
	// message: content deltas, then a usage-only chunk, then [DONE].
	Chunks [][]byte
}

// promptText is a chat message of about 400 tokens, the size of a
// typical short prompt with context.
var promptText = strings.Repeat("Summarise the following passage in two sentences, keeping every number exact. ", 32)

// NewBodies builds an OpenAI chat-completions request for model and its
// response: a non-stream JSON body with usage, and an SSE stream of
// chunks chunks (at least 3: content deltas, the usage chunk OpenAI sends
// when stream_options.include_usage is set, and data: [DONE]).
func NewBodies(model string, chunks int, stream bool) (Bodies, error) {
	req := map[string]any{
		"model": model,
		"messages": []map[string]string{
			{"role": "system", "content": "You are a careful assistant."},
			{"role": "user", "content": promptText},
		},
		"max_tokens": 256,
	}
	if stream {
		req["stream"] = true
		req["stream_options"] = map[string]bool{"include_usage": true}
	}
	rb, err := json.Marshal(req)
	if err != nil {
		return Bodies{}, err
	}
	const id, created = "chatcmpl-bench0001", 1767225600
	words := strings.Fields(strings.Repeat("The passage reports forty two results across seven trials. ", 8))
	usage := map[string]any{
		"prompt_tokens": 412, "completion_tokens": 64, "total_tokens": 476,
		"prompt_tokens_details":     map[string]int{"cached_tokens": 0, "audio_tokens": 0},
		"completion_tokens_details": map[string]int{"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
	}
	resp, err := json.Marshal(map[string]any{
		"id": id, "object": "chat.completion", "created": created, "model": model + "-2024-07-18",
		"choices": []map[string]any{{
			"index": 0, "finish_reason": "stop", "logprobs": nil,
			"message": map[string]any{"role": "assistant", "content": strings.Join(words, " "), "refusal": nil},
		}},
		"usage": usage, "service_tier": "default", "system_fingerprint": "fp_bench",
	})
	if err != nil {
		return Bodies{}, err
	}
	b := Bodies{Request: rb, Response: resp}
	if chunks < 3 {
		chunks = 3
	}
	deltas := chunks - 2
	for i := range deltas {
		delta := map[string]any{"content": words[i%len(words)] + " "}
		if i == 0 {
			delta = map[string]any{"role": "assistant", "content": "", "refusal": nil}
		}
		choice := map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": nil}
		if i == deltas-1 {
			choice["delta"] = map[string]any{}
			choice["finish_reason"] = "stop"
		}
		c, err := json.Marshal(map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": model + "-2024-07-18",
			"system_fingerprint": "fp_bench", "choices": []any{choice}, "usage": nil,
		})
		if err != nil {
			return Bodies{}, err
		}
		b.Chunks = append(b.Chunks, fmt.Appendf(nil, "data: %s\n\n", c))
	}
	u, err := json.Marshal(map[string]any{
		"id": id, "object": "chat.completion.chunk", "created": created, "model": model + "-2024-07-18",
		"system_fingerprint": "fp_bench", "choices": []any{}, "usage": usage,
	})
	if err != nil {
		return Bodies{}, err
	}
	b.Chunks = append(b.Chunks, fmt.Appendf(nil, "data: %s\n\n", u), []byte("data: [DONE]\n\n"))
	return b, nil
}
