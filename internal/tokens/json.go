package tokens

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// JSONObject is the JSON object holding head's fields, then a field per
// kind of token in order, named name(k.Names()) and holding c[k], then
// tail's fields: the shape of a struct with a field per kind, which
// encoding/json cannot write from an array. head and tail must encode as
// JSON objects (structs); either may be nil.
func JSONObject(head any, c Counts, name func(Names) string, tail any) ([]byte, error) {
	b := []byte{'{'}
	inner := func(v any) error {
		if v == nil {
			return nil
		}
		o, err := json.Marshal(v)
		if err != nil {
			return err
		}
		o = bytes.TrimSpace(o)
		if len(o) < 2 || o[0] != '{' || o[len(o)-1] != '}' {
			return fmt.Errorf("tokens: %T is not a JSON object", v)
		}
		if o = o[1 : len(o)-1]; len(o) > 0 {
			if len(b) > 1 {
				b = append(b, ',')
			}
			b = append(b, o...)
		}
		return nil
	}
	if err := inner(head); err != nil {
		return nil, err
	}
	for k, n := range c {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, name(names[k]))
		b = append(b, ':')
		b = strconv.AppendInt(b, n, 10)
	}
	if err := inner(tail); err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}
