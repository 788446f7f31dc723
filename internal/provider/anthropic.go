package provider

import (
	"fmt"

	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/providerkind"
)

// Anthropic is the Anthropic Messages API (kind "anthropic"): /v1/messages
// and /v1/messages/count_tokens only, the credential in x-api-key, an anthropic-version header, api_key
// required.
type Anthropic struct{}

var _ Provider = Anthropic{}

// Unsupported refuses every endpoint but the Messages API's (messages and
// count_tokens).
func (Anthropic) Unsupported(ep llmapi.Endpoint, name string) string {
	if ep.Dialect() != llmapi.Anthropic {
		return fmt.Sprintf("its provider %q speaks the Anthropic Messages API; call /v1/messages", name)
	}
	return ""
}

// Rewrite sets x-api-key (removing the client's account headers unless
// forwarded), anthropic-version unless the client sent one, and the base
// URL's path prefix.
func (Anthropic) Rewrite(t Target, r Request) Rewrite {
	rw := base(t, r)
	rw.credential(providerkind.Anthropic, t, "x-api-key", t.APIKey)
	if !r.AnthropicVersion {
		rw.set("anthropic-version", t.AnthropicVersion)
	}
	rw.prefixed(t, r)
	return rw.done()
}
