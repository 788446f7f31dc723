package payload

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"

	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/jsonlex"
	"github.com/sluicegw/sluice/internal/llmapi"
)

// Request is what Sluice needs from an LLM API request body.
type Request struct {
	// Model is the top-level "model" field, decoded (escapes resolved).
	Model string
	// Stream is true when "stream" is true. Only read on endpoints that can
	// stream (llmapi.Endpoint.CanStream) and on an unknown endpoint.
	Stream bool
	// MaxOutputTokens is the client's cap on output tokens, -1 when absent
	// (or null): max_tokens and max_completion_tokens (chat/completions,
	// completions; the larger when both are set), max_output_tokens
	// (responses), max_tokens (messages); an unknown endpoint takes the
	// largest of the three. Embeddings have none.
	MaxOutputTokens int64
	// InputTokens estimates the prompt's tokens for admission; README.md gives
	// the formula and its error. It is never negative.
	InputTokens int64
	// IncludeUsage is true when stream_options.include_usage is true
	// (chat/completions, completions and an unknown endpoint).
	IncludeUsage bool
	// N is the number of choices asked for ("n", chat/completions and
	// completions; 1 when absent or null, and on other endpoints). Output
	// tokens multiply by it.
	N int64
	// ByReference lists the kinds of input the body points at instead of
	// carrying — a file id, a document URL, a stored response,
	// conversation or prompt — whose size Sluice cannot see (ref.go); 0
	// when it carries all of its input.
	ByReference Refs
	// Background is true when "background" is true (responses, and an
	// unknown endpoint): the provider answers at once and generates
	// later, where Sluice cannot meter it.
	Background bool
}

// Limits on the values Parse accepts: large enough for every real request
// (providers refuse far smaller values), small enough that
// MaxOutputTokens × N stays below 2^39.
const (
	MaxTokensLimit = 1<<32 - 1 // largest max_tokens / max_output_tokens accepted
	MaxN           = 128       // largest "n" accepted: OpenAI's own bound (1–128)
	MaxModelLen    = 256       // longest model name accepted, in bytes (decoded)
)

// invalid is a client error in a request body: an *apierr.Error with
// status 400 and one of apierr's body codes (empty_body, invalid_json,
// not_an_object, missing_model, invalid_model, invalid_type,
// invalid_field, integer_below_min_value, integer_above_max_value,
// duplicate_field, invalid_utf8). The message says what is wrong and
// where, and quotes at most 64 bytes of the body; it is formatted only
// when args are given. Where OpenAI's API refuses the same body itself,
// openAI sets its words (apierr.Error.OpenAIMessage).
func invalid(code, format string, args ...any) *apierr.Error {
	return apierr.New(http.StatusBadRequest, code, format, args...)
}

// openAI sets e's message in OpenAI's words and returns e.
func openAI(e *apierr.Error, msg string) *apierr.Error {
	e.OpenAIMessage = msg
	return e
}

// noModel is OpenAI's refusal of a body without a model, or with an
// empty one: "you must provide a model parameter", param and code null.
const noModel = "you must provide a model parameter"

// invalidParam is invalid naming the field at fault (OpenAI's "param").
func invalidParam(param, code, format string, args ...any) *apierr.Error {
	e := invalid(code, format, args...)
	e.Param = param
	return e
}

// readKeys are the top-level keys whose value Parse reads on some
// endpoint (decoded, or measured for the estimate), each with its bit in
// the duplicate check (keyBit).
var readKeys = [...]string{
	"model", "stream", "max_tokens", "max_completion_tokens", "max_output_tokens", "n", "stream_options",
	"messages", "input", "prompt", "suffix", "system", "instructions", "tools", "functions", "response_format", "text",
	"background", "previous_response_id", "conversation",
}

// keyBit is the bit of a key of readKeys, 0 for any other key.
func keyBit(key []byte) uint32 {
	for i, k := range readKeys {
		if string(key) == k {
			return 1 << i
		}
	}
	return 0
}

// duplicate is the refusal of a body in which a field Parse reads occurs
// twice: JSON parsers disagree on which occurrence wins (the last for
// encoding/json and Python, the first for others, an error for some), so
// a provider could run or bill another value than the one Sluice metered.
func duplicate(name string) *apierr.Error {
	return invalidParam(name, apierr.CodeDuplicateField,
		"%s occurs more than once in the request body; send it once", strconv.Quote(name))
}

