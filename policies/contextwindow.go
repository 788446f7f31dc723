package policies

import "strings"

// knownWindows are the context windows, in tokens, of well-known models,
// by name prefix: the default of a model's context_window. The provider's
// own model pages give them:
//
//   - OpenAI (platform.openai.com/docs/models): gpt-4o and gpt-4o-mini
//     128,000; gpt-4.1, -mini and -nano 1,047,576; o1 200,000, o1-mini
//     128,000; o3, o3-mini, o4-mini 200,000; gpt-4-turbo 128,000; gpt-5,
//     -mini and -nano 400,000 (input and output together).
//   - Anthropic (docs.anthropic.com/en/docs/about-claude/models): every
//     Claude 3, 3.5, 3.7 and 4 model 200,000. Claude Sonnet 4 and 4.5 take
//     1,000,000 with the context-1m beta header: a gateway that lets
//     clients send it must set context_window: 1000000 on those models.
//
// A name matches a prefix when it equals it or continues it with '-' (a
// dated snapshot, a smaller size); the longest matching prefix wins.
var knownWindows = []struct {
	prefix string
	tokens int64
}{
	{"gpt-4o", 128_000},
	{"chatgpt-4o", 128_000},
	{"gpt-4-turbo", 128_000},
	{"gpt-4.1", 1_047_576},
	{"gpt-5", 400_000},
	{"o1", 200_000},
	{"o1-mini", 128_000},
	{"o1-preview", 128_000},
	{"o3", 200_000},
	{"o3-mini", 200_000},
	{"o3-pro", 200_000},
	{"o4-mini", 200_000},
	{"claude", 200_000},
}

// KnownContextWindow is the built-in context window of the model named
// name, or 0 when none is known.
func KnownContextWindow(name string) int64 {
	best, n := -1, int64(0)
	for _, w := range knownWindows {
		rest, ok := strings.CutPrefix(name, w.prefix)
		if !ok || (rest != "" && rest[0] != '-') || len(w.prefix) <= best {
			continue
		}
		best, n = len(w.prefix), w.tokens
	}
	return n
}

// contextWindow is a model's context window: its context_window, else the
// largest built-in window of its name and its providers' names for it
// (a request may go to any of them), else 0.
func contextWindow(m Model, targets []Target) int64 {
	if m.ContextWindow > 0 {
		return m.ContextWindow
	}
	w := KnownContextWindow(m.Name)
	for _, t := range targets {
		w = max(w, KnownContextWindow(t.Upstream))
	}
	return w
}

// ContextWindowWarnings lists the models with no context window, set or
// built in: a request for one whose prompt points at content Sluice
// cannot see (a file id, a document URL, a stored response) is refused
// with 400 input_by_reference. Each is addressed by its models path.
func (s *Snapshot) ContextWindowWarnings() []Problem {
	var out []Problem
	for _, m := range s.Models() {
		if m.ContextWindow == 0 {
			out = append(out, Problem{Path: fieldPath(keyPath("models", m.Name), "context_window"),
				Msg: "not set and not known for this model: requests whose input is by reference (file ids, document URLs, stored responses, conversations, prompts) are refused"})
		}
	}
	return out
}
