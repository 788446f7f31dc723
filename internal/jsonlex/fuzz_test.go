package jsonlex

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"testing"
	"unicode/utf8"
)

// FuzzLex reads any bytes with every function of the package. Invariants:
// no panic; offsets stay within the input and EOF means the input ended;
// String accepts exactly the strings encoding/json accepts and Unescape
// decodes them as it does; the strict composition (strictString) accepts
// those that are valid UTF-8 and measures Units of each decoded rune;
// Number and Literal accept exactly encoding/json's numbers and literals;
// ParseInt agrees with strconv.ParseInt and with encoding/json's int64.
// The checked-in corpus is in testdata/fuzz/FuzzLex.
func FuzzLex(f *testing.F) {
	for _, s := range []string{
		`"a"`, `"\u00e9\ud83d\ude42\n"`, "\"\xff\"", `-1.5e+10`, `true`, `null`, `9223372036854775808`, ` x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// valid: b is one JSON value and nothing else, whitespace included.
		valid := json.Valid(b) && !IsSpace(b[0]) && !IsSpace(b[len(b)-1])

		j := SkipSpace(b, 0)
		if j > len(b) || len(bytes.TrimLeft(b, " \t\r\n")) != len(b)-j {
			t.Fatalf("SkipSpace(%q) = %d", b, j)
		}

		checkOffset := func(what string, end int, p Problem) {
			t.Helper()
			if end < 0 || end > len(b) || (p == EOF) != (end == len(b) && p != OK) {
				t.Fatalf("%s(%q): offset %d, problem %d", what, b, end, p)
			}
		}

		end, esc, p := String(b, 0)
		checkOffset("String", end, p)
		if len(b) > 0 && b[0] == '"' {
			if valid && (p != OK || end != len(b)) {
				t.Fatalf("String(%q) = %d, %d; encoding/json accepts it", b, end, p)
			}
			if p != OK && valid {
				t.Fatalf("String(%q) refused a valid string", b)
			}
			if p == OK {
				var want string
				if err := json.Unmarshal(b[:end], &want); err != nil {
					t.Fatalf("String(%q) accepted %q, encoding/json says %v", b, b[:end], err)
				}
				raw := b[1 : end-1]
				if esc != (bytes.IndexByte(raw, '\\') >= 0) {
					t.Fatalf("String(%q): esc = %v", b, esc)
				}
				got, ok := Unescape(nil, raw, math.MaxInt)
				if !ok || string(got) != want {
					t.Fatalf("Unescape(%q) = %q, encoding/json says %q", raw, got, want)
				}
				if len(got) > 0 {
					if short, ok := Unescape(nil, raw, len(got)-1); ok || !bytes.HasPrefix(got, short) {
						t.Fatalf("Unescape(%q) with limit %d = %q, %v", raw, len(got)-1, short, ok)
					}
				}
				send, units, sok := strictString(b)
				if sok != utf8.Valid(raw) || sok && send != end {
					t.Fatalf("strictString(%q) = %d, %v; String ends at %d", b, send, sok, end)
				}
				if sok {
					var wantUnits int64
					for _, r := range want {
						wantUnits += Units(r)
					}
					if units != wantUnits {
						t.Fatalf("strictString(%q) units = %d, want %d", b, units, wantUnits)
					}
				}
			} else if _, _, sok := strictString(b); sok {
				t.Fatalf("strictString(%q) accepts what String refuses", b)
			}
		}
		_, _ = Unescape(nil, b, math.MaxInt) // anything: no panic

		if len(b) > 0 && b[0] == '\\' {
			end, r, p := Escape(b, 0)
			checkOffset("Escape", end, p)
			var want string
			err := json.Unmarshal([]byte(`"`+string(b[:max(end, 1)])+`"`), &want)
			if p == OK && (err != nil || want != string(utf8.AppendRune(nil, r))) {
				t.Fatalf("Escape(%q) = %d, %U; encoding/json says %q, %v", b, end, r, want, err)
			}
		}

		end, p = Number(b, 0)
		checkOffset("Number", end, p)
		isNum := len(b) > 0 && (b[0] == '-' || b[0] >= '0' && b[0] <= '9')
		if valid && isNum && (p != OK || end != len(b)) {
			t.Fatalf("Number(%q) = %d, %d; encoding/json accepts it", b, end, p)
		}
		if p == OK && !json.Valid(b[:end]) {
			t.Fatalf("Number(%q) accepted %q", b, b[:end])
		}

		for _, w := range []string{"true", "false", "null"} {
			end, p := Literal(b, 0, w)
			checkOffset("Literal", end, p)
			if (p == OK) != bytes.HasPrefix(b, []byte(w)) {
				t.Fatalf("Literal(%q, %s) = %d, %d", b, w, end, p)
			}
		}

		n, overflow, ok := ParseInt(b)
		if len(b) > 0 && b[0] != '+' {
			sn, err := strconv.ParseInt(string(b), 10, 64)
			switch {
			case err == nil:
				if !ok || overflow || n != sn {
					t.Fatalf("ParseInt(%q) = %d, %v, %v; strconv says %d", b, n, overflow, ok, sn)
				}
			case errors.Is(err, strconv.ErrRange):
				// strconv stops at the overflow, before any later non-digit
				// (then ParseInt says not an integer: both refuse it).
				allDigits := len(bytes.Trim(bytes.TrimPrefix(b, []byte("-")), "0123456789")) == 0
				if ok != allDigits || ok && (!overflow || n != sn) {
					t.Fatalf("ParseInt(%q) = %d, %v, %v; strconv says out of range %d", b, n, overflow, ok, sn)
				}
			default:
				if ok {
					t.Fatalf("ParseInt(%q) = %d, %v, %v; strconv says %v", b, n, overflow, ok, err)
				}
			}
		}
		if valid && isNum {
			var jn int64
			err := json.Unmarshal(b, &jn)
			if (err == nil) != (ok && !overflow) || err == nil && jn != n {
				t.Fatalf("ParseInt(%q) = %d, %v, %v; encoding/json says %d, %v", b, n, overflow, ok, jn, err)
			}
		}
	})
}
