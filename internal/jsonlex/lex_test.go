package jsonlex

import (
	"math"
	"strings"
	"testing"
)

func TestSkipSpace(t *testing.T) {
	for _, tc := range []struct {
		in   string
		i    int
		want int
	}{
		{"", 0, 0}, {"x", 0, 0}, {" \t\r\nx", 0, 4}, {"   ", 0, 3}, {"a  b", 1, 3},
		{"\v x", 0, 0}, {"\f", 0, 0}, {"\u00a0", 0, 0}, {" ", 1, 1},
	} {
		if got := SkipSpace([]byte(tc.in), tc.i); got != tc.want {
			t.Errorf("SkipSpace(%q, %d) = %d, want %d", tc.in, tc.i, got, tc.want)
		}
	}
}

func TestLiteral(t *testing.T) {
	for _, tc := range []struct {
		in, word string
		end      int
		p        Problem
	}{
		{"true", "true", 4, OK}, {"true,", "true", 4, OK}, {"null]", "null", 4, OK}, {"false", "false", 5, OK},
		{"tru", "true", 3, EOF}, {"", "null", 0, EOF}, {"trux", "true", 3, BadLiteral},
		{"fals", "false", 4, EOF}, {"nul!", "null", 3, BadLiteral}, {"True", "true", 0, BadLiteral},
	} {
		end, p := Literal([]byte(tc.in), 0, tc.word)
		if end != tc.end || p != tc.p {
			t.Errorf("Literal(%q, %q) = %d, %d; want %d, %d", tc.in, tc.word, end, p, tc.end, tc.p)
		}
	}
}

func TestNumber(t *testing.T) {
	for _, tc := range []struct {
		in  string
		end int
		p   Problem
	}{
		{"0", 1, OK}, {"-0", 2, OK}, {"12", 2, OK}, {"12,", 2, OK}, {"01", 1, OK}, {"-1.5e+10", 8, OK},
		{"1E5", 3, OK}, {"1e-0", 4, OK}, {"0.0", 3, OK}, {"1.5x", 3, OK},
		{"", 0, EOF}, {"-", 1, EOF}, {"1.", 2, EOF}, {"1e", 2, EOF}, {"1e+", 3, EOF},
		{"-x", 1, BadNumber}, {"+1", 0, BadNumber}, {".5", 0, BadNumber}, {"x", 0, BadNumber},
		{"1.e3", 2, BadFraction}, {"1.x", 2, BadFraction}, {"1e+x", 3, BadExponent}, {"1ex", 2, BadExponent},
	} {
		end, p := Number([]byte(tc.in), 0)
		if end != tc.end || p != tc.p {
			t.Errorf("Number(%q) = %d, %d; want %d, %d", tc.in, end, p, tc.end, tc.p)
		}
	}
}

func TestParseInt(t *testing.T) {
	for _, tc := range []struct {
		in           string
		n            int64
		overflow, ok bool
	}{
		{"0", 0, false, true}, {"-0", 0, false, true}, {"12", 12, false, true}, {"007", 7, false, true},
		{"-5", -5, false, true},
		{"9223372036854775807", math.MaxInt64, false, true},
		{"9223372036854775808", math.MaxInt64, true, true},
		{"-9223372036854775808", math.MinInt64, false, true},
		{"-9223372036854775809", math.MinInt64, true, true},
		{"99999999999999999999999", math.MaxInt64, true, true},
		{"-99999999999999999999999", math.MinInt64, true, true},
		{"", 0, false, false}, {"-", 0, false, false}, {"1.0", 0, false, false}, {"1e3", 0, false, false},
		{"+1", 0, false, false}, {"1_000", 0, false, false}, {" 1", 0, false, false}, {"null", 0, false, false},
		{"99999999999999999999x", 0, false, false},
	} {
		n, overflow, ok := ParseInt([]byte(tc.in))
		if n != tc.n || overflow != tc.overflow || ok != tc.ok {
			t.Errorf("ParseInt(%q) = %d, %v, %v; want %d, %v, %v", tc.in, n, overflow, ok, tc.n, tc.overflow, tc.ok)
		}
	}
}

