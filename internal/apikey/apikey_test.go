package apikey

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/apierr"
)

// A fixed, valid key for tests (43 base62 characters after the prefix).
const good = "sk-sluice-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefg"

func headers(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestFromHeaders(t *testing.T) {
	long := strings.Repeat("A", 10*1024)
	tests := []struct {
		name     string
		get      func(string) (string, bool)
		want     Secret
		wantCode string
		wantMsg  string
	}{
		{"bearer", headers("authorization", "Bearer "+good), good, "", ""},
		{"bearer lower-case scheme and extra spaces", headers("authorization", "  bearer   "+good+" "), good, "", ""},
		{"x-api-key", headers("x-api-key", good), good, "", ""},
		{"azure api-key", headers("api-key", good), good, "", ""},
		{"same key twice", headers("authorization", "Bearer "+good, "x-api-key", good), good, "", ""},
		{"none", headers("content-type", "application/json"), "", apierr.CodeMissingCredential, `no API key: send "Authorization: Bearer sk-sluice-…" or "x-api-key: sk-sluice-…"`},
		{"bearer with nothing after it", headers("authorization", "Bearer"), "", apierr.CodeMalformedCredential, `the authorization header says "Bearer" but carries no API key`},
		{"bearer and spaces", headers("authorization", "Bearer    "), "", apierr.CodeMalformedCredential, `the authorization header says "Bearer" but carries no API key`},
		{"empty authorization", headers("authorization", ""), "", apierr.CodeMalformedCredential, `the authorization header is empty; send "Bearer sk-sluice-…"`},
		{"basic scheme", headers("authorization", "Basic dXNlcjpwYXNz"), "", apierr.CodeMalformedCredential, `the authorization header must use the Bearer scheme: "Bearer sk-sluice-…"`},
		{"empty x-api-key", headers("x-api-key", " "), "", apierr.CodeMalformedCredential, "the x-api-key header is empty"},
		{"wrong prefix", headers("authorization", "Bearer sk-proj-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefg"), "", apierr.CodeMalformedCredential, `the API key must start with "sk-sluice-" (in the authorization header)`},
		{"too short", headers("x-api-key", "sk-sluice-abc"), "", apierr.CodeMalformedCredential, `the API key is too short: 3 characters after "sk-sluice-", need at least 32 (in the x-api-key header)`},
		{"non-ASCII garbage", headers("authorization", "Bearer sk-sluice-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdé"), "", apierr.CodeMalformedCredential, `the API key contains a character outside [0-9A-Za-z] at position 51 (in the authorization header)`},
		{"10 KB header", headers("authorization", "Bearer "+long), "", apierr.CodeMalformedCredential, "the authorization header is too long (10247 bytes)"},
		{"duplicates joined by Envoy", headers("authorization", "Bearer "+good+",Bearer "+good), "", apierr.CodeMalformedCredential, "more than one authorization header (or a comma in it); send exactly one API key"},
		{"different keys", headers("authorization", "Bearer "+good, "x-api-key", good[:len(good)-1]+"h"), "", apierr.CodeConflictingCredentials, "the authorization and x-api-key headers carry different API keys; send one"},
		{"bad x-api-key beside good bearer", headers("authorization", "Bearer "+good, "x-api-key", "nope"), "", apierr.CodeMalformedCredential, `the API key must start with "sk-sluice-" (in the x-api-key header)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromHeaders(tt.get)
			if tt.wantCode == "" {
				if err != nil {
					t.Fatalf("FromHeaders: %v", err)
				}
				if got != tt.want {
					t.Fatalf("secret = %q, want %q", got.Reveal(), tt.want.Reveal())
				}
				return
			}
			e, ok := apierr.As(err)
			if !ok {
				t.Fatalf("err = %v (%T), want *apierr.Error with code %s", err, err, tt.wantCode)
			}
			if e.Status != 401 || e.Code != tt.wantCode || e.Message != tt.wantMsg {
				t.Fatalf("got (%d, %s, %q), want (401, %s, %q)", e.Status, e.Code, e.Message, tt.wantCode, tt.wantMsg)
			}
		})
	}
}

func TestGenerate(t *testing.T) {
	// All-zero and all-0xff randomness are the extremes of the encoding.
	for _, b := range []byte{0x00, 0xff, 0x5a} {
		s, err := Generate(bytes.NewReader(bytes.Repeat([]byte{b}, 64)))
		if err != nil {
			t.Fatal(err)
		}
		if len(s) != len(Prefix)+secretLen {
			t.Errorf("len = %d, want %d", len(s), len(Prefix)+secretLen)
		}
		if err := Validate(s.Reveal()); err != nil {
			t.Errorf("generated key does not validate: %v", err)
		}
	}
	zero, _ := Generate(bytes.NewReader(make([]byte, 32)))
	if want := Prefix + strings.Repeat("0", secretLen); zero.Reveal() != want {
		t.Errorf("zero key = %q, want %q", zero.Reveal(), want)
	}
	a, _ := Generate(nil)
	b, _ := Generate(nil)
	if a == b {
		t.Error("two generated keys are equal")
	}
	if _, err := Generate(bytes.NewReader(make([]byte, 5))); err == nil {
		t.Error("Generate with a short reader succeeded")
	}
	id, err := NewID(bytes.NewReader(bytes.Repeat([]byte{0xff}, 12)))
	if err != nil || len(id) != len("key_")+idLen || !strings.HasPrefix(id, "key_") {
		t.Errorf("NewID = %q, %v", id, err)
	}
}

func TestPublicPrefixAndHash(t *testing.T) {
	if got, want := PublicPrefix(good), "sk-sluice-012345"; got != want {
		t.Errorf("PublicPrefix = %q, want %q", got, want)
	}
	if got := PublicPrefix("sk-sluice-short"); got != "" {
		t.Errorf("PublicPrefix of a malformed key = %q, want empty", got)
	}
	// printf %s sk-sluice-0123…efg | sha256sum
	if got, want := HashHex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; got != want {
		t.Errorf("HashHex(abc) = %s, want %s", got, want)
	}
}

// TestRedacted: a key is echoed as OpenAI echoes one, its first 8 and last
// 4 characters and a '*' for each between, never more; a malformed string
// not at all.
func TestRedacted(t *testing.T) {
	got := Redacted(good)
	if want := "sk-sluic" + strings.Repeat("*", len(good)-12) + "defg"; got != want {
		t.Errorf("Redacted = %q, want %q", got, want)
	}
	if shown := len(strings.ReplaceAll(got, "*", "")); shown != 12 || len(got) != len(good) {
		t.Errorf("Redacted shows %d characters of %d, want 12 of %d", shown, len(got), len(good))
	}
	for _, bad := range []string{"", "sk-sluice-short", "sk-proj-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefg"} {
		if got := Redacted(bad); got != "" {
			t.Errorf("Redacted(%q) = %q, want empty", bad, got)
		}
	}
}

func TestSecretNeverPrints(t *testing.T) {
	s := Secret(good)
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	log.Info("x", "key", s)
	out := buf.String() + fmt.Sprintf("%v %s %+v %#v", s, s, s, s)
	if strings.Contains(out, good[len(Prefix)+publicChars:]) {
		t.Fatalf("secret leaked: %s", out)
	}
	if !strings.Contains(out, "sk-sluice-012345") {
		t.Fatalf("public prefix missing: %s", out)
	}
}

func BenchmarkFromHeaders(b *testing.B) {
	get := headers("authorization", "Bearer "+good, "content-type", "application/json")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := FromHeaders(get); err != nil {
			b.Fatal(err)
		}
	}
}

// TestScrub: every run that looks like a key, in any case, leaves Scrub
// redacted; the text around it is kept.
func TestScrub(t *testing.T) {
	const key = "sk-sluice-0123456789abcdefghijklmnopqrstuvwxyzAB"
	for _, tt := range []struct{ in, want string }{
		{"nothing here", "nothing here"},
		{`unknown team "` + key + `" (teams: a)`, `unknown team "sk-sluic************************************yzAB" (teams: a)`},
		{`unknown column "` + strings.ToLower(key) + `"`, `unknown column "sk-sluic************************************yzab"`},
		{`SK-SLUICE-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZAB`, `sk-sluic************************************YZAB`},
		{key + "," + key, "sk-sluic************************************yzAB,sk-sluic************************************yzAB"},
		{"sk-sluice-abc and sk-sluice- and (sk-sluice-ABCDEF…)", "sk-sluice-abc and sk-sluice- and (sk-sluice-ABCDEF…)"},
		{"a truncated sk-sluice-0123456789abcdefghij", "a truncated sk-sluice-012345…"},
	} {
		got := Scrub(tt.in)
		if got != tt.want {
			t.Errorf("Scrub(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if strings.Contains(strings.ToLower(got), "0123456789abcdefghij") {
			t.Errorf("Scrub(%q) kept the key's middle: %q", tt.in, got)
		}
	}
}
