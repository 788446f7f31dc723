package provider

import (
	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/providerkind"
)

// OpenAI is the OpenAI API (kind "openai"): every OpenAI endpoint, the
// credential as a bearer token, api_key required.
type OpenAI struct{}

var _ Provider = OpenAI{}

// Unsupported refuses the Anthropic Messages API.
func (OpenAI) Unsupported(ep llmapi.Endpoint, name string) string { return openAIFamily(ep, name) }

// Rewrite sets authorization: Bearer <key>, removes the client's
// openai-organization and openai-project (unless forwarded), and sets the
// base URL's path prefix.
func (OpenAI) Rewrite(t Target, r Request) Rewrite { return bearer(providerkind.OpenAI, t, r) }

// bearer is the rewrite of the OpenAI API and of OpenAI-compatible
// servers: the model renamed, authorization: Bearer <key> when there is a
// key (and then the client's account headers removed), the base URL's
// path prefix before the client's path.
func bearer(kind providerkind.Kind, t Target, r Request) Rewrite {
	rw := base(t, r)
	if t.APIKey != "" {
		rw.credential(kind, t, "authorization", "Bearer "+t.APIKey)
	}
	rw.prefixed(t, r)
	return rw.done()
}
