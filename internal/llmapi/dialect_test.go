package llmapi

import "testing"

func TestDialectFor(t *testing.T) {
	for path, want := range map[string]Dialect{
		"/v1/chat/completions":         OpenAI,
		"/v1/completions":              OpenAI,
		"/v1/embeddings":               OpenAI,
		"/v1/responses":                OpenAI,
		"/v1/messages":                 Anthropic,
		"/v1/messages?beta=true":       Anthropic,
		"/v1/messages/count_tokens":    Anthropic,
		"/v1/complete":                 Anthropic,
		"/v1/messagesX":                OpenAI,
		"/":                            OpenAI,
		"":                             OpenAI,
		"/openai/deployments/x/chat":   OpenAI,
		"/v1/chat/completions?x=/v1/m": OpenAI,
	} {
		if got := DialectFor(path); got != want {
			t.Errorf("DialectFor(%q) = %v, want %v", path, got, want)
		}
	}
}