// fields Parse reads, found by top-level key.
type field uint8

const (
	fNone field = iota
	fModel
	fStream
	fMaxTokens
	fMaxCompletionTokens
	fMaxOutputTokens
	fN
	fStreamOptions
	fBackground         // responses: background
	fPreviousResponseID // responses: previous_response_id (by reference)
	fConversation       // responses: conversation (by reference)
	fStoredPrompt       // responses: prompt, a stored prompt (by reference)
	fText               // prompt text: strings and numbers count
	fList               // prompt list: as fText, plus per-item overhead
	fSize               // counted by raw JSON size
)

// fieldNames are the keys of the decoded fields (fModel…fStoredPrompt),
// for messages and the case-folding check.
var fieldNames = [...]string{
	fModel:               "model",
	fStream:              "stream",
	fMaxTokens:           "max_tokens",
	fMaxCompletionTokens: "max_completion_tokens",
	fMaxOutputTokens:     "max_output_tokens",
	fN:                   "n",
	fStreamOptions:       "stream_options",
	fBackground:          "background",
	fPreviousResponseID:  "previous_response_id",
	fConversation:        "conversation",
	fStoredPrompt:        "prompt",
}

// fieldKeys are fieldNames as bytes (read only).
var fieldKeys = func() (k [fStoredPrompt + 1][]byte) {
	for f := fModel; f <= fStoredPrompt; f++ {
		k[f] = []byte(fieldNames[f])
	}
	return k
}()

// fieldOf says what the top-level key means on endpoint ep.
func fieldOf(ep llmapi.Endpoint, key []byte) field {
	switch string(key) {
	case "model":
		return fModel
	case "stream":
		if ep.CanStream() || ep == llmapi.Unknown {
			return fStream
		}
	case "max_tokens":
		if ep != llmapi.Embeddings && ep != llmapi.Responses {
			return fMaxTokens
		}
	case "max_completion_tokens":
		if ep == llmapi.ChatCompletions || ep == llmapi.Completions || ep == llmapi.Unknown {
			return fMaxCompletionTokens
		}
	case "max_output_tokens":
		if ep == llmapi.Responses || ep == llmapi.Unknown {
			return fMaxOutputTokens
		}
	case "n":
		if ep == llmapi.ChatCompletions || ep == llmapi.Completions || ep == llmapi.Unknown {
			return fN
		}
	case "stream_options":
		if ep == llmapi.ChatCompletions || ep == llmapi.Completions || ep == llmapi.Unknown {
			return fStreamOptions
		}
	case "messages":
		if ep == llmapi.ChatCompletions || ep == llmapi.Messages || ep == llmapi.Unknown {
			return fList
		}
	case "input":
		switch ep {
		case llmapi.Responses, llmapi.Unknown:
			return fList
		case llmapi.Embeddings:
			return fText
		}
	case "background":
		if ep == llmapi.Responses || ep == llmapi.Unknown {
			return fBackground
		}
	case "previous_response_id":
		if ep == llmapi.Responses || ep == llmapi.Unknown {
			return fPreviousResponseID
		}
	case "conversation":
		if ep == llmapi.Responses || ep == llmapi.Unknown {
			return fConversation
		}
	case "prompt", "suffix":
		if ep == llmapi.Responses && string(key) == "prompt" {
			return fStoredPrompt
		}
		if ep == llmapi.Completions || ep == llmapi.Unknown {
			return fText
		}
	case "system":
		if ep == llmapi.Messages || ep == llmapi.Unknown {
			return fText
		}
	case "instructions":
		if ep == llmapi.Responses || ep == llmapi.Unknown {
			return fText
		}
	case "tools":
		if ep != llmapi.Completions && ep != llmapi.Embeddings {
			return fSize
		}
	case "functions", "response_format":
		if ep == llmapi.ChatCompletions || ep == llmapi.Unknown {
			return fSize
		}
	case "text":
		if ep == llmapi.Responses || ep == llmapi.Unknown {
			return fSize
		}
	}
	return fNone
}

