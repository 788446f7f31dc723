package provider

import (
	"fmt"

	"github.com/sluicegw/sluice/internal/llmapi"
)

// Anthropic is the Anthropic Messages API (kind "anthropic"): /v1/messages
// and /v1/messages/count_tokens only, the credential in x-api-key, an anthropic-version header, api_key
// required.
type Anthropic struct{}

var _ Provider = Anthropic{}

// Dialect is Anthropic's.
func (Anthropic) Dialect() llmapi.Dialect { return llmapi.Anthropic }

// Unsupported refuses every endpoint but the Messages API's (messages and
// count_tokens).
func (Anthropic) Unsupported(ep llmapi.Endpoint, name string) string {
	if ep.Dialect() != llmapi.Anthropic {
		return fmt.Sprintf("its provider %q speaks the Anthropic Messages API; call /v1/messages", name)
	}
	return ""
}

// Configure requires api_key, refuses api_version, defaults
// anthropic_version to DefaultAnthropicVersion, and checks
// forward_client_headers.
func (Anthropic) Configure(s Settings) (Settings, []Problem) {
	ps := append(keyRequired(KindAnthropic, s), onlyFor(KindAnthropic, s)...)
	if s.AnthropicVersion == "" {
		s.AnthropicVersion = DefaultAnthropicVersion
	}
	fwd, fps := forwardable(KindAnthropic, s)
	s.ForwardClientHeaders = fwd
	return s, append(ps, fps...)
}

// Rewrite sets x-api-key (removing the client's account headers unless
// forwarded), anthropic-version unless the client sent one, and the base
// URL's path prefix.
func (Anthropic) Rewrite(t Target, r Request) Rewrite {
	rw := base(t, r)
	rw.credential(KindAnthropic, t, "x-api-key", t.APIKey)
	if !r.AnthropicVersion {
		rw.set("anthropic-version", t.AnthropicVersion)
	}
	rw.prefixed(t, r)
	return rw.done()
}
