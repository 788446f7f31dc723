package provider

import (
	"log/slog"

	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/payload"
	"github.com/sluicegw/sluice/internal/providerkind"
)

// For returns the implementation of kind k, or false for a kind Sluice does
// not know. It is the one place a kind is mapped to request-path
// behaviour; the configuration names the kind (policies.Provider.Kind)
// and validation admits only known ones, so on the request path it never
// returns false.
func For(k providerkind.Kind) (Provider, bool) {
	switch k {
	case providerkind.OpenAI:
		return OpenAI{}, true
	case providerkind.Anthropic:
		return Anthropic{}, true
	case providerkind.AzureOpenAI:
		return AzureOpenAI{}, true
	case providerkind.OpenAICompatible:
		return Compatible{}, true
	}
	return nil, false
}

// Provider is what one kind of provider does to a request. Implementations
// are stateless values; everything per provider arrives as an argument.
// The kind's dialect and the checks and defaults of its configuration are
// providerkind's.
type Provider interface {
	// Unsupported says why a request to ep cannot go to the provider
	// called name, as the client-facing message of a 400
	// unsupported_endpoint, or "" when the provider serves ep.
	Unsupported(ep llmapi.Endpoint, name string) string
	// Rewrite is the provider-specific rewrite of request r for target t:
	// its credential, path and version headers, the caller's credential
	// headers removed (but the one the credential is set in), the client's
	// account headers removed when the credential is injected (but those
	// t.ForwardClientHeaders keeps), and the model name in the body.
	Rewrite(t Target, r Request) Rewrite
}

// Target is a provider as a request is rewritten for it.
type Target struct {
	APIKey           string // the provider credential; may be empty where the kind allows
	APIVersion       string
	AnthropicVersion string // defaults applied (providerkind.Kind.Configure)
	PathPrefix       string // base_url's path, no trailing slash
	Upstream         string // the model's name at the provider (Azure: the deployment)
	// ForwardClientHeaders are the account headers kept from the client
	// when the credential is injected (providerkind.Settings'
	// ForwardClientHeaders, as Configure returned them).
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
