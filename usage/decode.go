package usage

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
)

// wireUsage is every usage field of the dialects: OpenAI chat/completions
// (prompt_/completion_tokens), OpenAI Responses and Anthropic
// (input_/output_tokens), Anthropic's cache counts and OpenAI's details.
type wireUsage struct {
	PromptTokens      count   `json:"prompt_tokens"`
	CompletionTokens  count   `json:"completion_tokens"`
	TotalTokens       count   `json:"total_tokens"`
	InputTokens       count   `json:"input_tokens"`
	OutputTokens      count   `json:"output_tokens"`
	CacheCreation     count   `json:"cache_creation_input_tokens"`
	CacheRead         count   `json:"cache_read_input_tokens"`
	PromptDetails     details `json:"prompt_tokens_details"`
	InputDetails      details `json:"input_tokens_details"`
	CompletionDetails details `json:"completion_tokens_details"`
	OutputDetails     details `json:"output_tokens_details"`
}

type details struct {
	CachedTokens    count `json:"cached_tokens"`
	ReasoningTokens count `json:"reasoning_tokens"`
}

// count is a token count as a provider wrote it: ok when it was present
// and a whole number (12 or 12.0); null, fractions, strings and other
// values are absent. Values are clamped to [0, maxCount].
type count struct {
	v  int64
	ok bool
}

// UnmarshalJSON implements json.Unmarshaler. It never fails, so a bad
// count does not stop the rest of the object from decoding.
func (c *count) UnmarshalJSON(b []byte) error {
	*c = count{}
	if n, ok := parseDigits(b); ok {
		*c = count{v: n, ok: true}
		return nil
	}
	if len(b) == 0 || b[0] == '"' || b[0] == 'n' || b[0] == '{' || b[0] == '[' || b[0] == 't' || b[0] == 'f' {
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || f != math.Trunc(f) {
		return nil
	}
	*c = count{v: int64(min(max(f, 0), maxCount)), ok: true}
	return nil
}

// parseDigits parses a non-negative or negative integer literal without
// allocating, clamped to [0, maxCount].
func parseDigits(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if n <= maxCount {
			n = n*10 + int64(c-'0')
		}
	}
	if neg {
		return 0, true
	}
	return min(n, maxCount), true
}

func firstOf(a, b count) count {
	if a.ok {
		return a
	}
	return b
}

// decodeOK reports whether json.Unmarshal got somewhere: a type mismatch
// in one field leaves the others decoded.
func decodeOK(err error) bool {
	if err == nil {
		return true
	}
	_, ok := err.(*json.UnmarshalTypeError)
	return ok
}

// applyOpenAI records an OpenAI-shaped usage object (chat, completions,
// embeddings, Responses). The last one wins.
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
		c.cacheRead = max(u.PromptDetails.CachedTokens.v, u.InputDetails.CachedTokens.v)
	}
	switch {
	case out.ok:
		c.haveOut = true
		c.output = out.v
		c.reasoning = max(u.CompletionDetails.ReasoningTokens.v, u.OutputDetails.ReasoningTokens.v)
	case m.embeddings:
		c.haveOut, c.output, c.reasoning = true, 0, 0
	}
	m.text.stopIfFinal(c)
}

// applyAnthropic records an Anthropic usage object. Input counts present
// replace earlier ones field by field; output_tokens is final unless it
// comes from message_start (outFinal=false).
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
	if u.OutputTokens.ok {
		if outFinal {
			c.output, c.haveOut = u.OutputTokens.v, true
		} else {
			c.provisionalOut = u.OutputTokens.v
		}
	}
	m.text.stopIfFinal(c)
}

func (m *Meter) applyUsage(u *wireUsage, outFinal bool) {
	if u == nil {
		return
	}
	if m.dialect == anthropic {
		m.applyAnthropic(u, outFinal)
	} else {
		m.applyOpenAI(u)
	}
}

// setProviderError records the error type of a raw "error" value: an
// object's "type" (or "code"), or "error" for anything else but null.
func (m *Meter) setProviderError(raw []byte) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return
	}
	var e struct {
		Type any `json:"type"`
		Code any `json:"code"`
	}
	label := ""
	if raw[0] == '{' && json.Unmarshal(raw, &e) == nil {
		label = labelOf(e.Type)
		if label == "" {
			label = labelOf(e.Code)
		}
	}
	m.setProviderErrorLabel(label)
}

func (m *Meter) setProviderErrorLabel(label string) {
	if label = sanitizeLabel(label); label == "" {
		label = "error"
	}
	m.provErr = label
}

