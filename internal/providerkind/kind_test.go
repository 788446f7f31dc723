package providerkind

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicegw/sluice/internal/llmapi"
)

// TestKinds: the kinds, their YAML spellings and the dialect each speaks;
// an unknown kind is not Known, counts as OpenAI-family and has no account
// headers.
func TestKinds(t *testing.T) {
	want := map[Kind]llmapi.Dialect{
		OpenAI:           llmapi.OpenAI,
		Anthropic:        llmapi.Anthropic,
		AzureOpenAI:      llmapi.OpenAI,
		OpenAICompatible: llmapi.OpenAI,
	}
	if len(Kinds()) != len(want) {
		t.Errorf("Kinds() = %v, want the %d kinds", Kinds(), len(want))
	}
	for _, k := range Kinds() {
		if !k.Known() {
			t.Errorf("%q is not Known", k)
		}
		if got := k.Dialect(); got != want[k] {
			t.Errorf("%q.Dialect() = %v, want %v", k, got, want[k])
		}
		if len(AccountHeaders(k)) == 0 {
			t.Errorf("AccountHeaders(%q) is empty", k)
		}
	}
	for _, k := range []Kind{"", "OpenAI", "ollama", "azure"} {
		if k.Known() || k.Dialect() != llmapi.OpenAI || AccountHeaders(k) != nil {
			t.Errorf("unknown kind %q: Known %v, Dialect %v, AccountHeaders %v", k, k.Known(), k.Dialect(), AccountHeaders(k))
		}
		if got, ps := k.Configure(Settings{APIVersion: "v"}); ps != nil || got.APIVersion != "v" {
			t.Errorf("unknown kind %q: Configure = %+v, %v; want its settings unchanged and no problem", k, got, ps)
		}
	}
	if string(OpenAI) != "openai" || string(Anthropic) != "anthropic" ||
		string(AzureOpenAI) != "azure-openai" || string(OpenAICompatible) != "openai-compatible" {
		t.Error("the YAML spellings of the kinds changed")
	}
}

func TestConfigure(t *testing.T) {
	tests := []struct {
		kind Kind
		in   Settings
		want Settings
		ps   []Problem
	}{
		{kind: OpenAI, in: Settings{HasAPIKey: true}, want: Settings{HasAPIKey: true}},
		{kind: OpenAI, in: Settings{APIVersion: "v", AnthropicVersion: "a"}, want: Settings{APIVersion: "v", AnthropicVersion: "a"}, ps: []Problem{
			{"api_key", `required for kind "openai"`},
			{"api_version", `only allowed for kind "azure-openai"`},
			{"anthropic_version", `only allowed for kind "anthropic"`},
		}},
		{kind: OpenAICompatible, in: Settings{}, want: Settings{}},
		{kind: OpenAICompatible, in: Settings{APIVersion: "v", AnthropicVersion: "a"}, want: Settings{APIVersion: "v", AnthropicVersion: "a"}, ps: []Problem{
			{"api_version", `only allowed for kind "azure-openai"`},
			{"anthropic_version", `only allowed for kind "anthropic"`},
		}},
		{kind: AzureOpenAI, in: Settings{HasAPIKey: true, APIVersion: "2024-10-21"}, want: Settings{HasAPIKey: true, APIVersion: "2024-10-21"}},
		{kind: AzureOpenAI, in: Settings{AnthropicVersion: "a"}, want: Settings{AnthropicVersion: "a"}, ps: []Problem{
			{"api_key", `required for kind "azure-openai"`},
			{"api_version", `required for kind "azure-openai"`},
			{"anthropic_version", `only allowed for kind "anthropic"`},
		}},
		{kind: Anthropic, in: Settings{HasAPIKey: true}, want: Settings{HasAPIKey: true, AnthropicVersion: DefaultAnthropicVersion}},
		{kind: Anthropic, in: Settings{HasAPIKey: true, AnthropicVersion: "2023-01-01"}, want: Settings{HasAPIKey: true, AnthropicVersion: "2023-01-01"}},
		{kind: Anthropic, in: Settings{APIVersion: "v"}, want: Settings{APIVersion: "v", AnthropicVersion: DefaultAnthropicVersion}, ps: []Problem{
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
		{kind: OpenAI, in: fwd(), want: fwd()},
		{kind: OpenAI, in: fwd("OpenAI-Organization", " openai-project"), want: fwd("openai-organization", "openai-project")},
		{kind: OpenAI, in: fwd("openai-project", "OPENAI-PROJECT"), want: fwd("openai-project"), ps: []Problem{
			{"forward_client_headers[1]", `"OPENAI-PROJECT" is listed twice`},
		}},
		{kind: OpenAI, in: fwd("authorization", "x-custom", ""), want: fwd(), ps: []Problem{
			{"forward_client_headers[0]", `"authorization" is a credential header: the caller's credential never reaches a provider`},
			{"forward_client_headers[1]", `"x-custom" is not an account header of kind "openai" (one of openai-organization, openai-project); other client headers are forwarded already`},
			{"forward_client_headers[2]", `"" is not an account header of kind "openai" (one of openai-organization, openai-project); other client headers are forwarded already`},
		}},
		{kind: OpenAICompatible, in: Settings{ForwardClientHeaders: []string{"openai-organization"}}, want: Settings{ForwardClientHeaders: []string{"openai-organization"}}},
		{kind: Anthropic, in: fwd("openai-organization"), want: Settings{HasAPIKey: true, AnthropicVersion: DefaultAnthropicVersion}, ps: []Problem{
			{"forward_client_headers[0]", `"openai-organization" is not an account header of kind "anthropic" (one of anthropic-organization-id, anthropic-workspace-id); other client headers are forwarded already`},
		}},
		{kind: AzureOpenAI, in: Settings{HasAPIKey: true, APIVersion: "v", ForwardClientHeaders: []string{"Ocp-Apim-Subscription-Key", "api-key"}},
			want: Settings{HasAPIKey: true, APIVersion: "v", ForwardClientHeaders: []string{"ocp-apim-subscription-key"}}, ps: []Problem{
				{"forward_client_headers[1]", `"api-key" is a credential header: the caller's credential never reaches a provider`},
			}},
	}...)
	for _, tc := range tests {
		got, ps := tc.kind.Configure(tc.in)
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
