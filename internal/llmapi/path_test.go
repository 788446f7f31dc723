package llmapi

import (
	"strings"
	"testing"
)

func TestClassifyPath(t *testing.T) {
	for _, tt := range []struct {
		path, canon string
		ep          Endpoint
		azure       bool
		suspicious  bool
	}{
		// Already canonical.
		{"/v1/chat/completions", "/v1/chat/completions", ChatCompletions, false, false},
		{"/v1/chat/completions?a=%2F&b=..//", "/v1/chat/completions?a=%2F&b=..//", ChatCompletions, false, false},
		{"/v1/files", "/v1/files", Unknown, false, false},
		{"/v1/files/file-AbC", "/v1/files/file-AbC", Unknown, false, false},
		{"/", "/", Unknown, false, false},
		{"", "/", Unknown, false, false},
		// Escaped slashes and backslashes.
		{"/v1/chat%2Fcompletions", "/v1/chat/completions", ChatCompletions, false, false},
		{"/v1/chat%2fcompletions", "/v1/chat/completions", ChatCompletions, false, false},
		{"/v1%2Fchat%2Fcompletions", "/v1/chat/completions", ChatCompletions, false, false},
		{"%2Fv1%2Fchat%2Fcompletions", "/v1/chat/completions", ChatCompletions, false, false},
		{"/v1/chat%5Ccompletions", "/v1/chat/completions", ChatCompletions, false, false},
		{`/v1\chat\completions`, "/v1/chat/completions", ChatCompletions, false, false},
		// Escaped unreserved characters.
		{"/v1/chat/completion%73", "/v1/chat/completions", ChatCompletions, false, false},
		{"/%76%31/%63hat/completions", "/v1/chat/completions", ChatCompletions, false, false},
		{"/v1/messages%2Fcount%5Ftokens", "/v1/messages/count_tokens", CountTokens, false, false},
		{"/v1/embeddings%7E", "/v1/embeddings~", Unknown, false, false},
		// Trailing slash, repeated slashes.
		{"/v1/chat/completions/", "/v1/chat/completions", ChatCompletions, false, false},
		{"/v1/chat/completions//", "/v1/chat/completions", ChatCompletions, false, false},
		{"//v1//chat///completions", "/v1/chat/completions", ChatCompletions, false, false},
		{"/v1/models/", "/v1/models", ModelList, false, false},
		// Dot segments, never above the root, escaped or not.
		{"/v1/./chat/completions", "/v1/chat/completions", ChatCompletions, false, false},
		{"/./v1/chat/completions", "/v1/chat/completions", ChatCompletions, false, false},
		{"/v1/x/../chat/completions", "/v1/chat/completions", ChatCompletions, false, false},
		{"/../../v1/chat/completions", "/v1/chat/completions", ChatCompletions, false, false},
		{"/v1/chat/completions/.", "/v1/chat/completions", ChatCompletions, false, false},
		{"/v1/chat/completions/x/..", "/v1/chat/completions", ChatCompletions, false, false},
		{"/v1/chat/completions/..", "/v1/chat", Unknown, false, false},
		{"/v1/x/%2E%2E/chat/completions", "/v1/chat/completions", ChatCompletions, false, false},
		{"/v1/x/%2e%2e%2fchat/completions", "/v1/chat/completions", ChatCompletions, false, false},
		{"/v1/models/x/../../messages", "/v1/messages", Messages, false, false},
		{"/v1/...", "/v1/...", Unknown, false, true}, // a segment ending in a dot
		// Path parameters.
		{"/v1/chat/completions;x", "/v1/chat/completions", ChatCompletions, false, false},
		{"/v1;a=b/chat;c/completions;d", "/v1/chat/completions", ChatCompletions, false, false},
		{"/v1/x/..;y/chat/completions", "/v1/chat/completions", ChatCompletions, false, false},
		// An escaped delimiter splits the path otherwise for whoever
		// decodes it again: suspicious.
		{"/v1/chat/completions%3Bx", "/v1/chat/completions%3Bx", Unknown, false, true},
		{"/v1/files/a%3bb", "/v1/files/a%3Bb", Unknown, false, true},
		{"/v1/chat/completions%3Fx", "/v1/chat/completions%3Fx", Unknown, false, true},
		{"/v1/chat/completions%23x", "/v1/chat/completions%23x", Unknown, false, true},
		{"/v1/chat/completions.", "/v1/chat/completions.", Unknown, false, true},
		// Case: /v1 folded in the canonical form; the rest kept, but
		// compared without case.
		{"/V1/chat/completions", "/v1/chat/completions", ChatCompletions, false, false},
		{"/V1/Chat/Completions", "/v1/Chat/Completions", ChatCompletions, false, false},
		{"/v1/MESSAGES", "/v1/MESSAGES", Messages, false, false},
		{"/V1/Files", "/v1/Files", Unknown, false, false},
		// Azure's paths.
		{"/openai/deployments/gpt-4o/chat/completions", "/openai/deployments/gpt-4o/chat/completions", ChatCompletions, true, false},
		{"/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21", "/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21", ChatCompletions, true, false},
		{"/OpenAI/Deployments/d/embeddings/", "/OpenAI/Deployments/d/embeddings", Embeddings, true, false},
		{"/openai/deployments/d/audio/speech", "/openai/deployments/d/audio/speech", Unknown, true, false},
		{"/openai/deployments", "/openai/deployments", Unknown, true, false},
		{"/openai%2Fdeployments%2Fd%2Fcompletions", "/openai/deployments/d/completions", Completions, true, false},
		{"/openai/v1/chat/completions", "/openai/v1/chat/completions", ChatCompletions, true, false},
		{"/openai/v1/files", "/openai/v1/files", Unknown, false, false},
		// Double encoding: decoded once, flagged.
		{"/v1/chat%252Fcompletions", "/v1/chat%252Fcompletions", Unknown, false, true},
		{"/v1/chat%25%32Fcompletions", "/v1/chat%252Fcompletions", Unknown, false, true},
		{"/v1/chat/completion%2573", "/v1/chat/completion%2573", Unknown, false, true},
		{"/v1/files/100%25", "/v1/files/100%25", Unknown, false, false},
		// Controls, spaces and broken escapes.
		{"/v1/chat/completions%00", "/v1/chat/completions%00", Unknown, false, true},
		{"/v1/chat/completions%0a", "/v1/chat/completions%0A", Unknown, false, true},
		{"/v1/chat/completions%20", "/v1/chat/completions%20", Unknown, false, true},
		{"/v1/chat/completions\t", "/v1/chat/completions%09", Unknown, false, true},
		{"/v1/chat/completions x", "/v1/chat/completions%20x", Unknown, false, true},
		{"/v1/chat/completions%", "/v1/chat/completions%25", Unknown, false, true},
		{"/v1/chat/completions%2", "/v1/chat/completions%252", Unknown, false, true},
		{"/v1/chat/completions%zz", "/v1/chat/completions%25zz", Unknown, false, true},
		{"/%%610", "/%25a0", Unknown, false, true},
		// Not a path: still given a root.
		{"v1/chat/completions", "/v1/chat/completions", ChatCompletions, false, false},
	} {
		c := ClassifyPath(tt.path)
		if c.Canonical != tt.canon || c.Endpoint != tt.ep || c.Azure != tt.azure || c.Suspicious != tt.suspicious || c.Changed != (tt.canon != tt.path) {
			t.Errorf("ClassifyPath(%q) = %+v; want canonical %q, endpoint %v, azure %v, suspicious %v", tt.path, c, tt.canon, tt.ep, tt.azure, tt.suspicious)
		}
		if canon, changed := Canonical(tt.path); canon != c.Canonical || changed != c.Changed {
			t.Errorf("Canonical(%q) = %q, %v; ClassifyPath says %q, %v", tt.path, canon, changed, c.Canonical, c.Changed)
		}
		if c.Reserved() != (tt.ep != Unknown || tt.azure) {
			t.Errorf("ClassifyPath(%q).Reserved() = %v", tt.path, c.Reserved())
		}
	}
}

