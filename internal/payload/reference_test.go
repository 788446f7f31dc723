package payload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicegw/sluice/internal/llmapi"
)

// reference derives what Parse must report, InputTokens aside, by decoding
// the whole body with encoding/json into map[string]any (last duplicate key
// wins there too). It trusts the body to be a valid request: it is the
// oracle for bodies Parse accepted.
func reference(ep llmapi.Endpoint, body []byte) (Request, error) {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return Request{}, err
	}
	r := Request{MaxOutputTokens: -1, N: 1}
	model, ok := m["model"].(string)
	if !ok {
		return Request{}, fmt.Errorf("model is %T", m["model"])
	}
	r.Model = model
	if ep.CanStream() || ep == llmapi.Unknown {
		r.Stream = m["stream"] == true
	}
	integer := func(k string, absent int64) (int64, error) {
		switch v := m[k].(type) {
		case nil:
			return absent, nil
		case json.Number:
			return strconv.ParseInt(string(v), 10, 64)
		default:
			return 0, fmt.Errorf("%s is %T", k, v)
		}
	}
	var keys []string
	switch ep {
	case llmapi.ChatCompletions, llmapi.Completions:
		keys = []string{"max_tokens", "max_completion_tokens"}
	case llmapi.Responses:
		keys = []string{"max_output_tokens"}
	case llmapi.Messages:
		keys = []string{"max_tokens"}
	case llmapi.Unknown:
		keys = []string{"max_tokens", "max_completion_tokens", "max_output_tokens"}
	}
	for _, k := range keys {
		v, err := integer(k, -1)
		if err != nil {
			return Request{}, err
		}
		r.MaxOutputTokens = max(r.MaxOutputTokens, v)
	}
	if ep == llmapi.ChatCompletions || ep == llmapi.Completions || ep == llmapi.Unknown {
		n, err := integer("n", 1)
		if err != nil {
			return Request{}, err
		}
		r.N = n
		if so, ok := m["stream_options"].(map[string]any); ok {
			r.IncludeUsage = so["include_usage"] == true
		}
	}
	if ep == llmapi.Responses || ep == llmapi.Unknown {
		r.Background = m["background"] == true
	}
	refs, err := referenceRefs(ep, body)
	if err != nil {
		return Request{}, err
	}
	r.ByReference = refs
	return r, nil
}

// referenceRefs recomputes ref.go's kinds of input by reference from
// encoding/json's token stream (which keeps duplicate keys): top-level
// previous_response_id, conversation and (responses) prompt when not
// null; inside the prompt fields, in objects in text mode, a string
// file_id or file_url, a string url in an object whose "type" is "url"
// unless the object is an image_url's value, a "type" of
// "item_reference", and a non-null "id" in the object under "audio".
func referenceRefs(ep llmapi.Endpoint, body []byte) (Refs, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil {
		return 0, err
	}
	var refs Refs
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return 0, err
		}
		f := fieldOf(ep, []byte(k.(string)))
		tok, err := dec.Token()
		if err != nil {
			return 0, err
		}
		switch f {
		case fPreviousResponseID, fConversation, fStoredPrompt:
			if tok != nil {
				refs |= topLevelRef(f)
			}
			err = refWalk(dec, tok, modeSkip, "", nil)
		case fText, fList:
			err = refWalk(dec, tok, modeText, "", &refs)
		default:
			err = refWalk(dec, tok, modeSkip, "", nil)
		}
		if err != nil {
			return 0, err
		}
	}
	return refs, nil
}

// refWalk walks the value that starts with tok in mode m (refValue's
// modes), adding to refs the kinds of input by reference it holds;
// parent is the key the value sits under.
func refWalk(dec *json.Decoder, tok json.Token, m mode, parent string, refs *Refs) error {
	d, ok := tok.(json.Delim)
	if !ok || (d != '{' && d != '[') {
		return nil
	}
	cm := childMode(m)
	var hasURL, typeURL bool
	for dec.More() {
		key := ""
		if d == '{' {
			k, err := dec.Token()
			if err != nil {
				return err
			}
			key = k.(string)
		}
		next, err := dec.Token()
		if err != nil {
			return err
		}
		vm := cm
		if d == '{' && cm == modeText {
			vm = keyMode([]byte(key))
			str, isStr := next.(string)
			switch {
			case key == "id" && parent == "audio" && next != nil:
				*refs |= RefAudioID
			case key == "file_id" && isStr:
				*refs |= RefFileID
			case key == "file_url" && isStr:
				*refs |= RefFileURL
			case key == "url" && isStr && parent != "image_url":
				hasURL = true
			case key == "type" && isStr && str == "item_reference":
				*refs |= RefItemReference
			case key == "type" && isStr && str == "url":
				typeURL = true
			}
		}
		childParent := ""
		if d == '{' && cm == modeText {
			childParent = key
		}
		if err := refWalk(dec, next, vm, childParent, refs); err != nil {
			return err
		}
	}
	if hasURL && typeURL {
		*refs |= RefURL
	}
	_, err := dec.Token() // the closing delimiter
	return err
}