// foldedField reports the decoded field whose key equals key under Unicode
// case folding (as encoding/json matches struct fields) though not exactly.
func foldedField(ep llmapi.Endpoint, key []byte) (field, bool) {
	if len(key) == 0 || len(key) > 3*len("max_completion_tokens") {
		return fNone, false
	}
	for f := fModel; f <= fStoredPrompt; f++ {
		name := fieldKeys[f]
		if !bytes.Equal(key, name) && bytes.EqualFold(key, name) && fieldOf(ep, name) == f {
			return f, true
		}
	}
	return fNone, false
}

// Tokens added by the estimate (README.md).
const (
	perRequestTokens = 3    // reply priming, chat-style endpoints
	perItemTokens    = 4    // each message / input item
	mediaTokens      = 1600 // each media string (image, audio, file)
)

// Parse reads the request body of a call to endpoint ep. A body that is not
// a valid request is an *apierr.Error with status 400 and a body code
// (see invalid); Parse reports a syntax error anywhere in the body before
// any problem with a field's value.
func Parse(ep llmapi.Endpoint, body []byte) (Request, error) {
	s := scanner{buf: body}
	if err := s.begin(); err != nil {
		return Request{}, err
	}
	req := Request{MaxOutputTokens: -1, N: 1}
	maxTokens, maxCompl, maxOutput := int64(-1), int64(-1), int64(-1)
	haveModel, modelEsc := false, false
	modelStart, modelEnd := 0, 0 // the last model string's content
	var bad *apierr.Error        // the first problem with a field's value
	noteBad := func(e *apierr.Error) {
		if bad == nil {
			bad = e
		}
	}
	var seen uint32 // keyBit of every field read so far
	for more := s.firstMember(); more; more = s.nextMember() {
		key, ok := s.memberKey()
		if !ok {
			break
		}
		f := fieldOf(ep, key)
		if f == fNone {
			if g, folded := foldedField(ep, key); folded {
				noteBad(openAI(invalidParam(string(key), apierr.CodeInvalidField,
					"top-level key %s differs from %q only in case; send %q", quoteKey(key), fieldNames[g], fieldNames[g]),
					fmt.Sprintf("Unknown parameter: '%s'. (Keys are case-sensitive: did you mean '%s'?)", string(key), fieldNames[g])))
			}
		} else if bit := keyBit(key); seen&bit != 0 {
			noteBad(duplicate(string(key)))
		} else {
			seen |= bit
		}
		start := s.pos
		switch f {
		case fModel:
			haveModel = true
			if s.peek() != '"' {
				if !s.value(1, modeSkip) {
					break
				}
				noteBad(openAI(invalidParam("model", apierr.CodeInvalidType, `"model" must be a string, got `+kindOf(body[start])),
					"Invalid type for 'model': expected a string, but got "+openAIKind(body[start:s.pos])+" instead."))
				break
			}
			_, esc, ok := s.str()
			if !ok {
				break
			}
			modelStart, modelEnd, modelEsc = start+1, s.pos-1, esc
			if modelStart == modelEnd {
				noteBad(openAI(invalid(apierr.CodeMissingModel, `"model" must not be empty`), noModel))
			}
		case fStream:
			v, e, ok := s.boolValue("stream")
			if !ok {
				break
			}
			if e != nil {
				noteBad(e)
			}
			req.Stream = v
		case fMaxTokens, fMaxCompletionTokens, fMaxOutputTokens:
			v, e, ok := s.intValue(fieldNames[f], 0, MaxTokensLimit, -1, openAIMinimum(f))
			if !ok {
				break
			}
			if e != nil {
				noteBad(e)
			}
			switch f {
			case fMaxTokens:
				maxTokens = v
			case fMaxCompletionTokens:
				maxCompl = v
			default:
				maxOutput = v
			}
		case fN:
			v, e, ok := s.intValue("n", 1, MaxN, 1, 1)
			if !ok {
				break
			}
			if e != nil {
				noteBad(e)
			}
			req.N = v
		case fStreamOptions:
			v, e, ok := s.streamOptions()
			if !ok {
				break
			}
			if e != nil {
				noteBad(e)
			}
			req.IncludeUsage = v
		case fBackground:
			v, e, ok := s.boolValue("background")
			if !ok {
				break
			}
			if e != nil {
				noteBad(e)
			}
			req.Background = v
		case fPreviousResponseID, fConversation, fStoredPrompt:
			// Any value but null points at stored input; what it is the
			// provider checks.
			if s.peek() != 'n' {
				s.refs |= topLevelRef(f)
			}
			s.value(1, modeSkip)
		case fText:
			s.value(1, modeText)
		case fList:
			if s.peek() == '[' {
				s.array(2, modeText, true)
			} else {
				s.value(1, modeText)
			}
		case fSize:
			if s.value(1, modeSkip) {
				s.tokens += int64(s.pos-start+3) / 4
			}
		default:
			s.value(1, modeSkip)
		}
	}
	if err := s.end(); err != nil {
		return Request{}, err
	}
	if bad != nil {
		return Request{}, bad
	}
	if !haveModel {
		return Request{}, openAI(invalid(apierr.CodeMissingModel, `the request body has no "model" field`), noModel)
	}
	model, err := decodeModel(body[modelStart:modelEnd], modelEsc)
	if err != nil {
		return Request{}, err
	}
	req.Model = model
	req.MaxOutputTokens = max(maxTokens, maxCompl, maxOutput)
	req.InputTokens = s.tokens
	req.ByReference = s.refs
	if ep == llmapi.ChatCompletions || ep == llmapi.Messages || ep == llmapi.Responses {
		req.InputTokens += perRequestTokens
	}
	return req, nil
}