func TestPathClassWant(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/chat%2Fcompletions":                 "/v1/chat/completions",
		"/v1/messages/":                          "/v1/messages",
		"/v1/messages/count_tokens/":             "/v1/messages/count_tokens",
		"/v1/models/":                            "/v1/models",
		"/v1//models/gpt-4o":                     "/v1/models/{id}",
		"/openai/deployments/d/chat/completions": "/v1/chat/completions",
		"/openai/deployments/d/audio/speech":     "",
		"/v1/files/":                             "",
	} {
		if got := ClassifyPath(path).Want(); got != want {
			t.Errorf("ClassifyPath(%q).Want() = %q, want %q", path, got, want)
		}
	}
}

func TestPathClassDialect(t *testing.T) {
	none := func(string) (string, bool) { return "", false }
	version := func(k string) (string, bool) { return "2023-06-01", k == "anthropic-version" }
	for _, tt := range []struct {
		path   string
		header func(string) (string, bool)
		want   Dialect
	}{
		{"/v1//messages/batches", none, Anthropic},
		{"/V1/Messages", none, Anthropic},
		{"/v1/messages%2Fbatches?x", none, Anthropic},
		{"/v1/files/", none, OpenAI},
		{"/v1/models/", version, Anthropic},
		{"/v1/models/", none, OpenAI},
	} {
		if got := ClassifyPath(tt.path).Dialect(tt.header); got != tt.want {
			t.Errorf("ClassifyPath(%q).Dialect = %v, want %v", tt.path, got, tt.want)
		}
	}
}

