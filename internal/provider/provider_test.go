package provider

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/payload"
	"github.com/sluicegw/sluice/internal/providerkind"
)

func mustFor(t *testing.T, k providerkind.Kind) Provider {
	t.Helper()
	p, ok := For(k)
	if !ok {
		t.Fatalf("For(%q): unknown", k)
	}
	return p
}

// TestFor: every kind has its adapter, which serves the endpoints of the
// kind's own dialect; an unknown kind has none.
func TestFor(t *testing.T) {
	own := map[llmapi.Dialect]llmapi.Endpoint{llmapi.OpenAI: llmapi.ChatCompletions, llmapi.Anthropic: llmapi.Messages}
	for _, k := range providerkind.Kinds() {
		if msg := mustFor(t, k).Unsupported(own[k.Dialect()], "p"); msg != "" {
			t.Errorf("For(%q) refuses its own dialect's %v: %s", k, own[k.Dialect()], msg)
		}
	}
	for _, k := range []providerkind.Kind{"", "OpenAI", "ollama", "azure"} {
		if p, ok := For(k); ok || p != nil {
			t.Errorf("For(%q) = %v, %v; want nil, false", k, p, ok)
		}
	}
}

// TestUnsupported: which endpoints each kind serves, and the message
// (byte for byte) when it does not.
func TestUnsupported(t *testing.T) {
	const (
		openAIMsg    = `its provider "p" speaks the OpenAI API; call /v1/chat/completions`
		anthropicMsg = `its provider "p" speaks the Anthropic Messages API; call /v1/messages`
		azureMsg     = `the Responses API is not routed to Azure OpenAI provider "p"`
	)
	eps := []llmapi.Endpoint{llmapi.ChatCompletions, llmapi.Completions, llmapi.Embeddings, llmapi.Responses, llmapi.Messages, llmapi.CountTokens}
	want := map[providerkind.Kind]map[llmapi.Endpoint]string{
		providerkind.OpenAI:           {llmapi.Messages: openAIMsg, llmapi.CountTokens: openAIMsg},
		providerkind.OpenAICompatible: {llmapi.Messages: openAIMsg, llmapi.CountTokens: openAIMsg},
		providerkind.AzureOpenAI:      {llmapi.Messages: openAIMsg, llmapi.CountTokens: openAIMsg, llmapi.Responses: azureMsg},
		providerkind.Anthropic: {
			llmapi.ChatCompletions: anthropicMsg, llmapi.Completions: anthropicMsg,
			llmapi.Embeddings: anthropicMsg, llmapi.Responses: anthropicMsg,
		},
	}
	for _, k := range providerkind.Kinds() {
		p := mustFor(t, k)
		for _, ep := range eps {
			if got := p.Unsupported(ep, "p"); got != want[k][ep] {
				t.Errorf("%s: Unsupported(%v) = %q, want %q", k, ep, got, want[k][ep])
			}
		}
	}
}

