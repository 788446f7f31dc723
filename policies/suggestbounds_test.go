package policies

import "testing"

// TestSuggestBounds: a suggestion is the closest candidate within the typo
// distance and closer than the word is long (else any two-letter word
// would "suggest" any other); ties go to the earliest.
func TestSuggestBounds(t *testing.T) {
	for _, tt := range []struct {
		s          string
		candidates []string
		want       string // "" for none
	}{
		{"ab", []string{"xy"}, ""},
		{"ab", []string{"xb"}, "xb"},
		{"abc", []string{"abd", "abe"}, "abd"},
		{"per_minut", []string{"per_hour", "per_minute"}, "per_minute"},
		{"x", []string{"x", ""}, ""},
	} {
		got, ok := suggest(tt.s, tt.candidates)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("suggest(%q, %q) = %q, %v; want %q", tt.s, tt.candidates, got, ok, tt.want)
		}
	}
}
