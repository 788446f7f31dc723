package principal

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"
)

func secret(b byte) []byte { return bytes.Repeat([]byte{b}, MinSecretBytes) }

func mustKeys(t testing.TB, secrets ...[]byte) *Keys {
	t.Helper()
	k, err := New(secrets)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var t0 = time.Date(2026, 12, 7, 23, 59, 59, 0, time.UTC)

func TestSignVerify(t *testing.T) {
	k := mustKeys(t, secret(1))
	sig := k.Sign(ForPrincipal, "req-1", t0, "key-1", "team", "org")
	if !strings.HasPrefix(sig, "v1.") {
		t.Fatalf("signature %q does not start with v1.", sig)
	}
	if r := k.Verify(sig, ForPrincipal, "req-1", t0.Add(time.Second), 30*time.Second, "key-1", "team", "org"); r != OK {
		t.Fatalf("Verify = %q, want OK", r)
	}
	// Everything signed is bound: each change refuses.
	for _, c := range []struct {
		name   string
		p      Purpose
		rid    string
		fields []string
	}{
		{"another request", ForPrincipal, "req-2", []string{"key-1", "team", "org"}},
		{"no request id", ForPrincipal, "", []string{"key-1", "team", "org"}},
		{"another key", ForPrincipal, "req-1", []string{"key-2", "team", "org"}},
		{"another team", ForPrincipal, "req-1", []string{"key-1", "teamx", "org"}},
		{"another org", ForPrincipal, "req-1", []string{"key-1", "team", "org2"}},
		{"a field fewer", ForPrincipal, "req-1", []string{"key-1", "team"}},
		{"a field more", ForPrincipal, "req-1", []string{"key-1", "team", "org", ""}},
		{"fields shifted", ForPrincipal, "req-1", []string{"key-1t", "eam", "org"}},
		{"another purpose", ForHandoff, "req-1", []string{"key-1", "team", "org"}},
	} {
		if r := k.Verify(sig, c.p, c.rid, t0, time.Minute, c.fields...); r != BadSignature {
			t.Errorf("%s: Verify = %q, want %q", c.name, r, BadSignature)
		}
	}
	if r := mustKeys(t, secret(2)).Verify(sig, ForPrincipal, "req-1", t0, time.Minute, "key-1", "team", "org"); r != BadSignature {
		t.Errorf("another secret: Verify = %q, want %q", r, BadSignature)
	}
}

func TestTimeBounds(t *testing.T) {
	k := mustKeys(t, secret(1))
	sig := k.Sign(ForPrincipal, "r", t0, "a")
	for _, c := range []struct {
		now  time.Time
		want Reason
	}{
		{t0, OK},
		{t0.Add(30 * time.Second), OK},
		{t0.Add(30*time.Second + time.Millisecond), Expired},
		{t0.Add(-30 * time.Second), OK},
		{t0.Add(-30*time.Second - time.Millisecond), Future},
		{t0.Add(240 * time.Hour), Expired},
	} {
		if r := k.Verify(sig, ForPrincipal, "r", c.now, 30*time.Second, "a"); r != c.want {
			t.Errorf("now %v after issue: Verify = %q, want %q", c.now.Sub(t0), r, c.want)
		}
	}
	// A changed time is a changed signature, not a fresher one.
	forged := strings.Replace(sig, "v1."+strconvMS(t0), "v1."+strconvMS(t0.Add(time.Hour)), 1)
	if r := k.Verify(forged, ForPrincipal, "r", t0.Add(time.Hour), 30*time.Second, "a"); r != BadSignature {
		t.Errorf("moved issue time: Verify = %q, want %q", r, BadSignature)
	}
}

func strconvMS(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

func TestRotation(t *testing.T) {
	oldK := mustKeys(t, secret(1))
	// Step 1: every replica accepts the new secret, still signing with the old.
	step1 := mustKeys(t, secret(1), secret(2))
	// Step 2: every replica signs with the new one, still accepting the old.
	step2 := mustKeys(t, secret(2), secret(1))
	// Step 3: the old one is gone.
	step3 := mustKeys(t, secret(2))
	byOld, byStep1, byStep2 := oldK.Sign(ForPrincipal, "r", t0, "k"), step1.Sign(ForPrincipal, "r", t0, "k"), step2.Sign(ForPrincipal, "r", t0, "k")
	for _, c := range []struct {
		name   string
		sig    string
		by     *Keys
		verify bool
	}{
		{"old by step 1", byOld, step1, true},
		{"step 1 by old", byStep1, oldK, true},
		{"step 2 by step 1", byStep2, step1, true},
		{"step 1 by step 2", byStep1, step2, true},
		{"step 2 by step 3", byStep2, step3, true},
		{"old by step 3", byOld, step3, false},
		{"step 2 by old", byStep2, oldK, false},
	} {
		r := c.by.Verify(c.sig, ForPrincipal, "r", t0, time.Minute, "k")
		if (r == OK) != c.verify {
			t.Errorf("%s: Verify = %q, want verified %v", c.name, r, c.verify)
		}
	}
}

func TestMalformed(t *testing.T) {
	k := mustKeys(t, secret(1))
	good := k.Sign(ForPrincipal, "r", t0, "k")
	_, mac, _ := strings.Cut(good[3:], ".")
	for _, sig := range []string{
		"x", "v1", "v1.", "v1..", "v2." + good[3:], "V1." + good[3:],
		"v1.123", "v1.123.", "v1..", "v1." + mac, "v1.-1." + mac, "v1.+1." + mac, "v1. 1." + mac,
		"v1.99999999999999999999." + mac, "v1.1.1." + mac, "v1.1." + mac + "A", "v1.1." + mac[:len(mac)-1],
		"v1.1." + strings.Repeat("!", len(mac)), "v1.1." + mac + "=",
		good + "\x00", " " + good,
	} {
		if r := k.Verify(sig, ForPrincipal, "r", t0, time.Hour, "k"); r != Malformed && r != BadSignature {
			t.Errorf("Verify(%q) = %q, want malformed or bad_signature", sig, r)
		}
	}
	if r := k.Verify("", ForPrincipal, "r", t0, time.Hour, "k"); r != Missing {
		t.Errorf("Verify(\"\") = %q, want missing", r)
	}
}

func TestNew(t *testing.T) {
	if _, err := New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
	if _, err := New([][]byte{secret(1), secret(2)[:MinSecretBytes-1]}); err == nil || !strings.Contains(err.Error(), "secret 1 is 31 bytes") {
		t.Errorf("New with a short secret = %v, want an error naming secret 1 and its length", err)
	}
	g1, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	g2, _ := Generate()
	if !g1.Generated() || mustKeys(t, secret(1)).Generated() {
		t.Error("Generated() is wrong")
	}
	if r := g2.Verify(g1.Sign(ForPrincipal, "r", t0, "k"), ForPrincipal, "r", t0, time.Minute, "k"); r != BadSignature {
		t.Errorf("two generated keys agree: %q", r)
	}
	// The secret is copied: changing the caller's slice changes nothing.
	s := secret(3)
	k := mustKeys(t, s)
	sig := k.Sign(ForPrincipal, "r", t0, "k")
	s[0] ^= 1
	if r := k.Verify(sig, ForPrincipal, "r", t0, time.Minute, "k"); r != OK {
		t.Errorf("after the caller changed its secret: %q", r)
	}
}

func FuzzVerify(f *testing.F) {
	k := mustKeys(f, secret(1))
	f.Add(k.Sign(ForPrincipal, "r", t0, "k"), "r", "k")
	f.Add("v1.1.AAAA", "", "")
	f.Add("", "r", "k")
	f.Fuzz(func(t *testing.T, sig, rid, field string) {
		r := k.Verify(sig, ForPrincipal, rid, t0, time.Minute, field)
		if r == OK && sig != k.Sign(ForPrincipal, rid, time.UnixMilli(msOf(sig)), field) {
			t.Fatalf("Verify accepted %q, which Sign does not write", sig)
		}
	})
}

func msOf(sig string) int64 {
	var ms int64
	for _, c := range sig[3:] {
		if c == '.' {
			break
		}
		ms = ms*10 + int64(c-'0')
	}
	return ms
}

func BenchmarkSign(b *testing.B) {
	k := mustKeys(b, secret(1))
	b.ReportAllocs()
	for b.Loop() {
		k.Sign(ForPrincipal, "2f0b7bd5-0d43-4b55-9c1f-0a1b2c3d4e5f", t0, "key_0123456789", "platform", "acme")
	}
}

func BenchmarkVerify(b *testing.B) {
	k := mustKeys(b, secret(1))
	sig := k.Sign(ForPrincipal, "2f0b7bd5-0d43-4b55-9c1f-0a1b2c3d4e5f", t0, "key_0123456789", "platform", "acme")
	b.ReportAllocs()
	for b.Loop() {
		k.Verify(sig, ForPrincipal, "2f0b7bd5-0d43-4b55-9c1f-0a1b2c3d4e5f", t0, time.Minute, "key_0123456789", "platform", "acme")
	}
}

// TestOneSpelling: a signature verifies in the one spelling Sign writes;
// the base64 of its MAC with other unused bits in its last character
// does not.
func TestOneSpelling(t *testing.T) {
	k := mustKeys(t, secret(1))
	sig := k.Sign(ForPrincipal, "r", t0, "k")
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, sig[len(sig)-1])
	verified := 0
	for i := last &^ 3; i < last&^3+4; i++ {
		variant := sig[:len(sig)-1] + string(alphabet[i])
		if k.Verify(variant, ForPrincipal, "r", t0, time.Minute, "k") == OK {
			verified++
			if variant != sig {
				t.Errorf("%q verifies, a second spelling of %q", variant, sig)
			}
		}
	}
	if verified != 1 {
		t.Errorf("%d spellings verify, want 1", verified)
	}
}

func TestAlsoAccepting(t *testing.T) {
	oldK, newK := mustKeys(t, secret(1)), mustKeys(t, secret(2))
	both := newK.AlsoAccepting(oldK)
	byOld := oldK.Sign(ForPrincipal, "r", t0, "k")
	if r := both.Verify(byOld, ForPrincipal, "r", t0, time.Minute, "k"); r != OK {
		t.Errorf("the old key's signature: %s", r)
	}
	if r := newK.Verify(both.Sign(ForPrincipal, "r", t0, "k"), ForPrincipal, "r", t0, time.Minute, "k"); r != OK {
		t.Errorf("both sign with the new key: %s", r)
	}
	if r := newK.Verify(byOld, ForPrincipal, "r", t0, time.Minute, "k"); r != BadSignature {
		t.Errorf("AlsoAccepting changed the new keys: %s", r)
	}
}
