package providerkind

import "github.com/sluicegw/sluice/internal/llmapi"

// Kind names a provider kind in sluice.yaml (providers[].kind).
type Kind string

// The provider kinds. The values are the YAML spellings.
const (
	OpenAI           Kind = "openai"
	Anthropic        Kind = "anthropic"
	AzureOpenAI      Kind = "azure-openai"
	OpenAICompatible Kind = "openai-compatible"
)

// Kinds returns every kind, in the order error messages list them.
func Kinds() []Kind {
	return []Kind{OpenAI, Anthropic, AzureOpenAI, OpenAICompatible}
}

// Known reports whether k is a kind Sluice knows.
func (k Kind) Known() bool {
	switch k {
	case OpenAI, Anthropic, AzureOpenAI, OpenAICompatible:
		return true
	}
	return false
}

// Dialect is the API family the kind speaks. The providers of one model
// must share it: Sluice never translates between dialects. An unknown
// kind counts as OpenAI-family.
func (k Kind) Dialect() llmapi.Dialect {
	if k == Anthropic {
		return llmapi.Anthropic
	}
	return llmapi.OpenAI
}

// DefaultAnthropicVersion is sent to Anthropic when neither the client nor
// the provider's anthropic_version sets one.
const DefaultAnthropicVersion = "2023-06-01"

// AccountHeaders are the request headers with which a client of kind k's
// API selects the account, organization or project its request is billed
// to, lower-case: sent next to the gateway's own credential they would
// spend on whatever account the client names. Every kind's rewrite
// removes them when it injects a credential, but those a provider's
// forward_client_headers keeps.
//
//   - openai, openai-compatible: OpenAI-Organization and OpenAI-Project
//     (OpenAI's "Organizations and projects" request headers).
//   - azure-openai: the same two, and Ocp-Apim-Subscription-Key and
//     Ocp-Apim-Subscription-Region, the Azure AI services resource-key
//     headers (an alternative credential, and the region it bills).
//   - anthropic: Anthropic's API selects the organization and workspace
//     by the key alone and documents no request header for either; the
//     names of its account identifiers, anthropic-organization-id (a
//     response header) and anthropic-workspace-id, are removed all the
//     same so that a client-sent one never travels with the gateway's key.
func AccountHeaders(k Kind) []string {
	switch k {
	case OpenAI, OpenAICompatible:
		return []string{"openai-organization", "openai-project"}
	case AzureOpenAI:
		return []string{"openai-organization", "openai-project", "ocp-apim-subscription-key", "ocp-apim-subscription-region"}
	case Anthropic:
		return []string{"anthropic-organization-id", "anthropic-workspace-id"}
	}
	return nil
}
