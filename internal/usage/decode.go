package usage

import (
	"bytes"
	"strings"
)

// wireUsage is every usage field of the schemas: OpenAI chat/completions
// (prompt_/completion_tokens), OpenAI Responses and Anthropic
// (input_/output_tokens), Anthropic's cache counts and their TTL
// breakdown, and the *_tokens_details of OpenAI and the providers that
// copy its shape.
type wireUsage struct {
	PromptTokens, CompletionTokens, TotalTokens count
	InputTokens, OutputTokens                   count
	CacheCreation, CacheRead                    count // cache_creation_input_tokens, cache_read_input_tokens
	CacheCreation5m, CacheCreation1h            count // cache_creation.ephemeral_{5m,1h}_input_tokens
	Prompt, Input                               details
	Completion, Output                          details
}

// details is a {prompt,input,completion,output}_tokens_details object.
// Each count is read from any of them; the apply functions use the ones
// that belong where they were found.
type details struct {
	Cached     count // cached_tokens (prompt/input)
	CacheWrite count // cache_write_tokens (prompt/input): an OpenRouter-style extension
	Reasoning  count // reasoning_tokens (completion/output)
	Audio      count // audio_tokens (every side)
}

// count is a token count as a provider wrote it: ok when it was present
// and a believable count, bad when it was a number that cannot be one;
// see parseCount.
type count struct {
	v       int64
	ok, bad bool
}

func firstOf(a, b count) count {
	if a.ok || a.bad {
		return a
	}
	return b
}

// bad reports whether any count of u that the meter reads is a number
// that cannot be a token count (negative, fractional, above maxCount).
func (u *wireUsage) bad() bool {
	for _, c := range [...]count{
		u.PromptTokens, u.CompletionTokens, u.TotalTokens, u.InputTokens, u.OutputTokens,
		u.CacheCreation, u.CacheRead, u.CacheCreation5m, u.CacheCreation1h,
		u.Prompt.Cached, u.Prompt.CacheWrite, u.Prompt.Audio, u.Input.Cached, u.Input.CacheWrite, u.Input.Audio,
		u.Completion.Reasoning, u.Completion.Audio, u.Output.Reasoning, u.Output.Audio,
	} {
		if c.bad {
			return true
		}
	}
	return false
}

// parseUsage reads a raw "usage" value; false unless it is an object. A
// key that occurs twice takes its last value; a details object that
// occurs twice is the last one, whole.
func parseUsage(raw []byte) (wireUsage, bool) {
	var u wireUsage
	ok := eachObject(raw, func(k, v []byte) {
		switch string(k) {
		case "prompt_tokens":
			u.PromptTokens = parseCount(v)
		case "completion_tokens":
			u.CompletionTokens = parseCount(v)
		case "total_tokens":
			u.TotalTokens = parseCount(v)
		case "input_tokens":
			u.InputTokens = parseCount(v)
		case "output_tokens":
			u.OutputTokens = parseCount(v)
		case "cache_creation_input_tokens":
			u.CacheCreation = parseCount(v)
		case "cache_read_input_tokens":
			u.CacheRead = parseCount(v)
		case "cache_creation":
			u.CacheCreation5m, u.CacheCreation1h = count{}, count{}
			eachObject(v, func(k, v []byte) {
				switch string(k) {
				case "ephemeral_5m_input_tokens":
					u.CacheCreation5m = parseCount(v)
				case "ephemeral_1h_input_tokens":
					u.CacheCreation1h = parseCount(v)
				}
			})
		case "prompt_tokens_details":
			u.Prompt = parseDetails(v)
		case "input_tokens_details":
			u.Input = parseDetails(v)
		case "completion_tokens_details":
			u.Completion = parseDetails(v)
		case "output_tokens_details":
			u.Output = parseDetails(v)
		}
	})
	return u, ok
}

func parseDetails(raw []byte) details {
	var d details
	eachObject(raw, func(k, v []byte) {
		switch string(k) {
		case "cached_tokens":
			d.Cached = parseCount(v)
		case "cache_write_tokens":
			d.CacheWrite = parseCount(v)
		case "reasoning_tokens":
			d.Reasoning = parseCount(v)
		case "audio_tokens":
			d.Audio = parseCount(v)
		}
	})
	return d
}

