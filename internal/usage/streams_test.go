package usage

import (
	"strings"

	"github.com/sluicegw/sluice/internal/llmapi"
)

// Hand-written bodies in the shape the public API docs give, with
// multi-byte UTF-8 ("é", "🙂", "Zürich") and every line-ending style, for
// the schema tests and the chunk-split property.

// crlf rewrites LF line endings to CRLF; cr to CR.
func crlf(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }
func cr(s string) string   { return strings.ReplaceAll(s, "\n", "\r") }

const anthropicStream = `event: message_start
data: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Café crème 🙂"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" — voilà, I'll check the weather."}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Zür"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"ich\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":42}}

event: message_stop
data: {"type":"message_stop"}

`

// anthropicStreamRepeat's message_delta repeats the input counts, with
// different values (some backends send cumulative input there).
const anthropicStreamRepeat = `event: message_start
data: {"type":"message_start","message":{"usage":{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Hmm… l'été 🙂"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Bonjour!"}}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":12,"cache_read_input_tokens":300,"output_tokens":57}}

event: message_stop
data: {"type":"message_stop"}

`

// anthropicStreamError is overloaded mid-stream: no message_delta.
const anthropicStreamError = `event: message_start
data: {"type":"message_start","message":{"usage":{"input_tokens":30,"cache_read_input_tokens":5,"output_tokens":2}}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello there, général Kenobi 🙂"}}

event: ping
data: {"type":"ping"}

event: error
data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}

`

const anthropicJSON = `{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Café 🙂"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"cache_creation_input_tokens":1200,"cache_read_input_tokens":800,"output_tokens":9}}`

const anthropicErrorJSON = `{"type":"error","error":{"type":"not_found_error","message":"model: claude-nope"}}`

const responsesStream = `event: response.created
data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","output":[],"usage":null}}

event: response.in_progress
data: {"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_1","status":"in_progress","usage":null}}

event: response.output_item.added
data: {"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","content":[],"role":"assistant"}}

event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":3,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Déjà vu 🙂"}

event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":" all over again."}

event: response.output_text.done
data: {"type":"response.output_text.done","sequence_number":5,"item_id":"msg_1","output_index":0,"content_index":0,"text":"Déjà vu 🙂 all over again."}

event: response.completed
data: {"type":"response.completed","sequence_number":6,"response":{"id":"resp_1","object":"response","status":"completed","output":[{"id":"msg_1","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"text":"Déjà vu 🙂 all over again."}],"role":"assistant"}],"usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":4},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":64},"total_tokens":123}}}

`

const responsesJSON = `{
  "id": "resp_1", "object": "response", "status": "completed", "error": null,
  "output": [
    {"type": "reasoning", "id": "rs_1", "summary": []},
    {"type": "message", "id": "msg_1", "role": "assistant",
     "content": [{"type": "output_text", "annotations": [], "text": "Déjà vu 🙂"}]}
  ],
  "usage": {"input_tokens": 328, "input_tokens_details": {"cached_tokens": 256},
            "output_tokens": 52, "output_tokens_details": {"reasoning_tokens": 32}, "total_tokens": 380}
}`

// openAIStreamUsage is a chat stream with include_usage: usage null on
// content chunks, then the usage-only chunk.
const openAIStreamUsage = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}

data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Olá, café 🙂"},"finish_reason":null}],"usage":null}

data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"q\":\"é\"}"}}]},"finish_reason":null}],"usage":null}

data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":null}

data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":40,"total_tokens":1240,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":16,"audio_tokens":0}}}

data: [DONE]

`

// splitCase is a body and the options to read it with.
type splitCase struct {
	name string
	opts Options
	body string
}

func handWritten() []splitCase {
	anth := Options{Endpoint: llmapi.Messages, Stream: true, ContentType: "text/event-stream", Model: "claude-sonnet-4-5"}
	anthJSON := Options{Endpoint: llmapi.Messages, ContentType: "application/json", Model: "claude-sonnet-4-5"}
	resp := Options{Endpoint: llmapi.Responses, Stream: true, ContentType: "text/event-stream", Model: "gpt-5"}
	respJSON := Options{Endpoint: llmapi.Responses, ContentType: "application/json", Model: "gpt-5"}
	chat := Options{Endpoint: llmapi.ChatCompletions, Stream: true, ContentType: "text/event-stream", Model: "gpt-4o"}
	return append([]splitCase{
		{"anthropic-stream-crlf", anth, crlf(anthropicStream)},
		{"anthropic-stream-cr", anth, cr(anthropicStream)},
		{"anthropic-stream-repeat", anth, anthropicStreamRepeat},
		{"anthropic-stream-error-crlf", anth, crlf(anthropicStreamError)},
		{"anthropic-json", anthJSON, anthropicJSON},
		{"anthropic-error-json", anthJSON, anthropicErrorJSON},
		{"responses-stream", resp, responsesStream},
		{"responses-stream-crlf", resp, crlf(responsesStream)},
		{"responses-json", respJSON, responsesJSON},
		{"chat-stream-usage-cr", chat, cr(openAIStreamUsage)},
		{"chat-stream-usage-cut", chat, openAIStreamUsage[:len(openAIStreamUsage)/2]},
	}, shapeCases()...)
}
