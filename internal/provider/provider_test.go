package provider

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/payload"
)

func mustFor(t *testing.T, k Kind) Provider {
	t.Helper()
	p, ok := For(k)
	if !ok {
		t.Fatalf("For(%q): unknown", k)
	}
	return p
}

func TestFor(t *testing.T) {
	want := map[Kind]llmapi.Dialect{
		KindOpenAI:           llmapi.OpenAI,
		KindAnthropic:        llmapi.Anthropic,
		KindAzureOpenAI:      llmapi.OpenAI,
		KindOpenAICompatible: llmapi.OpenAI,
	}
	if len(Kinds()) != len(want) {
		t.Errorf("Kinds() = %v, want the %d kinds", Kinds(), len(want))
	}
	for _, k := range Kinds() {
		if got := mustFor(t, k).Dialect(); got != want[k] {
			t.Errorf("For(%q).Dialect() = %v, want %v", k, got, want[k])
		}
	}
	for _, k := range []Kind{"", "OpenAI", "ollama", "azure"} {
		if p, ok := For(k); ok || p != nil {
			t.Errorf("For(%q) = %v, %v; want nil, false", k, p, ok)
		}
	}
	if string(KindOpenAI) != "openai" || string(KindAnthropic) != "anthropic" ||
		string(KindAzureOpenAI) != "azure-openai" || string(KindOpenAICompatible) != "openai-compatible" {
		t.Error("the YAML spellings of the kinds changed")
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
	want := map[Kind]map[llmapi.Endpoint]string{
		KindOpenAI:           {llmapi.Messages: openAIMsg, llmapi.CountTokens: openAIMsg},
		KindOpenAICompatible: {llmapi.Messages: openAIMsg, llmapi.CountTokens: openAIMsg},
		KindAzureOpenAI:      {llmapi.Messages: openAIMsg, llmapi.CountTokens: openAIMsg, llmapi.Responses: azureMsg},
		KindAnthropic: {
			llmapi.ChatCompletions: anthropicMsg, llmapi.Completions: anthropicMsg,
			llmapi.Embeddings: anthropicMsg, llmapi.Responses: anthropicMsg,
		},
	}
	for _, k := range Kinds() {
		p := mustFor(t, k)
		for _, ep := range eps {
			if got := p.Unsupported(ep, "p"); got != want[k][ep] {
				t.Errorf("%s: Unsupported(%v) = %q, want %q", k, ep, got, want[k][ep])
			}
		}
	}
}

func TestConfigure(t *testing.T) {
	tests := []struct {
		kind Kind
		in   Settings
		want Settings
		ps   []Problem
	}{
		{kind: KindOpenAI, in: Settings{HasAPIKey: true}, want: Settings{HasAPIKey: true}},
		{kind: KindOpenAI, in: Settings{APIVersion: "v", AnthropicVersion: "a"}, want: Settings{APIVersion: "v", AnthropicVersion: "a"}, ps: []Problem{
			{"api_key", `required for kind "openai"`},
			{"api_version", `only allowed for kind "azure-openai"`},
			{"anthropic_version", `only allowed for kind "anthropic"`},
		}},
		{kind: KindOpenAICompatible, in: Settings{}, want: Settings{}},
		{kind: KindOpenAICompatible, in: Settings{APIVersion: "v", AnthropicVersion: "a"}, want: Settings{APIVersion: "v", AnthropicVersion: "a"}, ps: []Problem{
			{"api_version", `only allowed for kind "azure-openai"`},
			{"anthropic_version", `only allowed for kind "anthropic"`},
		}},
		{kind: KindAzureOpenAI, in: Settings{HasAPIKey: true, APIVersion: "2024-10-21"}, want: Settings{HasAPIKey: true, APIVersion: "2024-10-21"}},
		{kind: KindAzureOpenAI, in: Settings{AnthropicVersion: "a"}, want: Settings{AnthropicVersion: "a"}, ps: []Problem{
			{"api_key", `required for kind "azure-openai"`},
			{"api_version", `required for kind "azure-openai"`},
			{"anthropic_version", `only allowed for kind "anthropic"`},
		}},
		{kind: KindAnthropic, in: Settings{HasAPIKey: true}, want: Settings{HasAPIKey: true, AnthropicVersion: DefaultAnthropicVersion}},
		{kind: KindAnthropic, in: Settings{HasAPIKey: true, AnthropicVersion: "2023-01-01"}, want: Settings{HasAPIKey: true, AnthropicVersion: "2023-01-01"}},
		{kind: KindAnthropic, in: Settings{APIVersion: "v"}, want: Settings{APIVersion: "v", AnthropicVersion: DefaultAnthropicVersion}, ps: []Problem{
			{"api_key", `required for kind "anthropic"`},
			{"api_version", `only allowed for kind "azure-openai"`},
		}},
	}
	fwd := func(hs ...string) Settings { return Settings{HasAPIKey: true, ForwardClientHeaders: hs} }
	tests = append(tests, []struct {
		kind Kind
		in   Settings
		want Settings
		ps   []Problem
	}{
		{kind: KindOpenAI, in: fwd(), want: fwd()},
		{kind: KindOpenAI, in: fwd("OpenAI-Organization", " openai-project"), want: fwd("openai-organization", "openai-project")},
		{kind: KindOpenAI, in: fwd("openai-project", "OPENAI-PROJECT"), want: fwd("openai-project"), ps: []Problem{
			{"forward_client_headers[1]", `"OPENAI-PROJECT" is listed twice`},
		}},
		{kind: KindOpenAI, in: fwd("authorization", "x-custom", ""), want: fwd(), ps: []Problem{
			{"forward_client_headers[0]", `"authorization" is a credential header: the caller's credential never reaches a provider`},
			{"forward_client_headers[1]", `"x-custom" is not an account header of kind "openai" (one of openai-organization, openai-project); other client headers are forwarded already`},
			{"forward_client_headers[2]", `"" is not an account header of kind "openai" (one of openai-organization, openai-project); other client headers are forwarded already`},
		}},
		{kind: KindOpenAICompatible, in: Settings{ForwardClientHeaders: []string{"openai-organization"}}, want: Settings{ForwardClientHeaders: []string{"openai-organization"}}},
		{kind: KindAnthropic, in: fwd("openai-organization"), want: Settings{HasAPIKey: true, AnthropicVersion: DefaultAnthropicVersion}, ps: []Problem{
			{"forward_client_headers[0]", `"openai-organization" is not an account header of kind "anthropic" (one of anthropic-organization-id, anthropic-workspace-id); other client headers are forwarded already`},
		}},
		{kind: KindAzureOpenAI, in: Settings{HasAPIKey: true, APIVersion: "v", ForwardClientHeaders: []string{"Ocp-Apim-Subscription-Key", "api-key"}},
			want: Settings{HasAPIKey: true, APIVersion: "v", ForwardClientHeaders: []string{"ocp-apim-subscription-key"}}, ps: []Problem{
				{"forward_client_headers[1]", `"api-key" is a credential header: the caller's credential never reaches a provider`},
			}},
	}...)
	for _, tc := range tests {
		got, ps := mustFor(t, tc.kind).Configure(tc.in)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: Configure(%+v) settings (-want +got):\n%s", tc.kind, tc.in, diff)
		}
		if diff := cmp.Diff(tc.ps, ps, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: Configure(%+v) problems (-want +got):\n%s", tc.kind, tc.in, diff)
		}
	}
	if DefaultAnthropicVersion != "2023-06-01" {
		t.Errorf("DefaultAnthropicVersion = %q", DefaultAnthropicVersion)
	}
}

