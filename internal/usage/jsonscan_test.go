package usage

import (
	"strings"
	"testing"
)

func TestJSONScan(t *testing.T) {
	tests := []struct {
		name       string
		in         string
		end        int // 0: the value ends with the input; -1: it does not end
		usage, err string
		usageOK    bool
		errOK      bool
	}{
		{name: "usage last", in: `{"a":1,"usage":{"prompt_tokens":3}}`, end: 0, usage: `{"prompt_tokens":3}`, usageOK: true},
		{name: "usage first with spaces", in: "{ \"usage\" : { \"x\" : [1,{\"y\":2}] } , \"b\":\"usage\"}\n", end: 48,
			usage: `{ "x" : [1,{"y":2}] }`, usageOK: true},
		{name: "error string", in: `{"error":"bad \"thing\"","usage":null}`, end: 0, err: `"bad \"thing\""`, errOK: true,
			usage: "null", usageOK: true},
		{name: "nested usage is not captured", in: `{"choices":[{"usage":{"a":1}}],"x":{"usage":2}}`, end: 0},
		{name: "string value usage is not a key", in: `{"k":"usage","v":1}`, end: 0},
		{name: "escaped key is not matched", in: `{"us\u0061ge":{}}`, end: 0},
		{name: "longer keys", in: `{"usages":{},"usag":{},"error_x":1}`, end: 0},
		// A key is forgotten for good at an escape or its sixth byte: what
		// follows never completes a match.
		{name: "escape then the rest of usage", in: `{"u\"sage":{},"e\\rror":1,"\nusage":2}`, end: 0},
		{name: "six bytes then the rest of usage", in: `{"uXXXXXsage":{},"eXXXXXrror":1}`, end: 0},
		{name: "braces in strings", in: `{"s":"}{][\\","usage":{"t":"}"}}`, end: 0, usage: `{"t":"}"}`, usageOK: true},
		{name: "top-level array", in: `[{"usage":{}}]`, end: 0},
		{name: "truncated", in: `{"usage":{"prompt_tokens":3`, end: -1},
		{name: "truncated after usage", in: `{"usage":{"prompt_tokens":3},"choi`, end: -1, usage: `{"prompt_tokens":3}`, usageOK: true},
		{name: "trailing bytes", in: `{"usage":1} garbage`, end: 11, usage: "1", usageOK: true},
		{name: "last usage wins", in: `{"usage":1,"usage":22}`, end: 0, usage: "22", usageOK: true},
		{name: "deep nesting", in: `{"a":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `,"usage":5}`, end: 0,
			usage: "5", usageOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.end == 0 {
				tt.end = len(tt.in)
			}
			for split := 0; split < len(tt.in); split++ {
				var s jsonScan
				s.reset()
				end := s.scan([]byte(tt.in[:split]))
				if end < 0 {
					if e := s.scan([]byte(tt.in[split:])); e >= 0 {
						end = split + e
					}
				}
				if end != tt.end {
					t.Fatalf("split %d: end %d, want %d", split, end, tt.end)
				}
				u, uok := s.captured(capUsage)
				e, eok := s.captured(capError)
				if !uok {
					u = nil
				}
				if !eok {
					e = nil
				}
				if string(u) != tt.usage || uok != tt.usageOK || string(e) != tt.err || eok != tt.errOK {
					t.Fatalf("split %d: usage %q %v, error %q %v; want %q %v, %q %v",
						split, u, uok, e, eok, tt.usage, tt.usageOK, tt.err, tt.errOK)
				}
				if len(tt.in) > 1000 && split > 3 {
					break
				}
			}
		})
	}
}

func TestJSONScanCaptureBound(t *testing.T) {
	var s jsonScan
	s.reset()
	s.scan([]byte(`{"usage":"`))
	chunk := []byte(strings.Repeat("u", 1<<10))
	for range 100 {
		s.scan(chunk)
	}
	end := s.scan([]byte(`","error":{"type":"x"}}`))
	if _, ok := s.captured(capUsage); ok || cap(s.caps[capUsage]) > maxCapture {
		t.Errorf("oversized usage captured (cap %d)", cap(s.caps[capUsage]))
	}
	if e, ok := s.captured(capError); !ok || string(e) != `{"type":"x"}` || end != 23 {
		t.Errorf("error after an oversized usage: %q %v, end %d", e, ok, end)
	}
}

// TestJSONScanCaptureExactBound: a captured value of exactly maxCapture
// bytes is kept, however it arrives; one byte more and it is dropped.
func TestJSONScanCaptureExactBound(t *testing.T) {
	value := func(n int) string { return `{"a":"` + strings.Repeat("x", n-8) + `"}` }
	for _, tt := range []struct {
		n    int
		want bool
	}{{maxCapture - 1, true}, {maxCapture, true}, {maxCapture + 1, false}, {2 * maxCapture, false}} {
		v := value(tt.n)
		in := `{"usage":` + v + `,"b":1}`
		for _, split := range []int{0, 9, 10, len(in) / 2, len(in) - 7, len(in) - 6, len(in)} {
			var s jsonScan
			s.reset()
			end := s.scan([]byte(in[:split]))
			if end < 0 {
				if e := s.scan([]byte(in[split:])); e >= 0 {
					end = split + e
				}
			}
			u, ok := s.captured(capUsage)
			if end != len(in) || ok != tt.want || ok && string(u) != v {
				t.Errorf("%d-byte value, split at %d: end %d, captured %v (%d bytes); want %v", tt.n, split, end, ok, len(u), tt.want)
			}
		}
	}
}
