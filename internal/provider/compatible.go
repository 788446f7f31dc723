package provider

import "github.com/sluicegw/sluice/internal/llmapi"

// Compatible is a server speaking the OpenAI API (kind
// "openai-compatible": vLLM, llama.cpp, Ollama, …): as OpenAI, except that
// api_key is optional — without one no credential is sent.
type Compatible struct{}

var _ Provider = Compatible{}

// Dialect is OpenAI's.
func (Compatible) Dialect() llmapi.Dialect { return llmapi.OpenAI }

// Unsupported refuses the Anthropic Messages API.
func (Compatible) Unsupported(ep llmapi.Endpoint, name string) string {
	return openAIFamily(ep, name)
}

// Configure refuses the other kinds' version fields and checks
// forward_client_headers; api_key is optional.
func (Compatible) Configure(s Settings) (Settings, []Problem) {
	fwd, ps := forwardable(KindOpenAICompatible, s)
	s.ForwardClientHeaders = fwd
	return s, append(onlyFor(KindOpenAICompatible, s), ps...)
}

// Rewrite sets authorization: Bearer <key> when there is a key — and then
// removes the client's openai-organization and openai-project unless
// forwarded; without a key Sluice injects no credential and they pass —
// and the base URL's path prefix.
func (Compatible) Rewrite(t Target, r Request) Rewrite { return bearer(KindOpenAICompatible, t, r) }
