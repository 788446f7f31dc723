package llmapi

import "testing"

func TestEndpointFor(t *testing.T) {
	for path, want := range map[string]Endpoint{
		"/v1/chat/completions":       ChatCompletions,
		"/v1/chat/completions?x=1":   ChatCompletions,
		"/v1/completions":            Completions,
		"/v1/embeddings":             Embeddings,
		"/v1/responses":              Responses,
		"/v1/messages":               Messages,
		"/v1/messages/count_tokens":  Unknown,
		"/v1/chat/completions/extra": Unknown,
		"/v1/models":                 Unknown,
		"":                           Unknown,
	} {
		if got := EndpointFor(path); got != want {
			t.Errorf("EndpointFor(%q) = %v, want %v", path, got, want)
		}
	}
	if Messages.Dialect().String() != "anthropic" || ChatCompletions.Dialect().String() != "openai" {
		t.Error("dialects")
	}
	if Embeddings.CanStream() || !Messages.CanStream() {
		t.Error("CanStream")
	}
}
