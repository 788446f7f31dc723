package usage

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestLexerAgreesWithEncodingJSON(t *testing.T) {
	for _, doc := range lexerSeeds {
		checkLexer(t, []byte(doc))
	}
}

var lexerSeeds = []string{
	`{}`, ` { } `, `{"a":1}`, `{"a":-0.5e+10,"b":[true,false,null,{"c":"d"}]}`,
	`{"s":"\u00e9\ud83d\ude42\n\t\"\\\/"}`, `{"lone":"\ud83d x"}`, `{"bad":"\xff\xfe"}`,
	`{"usage":{"prompt_tokens":3}}  `, "{\"tab\":\"a\tb\"}", `{"a":01}`, `{"a":1.}`, `{"a":.5}`,
	`{"a":+1}`, `{"a":1e}`, `{"a":tru}`, `{"a":"x"`, `{"a" 1}`, `{"a":1,}`, `[1,2]`, `"s"`, `{"a":1}x`,
	`{"\u0075sage":1}`, `{"a":"\x"}`, `{"a":"\u12"}`, `{"a":[1 2]}`, `{,}`, `{"a":[]}`, `{"a":{}}`,
	`{"long":"` + strings.Repeat("x", 40) + "\t" + `"}`, `{"long":"` + strings.Repeat("x", 40) + `\n"}`,
	`{"a":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
	`{"a":` + strings.Repeat("[", 9998) + strings.Repeat("]", 9998) + `}`,
	// Nesting of exactly maxDepth (10000) levels is accepted, as by
	// encoding/json, one more is not, whether the deepest is an array or
	// an object.
	`{"a":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`,
	`{"a":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`,
	`{"a":` + strings.Repeat("[", 9998) + `{}` + strings.Repeat("]", 9998) + `}`,
	`{"a":` + strings.Repeat("[", 9999) + `{}` + strings.Repeat("]", 9999) + `}`,
	strings.Repeat(`{"a":`, 9999) + `{"b":1}` + strings.Repeat("}", 9999),
	strings.Repeat(`{"a":`, 10000) + `{"b":1}` + strings.Repeat("}", 10000),
	// The depth counts nesting, not values: 10000 siblings of each kind
	// of closed value leave it where it was.
	`{"a":[` + strings.Repeat(`{},`, 10000) + `{}]}`,
	`{"a":[` + strings.Repeat(`{"b":1},`, 10000) + `{}]}`,
	`{"a":[` + strings.Repeat(`[],`, 10000) + `[]]}`,
	`{"a":[` + strings.Repeat(`[1],`, 10000) + `[]]}`,
}

// checkLexer: the lexer accepts exactly the JSON objects encoding/json
// accepts, and decodes every string as encoding/json does.
func checkLexer(t *testing.T, b []byte) {
	t.Helper()
	want := json.Valid(b) && bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("{"))
	if got := document(b, nil); got != want {
		t.Fatalf("document(%.80q) = %v, json.Valid says %v", b, got, want)
	}
	if !want {
		return
	}
	// The walk re-reads each nested value, so it stops 64 levels down.
	var walk func(raw []byte, depth int)
	walk = func(raw []byte, depth int) {
		if depth > 64 {
			return
		}
		switch raw[0] {
		case '{':
			eachObject(raw, func(k, v []byte) {
				walk(v, depth+1)
			})
		case '[':
			eachElement(raw, func(v []byte) { walk(v, depth+1) })
		case '"':
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				t.Fatalf("encoding/json rejects string %q: %v", raw, err)
			}
			if got := string(text(nil, raw)); got != s {
				t.Fatalf("string %q decoded as %q, encoding/json says %q", raw, got, s)
			}
		}
	}
	walk(bytes.TrimSpace(b), 0)
	// Keys arrive unescaped: compare with encoding/json's map keys.
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	document(b, func(k, v []byte) {
		if _, ok := m[string(k)]; !ok {
			t.Fatalf("key %q is not among encoding/json's keys", k)
		}
	})
}

// FuzzLexer: the hand-written lexer that replaces encoding/json on the hot
// path must accept and decode exactly what encoding/json does.
func FuzzLexer(f *testing.F) {
	for _, s := range lexerSeeds {
		f.Add([]byte(s))
	}
	for _, sc := range handWritten() {
		for _, line := range strings.Split(sc.body, "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				f.Add([]byte(d))
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkLexer(t, b)
		for _, raw := range [][]byte{b, []byte(`"` + string(b) + `"`)} {
			_ = parseCount(raw)
			_, _ = parseUsage(raw)
		}
	})
}

func TestParseCount(t *testing.T) {
	bad := count{bad: true}
	for in, want := range map[string]count{
		"12": {12, true, false}, "0": {0, true, false}, "12.0": {12, true, false}, "1.2e1": {12, true, false},
		"1073741824": {maxCount, true, false}, "1.073741824e9": {maxCount, true, false},
		"-0": {0, true, false}, "0.0": {0, true, false}, "0e5": {0, true, false}, "-0.0": {0, true, false}, "1e0": {1, true, false},
		"null": {}, `"12"`: {}, `"-5"`: {}, "true": {}, "{}": {}, "": {},
		// Numbers that cannot be token counts.
		"-5": bad, "-0.5": bad, "-1": bad, "1.5": bad, "1073741825": bad, "1099511627776": bad,
		"9223372036854775807": bad, "9223372036854775808": bad, "-9223372036854775809": bad,
		"1e300": bad, "-1e300": bad, "1e400": bad, "1.1e9": bad,
	} {
		if got := parseCount([]byte(in)); got != want {
			t.Errorf("parseCount(%q) = %+v, want %+v", in, got, want)
		}
	}
}
