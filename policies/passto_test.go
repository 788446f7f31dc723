package policies

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/providerkind"
)

// TestPassTo: gateway.pass_to's rule — a named provider must exist, speak
// the API and not be azure-openai; an unnamed API goes to its only
// provider; pass_to without pass, and pass with no target, are mistakes.
// The snapshot resolves what Validate accepts to the same providers.
func TestPassTo(t *testing.T) {
	tests := []struct {
		name              string
		change            func(c *Config)
		want              []string
		openAI, anthropic string // the snapshot's targets when valid
	}{
		{"deny has no targets", func(c *Config) {}, nil, "", ""},
		{"pass: Anthropic's only provider, OpenAI's two need a name", func(c *Config) { c.Gateway.UnknownPaths = "pass" }, nil, "", "anthropic"},
		{"pass with OpenAI's named", func(c *Config) {
			c.Gateway.UnknownPaths = "pass"
			c.Gateway.PassTo.OpenAI = "local"
		}, nil, "local", "anthropic"},
		{"the only OpenAI provider but azure", func(c *Config) {
			c.Gateway.UnknownPaths = "pass"
			c.Providers = c.Providers[:3] // openai, anthropic, azure
			c.Models = c.Models[:2]
		}, nil, "openai", "anthropic"},
		{"named providers that cannot take them", func(c *Config) {
			c.Gateway.UnknownPaths = "pass"
			c.Gateway.PassTo = PassTo{OpenAI: "azure", Anthropic: "openai"}
		}, []string{
			`gateway.pass_to.anthropic: provider "openai" is of kind "openai", which does not speak the anthropic API`,
			`gateway.pass_to.openai: provider "azure" is azure-openai, whose paths are its own (/openai/deployments/…): it cannot take a client's unknown paths`,
		}, "", ""},
		{"an unknown provider", func(c *Config) {
			c.Gateway.UnknownPaths = "pass"
			c.Gateway.PassTo.OpenAI = "opnai"
		}, []string{`gateway.pass_to.openai: unknown provider "opnai"`}, "", ""},
		{"pass_to without pass", func(c *Config) { c.Gateway.PassTo.Anthropic = "anthropic" }, []string{
			`gateway.pass_to.anthropic: is set, but gateway.unknown_paths is "deny": set unknown_paths: pass, or remove pass_to`,
		}, "", ""},
		{"pass with no target at all", func(c *Config) {
			c.Gateway.UnknownPaths = "pass"
			c.Providers = append(c.Providers, Provider{Name: "anthropic2", Kind: providerkind.Anthropic, BaseURL: "https://api.anthropic.com", APIKey: "sk-ant-y"})
		}, []string{
			"gateway.unknown_paths: is pass, but no provider can take unknown paths: each API has none or several providers that could (azure-openai cannot); name one in gateway.pass_to.openai or gateway.pass_to.anthropic (providers: openai, anthropic, azure, local, anthropic2)",
		}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.change(c)
			var got []string
			for _, p := range c.Validate() {
				got = append(got, p.String())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("Validate (-want +got):\n%s", diff)
			}
			if tt.want != nil {
				return
			}
			s, err := Compile(c, filepath.Join(t.TempDir(), "sluice.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range []struct {
				d    llmapi.Dialect
				want string
			}{{llmapi.OpenAI, tt.openAI}, {llmapi.Anthropic, tt.anthropic}} {
				var got string
				if p := s.PassTo(d.d); p != nil {
					got = p.Name
				}
				if got != d.want {
					t.Errorf("PassTo(%s) = %q, want %q", d.d, got, d.want)
				}
			}
		})
	}
}
