package policies

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluicegw/sluice/internal/providerkind"
	"github.com/sluicegw/sluice/internal/tokens"
)

// PricingWarnings lists what the pricing table leaves to a default or to
// nothing for the kinds of token a configured model's providers report:
// facts Sluice knows from the configuration alone, none of which makes it
// invalid. Each is addressed by its pricing path (pricing.<model>):
//
//   - a model with no pricing entry: its requests cost 0, which no budget
//     sees (or, with gateway.unpriced_models: deny, are refused);
//   - an entry without cached_input for a model an OpenAI, Azure OpenAI or
//     Anthropic provider serves: those APIs report cached prompt tokens,
//     which are then charged at the input price;
//   - an entry without cache_write or cache_write_1h for a model an
//     Anthropic provider serves: Anthropic reports cache writes, which are
//     then charged at the default, 1.25 × or 2 × input;
//   - an entry without audio_input or audio_output for a model whose name
//     (or a provider's name for it) says it takes audio ("audio",
//     "realtime"): audio tokens are then charged at the text prices.
//
// They are sorted by path, then message.
func (s *Snapshot) PricingWarnings() []Problem {
	var out []Problem
	for _, m := range s.Models() {
		path := keyPath("pricing", m.Name)
		if !m.Priced {
			what := "its requests are recorded at cost 0, which no budget counts (gateway.unpriced_models: allow)"
			if s.Gateway().UnpricedModels == "deny" {
				what = "its requests are refused (gateway.unpriced_models: deny)"
			}
			out = append(out, Problem{Path: path, Msg: fmt.Sprintf("model %q has no price: %s", m.Name, what)})
			continue
		}
		p := m.Price
		kinds := map[providerkind.Kind]bool{}
		names := []string{m.Name}
		for _, t := range m.Targets {
			kinds[t.Provider.Kind] = true
			names = append(names, t.Upstream)
		}
		reportsCached := kinds[providerkind.OpenAI] || kinds[providerkind.AzureOpenAI] || kinds[providerkind.Anthropic]
		if p.CachedInput == 0 && reportsCached {
			out = append(out, Problem{Path: fieldPath(path, tokens.CachedInput.String()),
				Msg: "not set: the provider reports cached prompt tokens, and they are charged at the input price (OpenAI bills them at a discount, Anthropic at 0.1 × input)"})
		}
		if kinds[providerkind.Anthropic] {
			if p.CacheWrite == nil {
				out = append(out, Problem{Path: fieldPath(path, tokens.CacheWrite.String()),
					Msg: "not set: Anthropic reports 5-minute cache writes, charged at the default, 1.25 × input"})
			}
			if p.CacheWrite1h == nil {
				out = append(out, Problem{Path: fieldPath(path, tokens.CacheWrite1h.String()),
					Msg: "not set: Anthropic reports 1-hour cache writes, charged at the default, 2 × input"})
			}
		}
		if audioName(names) {
			if p.AudioInput == nil {
				out = append(out, Problem{Path: fieldPath(path, tokens.AudioInput.String()),
					Msg: "not set: the model's name says it takes audio, and audio input tokens are charged at the text input price"})
			}
			if p.AudioOutput == nil {
				out = append(out, Problem{Path: fieldPath(path, tokens.AudioOutput.String()),
					Msg: "not set: the model's name says it speaks audio, and audio output tokens are charged at the text output price"})
			}
		}
	}
	slices.SortFunc(out, func(a, b Problem) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Msg, b.Msg)
	})
	return out
}

// audioName reports whether one of a model's names says it handles audio,
// as OpenAI's audio models are named (gpt-4o-audio-preview,
// gpt-4o-realtime-preview, gpt-audio, gpt-realtime).
func audioName(names []string) bool {
	for _, n := range names {
		n = strings.ToLower(n)
		if strings.Contains(n, "audio") || strings.Contains(n, "realtime") {
			return true
		}
	}
	return false
}