// TestRewrite: the rewrite of each kind, as extproc's single-provider and
// upstream tests see it through the processor.
func TestRewrite(t *testing.T) {
	type h = Header
	tests := []struct {
		name string
		kind Kind
		t    Target
		r    Request
		want Rewrite
	}{
		{name: "openai: bearer credential, model renamed", kind: KindOpenAI,
			t: Target{APIKey: "sk-up", Upstream: "gpt-4o-2024"},
			r: Request{Path: "/v1/chat/completions", Endpoint: llmapi.ChatCompletions, Model: "gpt-4o"},
			want: Rewrite{Set: []h{{"authorization", "Bearer sk-up"}}, Remove: []string{"openai-organization", "openai-project", "x-api-key", "api-key"},
				Body: payload.Rewrite{Model: "gpt-4o-2024"}}},
		{name: "openai: the model kept when the upstream name is the requested one", kind: KindOpenAI,
			t:    Target{APIKey: "sk-up", Upstream: "gpt-4o"},
			r:    Request{Path: "/v1/embeddings", Endpoint: llmapi.Embeddings, Model: "gpt-4o"},
			want: Rewrite{Set: []h{{"authorization", "Bearer sk-up"}}, Remove: []string{"openai-organization", "openai-project", "x-api-key", "api-key"}}},
		{name: "openai: base path prefix before the client's path, query kept", kind: KindOpenAI,
			t:    Target{APIKey: "sk-up", PathPrefix: "/proxy", Upstream: "m"},
			r:    Request{Path: "/v1/responses?x=1", Endpoint: llmapi.Responses, Model: "m"},
			want: Rewrite{Set: []h{{"authorization", "Bearer sk-up"}, {":path", "/proxy/v1/responses?x=1"}}, Remove: []string{"openai-organization", "openai-project", "x-api-key", "api-key"}}},
		{name: "openai-compatible: base path prefix, bearer credential", kind: KindOpenAICompatible,
			t: Target{APIKey: "sk-compat", PathPrefix: "/api", Upstream: "local-fb"},
			r: Request{Path: "/v1/chat/completions?trace=1", Endpoint: llmapi.ChatCompletions, Model: "fb"},
			want: Rewrite{Set: []h{{"authorization", "Bearer sk-compat"}, {":path", "/api/v1/chat/completions?trace=1"}}, Remove: []string{"openai-organization", "openai-project", "x-api-key", "api-key"},
				Body: payload.Rewrite{Model: "local-fb"}}},
		{name: "openai-compatible without a key: no credential is sent, every caller credential removed", kind: KindOpenAICompatible,
			t:    Target{Upstream: "llama"},
			r:    Request{Path: "/v1/chat/completions", Endpoint: llmapi.ChatCompletions, Model: "llama"},
			want: Rewrite{Remove: []string{"authorization", "x-api-key", "api-key"}}},
		{name: "azure-openai: deployment path with api-version, api-key, model dropped", kind: KindAzureOpenAI,
			t: Target{APIKey: "azkey", APIVersion: "2024-10-21", Upstream: "dep-fb"},
			r: Request{Path: "/v1/chat/completions", Endpoint: llmapi.ChatCompletions, Model: "fb"},
			want: Rewrite{Set: []h{{"api-key", "azkey"}, {":path", "/openai/deployments/dep-fb/chat/completions?api-version=2024-10-21"}}, Remove: []string{"openai-organization", "openai-project", "ocp-apim-subscription-key", "ocp-apim-subscription-region", "authorization", "x-api-key"},
				Body: payload.Rewrite{DropModel: true}}},
		{name: "azure-openai: base path prefix, escaped deployment and version, the client's query replaced", kind: KindAzureOpenAI,
			t: Target{APIKey: "azkey", APIVersion: "2024-10-21 preview&x", PathPrefix: "/eu", Upstream: "dep/1"},
			r: Request{Path: "/v1/embeddings?x=1", Endpoint: llmapi.Embeddings, Model: "dep/1"},
			want: Rewrite{Set: []h{{"api-key", "azkey"}, {":path", "/eu/openai/deployments/dep%2F1/embeddings?api-version=2024-10-21+preview%26x"}}, Remove: []string{"openai-organization", "openai-project", "ocp-apim-subscription-key", "ocp-apim-subscription-region", "authorization", "x-api-key"},
				Body: payload.Rewrite{DropModel: true}}},
		{name: "azure-openai: completions", kind: KindAzureOpenAI,
			t: Target{APIKey: "azkey", APIVersion: "v1", Upstream: "d"},
			r: Request{Path: "/v1/completions", Endpoint: llmapi.Completions, Model: "m"},
			want: Rewrite{Set: []h{{"api-key", "azkey"}, {":path", "/openai/deployments/d/completions?api-version=v1"}}, Remove: []string{"openai-organization", "openai-project", "ocp-apim-subscription-key", "ocp-apim-subscription-region", "authorization", "x-api-key"},
				Body: payload.Rewrite{DropModel: true}}},
		{name: "anthropic: x-api-key, the provider's anthropic-version", kind: KindAnthropic,
			t: Target{APIKey: "sk-ant2", AnthropicVersion: "2023-01-01", Upstream: "claude-sonnet-4-b"},
			r: Request{Path: "/v1/messages", Endpoint: llmapi.Messages, Model: "fb-claude"},
			want: Rewrite{Set: []h{{"x-api-key", "sk-ant2"}, {"anthropic-version", "2023-01-01"}}, Remove: []string{"anthropic-organization-id", "anthropic-workspace-id", "authorization", "api-key"},
				Body: payload.Rewrite{Model: "claude-sonnet-4-b"}}},
		{name: "anthropic: the client's anthropic-version kept, base path prefix", kind: KindAnthropic,
			t:    Target{APIKey: "sk-ant", AnthropicVersion: DefaultAnthropicVersion, PathPrefix: "/prefix", Upstream: "claude-sonnet-4"},
			r:    Request{Path: "/v1/messages", Endpoint: llmapi.Messages, Model: "claude-sonnet-4", AnthropicVersion: true},
			want: Rewrite{Set: []h{{"x-api-key", "sk-ant"}, {":path", "/prefix/v1/messages"}}, Remove: []string{"anthropic-organization-id", "anthropic-workspace-id", "authorization", "api-key"}}},
		{name: "openai: a forwarded account header is kept, the other removed", kind: KindOpenAI,
			t:    Target{APIKey: "sk-up", Upstream: "m", ForwardClientHeaders: []string{"openai-project"}},
			r:    Request{Path: "/v1/chat/completions", Endpoint: llmapi.ChatCompletions, Model: "m"},
			want: Rewrite{Set: []h{{"authorization", "Bearer sk-up"}}, Remove: []string{"openai-organization", "x-api-key", "api-key"}}},
		{name: "openai-compatible with a key: account headers removed", kind: KindOpenAICompatible,
			t:    Target{APIKey: "k", Upstream: "m"},
			r:    Request{Path: "/v1/chat/completions", Endpoint: llmapi.ChatCompletions, Model: "m"},
			want: Rewrite{Set: []h{{"authorization", "Bearer k"}}, Remove: []string{"openai-organization", "openai-project", "x-api-key", "api-key"}}},
		{name: "azure-openai: every account header forwarded", kind: KindAzureOpenAI,
			t: Target{APIKey: "az", APIVersion: "v", Upstream: "d", ForwardClientHeaders: AccountHeaders(KindAzureOpenAI)},
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
