package policies

import (
	"fmt"
	"strings"

	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/providerkind"
)

// passDialects are the APIs gateway.pass_to names a provider for, with
// their YAML field.
var passDialects = []struct {
	d     llmapi.Dialect
	field string
	get   func(PassTo) string
}{
	{llmapi.OpenAI, "openai", func(p PassTo) string { return p.OpenAI }},
	{llmapi.Anthropic, "anthropic", func(p PassTo) string { return p.Anthropic }},
}

// passTargets resolves gateway.pass_to: the provider (an index into
// c.Providers) that takes unknown paths of each API, and every problem of
// the setting, each with its path. It is the one rule, shared by Validate
// and the snapshot.
//
//   - A named provider must exist, speak that API, and not be
//     azure-openai, whose paths (/openai/deployments/…) are its own: a
//     client's /v1/files means nothing there.
//   - An unnamed API goes to its only provider when exactly one speaks it
//     (azure-openai not counted); with none or several it has no pass
//     target, and its unknown paths are refused as under deny.
//   - pass_to set with unknown_paths deny, and pass with no target at all,
//     are mistakes, reported.
func passTargets(c *Config) (map[llmapi.Dialect]int, []issue) {
	var ps []issue
	pass := c.Gateway.UnknownPaths == "pass"
	out := map[llmapi.Dialect]int{}
	for _, pd := range passDialects {
		path := "gateway.pass_to." + pd.field
		name := pd.get(c.Gateway.PassTo)
		if name != "" && !pass {
			ps = append(ps, issue{Problem: Problem{Path: path, Msg: fmt.Sprintf("is set, but gateway.unknown_paths is %q: set unknown_paths: pass, or remove pass_to", c.Gateway.UnknownPaths)}})
			continue
		}
		if !pass {
			continue
		}
		if name != "" {
			i := providerIndex(c.Providers, name)
			switch {
			case i < 0:
				ps = append(ps, issue{Problem: Problem{Path: path, Msg: fmt.Sprintf("unknown provider %q", name)}, refersTo: "providers"})
			case c.Providers[i].Kind == providerkind.AzureOpenAI:
				ps = append(ps, issue{Problem: Problem{Path: path, Msg: fmt.Sprintf("provider %q is azure-openai, whose paths are its own (/openai/deployments/…): it cannot take a client's unknown paths", name)}})
			case c.Providers[i].Kind.Dialect() != pd.d:
				ps = append(ps, issue{Problem: Problem{Path: path, Msg: fmt.Sprintf("provider %q is of kind %q, which does not speak the %s API", name, c.Providers[i].Kind, pd.d)}})
			default:
				out[pd.d] = i
			}
			continue
		}
		var speakers []int
		for i, p := range c.Providers {
			if p.Kind.Known() && p.Kind != providerkind.AzureOpenAI && p.Kind.Dialect() == pd.d {
				speakers = append(speakers, i)
			}
		}
		if len(speakers) == 1 {
			out[pd.d] = speakers[0]
		}
	}
	if pass && len(out) == 0 && len(ps) == 0 {
		var names []string
		for _, p := range c.Providers {
			names = append(names, p.Name)
		}
		ps = append(ps, issue{Problem: Problem{Path: "gateway.unknown_paths", Msg: fmt.Sprintf("is pass, but no provider can take unknown paths: each API has none or several providers that could (azure-openai cannot); name one in gateway.pass_to.openai or gateway.pass_to.anthropic (providers: %s)", strings.Join(names, ", "))}})
	}
	return out, ps
}

func providerIndex(ps []Provider, name string) int {
	for i, p := range ps {
		if p.Name == name {
			return i
		}
	}
	return -1
}