// applyOpenAI records an OpenAI-shaped usage object (chat, completions,
// embeddings, Responses). The last one wins. Input details (cached, cache
// write, audio) come with the input count and output details (reasoning,
// audio) with the output count; the chat and Responses spellings are
// both read, the larger winning.
//
// total_tokens above input + output is charged as output and as
// reasoning, unless the provider's rule says to ignore it (Options.
// TotalExcess): some OpenAI-compatible servers (Gemini's) leave thinking
// out of completion_tokens but bill it, and count it only in the total.
// The reasoning count is then at least the excess; a larger reported
// reasoning_tokens is kept (a server that reports reasoning outside
// completion_tokens reports exactly the excess there). Embeddings have no
// output, so their total is never an excess.
func (m *Meter) applyOpenAI(u *wireUsage) {
	in := firstOf(u.PromptTokens, u.InputTokens)
	if !in.ok && m.embeddings {
		in = u.TotalTokens
	}
	out := firstOf(u.CompletionTokens, u.OutputTokens)
	if !in.ok && !out.ok {
		return
	}
	c := &m.c
	if in.ok {
		c.haveIn = true
		c.input = in.v
		c.cacheRead = max(u.Prompt.Cached.v, u.Input.Cached.v)
		c.cacheCreate = max(u.Prompt.CacheWrite.v, u.Input.CacheWrite.v)
		c.audioIn = max(u.Prompt.Audio.v, u.Input.Audio.v)
	}
	switch {
	case out.ok:
		c.haveOut = true
		c.output = out.v
		c.reasoning = max(u.Completion.Reasoning.v, u.Output.Reasoning.v)
		c.audioOut = max(u.Completion.Audio.v, u.Output.Audio.v)
		if in.ok && u.TotalTokens.ok && !m.embeddings && m.excess == ExcessAsOutput {
			// Each count is at most maxCount, so neither the difference
			// nor the new output (at most the total) can overflow.
			if e := u.TotalTokens.v - in.v - out.v; e > 0 {
				c.output += e
				c.reasoning = max(c.reasoning, e)
			}
		}
	case m.embeddings:
		c.haveOut, c.output, c.reasoning = true, 0, 0
	}
	m.text.stopIfFinal(c)
}

// applyAnthropic records an Anthropic usage object. Input counts present
// (the cache_creation breakdown's two included) replace earlier ones
// field by field; output_tokens is final unless it comes from
// message_start (outFinal=false). How the breakdown and
// cache_creation_input_tokens combine is decided in result.
func (m *Meter) applyAnthropic(u *wireUsage, outFinal bool) {
	c := &m.c
	if u.InputTokens.ok {
		c.input, c.haveIn = u.InputTokens.v, true
	}
	if u.CacheRead.ok {
		c.cacheRead, c.haveIn = u.CacheRead.v, true
	}
	if u.CacheCreation.ok {
		c.cacheCreate, c.haveIn = u.CacheCreation.v, true
	}
	if u.CacheCreation5m.ok {
		c.cacheCreate5m, c.haveIn = u.CacheCreation5m.v, true
	}
	if u.CacheCreation1h.ok {
		c.cacheCreate1h, c.haveIn = u.CacheCreation1h.v, true
	}
	if u.OutputTokens.ok {
		if outFinal {
			c.output, c.haveOut = u.OutputTokens.v, true
		} else {
			c.provisionalOut = u.OutputTokens.v
		}
	}
	m.text.stopIfFinal(c)
}

// applyUsage records a raw usage value, if it is an object. A usage
// object with a count that cannot be one (u.bad) discredits the
// provider's usage for the whole response (distrustUsage).
func (m *Meter) applyUsage(raw []byte, outFinal bool) {
	u, ok := parseUsage(raw)
	if !ok || m.badUsage {
		return
	}
	if u.bad() {
		m.distrustUsage()
		return
	}
	if m.schema == anthropic {
		m.applyAnthropic(&u, outFinal)
	} else {
		m.applyOpenAI(&u)
	}
}

// distrustUsage forgets every count the provider reported and ignores the
// ones it may still report: a provider that wrote a negative, fractional
// or absurd count is not believed at all. Close then estimates both sides
// and marks the result Unparsed (Err CodeBadUsage), so that it is charged
// an estimate and counted, never a silent zero. An output count already
// reported stays as a floor for the estimate (the text it covered may no
// longer be kept).
func (m *Meter) distrustUsage() {
	c := &m.c
	out := c.provisionalOut
	if c.haveOut {
		out = max(out, c.output)
	}
	*c = counts{provisionalOut: out}
	m.badUsage = true
	m.setErr(CodeBadUsage)
}

// setProviderError records the error type of a raw "error" value: an
// object's "type" (or else "code"), or "error" for anything else but null.
func (m *Meter) setProviderError(raw []byte) {
	if raw == nil || string(raw) == "null" {
		return
	}
	var typ, code []byte
	eachObject(raw, func(k, v []byte) {
		switch string(k) {
		case "type":
			typ = v
		case "code":
			code = v
		}
	})
	label := labelOf(m, typ)
	if label == "" {
		label = labelOf(m, code)
	}
	m.setProviderErrorLabel(label)
}

