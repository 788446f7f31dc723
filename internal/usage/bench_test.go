package usage

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/tokens"
)

// stream20 is a 20-chunk OpenAI chat stream as Envoy delivers it, one
// event per chunk: the role chunk, 17 content chunks, the finish chunk,
// and (with usage) the usage chunk followed by [DONE] in the last chunk.
func stream20(withUsage bool) [][]byte {
	const head = `data: {"id":"chatcmpl-C4HqHBe4xca0k0EzsCnf1t6V3YFXp","object":"chat.completion.chunk","created":1755137933,"model":"gpt-5-nano-2025-08-07","service_tier":"default","system_fingerprint":null,`
	words := []string{"Hi", " there", "!", " How", " can", " I", " help", " today", "?", " I", " can", " answer",
		" questions", ",", " explain", " concepts", "."}
	var chunks [][]byte
	chunks = append(chunks, []byte(head+`"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"finish_reason":null}],"usage":null,"obfuscation":"nX"}`+"\n\n"))
	for _, w := range words {
		chunks = append(chunks, []byte(head+`"choices":[{"index":0,"delta":{"content":"`+w+`"},"finish_reason":null}],"usage":null,"obfuscation":"UC"}`+"\n\n"))
	}
	chunks = append(chunks, []byte(head+`"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null,"obfuscation":"XQdNwPP14L3TH0"}`+"\n\n"))
	last := "data: [DONE]\n\n"
	if withUsage {
		last = head + `"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":377,"total_tokens":385,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":320,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"obfuscation":"x"}` + "\n\n" + last
	}
	return append(chunks, []byte(last))
}

