package extproc

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestClip: a client's request id is cut to its bound on a character's
// boundary, so that a cut never makes valid UTF-8 invalid (a database
// refuses invalid UTF-8); bytes that were not UTF-8 are cut as bytes.
func TestClip(t *testing.T) {
	for _, tc := range []struct{ s, want string }{
		{"abc", "abc"},
		{"abcdef", "abcd"},
		{"ab€x", "ab"},  // € is 3 bytes at 2..4: cut before it
		{"abc€", "abc"}, // starts at 3, the bound: cut before it
		{"a€bcd", "a€"}, // ends at 4, the bound
		{"\xff\xff\xff\xff\xff\xff", "\xff\xff\xff\xff"},
	} {
		if got := clip(tc.s, 4); got != tc.want {
			t.Errorf("clip(%q, 4) = %q; want %q", tc.s, got, tc.want)
		}
	}
	long := strings.Repeat("é", 100) // 200 bytes
	for n := 0; n <= 200; n++ {
		if got := clip(long, n); !utf8.ValidString(got) || len(got) > n || len(got) < n-1 {
			t.Fatalf("clip of 'é'×100 to %d = %d bytes, valid %v", n, len(got), utf8.ValidString(got))
		}
	}
}