type member struct {
	key string
	raw string
}

// members lists the top-level members of a JSON object with each value's
// exact bytes, as encoding/json's Decoder finds them.
func members(body []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	var out []member
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		out = append(out, member{key: k.(string), raw: string(raw)})
	}
	return out, nil
}

// checkApplied reports how out (Apply(in, rw)) differs from what rw asks:
// with encoding/json as the judge, out must be valid JSON; every top-level
// member other than "model" and "stream_options" must keep its exact bytes
// and order; "model" must be rw.Model (or gone with DropModel, or as it was);
// stream_options must be as it was, or, with ForceIncludeUsage, an object
// with include_usage true whose other members keep their exact bytes.
func checkApplied(in, out []byte, rw Rewrite) error {
	if !json.Valid(out) {
		return fmt.Errorf("output is not valid JSON: %q", out)
	}
	mi, err := members(in)
	if err != nil {
		return fmt.Errorf("input: %v", err)
	}
	mo, err := members(out)
	if err != nil {
		return fmt.Errorf("output: %v", err)
	}
	others := func(ms []member) (o []member, model, opts []member) {
		for _, m := range ms {
			switch m.key {
			case "model":
				model = append(model, m)
			case "stream_options":
				opts = append(opts, m)
			default:
				o = append(o, m)
			}
		}
		return o, model, opts
	}
	oi, modelIn, optsIn := others(mi)
	oo, modelOut, optsOut := others(mo)
	if fmt.Sprint(oi) != fmt.Sprint(oo) {
		return fmt.Errorf("other members changed:\n in  %q\n out %q", oi, oo)
	}
	switch {
	case rw.DropModel:
		if len(modelOut) != 0 {
			return fmt.Errorf("model not dropped: %q", modelOut)
		}
	case rw.Model != "":
		var want string // rw.Model as a JSON decoder reads it back
		if err := json.Unmarshal(appendQuoted(nil, rw.Model), &want); err != nil {
			return fmt.Errorf("model %q encoded badly: %v", rw.Model, err)
		}
		if len(modelOut) != max(len(modelIn), 1) {
			return fmt.Errorf("model members: in %q, out %q", modelIn, modelOut)
		}
		for _, m := range modelOut {
			var got string
			if err := json.Unmarshal([]byte(m.raw), &got); err != nil || got != want {
				return fmt.Errorf("model is %s, want %q", m.raw, want)
			}
		}
	default:
		if fmt.Sprint(modelIn) != fmt.Sprint(modelOut) {
			return fmt.Errorf("model changed: %q to %q", modelIn, modelOut)
		}
	}
	if !rw.ForceIncludeUsage {
		if fmt.Sprint(optsIn) != fmt.Sprint(optsOut) {
			return fmt.Errorf("stream_options changed: %q to %q", optsIn, optsOut)
		}
		return nil
	}
	if len(optsOut) != max(len(optsIn), 1) {
		return fmt.Errorf("stream_options members: in %q, out %q", optsIn, optsOut)
	}
	for i, o := range optsOut {
		om, err := members([]byte(o.raw))
		if err != nil {
			return fmt.Errorf("stream_options %s: %v", o.raw, err)
		}
		var rest []member
		usage := 0
		for _, m := range om {
			if m.key == "include_usage" {
				usage++
				if m.raw != "true" {
					return fmt.Errorf("include_usage is %s in %s", m.raw, o.raw)
				}
				continue
			}
			rest = append(rest, m)
		}
		if usage == 0 {
			return fmt.Errorf("no include_usage in %s", o.raw)
		}
		var restIn []member
		if i < len(optsIn) && optsIn[i].raw[0] == '{' {
			im, err := members([]byte(optsIn[i].raw))
			if err != nil {
				return err
			}
			for _, m := range im {
				if m.key != "include_usage" {
					restIn = append(restIn, m)
				}
			}
		}
		if fmt.Sprint(rest) != fmt.Sprint(restIn) {
			return fmt.Errorf("stream_options members changed: %q to %q", restIn, rest)
		}
	}
	return nil
}

