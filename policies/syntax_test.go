package policies

import (
	"strings"
	"testing"
)

// TestSyntaxErrorAfterBlankLines: a YAML syntax error is located on its
// own line, also after blank lines (which end no search early).
func TestSyntaxErrorAfterBlankLines(t *testing.T) {
	for _, tt := range []struct{ doc, at string }{
		{"gateway:\n  unknown_paths: deny\nproviders: [\n  {name: a\n", "f.yaml:4:"},
		{"gateway:\n\n  unknown_paths: deny\n\nproviders: [\n\n  {name: a\n", "f.yaml:7:"},
	} {
		_, err := Parse([]byte(tt.doc), "f.yaml", nil)
		if err == nil || !strings.HasPrefix(err.Error(), tt.at) || !strings.Contains(err.Error(), "invalid YAML") {
			t.Errorf("Parse(%q) = %v, want invalid YAML at %s", tt.doc, err, tt.at)
		}
	}
}

// TestUnknownAliasLocated: an alias of an anchor that does not exist is
// pointed at, at the start of a line too.
func TestUnknownAliasLocated(t *testing.T) {
	for _, tt := range []struct{ doc, at string }{
		{"*nope\n", "f.yaml:1:1: "},
		{"providers:\n  - *nope\n", "f.yaml:2:5: "},
	} {
		_, err := Parse([]byte(tt.doc), "f.yaml", nil)
		if err == nil || !strings.HasPrefix(err.Error(), tt.at) || !strings.Contains(err.Error(), "nope") {
			t.Errorf("Parse(%q) = %v, want a problem at %s naming the alias", tt.doc, err, tt.at)
		}
	}
}

// TestZeroDuration: a duration of 0 decodes (0 keeps a default), a
// negative one is refused.
func TestZeroDuration(t *testing.T) {
	for _, tt := range []struct {
		value string
		ok    bool
	}{{"0s", true}, {"0", true}, {"30s", true}, {"-1s", false}} {
		_, err := Parse([]byte("models: [{name: m, provider: p}]\nproviders:\n  - {name: p, kind: openai-compatible, base_url: \"http://127.0.0.1:1\", outlier_detection: {base_ejection_time: "+tt.value+"}}\n"), "f.yaml", nil)
		if got := err == nil || !strings.Contains(err.Error(), "base_ejection_time"); got != tt.ok {
			t.Errorf("base_ejection_time %s: %v, want accepted: %v", tt.value, err, tt.ok)
		}
	}
}
