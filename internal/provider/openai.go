package provider

import "github.com/sluicegw/sluice/internal/llmapi"

// OpenAI is the OpenAI API (kind "openai"): every OpenAI endpoint, the
// credential as a bearer token, api_key required.
type OpenAI struct{}

var _ Provider = OpenAI{}

// Dialect is OpenAI's.
func (OpenAI) Dialect() llmapi.Dialect { return llmapi.OpenAI }

// Unsupported refuses the Anthropic Messages API.
func (OpenAI) Unsupported(ep llmapi.Endpoint, name string) string { return openAIFamily(ep, name) }

// Configure requires api_key, refuses the other kinds' version fields, and
// checks forward_client_headers.
func (OpenAI) Configure(s Settings) (Settings, []Problem) {
	ps := append(keyRequired(KindOpenAI, s), onlyFor(KindOpenAI, s)...)
	fwd, fps := forwardable(KindOpenAI, s)
	s.ForwardClientHeaders = fwd
	return s, append(ps, fps...)
}

// Rewrite sets authorization: Bearer <key>, removes the client's
// openai-organization and openai-project (unless forwarded), and sets the
// base URL's path prefix.
func (OpenAI) Rewrite(t Target, r Request) Rewrite { return bearer(KindOpenAI, t, r) }

// bearer is the rewrite of the OpenAI API and of OpenAI-compatible
// servers: the model renamed, authorization: Bearer <key> when there is a
// key (and then the client's account headers removed), the base URL's
// path prefix before the client's path.
func bearer(kind Kind, t Target, r Request) Rewrite {
	rw := base(t, r)
	if t.APIKey != "" {
		rw.credential(kind, t, "authorization", "Bearer "+t.APIKey)
	}
	rw.prefixed(t, r)
	return rw.done()
}
