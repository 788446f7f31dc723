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
		"/v1/messages/count_tokens":  CountTokens,
		"/v1/messages/count_tokens/": Unknown,
		"/v1/models":                 ModelList,
		"/v1/models?limit=5":         ModelList,
		"/v1/models/":                Unknown,
		"/v1/models/gpt-4o":          ModelGet,
		"/v1/models/org/model":       ModelGet,
		"/v1/modelsx":                Unknown,
		"/v1/chat/completions/extra": Unknown,
		"":                           Unknown,
	} {
		if got := EndpointFor(path); got != want {
			t.Errorf("EndpointFor(%q) = %v, want %v", path, got, want)
		}
	}
	if Messages.Dialect().String() != "anthropic" || ChatCompletions.Dialect().String() != "openai" {
		t.Error("dialects")
	}
	if Embeddings.CanStream() || !Messages.CanStream() || CountTokens.CanStream() || ModelList.CanStream() {
		t.Error("CanStream")
	}
	if CountTokens.Dialect() != Anthropic || CountTokens.String() != "count_tokens" {
		t.Error("CountTokens")
	}
	if ModelList.Method() != "GET" || ModelGet.Method() != "GET" || Messages.Method() != "POST" {
		t.Error("Method")
	}
}

func TestModelID(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/models/gpt-4o":           "gpt-4o",
		"/v1/models/gpt-4o?x=1":       "gpt-4o",
		"/v1/models/org/model":        "org/model",
		"/v1/models/org%2Fmodel":      "org/model",
		"/v1/models/a%40b":            "a@b",
		"/v1/models/":                 "",
		"/v1/models":                  "",
		"/v1/models/%zz":              "",
		"/v1/chat/completions/gpt-4o": "",
	} {
		got, ok := ModelID(path)
		if got != want || ok != (want != "") {
			t.Errorf("ModelID(%q) = %q, %v; want %q", path, got, ok, want)
		}
	}
}