// FuzzClassifyPath checks the canonical form's properties on any path:
// it is rooted, has no empty, dot or parameter segment, no backslash, no
// escape a second canonicalization would decode, keeps the query as it
// came, and is its own canonical form; a path EndpointFor knows as sent
// (but for a model id, which is opaque) is canonical; a path that is not
// reserved has a canonical form EndpointFor does not know in any case.
func FuzzClassifyPath(f *testing.F) {
	for _, s := range []string{"/v1/chat/completions", "/v1/chat%2Fcompletions", "/v1%2Fchat%2Fcompletions", "/v1/chat/completion%73",
		"/openai/deployments/m/chat/completions", "/v1/chat/completions/", "//v1//chat/completions", "/v1/./chat/completions",
		"/v1/x/../chat/completions", "/../v1/messages", "/v1/chat/completions;x", "/V1/chat/completions", "/v1/chat%252Fcompletions",
		"/v1/x/%2E%2E/messages?q=%2F", `/v1\messages`, "/v1/files#frag", "/v1/models/org%2Fmodel", "%", "/a/%2", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		c := ClassifyPath(path)
		p, rest := splitQuery(c.Canonical)
		if _, want := splitQuery(path); rest != want {
			t.Fatalf("ClassifyPath(%q): query %q, want %q", path, rest, want)
		}
		if !strings.HasPrefix(p, "/") || p != "/" && strings.HasSuffix(p, "/") || strings.Contains(p, "//") || strings.ContainsAny(p, `\;`) {
			t.Fatalf("ClassifyPath(%q): canonical %q is not clean", path, c.Canonical)
		}
		for _, s := range strings.Split(p[1:], "/") {
			if s == "." || s == ".." {
				t.Fatalf("ClassifyPath(%q): canonical %q has a dot segment", path, c.Canonical)
			}
		}
		again := ClassifyPath(c.Canonical)
		if again.Canonical != c.Canonical || again.Changed || again.Endpoint != c.Endpoint || again.Azure != c.Azure {
			t.Fatalf("ClassifyPath(%q) = %+v, but of its canonical form %+v", path, c, again)
		}
		if again.Suspicious && !c.Suspicious {
			t.Fatalf("ClassifyPath(%q): canonical %q suspicious, the path not", path, c.Canonical)
		}
		if ep := EndpointFor(path); ep != Unknown && ep != ModelGet && (c.Changed || c.Endpoint != ep) {
			t.Fatalf("ClassifyPath(%q) = %+v, but EndpointFor knows it as %v", path, c, ep)
		}
		if !c.Reserved() && EndpointFor(asciiLower(p)) != Unknown {
			t.Fatalf("ClassifyPath(%q) = %+v is not reserved", path, c)
		}
	})
}
