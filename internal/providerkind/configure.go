package providerkind

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluicegw/sluice/internal/llmapi"
)

// Settings are the kind-specific fields of a provider's configuration.
type Settings struct {
	HasAPIKey        bool   // api_key is set
	APIVersion       string // api_version
	AnthropicVersion string // anthropic_version
	// ForwardClientHeaders (forward_client_headers) are the kind's account
	// headers (AccountHeaders) a client may still send next to the
	// provider credential Sluice injects; Configure lower-cases them.
	ForwardClientHeaders []string
}

// Problem is a problem of a provider's Settings.
type Problem struct {
	Field   string // the YAML field, relative to the provider: "api_key"
	Message string
}

// Configure returns s with kind k's defaults applied, and every problem
// of s for k, each naming its field:
//
//   - openai: api_key required; api_version and anthropic_version refused.
//   - anthropic: api_key required; api_version refused; anthropic_version
//     defaults to DefaultAnthropicVersion.
//   - azure-openai: api_key and api_version required; anthropic_version
//     refused.
//   - openai-compatible: api_key optional; both version fields refused.
//
// Every kind checks forward_client_headers: each one of its
// AccountHeaders (case-insensitive), once, returned lower-cased. An
// unknown kind (Known) returns s unchanged and no problem: the kind itself
// is the problem, reported by the caller.
func (k Kind) Configure(s Settings) (Settings, []Problem) {
	if !k.Known() {
		return s, nil
	}
	var ps []Problem
	if k != OpenAICompatible && !s.HasAPIKey {
		ps = append(ps, Problem{"api_key", fmt.Sprintf("required for kind %q", k)})
	}
	if k == AzureOpenAI && s.APIVersion == "" {
		ps = append(ps, Problem{"api_version", fmt.Sprintf("required for kind %q", AzureOpenAI)})
	}
	if k != AzureOpenAI && s.APIVersion != "" {
		ps = append(ps, Problem{"api_version", fmt.Sprintf("only allowed for kind %q", AzureOpenAI)})
	}
	if k != Anthropic && s.AnthropicVersion != "" {
		ps = append(ps, Problem{"anthropic_version", fmt.Sprintf("only allowed for kind %q", Anthropic)})
	}
	if k == Anthropic && s.AnthropicVersion == "" {
		s.AnthropicVersion = DefaultAnthropicVersion
	}
	fwd, fps := forwardable(k, s)
	s.ForwardClientHeaders = fwd
	return s, append(ps, fps...)
}

// forwardable checks forward_client_headers for kind: each one of its
// AccountHeaders (case-insensitive), once; it returns them lower-cased.
func forwardable(kind Kind, s Settings) ([]string, []Problem) {
	var ps []Problem
	var out []string
	allowed := AccountHeaders(kind)
	for i, h := range s.ForwardClientHeaders {
		field := fmt.Sprintf("forward_client_headers[%d]", i)
		lh := strings.ToLower(strings.TrimSpace(h))
		switch {
		case slices.Contains(llmapi.CredentialHeaders, lh):
			ps = append(ps, Problem{field, fmt.Sprintf("%q is a credential header: the caller's credential never reaches a provider", h)})
		case !slices.Contains(allowed, lh):
			ps = append(ps, Problem{field, fmt.Sprintf("%q is not an account header of kind %q (one of %s); other client headers are forwarded already", h, kind, strings.Join(allowed, ", "))})
		case slices.Contains(out, lh):
			ps = append(ps, Problem{field, fmt.Sprintf("%q is listed twice", h)})
		default:
			out = append(out, lh)
		}
	}
	return out, ps
}
