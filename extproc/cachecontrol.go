package extproc

import "bytes"

// namesCacheControl reports whether body names "cache_control" — as a
// key, or in a string — however it is spelled: a key escaped in part
// ("cache\u005fcontrol") is the same key to the provider's JSON parser,
// and it would make the provider write the prompt to its cache at the
// cache-write rates, which the reservation must then price. A false
// positive only reserves more.
func namesCacheControl(body []byte) bool {
	const name = `"cache_control"`
	if bytes.Contains(body, []byte(name)) {
		return true
	}
	if !bytes.Contains(body, []byte(`\u`)) {
		return false // no escape could spell it otherwise
	}
	return bytes.Contains(unescapeASCII(body), []byte(name))
}

// unescapeASCII is body with every \u escape of an ASCII character
// replaced by that character and the backslash of every other escape
// dropped (so an escaped quote reads as a quote: more matches, never
// fewer); other bytes as they are.
func unescapeASCII(body []byte) []byte {
	out := make([]byte, 0, len(body))
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c != '\\' || i+1 >= len(body) {
			out = append(out, c)
			continue
		}
		if body[i+1] == 'u' && i+5 < len(body) {
			v, ok := hex4(body[i+2 : i+6])
			if ok && v < 0x80 {
				out = append(out, byte(v))
				i += 5
				continue
			}
		}
		out = append(out, body[i+1])
		i++
	}
	return out
}

func hex4(b []byte) (rune, bool) {
	var v rune
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			v = v<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			v = v<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			v = v<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return v, true
}
