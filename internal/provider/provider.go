package provider

import (
	"log/slog"

	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/payload"
)

// Kind names a provider kind in sluice.yaml (providers[].kind).
type Kind string

// The provider kinds. The values are the YAML spellings.
const (
	KindOpenAI           Kind = "openai"
	KindAnthropic        Kind = "anthropic"
	KindAzureOpenAI      Kind = "azure-openai"
	KindOpenAICompatible Kind = "openai-compatible"
)

// Kinds returns every kind, in the order error messages list them.
func Kinds() []Kind {
	return []Kind{KindOpenAI, KindAnthropic, KindAzureOpenAI, KindOpenAICompatible}
}

// DefaultAnthropicVersion is sent to Anthropic when neither the client nor
// the provider's anthropic_version sets one.
const DefaultAnthropicVersion = "2023-06-01"

// AccountHeaders are the request headers with which a client of kind k's
// API selects the account, organization or project its request is billed
// to, lower-case: sent next to the gateway's own credential they would
// spend on whatever account the client names. Every kind's Rewrite
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
	case KindOpenAI, KindOpenAICompatible:
		return []string{"openai-organization", "openai-project"}
	case KindAzureOpenAI:
		return []string{"openai-organization", "openai-project", "ocp-apim-subscription-key", "ocp-apim-subscription-region"}
	case KindAnthropic:
		return []string{"anthropic-organization-id", "anthropic-workspace-id"}
	}
	return nil
}

// For returns the implementation of kind k, or false for a kind Sluice does
// not know. It is the one place a kind is mapped to behaviour: callers
// resolve it once, when the configuration compiles, and keep the Provider.
func For(k Kind) (Provider, bool) {
	switch k {
	case KindOpenAI:
		return OpenAI{}, true
	case KindAnthropic:
		return Anthropic{}, true
	case KindAzureOpenAI:
		return AzureOpenAI{}, true
	case KindOpenAICompatible:
		return Compatible{}, true
	}
	return nil, false
}

// Provider is what one kind of provider does differently from the others.
// Implementations are stateless values; everything per provider arrives as
// an argument.
type Provider interface {
	// Dialect is the API family the provider speaks. The providers of one
	// model must share it: Sluice never translates between dialects.
	Dialect() llmapi.Dialect
	// Unsupported says why a request to ep cannot go to the provider
	// called name, as the client-facing message of a 400
	// unsupported_endpoint, or "" when the provider serves ep.
	Unsupported(ep llmapi.Endpoint, name string) string
	// Configure returns s with the kind's defaults applied, and every
	// problem of s for this kind, each naming its field.
	Configure(s Settings) (Settings, []Problem)
	// Rewrite is the provider-specific rewrite of request r for target t:
	// its credential, path and version headers, the caller's credential
	// headers removed (but the one the credential is set in), the client's
	// account headers removed when the credential is injected (but those
	// t.ForwardClientHeaders keeps), and the model name in the body.
	Rewrite(t Target, r Request) Rewrite
}

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

// Target is a provider as a request is rewritten for it.
type Target struct {
	APIKey           string // the provider credential; may be empty where the kind allows
	APIVersion       string
	AnthropicVersion string // defaults applied (Configure)
	PathPrefix       string // base_url's path, no trailing slash
	Upstream         string // the model's name at the provider (Azure: the deployment)
	// ForwardClientHeaders are the account headers kept from the client
	// when the credential is injected (Settings.ForwardClientHeaders, as
	// Configure returned them).
	ForwardClientHeaders []string
}

// String keeps the credential out of fmt's output.
func (t Target) String() string { return "provider.Target{upstream " + t.Upstream + "}" }

// GoString keeps the credential out of %#v.
func (t Target) GoString() string { return t.String() }

// LogValue keeps the credential out of logs.
func (t Target) LogValue() slog.Value {
	return slog.GroupValue(slog.String("upstream", t.Upstream), slog.String("path_prefix", t.PathPrefix))
}

// Request is what a rewrite needs of the client's request.
type Request struct {
	Path     string          // the client's :path, query included
	Endpoint llmapi.Endpoint // the endpoint of Path
	Model    string          // the model name in the body
	// AnthropicVersion: the client sent an anthropic-version header.
	AnthropicVersion bool
}

// Header is one header to set.
type Header struct{ Key, Value string }

// Rewrite describes how a request changes for a provider: headers to set
// (in order; a set overwrites), headers to remove, and the body's rewrite.
// It holds the credential: never log it.
type Rewrite struct {
	Set    []Header
	Remove []string
	Body   payload.Rewrite
}

// Sets reports whether rw sets header k.
func (rw *Rewrite) Sets(k string) bool {
	for _, h := range rw.Set {
		if h.Key == k {
			return true
		}
	}
	return false
}