func labelOf(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case float64:
		b, _ := json.Marshal(v)
		return string(b)
	}
	return ""
}

// sanitizeLabel keeps a provider's error type fit for a metrics label.
func sanitizeLabel(s string) string {
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

// Stream events.

type oaMessage struct {
	Content          string `json:"content"`
	Refusal          string `json:"refusal"`
	ReasoningContent string `json:"reasoning_content"`
	Reasoning        string `json:"reasoning"`
	ToolCalls        []struct {
		Index    int `json:"index"`
		Function struct {
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	FunctionCall struct {
		Arguments string `json:"arguments"`
	} `json:"function_call"`
}

// oaEvent is an OpenAI chat/completions chunk or body.
type oaEvent struct {
	Usage   *wireUsage      `json:"usage"`
	Error   json.RawMessage `json:"error"`
	Choices []struct {
		Index   int       `json:"index"`
		Text    string    `json:"text"`
		Delta   oaMessage `json:"delta"`
		Message oaMessage `json:"message"`
	} `json:"choices"`
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

func (m *Meter) oaText(ev *oaEvent) {
	for i := range ev.Choices {
		ch := &ev.Choices[i]
		m.text.add(chanKey{a: int32(ch.Index), kind: kContent}, ch.Text)
		for _, msg := range [...]*oaMessage{&ch.Delta, &ch.Message} {
			m.text.add(chanKey{a: int32(ch.Index), kind: kContent}, msg.Content)
			m.text.add(chanKey{a: int32(ch.Index), kind: kRefusal}, msg.Refusal)
			m.text.add(chanKey{a: int32(ch.Index), kind: kReasoning}, msg.ReasoningContent)
			m.text.add(chanKey{a: int32(ch.Index), kind: kReasoning}, msg.Reasoning)
			for _, tc := range msg.ToolCalls {
				m.text.add(chanKey{a: int32(ch.Index), b: int32(tc.Index), kind: kTool}, tc.Function.Arguments)
			}
			m.text.add(chanKey{a: int32(ch.Index), kind: kFunction}, msg.FunctionCall.Arguments)
		}
	}
}

// respEvent is an OpenAI Responses stream event.
type respEvent struct {
	Type         string `json:"type"`
	Delta        string `json:"delta"`
	OutputIndex  int    `json:"output_index"`
	ContentIndex int    `json:"content_index"`
	SummaryIndex int    `json:"summary_index"`
	Response     *struct {
		Usage *wireUsage      `json:"usage"`
		Error json.RawMessage `json:"error"`
	} `json:"response"`
	Code  any             `json:"code"`
	Error json.RawMessage `json:"error"`
}

// antEvent is an Anthropic Messages stream event.
type antEvent struct {
	Type    string `json:"type"`
	Index   int    `json:"index"`
	Message *struct {
		Usage *wireUsage `json:"usage"`
	} `json:"message"`
	Usage *wireUsage `json:"usage"`
	Delta struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		Thinking    string `json:"thinking"`
	} `json:"delta"`
	Error json.RawMessage `json:"error"`
}

// Which events are buffered, per dialect. OpenAI chat/completions keep
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
	switch m.dialect {
	case responses:
		return respKeep[string(name)]
	case anthropic:
		return antKeep[string(name)]
	}
	return true
}

// known reports whether a skipped event is one the dialect defines.
func (m *Meter) known(name []byte) bool {
	switch m.dialect {
	case responses:
		return bytes.HasPrefix(name, []byte("response."))
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
	if len(data) == 0 || data[0] != '{' {
		return
	}
	switch m.dialect {
	case openAI:
		var ev oaEvent
		if !decodeOK(json.Unmarshal(data, &ev)) {
			return
		}
		m.understood = true
		m.applyUsage(ev.Usage, true)
		if ev.Error != nil {
			m.setProviderError(ev.Error)
		}
		m.oaText(&ev)
	case responses:
		var ev respEvent
		if !decodeOK(json.Unmarshal(data, &ev)) {
			return
		}
		m.understood = true
		m.respEvent(name, &ev)
	case anthropic:
		var ev antEvent
		if !decodeOK(json.Unmarshal(data, &ev)) {
			return
		}
		m.understood = true
		m.antEvent(name, &ev)
	}
}

func (m *Meter) respEvent(name []byte, ev *respEvent) {
	typ := ev.Type
	if len(name) > 0 {
		typ = string(name)
	}
	delta, out := ev.Delta, int32(ev.OutputIndex)
	switch typ {
	case "response.completed", "response.incomplete", "response.failed":
		if ev.Response != nil {
			m.applyUsage(ev.Response.Usage, true)
			if ev.Response.Error != nil {
				m.setProviderError(ev.Response.Error)
			}
		}
	case "response.output_text.delta":
		m.text.add(chanKey{a: out, b: int32(ev.ContentIndex), kind: kContent}, delta)
	case "response.refusal.delta":
		m.text.add(chanKey{a: out, b: int32(ev.ContentIndex), kind: kRefusal}, delta)
	case "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
		m.text.add(chanKey{a: out, kind: kTool}, delta)
	case "response.reasoning_text.delta":
		m.text.add(chanKey{a: out, b: int32(ev.ContentIndex), kind: kReasoning}, delta)
	case "response.reasoning_summary_text.delta":
		m.text.add(chanKey{a: out, b: int32(ev.SummaryIndex), kind: kSummary}, delta)
	case "error":
		switch {
		case ev.Error != nil && string(ev.Error) != "null":
			m.setProviderError(ev.Error)
		default:
			m.setProviderErrorLabel(labelOf(ev.Code))
		}
	}
}

func (m *Meter) antEvent(name []byte, ev *antEvent) {
	typ := ev.Type
	if len(name) > 0 {
		typ = string(name)
	}
	switch typ {
	case "message_start":
		if ev.Message != nil {
			m.applyUsage(ev.Message.Usage, false)
		}
	case "message_delta":
		m.applyUsage(ev.Usage, true)
	case "content_block_delta":
		k := chanKey{a: int32(ev.Index)}
		switch ev.Delta.Type {
		case "text_delta":
			m.text.add(k, ev.Delta.Text)
		case "input_json_delta":
			m.text.add(k, ev.Delta.PartialJSON)
		case "thinking_delta":
			m.text.add(k, ev.Delta.Thinking)
		}
	case "error":
		m.setProviderError(ev.Error)
	}
}

// JSON bodies, decoded whole only when they carry no usage (for the
// fallback's text).

type respBody struct {
	Output []struct {
		Content []struct {
			Text    string `json:"text"`
			Refusal string `json:"refusal"`
		} `json:"content"`
		Arguments string `json:"arguments"`
		Input     any    `json:"input"`
		Summary   []struct {
			Text string `json:"text"`
		} `json:"summary"`
	} `json:"output"`
}

type antBody struct {
	Content []struct {
		Text     string          `json:"text"`
		Thinking string          `json:"thinking"`
		Input    json.RawMessage `json:"input"`
	} `json:"content"`
}

// bodyText decodes a whole JSON body for its generated text. It reports
// whether the body decoded.
func (m *Meter) bodyText(b []byte) bool {
	switch m.dialect {
	case responses:
		var v respBody
		if !decodeOK(json.Unmarshal(b, &v)) {
			return false
		}
		for i, o := range v.Output {
			for j, c := range o.Content {
				m.text.add(chanKey{a: int32(i), b: int32(j), kind: kContent}, c.Text)
				m.text.add(chanKey{a: int32(i), b: int32(j), kind: kRefusal}, c.Refusal)
			}
			m.text.add(chanKey{a: int32(i), kind: kTool}, o.Arguments)
			if s, ok := o.Input.(string); ok {
				m.text.add(chanKey{a: int32(i), kind: kTool}, s)
			}
			for j, s := range o.Summary {
				m.text.add(chanKey{a: int32(i), b: int32(j), kind: kSummary}, s.Text)
			}
		}
	case anthropic:
		var v antBody
		if !decodeOK(json.Unmarshal(b, &v)) {
			return false
		}
		for i, c := range v.Content {
			k := chanKey{a: int32(i)}
			m.text.add(k, c.Text)
			m.text.add(k, c.Thinking)
			m.text.add(k, string(c.Input))
		}
	default:
		var v oaEvent
		if !decodeOK(json.Unmarshal(b, &v)) {
			return false
		}
		m.oaText(&v)
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
	if !m.js.over {
		if len(m.js.buf)+len(p) > m.max {
			m.js.over, m.js.buf = true, nil
		} else {
			m.js.buf = appendCapped(m.js.buf, p, m.max)
		}
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
	if raw, ok := sc.captured(capUsage); ok && len(raw) > 0 && raw[0] == '{' {
		var u wireUsage
		if decodeOK(json.Unmarshal(raw, &u)) {
			m.applyUsage(&u, true)
			found = m.c.haveIn || m.c.haveOut
		}
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