// decodeModel decodes the model string's content (raw, escaped if esc),
// rejecting names no provider uses and that must not reach a header, a
// metrics label or the ledger. It allocates the string and nothing else.
func decodeModel(raw []byte, esc bool) (string, error) {
	var m string
	if esc {
		var buf [MaxModelLen]byte
		d, ok := jsonlex.Unescape(buf[:0], raw, MaxModelLen)
		if !ok {
			return "", invalidParam("model", apierr.CodeInvalidModel, `"model" is longer than %d bytes`, MaxModelLen)
		}
		m = string(d)
	} else {
		if len(raw) > MaxModelLen {
			return "", invalidParam("model", apierr.CodeInvalidModel, `"model" is longer than %d bytes`, MaxModelLen)
		}
		m = string(raw)
	}
	for i := 0; i < len(m); i++ {
		if c := m[i]; c < 0x20 || c == 0x7f {
			return "", invalidParam("model", apierr.CodeInvalidModel, `"model" contains a control character (U+%04X)`, c)
		}
	}
	return m, nil
}

// boolValue reads true, false or null (false) at s.pos for the field name
// (its path: "stream_options.include_usage"). e reports any other value
// (invalid_type, as OpenAI answers); ok is false on a syntax error.
func (s *scanner) boolValue(name string) (v bool, e *apierr.Error, ok bool) {
	start := s.pos
	switch s.peek() {
	case 't':
		return true, nil, s.value(1, modeSkip)
	case 'f', 'n':
		return false, nil, s.value(1, modeSkip)
	}
	if !s.value(1, modeSkip) {
		return false, nil, false
	}
	return false, openAI(invalidParam(name, apierr.CodeInvalidType, strconv.Quote(name)+" must be a boolean, got "+kindOf(s.buf[start])),
		"Invalid type for '"+name+"': expected a boolean, but got "+openAIKind(s.buf[start:s.pos])+" instead."), true
}

