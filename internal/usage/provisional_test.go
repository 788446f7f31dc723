package usage

import (
	"testing"

	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/tokens"
)

// TestAnthropicCutKeepsProvisionalOutput: an Anthropic stream cut before
// message_delta is charged message_start's output count when that is more
// than the text seen would make: the provider had already counted it.
func TestAnthropicCutKeepsProvisionalOutput(t *testing.T) {
	m := NewMeter(Options{Endpoint: llmapi.Messages, Stream: true, ContentType: "text/event-stream", Model: "claude-sonnet-4-5"})
	m.Write([]byte("event: message_start\ndata: " + `{"type":"message_start","message":{"usage":{"input_tokens":7,"output_tokens":30}}}` + "\n\n" +
		"event: content_block_delta\ndata: " + `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}` + "\n\n"))
	r := m.Close(false, 99)
	if r.Usage[tokens.Output] != 30 || r.Usage[tokens.Input] != 7 || !r.Reported || !r.Estimated {
		t.Errorf("result %+v; want 7 input, message_start's 30 output (more than \"Hi\"), reported and estimated", r)
	}
}