func TestHex4(t *testing.T) {
	for _, tc := range []struct {
		in string
		r  rune
		ok bool
	}{
		{"0000", 0, true}, {"ffff", 0xffff, true}, {"FfFf", 0xffff, true}, {"12aB", 0x12ab, true}, {"d83dx", 0xd83d, true},
		{"123", 0, false}, {"", 0, false}, {"g000", 0, false}, {"000g", 0, false}, {"-001", 0, false},
	} {
		r, ok := Hex4([]byte(tc.in))
		if ok != tc.ok || ok && r != tc.r {
			t.Errorf("Hex4(%q) = %#x, %v; want %#x, %v", tc.in, r, ok, tc.r, tc.ok)
		}
	}
}

func TestEscape(t *testing.T) {
	for _, tc := range []struct {
		in  string
		end int
		r   rune
		p   Problem
	}{
		{`\"`, 2, '"', OK}, {`\\`, 2, '\\', OK}, {`\/`, 2, '/', OK}, {`\b`, 2, '\b', OK}, {`\f`, 2, '\f', OK},
		{`\n`, 2, '\n', OK}, {`\r`, 2, '\r', OK}, {`\t`, 2, '\t', OK},
		{`\u0041`, 6, 'A', OK}, {`\u00e9x`, 6, 'é', OK}, {`\u4e2d`, 6, '中', OK},
		{`\ud83d\ude42`, 12, '🙂', OK},
		{`\ud83d`, 6, 0xfffd, OK}, {`\ud83dx`, 6, 0xfffd, OK}, {`\ude42\ud83d`, 6, 0xfffd, OK},
		{`\ud83d\u0041`, 6, 0xfffd, OK}, {`\ud83d\ud83d`, 6, 0xfffd, OK}, {`\ud83d\uzzzz`, 6, 0xfffd, OK},
		{`\ud83d\ude4`, 6, 0xfffd, OK},
		{`\`, 1, 0, EOF}, {`\u`, 2, 0, EOF}, {`\u12`, 4, 0, EOF}, {`\x`, 1, 0, BadEscape}, {`\U0041`, 1, 0, BadEscape},
		{`\u00g1`, 4, 0, BadHex}, {`\uZ`, 2, 0, BadHex}, {"\\\x00", 1, 0, BadEscape},
	} {
		end, r, p := Escape([]byte(tc.in), 0)
		if end != tc.end || p != tc.p || p == OK && r != tc.r {
			t.Errorf("Escape(%q) = %d, %U, %d; want %d, %U, %d", tc.in, end, r, p, tc.end, tc.r, tc.p)
		}
	}
}

func TestString(t *testing.T) {
	long := strings.Repeat("x", 40)
	for _, tc := range []struct {
		in       string
		end      int
		esc      bool
		p        Problem
		strictOK bool // valid UTF-8 too
	}{
		{`""`, 2, false, OK, true}, {`"a"`, 3, false, OK, true}, {`"a",`, 3, false, OK, true},
		{`"` + long + `"`, 42, false, OK, true}, {`"a\nb"`, 6, true, OK, true}, {`"` + long + `\n"`, 44, true, OK, true},
		{`"\u00e9\ud83d\ude42"`, 20, true, OK, true}, {`"é中🙂"`, 11, false, OK, true},
		{"\"\xff\xfe\"", 4, false, OK, false}, {"\"" + long + "\xc0\"", 43, false, OK, false},
		{"\"\xed\xa0\x80\"", 5, false, OK, false}, // an encoded surrogate
		{`"`, 1, false, EOF, false}, {`"abc`, 4, false, EOF, false}, {`"` + long, 41, false, EOF, false},
		{`"a\`, 3, false, EOF, false}, {`"\u12`, 5, false, EOF, false},
		{"\"a\tb\"", 2, false, BadControl, false}, {"\"" + long + "\t\"", 41, false, BadControl, false},
		{"\"" + long + "\\n\x01\"", 43, false, BadControl, false},
		{`"\x"`, 2, false, BadEscape, false}, {`"` + long + `\q"`, 42, false, BadEscape, false},
		{`"\u12x4"`, 5, false, BadHex, false},
	} {
		end, esc, p := String([]byte(tc.in), 0)
		if end != tc.end || p != tc.p || p == OK && esc != tc.esc {
			t.Errorf("String(%q) = %d, %v, %d; want %d, %v, %d", tc.in, end, esc, p, tc.end, tc.esc, tc.p)
		}
		if _, _, ok := strictString([]byte(tc.in)); ok != tc.strictOK {
			t.Errorf("strictString(%q) ok = %v, want %v", tc.in, ok, tc.strictOK)
		}
	}
}

// strictString composes PlainRun, Escape and UTF8Run the way a caller
// that refuses invalid UTF-8 and measures strings does (payload's
// scanner), so the fuzz target can check the pieces agree with String.
func strictString(b []byte) (end int, units int64, ok bool) {
	i := 1
	for {
		j := PlainRun(b, i)
		units += int64(j - i)
		i = j
		if i >= len(b) {
			return i, 0, false
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, units, true
		case c == '\\':
			n, r, p := Escape(b, i)
			if p != OK {
				return n, 0, false
			}
			i = n
			units += Units(r)
		case c < 0x20:
			return i, 0, false
		case c < 0x80:
			i++
			units++
		default:
			n, u := UTF8Run(b, i)
			if n == 0 {
				return i, 0, false
			}
			i += n
			units += u
		}
	}
}

func TestUnits(t *testing.T) {
	for _, tc := range []struct {
		in    string
		units int64
	}{
		{`""`, 0}, {`"abcd"`, 4}, {`"` + strings.Repeat("abcdefgh", 3) + `"`, 24}, {`"éß"`, 2}, {`"中文"`, 8},
		{`"🙂"`, 4}, {`"\u00e9\u4e2d\ud83d\ude42\ud800\n"`, 1 + 4 + 4 + 4 + 1}, {`"ࠀ߿"`, 5},
	} {
		if _, u, ok := strictString([]byte(tc.in)); !ok || u != tc.units {
			t.Errorf("units of %s = %d, %v; want %d", tc.in, u, ok, tc.units)
		}
	}
}

func TestUnescape(t *testing.T) {
	for _, tc := range []struct {
		raw, want string
	}{
		{``, ``}, {`abc`, `abc`}, {`a\"b\\c\/d`, `a"b\c/d`}, {`\b\f\n\r\t`, "\b\f\n\r\t"},
		{`\u00e9\u4E2D`, "é中"}, {`\ud83d\ude42`, "🙂"}, {`\ud83d`, "\ufffd"}, {`\ud83dx`, "\ufffdx"},
		{`\ude42\ud83d`, "\ufffd\ufffd"}, {`\ud83d\u0041`, "\ufffdA"}, {"a\xffb", "a\ufffdb"},
		{"\xe4\xb8", "\ufffd\ufffd"}, {"é中", "é中"},
		// Not a valid string's content: no panic, the backslash is kept.
		{`\`, `\`}, {`\x`, `\x`}, {`\u12`, `\u12`},
	} {
		got, ok := Unescape(nil, []byte(tc.raw), math.MaxInt)
		if !ok || string(got) != tc.want {
			t.Errorf("Unescape(%q) = %q, %v; want %q", tc.raw, got, ok, tc.want)
		}
		if len(tc.want) > 0 {
			if _, ok := Unescape(nil, []byte(tc.raw), len(tc.want)-1); ok {
				t.Errorf("Unescape(%q, limit %d) fits, want false", tc.raw, len(tc.want)-1)
			}
		}
		if got, ok := Unescape([]byte("pre"), []byte(tc.raw), 3+len(tc.want)); !ok || string(got) != "pre"+tc.want {
			t.Errorf("Unescape(pre, %q) = %q, %v", tc.raw, got, ok)
		}
	}
}