// labelOf is a raw string's text or a raw number as written; "" otherwise.
func labelOf(m *Meter, raw []byte) string {
	if len(raw) == 0 {
		return ""
	}
	if raw[0] == '"' {
		return sanitizeLabel(text(m.scratch[:0], raw))
	}
	if c := raw[0]; c == '-' || c >= '0' && c <= '9' {
		return sanitizeLabel(raw)
	}
	return ""
}

func (m *Meter) setProviderErrorLabel(label string) {
	if label == "" {
		label = "error"
	}
	m.provErr = label
}

// sanitizeLabel keeps a provider's error type fit for a metrics label:
// lower-case [a-z0-9_.-], spaces as '_', at most 64 bytes.
func sanitizeLabel(s []byte) string {
	b := make([]byte, 0, min(len(s), 64))
	for i := 0; i < len(s) && len(b) < 64; i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z':
			b = append(b, c+('a'-'A'))
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '.', c == '-':
			b = append(b, c)
		case c == ' ':
			b = append(b, '_')
		}
	}
	return string(b)
}

// Text channel kinds.
const (
	kContent uint8 = iota
	kRefusal
	kReasoning
	kTool
	kFunction
	kSummary
)

// addText adds a raw JSON string value's text to a channel; other values
// are ignored.
func (m *Meter) addText(k chanKey, raw []byte) {
	if len(raw) <= 2 || raw[0] != '"' {
		return
	}
	m.text.add(k, text(m.scratch[:0], raw))
}

// OpenAI chat/completions and completions: a stream chunk or a body.
func (m *Meter) openAIEvent(data []byte) bool {
	var usage, errv, choices []byte
	if !document(data, func(k, v []byte) {
		switch string(k) {
		case "usage":
			usage = v
		case "error":
			errv = v
		case "choices":
			choices = v
		}
	}) {
		return false
	}
	m.applyUsage(usage, true)
	m.setProviderError(errv)
	m.openAIChoices(choices)
	return true
}

// openAIChoices reads choices[]: text (completions), delta (stream) and
// message (body).
func (m *Meter) openAIChoices(raw []byte) {
	eachElement(raw, func(ch []byte) {
		var index, txt, delta, msg []byte
		eachObject(ch, func(k, v []byte) {
			switch string(k) {
			case "index":
				index = v
			case "text":
				txt = v
			case "delta":
				delta = v
			case "message":
				msg = v
			}
		})
		i := parseIndex(index)
		m.addText(chanKey{a: i, kind: kContent}, txt)
		m.openAIMessage(i, delta)
		m.openAIMessage(i, msg)
	})
}

func (m *Meter) openAIMessage(i int32, raw []byte) {
	var content, refusal, rc, reasoning, tools, fn []byte
	eachObject(raw, func(k, v []byte) {
		switch string(k) {
		case "content":
			content = v
		case "refusal":
			refusal = v
		case "reasoning_content":
			rc = v
		case "reasoning":
			reasoning = v
		case "tool_calls":
			tools = v
		case "function_call":
			fn = v
		}
	})
	m.addText(chanKey{a: i, kind: kContent}, content)
	m.addText(chanKey{a: i, kind: kRefusal}, refusal)
	m.addText(chanKey{a: i, kind: kReasoning}, rc)
	m.addText(chanKey{a: i, kind: kReasoning}, reasoning)
	eachElement(tools, func(tc []byte) {
		var index, f []byte
		eachObject(tc, func(k, v []byte) {
			switch string(k) {
			case "index":
				index = v
			case "function":
				f = v
			}
		})
		m.addText(chanKey{a: i, b: parseIndex(index), kind: kTool}, field(f, "arguments"))
	})
	m.addText(chanKey{a: i, kind: kFunction}, field(fn, "arguments"))
}

// field returns the raw value of key name in a raw object, or nil.
func field(raw []byte, name string) []byte {
	var out []byte
	eachObject(raw, func(k, v []byte) {
		if string(k) == name {
			out = v
		}
	})
	return out
}