// intValue reads an integer in [lo, hi] at s.pos, or null (absent). e
// reports any other value, with Param name and, as OpenAI answers, code
// integer_below_min_value or integer_above_max_value for an integer out of
// range (one too large for int64 included) and invalid_type for anything
// that is not an integer, each with OpenAI's message ("Invalid
// 'max_tokens': integer below minimum value. Expected a value >= 1, but
// got -1 instead."); ok is false on a syntax error. openAILo is the
// minimum OpenAI's message states: OpenAI's own, which may be above lo —
// a value from lo up to it is accepted here and the provider, which
// refuses it, answers in its own words.
func (s *scanner) intValue(name string, lo, hi, absent, openAILo int64) (v int64, e *apierr.Error, ok bool) {
	start := s.pos
	if !s.value(1, modeSkip) {
		return 0, nil, false
	}
	lit := s.buf[start:s.pos]
	if lit[0] == 'n' {
		return absent, nil, true
	}
	bad := func(code, got string) *apierr.Error {
		want := fmt.Sprintf("%q must be an integer from %d to %d", name, lo, hi)
		if lo == 0 {
			want = fmt.Sprintf("%q must be a non-negative integer (at most %d)", name, hi)
		}
		return invalidParam(name, code, want+", got "+got)
	}
	if c := lit[0]; c != '-' && (c < '0' || c > '9') {
		return 0, openAI(bad(apierr.CodeInvalidType, kindOf(c)),
			"Invalid type for '"+name+"': expected an integer, but got "+openAIKind(lit)+" instead."), true
	}
	n, _, isInt := jsonlex.ParseInt(lit)
	switch {
	case !isInt:
		return 0, openAI(bad(apierr.CodeInvalidType, clip(lit, 32)),
			"Invalid type for '"+name+"': expected an integer, but got a decimal number instead."), true
	case n < lo: // ParseInt saturates: an overflow is below or above
		return 0, openAI(bad(apierr.CodeIntegerBelowMin, clip(lit, 32)),
			fmt.Sprintf("Invalid '%s': integer below minimum value. Expected a value >= %d, but got %s instead.", name, openAILo, clip(lit, 32))), true
	case n > hi:
		return 0, openAI(bad(apierr.CodeIntegerAboveMax, clip(lit, 32)),
			fmt.Sprintf("Invalid '%s': integer above maximum value. Expected a value <= %d, but got %s instead.", name, hi, clip(lit, 32))), true
	}
	return n, nil, true
}

// streamOptions reads the stream_options value at s.pos: an object whose
// include_usage is read, or null.
func (s *scanner) streamOptions() (usage bool, e *apierr.Error, ok bool) {
	switch s.peek() {
	case '{':
	case 'n':
		return false, nil, s.value(1, modeSkip)
	default:
		start := s.pos
		if !s.value(1, modeSkip) {
			return false, nil, false
		}
		return false, openAI(invalidParam("stream_options", apierr.CodeInvalidType, `"stream_options" must be an object, got `+kindOf(s.buf[start])),
			"Invalid type for 'stream_options': expected an object, but got "+openAIKind(s.buf[start:s.pos])+" instead."), true
	}
	s.pos++ // '{'
	seen := false
	for more := s.firstMember(); more; more = s.nextMember() {
		key, ok := s.memberKey()
		if !ok {
			return false, nil, false
		}
		if string(key) != "include_usage" {
			if !s.value(2, modeSkip) {
				return false, nil, false
			}
			continue
		}
		v, ve, ok := s.boolValue("stream_options.include_usage")
		if !ok {
			return false, nil, false
		}
		if seen && e == nil {
			e = duplicate("stream_options.include_usage")
		}
		if ve != nil && e == nil {
			e = ve
		}
		seen = true
		usage = v
	}
	return usage, e, s.err == nil
}

// kindOf names the kind of JSON value starting with byte c.
func kindOf(c byte) string {
	switch c {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// openAIMinimum is the least value of an output cap OpenAI's API accepts,
// as its refusal states it: 1 for max_tokens and max_completion_tokens,
// 16 for the Responses API's max_output_tokens.
func openAIMinimum(f field) int64 {
	if f == fMaxOutputTokens {
		return 16
	}
	return 1
}

// openAIKind names the JSON value lit as OpenAI's type errors do ("but got
// a string instead"): numbers are an integer or a decimal number.
func openAIKind(lit []byte) string {
	switch c := lit[0]; {
	case c == '-' || (c >= '0' && c <= '9'):
		if _, _, isInt := jsonlex.ParseInt(lit); isInt {
			return "an integer"
		}
		return "a decimal number"
	default:
		return kindOf(c)
	}
}

// clip quotes at most n bytes of b, marking a cut with "…".
func clip(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}

// quoteKey quotes a decoded key for a message (keys reaching it are at
// most 63 bytes).
func quoteKey(key []byte) string { return strconv.Quote(string(key)) }
