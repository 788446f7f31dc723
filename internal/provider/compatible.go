package provider

import (
	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/providerkind"
)

// Compatible is a server speaking the OpenAI API (kind
// "openai-compatible": vLLM, llama.cpp, Ollama, …): as OpenAI, except that
// api_key is optional — without one no credential is sent.
type Compatible struct{}

var _ Provider = Compatible{}

// Unsupported refuses the Anthropic Messages API.
func (Compatible) Unsupported(ep llmapi.Endpoint, name string) string {
	return openAIFamily(ep, name)
}

// Rewrite sets authorization: Bearer <key> when there is a key — and then
// removes the client's openai-organization and openai-project unless
// forwarded; without a key Sluice injects no credential and they pass —
// and the base URL's path prefix.
func (Compatible) Rewrite(t Target, r Request) Rewrite {
	return bearer(providerkind.OpenAICompatible, t, r)
}