// Which events are buffered, per schema. OpenAI chat/completions keep
// every event (they are unnamed).
var (
	respKeep = map[string]bool{
		"response.completed":                     true,
		"response.incomplete":                    true,
		"response.failed":                        true,
		"response.output_text.delta":             true,
		"response.refusal.delta":                 true,
		"response.function_call_arguments.delta": true,
		"response.custom_tool_call_input.delta":  true,
		"response.reasoning_text.delta":          true,
		"response.reasoning_summary_text.delta":  true,
		"error":                                  true,
	}
	antKeep = map[string]bool{
		"message_start":       true,
		"message_delta":       true,
		"content_block_delta": true,
		"error":               true,
	}
	antKnown = map[string]bool{
		"ping":                true,
		"content_block_start": true,
		"content_block_stop":  true,
		"message_stop":        true,
	}
)

// keep implements sseSink.
func (m *Meter) keep(name []byte) bool {
	if len(name) == 0 {
		return true
	}
	switch m.schema {
	case responses:
		return respKeep[string(name)]
	case anthropic:
		return antKeep[string(name)]
	}
	return true
}

// known reports whether a skipped event is one the schema defines.
func (m *Meter) known(name []byte) bool {
	switch m.schema {
	case responses:
		return strings.HasPrefix(string(name), "response.")
	case anthropic:
		return antKnown[string(name)]
	}
	return false
}

// event implements sseSink.
func (m *Meter) event(name, data []byte, kept bool) {
	m.events++
	if !kept || !m.keep(name) {
		if m.known(name) {
			m.understood = true
		}
		return
	}
	data = bytes.TrimSpace(data)
	if string(data) == "[DONE]" {
		m.understood = true
		return
	}
	var ok bool
	switch m.schema {
	case openAI:
		ok = m.openAIEvent(data)
	case responses:
		ok = m.responsesEvent(name, data)
	case anthropic:
		ok = m.anthropicEvent(name, data)
	}
	if ok {
		m.understood = true
	}
}

// responsesEvent reads an OpenAI Responses stream event, routed by its
// SSE name, or by its "type" when unnamed.
func (m *Meter) responsesEvent(name, data []byte) bool {
	var typ, delta, out, content, summary, resp, code, errv []byte
	if !document(data, func(k, v []byte) {
		switch string(k) {
		case "type":
			typ = v
		case "delta":
			delta = v
		case "output_index":
			out = v
		case "content_index":
			content = v
		case "summary_index":
			summary = v
		case "response":
			resp = v
		case "code":
			code = v
		case "error":
			errv = v
		}
	}) {
		return false
	}
	if len(name) == 0 {
		name = text(m.scratch[:0], typ)
	}
	o := parseIndex(out)
	switch string(name) {
	case "response.completed", "response.incomplete", "response.failed":
		var usage, rerr []byte
		eachObject(resp, func(k, v []byte) {
			switch string(k) {
			case "usage":
				usage = v
			case "error":
				rerr = v
			}
		})
		m.applyUsage(usage, true)
		m.setProviderError(rerr)
	case "response.output_text.delta":
		m.addText(chanKey{a: o, b: parseIndex(content), kind: kContent}, delta)
	case "response.refusal.delta":
		m.addText(chanKey{a: o, b: parseIndex(content), kind: kRefusal}, delta)
	case "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
		m.addText(chanKey{a: o, kind: kTool}, delta)
	case "response.reasoning_text.delta":
		m.addText(chanKey{a: o, b: parseIndex(content), kind: kReasoning}, delta)
	case "response.reasoning_summary_text.delta":
		m.addText(chanKey{a: o, b: parseIndex(summary), kind: kSummary}, delta)
	case "error":
		if errv != nil && string(errv) != "null" {
			m.setProviderError(errv)
		} else {
			m.setProviderErrorLabel(labelOf(m, code))
		}
	}
	return true
}

// anthropicEvent reads an Anthropic Messages stream event, routed by its
// SSE name, or by its "type" when unnamed.
func (m *Meter) anthropicEvent(name, data []byte) bool {
	var typ, index, msg, usage, delta, errv []byte
	if !document(data, func(k, v []byte) {
		switch string(k) {
		case "type":
			typ = v
		case "index":
			index = v
		case "message":
			msg = v
		case "usage":
			usage = v
		case "delta":
			delta = v
		case "error":
			errv = v
		}
	}) {
		return false
	}
	if len(name) == 0 {
		name = text(m.scratch[:0], typ)
	}
	switch string(name) {
	case "message_start":
		m.applyUsage(field(msg, "usage"), false)
	case "message_delta":
		m.applyUsage(usage, true)
	case "content_block_delta":
		var dtyp, txt, pj, thinking []byte
		eachObject(delta, func(k, v []byte) {
			switch string(k) {
			case "type":
				dtyp = v
			case "text":
				txt = v
			case "partial_json":
				pj = v
			case "thinking":
				thinking = v
			}
		})
		k := chanKey{a: parseIndex(index)}
		var tb [32]byte
		switch string(text(tb[:0], dtyp)) {
		case "text_delta":
			m.addText(k, txt)
		case "input_json_delta":
			m.addText(k, pj)
		case "thinking_delta":
			m.addText(k, thinking)
		}
	case "error":
		m.setProviderError(errv)
	}
	return true
}

