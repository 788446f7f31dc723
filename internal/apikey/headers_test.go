package apikey

import (
	"testing"

	"github.com/sluicegw/sluice/internal/apierr"
)

// TestBearerWhitespace: the scheme and the key may be separated by any run
// of spaces and tabs (RFC 9110's whitespace; SDKs send one space, a
// hand-written header may hold a tab) — a key has no whitespace, so there
// is nothing to misread. Without a key after it, or with another scheme,
// the message says exactly that.
func TestBearerWhitespace(t *testing.T) {
	for _, v := range []string{
		"Bearer " + good, "Bearer\t" + good, "bearer \t " + good, "BEARER  " + good,
		"\tBearer\t\t" + good + "\t", " Bearer " + good + " ",
	} {
		s, err := FromHeaders(headers("authorization", v))
		if err != nil || s.Reveal() != good {
			t.Errorf("%q: got %v, want the key", v, err)
		}
	}
	for _, tt := range []struct{ v, msg string }{
		{"Bearer\t", `the authorization header says "Bearer" but carries no API key`},
		{"Bearer \t ", `the authorization header says "Bearer" but carries no API key`},
		{"Basic\t" + good, `the authorization header must use the Bearer scheme: "Bearer sk-sluice-…"`},
		{"Bearer" + good, `the authorization header must use the Bearer scheme: "Bearer sk-sluice-…"`},
		{"\t", `the authorization header is empty; send "Bearer sk-sluice-…"`},
		{"Bearer\v" + good, `the authorization header must use the Bearer scheme: "Bearer sk-sluice-…"`},
	} {
		_, err := FromHeaders(headers("authorization", tt.v))
		e, ok := apierr.As(err)
		if !ok || e.Code != apierr.CodeMalformedCredential || e.Message != tt.msg {
			t.Errorf("%q: got %v, want %s %q", tt.v, err, apierr.CodeMalformedCredential, tt.msg)
		}
	}
}
