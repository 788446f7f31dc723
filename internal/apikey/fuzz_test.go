package apikey

import (
	"regexp"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/apierr"
)

// FuzzFromHeaders feeds arbitrary header values (as a client could send
// them) through credential extraction. Invariants: no panic; a success is a
// well-formed key taken verbatim from one of the headers; an error is an
// *apierr.Error with a known code whose message quotes no part of what was sent.
func FuzzFromHeaders(f *testing.F) {
	f.Add("Bearer "+good, "", "")
	f.Add("", good, "")
	f.Add("", "", good)
	f.Add("Bearer", "", "")
	f.Add("Bearer "+good+",Bearer "+good, "", "")
	f.Add("Basic Zm9vOmJhcg==", "", "")
	f.Add("Bearer sk-sluice-ééééééééééééééééééééééééééééééééééé", "", "")
	f.Add("bearer\t"+good, good, "")
	f.Add("Bearer "+good, good[:len(good)-2]+"zz", "")
	f.Add("Bearer\t"+good, "", "")
	f.Add("\tBearer \t "+good+"\t", "", "")
	f.Add("Bearer\t", "", "")
	f.Add("Bearer\t\t", good, "")
	f.Add("Bearer\v"+good, "", "")
	f.Add("Bearer"+good, "", "")
	f.Fuzz(func(t *testing.T, auth, xKey, azureKey string) {
		m := map[string]string{}
		if auth != "" {
			m[HeaderAuthorization] = auth
		}
		if xKey != "" {
			m[HeaderXAPIKey] = xKey
		}
		if azureKey != "" {
			m[HeaderAPIKey] = azureKey
		}
		s, err := FromHeaders(func(k string) (string, bool) { v, ok := m[k]; return v, ok })
		if err == nil {
			if verr := Validate(s.Reveal()); verr != nil {
				t.Fatalf("accepted a malformed key: %v", verr)
			}
			if !strings.Contains(auth, s.Reveal()) && !strings.Contains(xKey, s.Reveal()) && !strings.Contains(azureKey, s.Reveal()) {
				t.Fatalf("secret %q not taken from the headers", s.Reveal())
			}
			return
		}
		e, ok := apierr.As(err)
		if !ok {
			t.Fatalf("error %v is %T, want *apierr.Error", err, err)
		}
		switch e.Code {
		case apierr.CodeMissingCredential, apierr.CodeMalformedCredential, apierr.CodeConflictingCredentials:
		default:
			t.Fatalf("unknown code %q", e.Code)
		}
		// Messages may carry numbers (lengths, positions) but no other text
		// taken from the request: with digit runs masked they must be one
		// of the fixed templates.
		if !knownMessages[digits.ReplaceAllString(e.Message, "N")] {
			t.Fatalf("error message %q is not a fixed template", e.Message)
		}
	})
}

var digits = regexp.MustCompile(`[0-9]+`)

var knownMessages = func() map[string]bool {
	m := map[string]bool{ErrMissing.Message: true}
	for _, h := range CredentialHeaders {
		for _, msg := range []string{
			`the API key must start with "sk-sluice-"`,
			`the API key is too short: N characters after "sk-sluice-", need at least N`,
			`the API key is too long: N characters after "sk-sluice-", at most N`,
			`the API key contains a character outside [N-NA-Za-z] at position N`,
		} {
			m[msg+" (in the "+h+" header)"] = true
		}
		m["the "+h+" header is too long (N bytes)"] = true
		m["more than one "+h+" header (or a comma in it); send exactly one API key"] = true
		m["the "+h+" header is empty"] = true
		for _, h2 := range CredentialHeaders {
			m["the "+h+" and "+h2+" headers carry different API keys; send one"] = true
		}
	}
	m[`the authorization header says "Bearer" but carries no API key`] = true
	m[`the authorization header is empty; send "Bearer sk-sluice-…"`] = true
	m[`the authorization header must use the Bearer scheme: "Bearer sk-sluice-…"`] = true
	return m
}()