// bodyText reads a whole JSON body that carried no usage for its
// generated text. It reports whether the body is a valid JSON object.
func (m *Meter) bodyText(b []byte) bool {
	switch m.schema {
	case responses:
		var output []byte
		if !document(b, func(k, v []byte) {
			if string(k) == "output" {
				output = v
			}
		}) {
			return false
		}
		var i int32
		eachElement(output, func(item []byte) {
			var content, args, input, summary []byte
			eachObject(item, func(k, v []byte) {
				switch string(k) {
				case "content":
					content = v
				case "arguments":
					args = v
				case "input":
					input = v
				case "summary":
					summary = v
				}
			})
			var j int32
			eachElement(content, func(c []byte) {
				m.addText(chanKey{a: i, b: j, kind: kContent}, field(c, "text"))
				m.addText(chanKey{a: i, b: j, kind: kRefusal}, field(c, "refusal"))
				j++
			})
			m.addText(chanKey{a: i, kind: kTool}, args)
			m.addText(chanKey{a: i, kind: kTool}, input)
			j = 0
			eachElement(summary, func(s []byte) {
				m.addText(chanKey{a: i, b: j, kind: kSummary}, field(s, "text"))
				j++
			})
			i++
		})
	case anthropic:
		var content []byte
		if !document(b, func(k, v []byte) {
			if string(k) == "content" {
				content = v
			}
		}) {
			return false
		}
		var i int32
		eachElement(content, func(block []byte) {
			var txt, thinking, input []byte
			eachObject(block, func(k, v []byte) {
				switch string(k) {
				case "text":
					txt = v
				case "thinking":
					thinking = v
				case "input":
					input = v
				}
			})
			k := chanKey{a: i}
			m.addText(k, txt)
			m.addText(k, thinking)
			if len(input) > 0 && input[0] == '{' {
				m.text.add(k, input) // a tool call's arguments, as the JSON text sent
			}
			i++
		})
	default:
		var choices []byte
		if !document(b, func(k, v []byte) {
			if string(k) == "choices" {
				choices = v
			}
		}) {
			return false
		}
		m.openAIChoices(choices)
	}
	return true
}

// jsonBody is a JSON response body being read.
type jsonBody struct {
	sc   jsonScan
	buf  []byte
	over bool // the body outgrew Meter.max: buf was dropped
}

func (m *Meter) feedJSON(p []byte) {
	end := m.js.sc.scan(p)
	if end >= 0 {
		p = p[:end]
	}
	switch {
	case m.js.over:
	case len(m.js.buf)+len(p) > m.max:
		m.js.over, m.js.buf = true, nil
	case end >= 0 && len(m.js.buf) == 0:
		// The whole body is in p: finishJSON reads it in place (it keeps
		// nothing of it, and sets buf to nil), so it is not copied.
		m.js.buf = p
	default:
		m.js.buf = appendCapped(m.js.buf, p, m.max)
	}
	if end >= 0 {
		m.finishJSON()
		m.done = true
	}
}

// appendCapped appends p to b, never growing b's capacity beyond limit
// (len(b)+len(p) ≤ limit is the caller's promise).
func appendCapped(b, p []byte, limit int) []byte {
	if need := len(b) + len(p); need > cap(b) {
		c := min(max(2*cap(b), need, 1024), limit)
		nb := make([]byte, len(b), c)
		copy(nb, b)
		b = nb
	}
	return append(b, p...)
}

func (m *Meter) finishJSON() {
	sc := &m.js.sc
	found := false
	if raw, ok := sc.captured(capUsage); ok {
		m.applyUsage(raw, true)
		found = m.c.haveIn || m.c.haveOut
	}
	if raw, ok := sc.captured(capError); ok {
		m.setProviderError(raw)
	}
	m.parsed = found || m.provErr != ""
	switch {
	case m.js.over:
		m.setErr(CodeBodyTooLarge)
	case !sc.ended:
		m.setErr(CodeTruncatedJSON)
	case !sc.topObj:
		m.setErr(CodeBadJSON)
	case !found:
		if m.bodyText(m.js.buf) {
			m.parsed = true
		} else {
			m.setErr(CodeBadJSON)
		}
	}
	m.js.buf = nil
}
