package ssefilter

import (
	"bytes"
	"encoding/json"
	"strings"
)

// reference is what a Filter must output for the whole stream in, written
// independently of it and as plainly as possible: split the stream into
// lines (ending in "\r\n", "\n" or "\r") and events (lines up to a blank
// line), and drop each event no longer than max (up to the first byte of
// its blank line) whose lines are all data lines and whose data the
// encoding/json oracle calls a usage chunk. A blank line outside an event
// and an unterminated last event are kept.
func reference(in []byte, max int) (out []byte, removed int) {
	i := 0
	for i < len(in) {
		start := i
		var values [][]byte
		allData, ended, firstEnd := true, false, 0
		for i < len(in) {
			e := bytes.IndexAny(in[i:], "\r\n")
			if e < 0 {
				i = len(in)
				break
			}
			e += i
			next := e + 1
			if in[e] == '\r' && next < len(in) && in[next] == '\n' {
				next++
			}
			line := in[i:e]
			i = next
			if len(line) == 0 {
				ended, firstEnd = true, e+1
				break
			}
			v, ok := dataValue(line)
			allData = allData && ok
			values = append(values, v)
		}
		switch {
		case !ended: // the unterminated rest
			out = append(out, in[start:]...)
		case len(values) == 0: // a blank line on its own
			out = append(out, in[start:i]...)
		case firstEnd-start <= max && allData && oracleUsageOnly(bytes.Join(values, []byte("\n"))):
			removed++
		default:
			out = append(out, in[start:i]...)
		}
	}
	return out, removed
}

// dataValue is the value of line if its field is "data" (as the SSE
// grammar reads a line: the field up to the first ':', then one optional
// space).
func dataValue(line []byte) ([]byte, bool) {
	field, value, _ := bytes.Cut(line, []byte(":"))
	if string(field) != "data" {
		return nil, false
	}
	return bytes.TrimPrefix(value, []byte(" ")), true
}

// oracleUsageOnly decides with encoding/json whether data is a usage
// chunk: one valid JSON object whose top-level members (decoded) include
// "choices" and "usage", every "choices" an empty array and every
// "usage" an object; any key that is not ASCII, or that matches
// "choices" or "usage" only ignoring case, rules it out.
func oracleUsageOnly(data []byte) bool {
	if !json.Valid(data) {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	choices, usage := false, false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		key := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return false
		}
		for _, r := range key {
			if r >= 0x80 {
				return false
			}
		}
		switch {
		case key == "choices":
			var arr []json.RawMessage
			if raw[0] != '[' || json.Unmarshal(raw, &arr) != nil || len(arr) != 0 {
				return false
			}
			choices = true
		case key == "usage":
			if raw[0] != '{' {
				return false
			}
			usage = true
		case strings.EqualFold(key, "choices"), strings.EqualFold(key, "usage"):
			return false
		}
	}
	return choices && usage
}