// referenceEstimate recomputes README.md's input-token estimate from
// encoding/json's token stream (which keeps duplicate keys, and decodes
// every escape and surrogate pair): the oracle for str's rune counting and
// the scanner's walk. The key tables (fieldOf, keyMode) are shared.
func referenceEstimate(ep llmapi.Endpoint, body []byte) (int64, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil {
		return 0, err
	}
	var total int64
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return 0, err
		}
		switch fieldOf(ep, []byte(k.(string))) {
		case fText, fList:
			tok, err := dec.Token()
			if err != nil {
				return 0, err
			}
			n, err := refValue(dec, tok, modeText, fieldOf(ep, []byte(k.(string))) == fList)
			if err != nil {
				return 0, err
			}
			total += n
		default:
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return 0, err
			}
			if fieldOf(ep, []byte(k.(string))) == fSize {
				total += int64(len(raw)+3) / 4
			}
		}
	}
	if ep == llmapi.ChatCompletions || ep == llmapi.Messages || ep == llmapi.Responses {
		total += perRequestTokens
	}
	return total, nil
}

// refValue costs the value that starts with tok in mode m; perItem adds
// perItemTokens for each object directly inside an array. Media strings
// are classified from their decoded value (README.md, "Media").
func refValue(dec *json.Decoder, tok json.Token, m mode, perItem bool) (int64, error) {
	switch v := tok.(type) {
	case string:
		switch m {
		case modeText:
			return (refUnits(v) + 3) / 4, nil
		case modeMedia:
			return dataTokens(refUnits(v)), nil
		}
		return 0, nil
	case json.Number:
		if m == modeText || m == modeMedia {
			return 1, nil
		}
		return 0, nil
	case json.Delim:
		var total int64
		cm := childMode(m)
		var raw []int64 // units of the raw media strings of this object
		hint := ""
		for dec.More() {
			vm := cm
			key := ""
			if v == '{' {
				k, err := dec.Token()
				if err != nil {
					return 0, err
				}
				key = k.(string)
				if cm == modeText {
					vm = keyMode([]byte(key))
				}
			}
			next, err := dec.Token()
			if err != nil {
				return 0, err
			}
			if v == '[' && perItem && next == json.Delim('{') {
				total += perItemTokens
			}
			if str, ok := next.(string); ok && v == '{' && cm == modeText {
				if vm == modeMedia {
					u := refUnits(str)
					switch {
					case key == "file_id", strings.HasPrefix(str, "https://"), strings.HasPrefix(str, "http://"), strings.HasPrefix(str, "data:image/"):
						total += mediaTokens
					case strings.HasPrefix(str, "data:"):
						total += dataTokens(u)
					default:
						raw = append(raw, u)
					}
					continue
				}
				if key == "media_type" || key == "mime_type" || key == "format" {
					c := "data"
					switch {
					case key == "format":
						if isAudioFormat([]byte(str)) {
							c = "audio"
						}
					case strings.HasPrefix(str, "image/"):
						c = "image"
					}
					if hint != "" && hint != c {
						c = "data"
					}
					hint = c
				}
			}
			n, err := refValue(dec, next, vm, false)
			if err != nil {
				return 0, err
			}
			total += n
		}
		var units int64
		for _, u := range raw {
			units += u
			switch hint {
			case "image":
				total += mediaTokens
			case "audio":
			default:
				total += dataTokens(u)
			}
		}
		if hint == "audio" && len(raw) > 0 {
			total += (units + audioUnitsPerToken - 1) / audioUnitsPerToken
		}
		_, err := dec.Token() // the closing delimiter
		return total, err
	}
	return 0, nil // bool, nil
}

// refUnits is README.md's units of a decoded string: 1 per rune below U+0800,
// 4 per rune at or above it.
func refUnits(v string) int64 {
	var units int64
	for _, r := range v {
		if r < 0x800 {
			units++
		} else {
			units += 4
		}
	}
	return units
}
