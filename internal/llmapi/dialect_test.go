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

func TestRequestDialect(t *testing.T) {
	none := func(string) (string, bool) { return "", false }
	anthropic := func(k string) (string, bool) { return "2023-06-01", k == "anthropic-version" }
	xAPIKey := func(k string) (string, bool) { return "sk", k == "x-api-key" }
	for _, c := range []struct {
		path   string
		header func(string) (string, bool)
		want   Dialect
	}{
		{"/v1/models", none, OpenAI},
		{"/v1/models", anthropic, Anthropic},
		{"/v1/models", xAPIKey, OpenAI},
		{"/v1/models/claude", anthropic, Anthropic},
		{"/v1/models/gpt-4o", none, OpenAI},
		{"/v1/chat/completions", anthropic, OpenAI},
		{"/v1/messages", none, Anthropic},
		{"/v1/messages/count_tokens", none, Anthropic},
	} {
		if got := RequestDialect(c.path, c.header); got != c.want {
			t.Errorf("RequestDialect(%q) = %v, want %v", c.path, got, c.want)
		}
	}
}
