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
