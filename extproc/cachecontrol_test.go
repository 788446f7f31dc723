package extproc

import "testing"

// TestNamesCacheControl: "cache_control" is found however its characters
// are escaped, and a body that ends inside an escape — a lone backslash,
// a \u with fewer than four hex digits — is read to its end without
// reading past it.
func TestNamesCacheControl(t *testing.T) {
	for _, tt := range []struct {
		body string
		want bool
	}{
		{`{"messages":[],"cache_control":{"type":"ephemeral"}}`, true},
		{`{"cache\u005fcontrol":{}}`, true},
		{`{"\u0063\u0061\u0063\u0068\u0065\u005F\u0063\u006f\u006e\u0074\u0072\u006f\u006c":{}}`, true},
		{`{"cache\_control":{}}`, false}, // not JSON: the provider refuses it
		{`{"cache_controls":{}}`, false},
		{`{"text":"no escapes here"}`, false},
		{`{"text":"\u00e9t\u00e9"}`, false},
		{`{"a":"b"}\`, false},
		{`{"a":"b"}\u`, false},
		{`{"a":"b"}\u005`, false},
		{`{"a":"b"}\u00`, false},
		{`"cache_control\u005`, false},
		{`"cache_control\u0022`, true},
		{`\u0022cache_control\u0022`, true},
	} {
		b := []byte(tt.body)
		b = b[:len(b):len(b)] // nothing past the body to read by mistake
		if got := namesCacheControl(b); got != tt.want {
			t.Errorf("namesCacheControl(%s) = %v, want %v", tt.body, got, tt.want)
		}
	}
	if got, want := string(unescapeASCII([]byte(`a\u0062\"c\u00e9\u007f\u0080\`))), "ab\"cu00e9\x7fu0080\\"; got != want {
		t.Errorf("unescapeASCII = %q, want %q", got, want)
	}
}