func benchStream(b *testing.B, chunks [][]byte, opts Options, check func(Result) error) {
	var n int
	for _, c := range chunks {
		n += len(c)
	}
	Warm(opts.Model)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		m := NewMeter(opts)
		for _, c := range chunks {
			m.Write(c)
		}
		if err := check(m.Close(true, 8)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMeterStream20(b *testing.B) {
	opts := Options{Endpoint: llmapi.ChatCompletions, Stream: true, ContentType: "text/event-stream", Model: "gpt-5-nano"}
	benchStream(b, stream20(true), opts, func(r Result) error {
		if !r.Reported || r.Usage[tokens.Output] != 377 || r.Events != 21 {
			return fmt.Errorf("result %+v", r)
		}
		return nil
	})
}

// BenchmarkMeterStream20Fallback is the same stream without usage: the
// text is tokenized at Close.
func BenchmarkMeterStream20Fallback(b *testing.B) {
	opts := Options{Endpoint: llmapi.ChatCompletions, Stream: true, ContentType: "text/event-stream", Model: "gpt-5-nano"}
	benchStream(b, stream20(false), opts, func(r Result) error {
		if r.Reported || !r.Estimated || r.Usage[tokens.Output] == 0 {
			return fmt.Errorf("result %+v", r)
		}
		return nil
	})
}

func BenchmarkMeterStream20Gzip(b *testing.B) {
	opts := Options{Endpoint: llmapi.ChatCompletions, Stream: true, ContentType: "text/event-stream",
		Model: "gpt-5-nano", ContentEncoding: "gzip"}
	var whole []byte
	for _, c := range stream20(true) {
		whole = append(whole, c...)
	}
	z := []byte(gz(b, string(whole)))
	var chunks [][]byte
	for i := 0; i < len(z); i += len(z)/20 + 1 {
		chunks = append(chunks, z[i:min(i+len(z)/20+1, len(z))])
	}
	benchStream(b, chunks, opts, func(r Result) error {
		if !r.Reported || r.Usage[tokens.Output] != 377 {
			return fmt.Errorf("result %+v", r)
		}
		return nil
	})
}

func BenchmarkMeterAnthropicStream(b *testing.B) {
	opts := Options{Endpoint: llmapi.Messages, Stream: true, ContentType: "text/event-stream", Model: "claude-sonnet-4-5"}
	var chunks [][]byte
	body := anthropicStream
	for i := 0; i < len(body); i += 97 {
		chunks = append(chunks, []byte(body[i:min(i+97, len(body))]))
	}
	benchStream(b, chunks, opts, func(r Result) error {
		if !r.Reported || r.Estimated || r.Usage[tokens.Output] != 42 {
			return fmt.Errorf("result %+v", r)
		}
		return nil
	})
}

// chatCompletion is a non-streaming chat completion like chat-basic.yaml.
const chatCompletion = `{
  "choices": [
    {
      "finish_reason": "stop",
      "index": 0,
      "message": {
        "annotations": [],
        "content": "Hi there! How can I help you today? I can explain concepts, answer questions, help with writing or editing, brainstorm ideas, assist with coding or math, plan tasks, and more. Tell me what you’d like to do.",
        "refusal": null,
        "role": "assistant"
      }
    }
  ],
  "created": 1755133833,
  "id": "chatcmpl-C4Gm9xikLXbgE8He0BHWeoM03aa72",
  "model": "gpt-5-nano-2025-08-07",
  "object": "chat.completion",
  "service_tier": "default",
  "system_fingerprint": null,
  "usage": {
    "completion_tokens": 377,
    "completion_tokens_details": {
      "accepted_prediction_tokens": 0,
      "audio_tokens": 0,
      "reasoning_tokens": 320,
      "rejected_prediction_tokens": 0
    },
    "prompt_tokens": 8,
    "prompt_tokens_details": {
      "audio_tokens": 0,
      "cached_tokens": 0
    },
    "total_tokens": 385
  }
}`

func BenchmarkMeterJSON(b *testing.B) {
	opts := Options{Endpoint: llmapi.ChatCompletions, ContentType: "application/json", Model: "gpt-5-nano"}
	benchStream(b, [][]byte{[]byte(chatCompletion)}, opts, func(r Result) error {
		if !r.Reported || r.Usage[tokens.Output] != 377 || r.Usage[tokens.Reasoning] != 320 {
			return fmt.Errorf("result %+v", r)
		}
		return nil
	})
}

// BenchmarkMeterJSONFallback: the same body without usage, so the body is
// decoded for its text and the text tokenized.
func BenchmarkMeterJSONFallback(b *testing.B) {
	opts := Options{Endpoint: llmapi.ChatCompletions, ContentType: "application/json", Model: "gpt-5-nano"}
	body := chatCompletion[:len(chatCompletion)-len(`,
  "usage": {
    "completion_tokens": 377,
    "completion_tokens_details": {
      "accepted_prediction_tokens": 0,
      "audio_tokens": 0,
      "reasoning_tokens": 320,
      "rejected_prediction_tokens": 0
    },
    "prompt_tokens": 8,
    "prompt_tokens_details": {
      "audio_tokens": 0,
      "cached_tokens": 0
    },
    "total_tokens": 385
  }
}`)] + "}"
	benchStream(b, [][]byte{[]byte(body)}, opts, func(r Result) error {
		if r.Reported || r.Usage[tokens.Output] == 0 {
			return fmt.Errorf("result %+v", r)
		}
		return nil
	})
}

// BenchmarkFallbackNewlines: a degenerate stream of " \n" (which makes
// tiktoken's pre-tokenizer backtrack) counted by the fallback: bounded by
// the 1 KiB pieces.
func BenchmarkFallbackNewlines(b *testing.B) {
	opts := Options{Endpoint: llmapi.ChatCompletions, Stream: true, ContentType: "text/event-stream", Model: "gpt-4o"}
	ev := []byte("data: " + `{"choices":[{"index":0,"delta":{"content":"` + strings.Repeat(` \n`, 64) + `"}}]}` + "\n\n")
	var chunks [][]byte
	for range 256 { // 64 KiB of text
		chunks = append(chunks, ev)
	}
	benchStream(b, chunks, opts, func(r Result) error {
		if r.Reported || r.OutputTextRunes != 256*128 {
			return fmt.Errorf("result %+v", r)
		}
		return nil
	})
}