// TestRewrite: the rewrite of each kind, as extproc's single-provider and
// upstream tests see it through the processor.
func TestRewrite(t *testing.T) {
	type h = Header
	tests := []struct {
		name string
		kind providerkind.Kind
		t    Target
		r    Request
		want Rewrite
	}{
		{name: "openai: bearer credential, model renamed", kind: providerkind.OpenAI,
			t: Target{APIKey: "sk-up", Upstream: "gpt-4o-2024"},
			r: Request{Path: "/v1/chat/completions", Endpoint: llmapi.ChatCompletions, Model: "gpt-4o"},
			want: Rewrite{Set: []h{{"authorization", "Bearer sk-up"}}, Remove: []string{"openai-organization", "openai-project", "x-api-key", "api-key"},
				Body: payload.Rewrite{Model: "gpt-4o-2024"}}},
		{name: "openai: the model kept when the upstream name is the requested one", kind: providerkind.OpenAI,
			t:    Target{APIKey: "sk-up", Upstream: "gpt-4o"},
			r:    Request{Path: "/v1/embeddings", Endpoint: llmapi.Embeddings, Model: "gpt-4o"},
			want: Rewrite{Set: []h{{"authorization", "Bearer sk-up"}}, Remove: []string{"openai-organization", "openai-project", "x-api-key", "api-key"}}},
		{name: "openai: base path prefix before the client's path, query kept", kind: providerkind.OpenAI,
			t:    Target{APIKey: "sk-up", PathPrefix: "/proxy", Upstream: "m"},
			r:    Request{Path: "/v1/responses?x=1", Endpoint: llmapi.Responses, Model: "m"},
			want: Rewrite{Set: []h{{"authorization", "Bearer sk-up"}, {":path", "/proxy/v1/responses?x=1"}}, Remove: []string{"openai-organization", "openai-project", "x-api-key", "api-key"}}},
		{name: "openai-compatible: base path prefix, bearer credential", kind: providerkind.OpenAICompatible,
			t: Target{APIKey: "sk-compat", PathPrefix: "/api", Upstream: "local-fb"},
			r: Request{Path: "/v1/chat/completions?trace=1", Endpoint: llmapi.ChatCompletions, Model: "fb"},
			want: Rewrite{Set: []h{{"authorization", "Bearer sk-compat"}, {":path", "/api/v1/chat/completions?trace=1"}}, Remove: []string{"openai-organization", "openai-project", "x-api-key", "api-key"},
				Body: payload.Rewrite{Model: "local-fb"}}},
		{name: "openai-compatible without a key: no credential is sent, every caller credential removed", kind: providerkind.OpenAICompatible,
			t:    Target{Upstream: "llama"},
			r:    Request{Path: "/v1/chat/completions", Endpoint: llmapi.ChatCompletions, Model: "llama"},
			want: Rewrite{Remove: []string{"authorization", "x-api-key", "api-key"}}},
		{name: "azure-openai: deployment path with api-version, api-key, model dropped", kind: providerkind.AzureOpenAI,
			t: Target{APIKey: "azkey", APIVersion: "2024-10-21", Upstream: "dep-fb"},
			r: Request{Path: "/v1/chat/completions", Endpoint: llmapi.ChatCompletions, Model: "fb"},
			want: Rewrite{Set: []h{{"api-key", "azkey"}, {":path", "/openai/deployments/dep-fb/chat/completions?api-version=2024-10-21"}}, Remove: []string{"openai-organization", "openai-project", "ocp-apim-subscription-key", "ocp-apim-subscription-region", "authorization", "x-api-key"},
				Body: payload.Rewrite{DropModel: true}}},
		{name: "azure-openai: base path prefix, escaped deployment and version, the client's query replaced", kind: providerkind.AzureOpenAI,
			t: Target{APIKey: "azkey", APIVersion: "2024-10-21 preview&x", PathPrefix: "/eu", Upstream: "dep/1"},
			r: Request{Path: "/v1/embeddings?x=1", Endpoint: llmapi.Embeddings, Model: "dep/1"},
			want: Rewrite{Set: []h{{"api-key", "azkey"}, {":path", "/eu/openai/deployments/dep%2F1/embeddings?api-version=2024-10-21+preview%26x"}}, Remove: []string{"openai-organization", "openai-project", "ocp-apim-subscription-key", "ocp-apim-subscription-region", "authorization", "x-api-key"},
				Body: payload.Rewrite{DropModel: true}}},
		{name: "azure-openai: completions", kind: providerkind.AzureOpenAI,
			t: Target{APIKey: "azkey", APIVersion: "v1", Upstream: "d"},
			r: Request{Path: "/v1/completions", Endpoint: llmapi.Completions, Model: "m"},
			want: Rewrite{Set: []h{{"api-key", "azkey"}, {":path", "/openai/deployments/d/completions?api-version=v1"}}, Remove: []string{"openai-organization", "openai-project", "ocp-apim-subscription-key", "ocp-apim-subscription-region", "authorization", "x-api-key"},
				Body: payload.Rewrite{DropModel: true}}},
		{name: "anthropic: x-api-key, the provider's anthropic-version", kind: providerkind.Anthropic,
			t: Target{APIKey: "sk-ant2", AnthropicVersion: "2023-01-01", Upstream: "claude-sonnet-4-b"},
			r: Request{Path: "/v1/messages", Endpoint: llmapi.Messages, Model: "fb-claude"},
			want: Rewrite{Set: []h{{"x-api-key", "sk-ant2"}, {"anthropic-version", "2023-01-01"}}, Remove: []string{"anthropic-organization-id", "anthropic-workspace-id", "authorization", "api-key"},
				Body: payload.Rewrite{Model: "claude-sonnet-4-b"}}},
		{name: "anthropic: the client's anthropic-version kept, base path prefix", kind: providerkind.Anthropic,
			t:    Target{APIKey: "sk-ant", AnthropicVersion: providerkind.DefaultAnthropicVersion, PathPrefix: "/prefix", Upstream: "claude-sonnet-4"},
			r:    Request{Path: "/v1/messages", Endpoint: llmapi.Messages, Model: "claude-sonnet-4", AnthropicVersion: true},
			want: Rewrite{Set: []h{{"x-api-key", "sk-ant"}, {":path", "/prefix/v1/messages"}}, Remove: []string{"anthropic-organization-id", "anthropic-workspace-id", "authorization", "api-key"}}},
		{name: "openai: a forwarded account header is kept, the other removed", kind: providerkind.OpenAI,
			t:    Target{APIKey: "sk-up", Upstream: "m", ForwardClientHeaders: []string{"openai-project"}},
			r:    Request{Path: "/v1/chat/completions", Endpoint: llmapi.ChatCompletions, Model: "m"},
			want: Rewrite{Set: []h{{"authorization", "Bearer sk-up"}}, Remove: []string{"openai-organization", "x-api-key", "api-key"}}},
		{name: "openai-compatible with a key: account headers removed", kind: providerkind.OpenAICompatible,
			t:    Target{APIKey: "k", Upstream: "m"},
			r:    Request{Path: "/v1/chat/completions", Endpoint: llmapi.ChatCompletions, Model: "m"},
			want: Rewrite{Set: []h{{"authorization", "Bearer k"}}, Remove: []string{"openai-organization", "openai-project", "x-api-key", "api-key"}}},
		{name: "azure-openai: every account header forwarded", kind: providerkind.AzureOpenAI,
			t: Target{APIKey: "az", APIVersion: "v", Upstream: "d", ForwardClientHeaders: providerkind.AccountHeaders(providerkind.AzureOpenAI)},
			r: Request{Path: "/v1/chat/completions", Endpoint: llmapi.ChatCompletions, Model: "d"},
			want: Rewrite{Set: []h{{"api-key", "az"}, {":path", "/openai/deployments/d/chat/completions?api-version=v"}}, Remove: []string{"authorization", "x-api-key"},
				Body: payload.Rewrite{DropModel: true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := mustFor(t, tc.kind).Rewrite(tc.t, tc.r)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Rewrite (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTargetHidesCredential: a Target printed or logged never shows its key.
func TestTargetHidesCredential(t *testing.T) {
	tg := Target{APIKey: "sk-SECRET", Upstream: "m"}
	for _, s := range []string{fmt.Sprint(tg), fmt.Sprintf("%v %+v %#v %s", tg, tg, tg, tg), tg.LogValue().String()} {
		if strings.Contains(s, "SECRET") {
			t.Errorf("credential shown: %s", s)
		}
	}
}
