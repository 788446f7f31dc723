package usage

import (
	"strings"

	"github.com/sluicegw/sluice/internal/jsonlex"
	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/sat"
	"github.com/sluicegw/sluice/internal/tokens"
)

// Usage is the token usage of one response, by kind (tokens.Kind).
// Tokens are int64, never floats. Where each count comes from:
//
//   - Input is every prompt token, cached ones included (OpenAI
//     prompt_tokens / input_tokens; Anthropic input_tokens +
//     cache_read_input_tokens + CacheWrite).
//   - CachedInput were read from the prompt cache (OpenAI
//     *_tokens_details.cached_tokens; Anthropic cache_read_input_tokens).
//   - CacheWrite were written to the prompt cache (Anthropic
//     cache_creation_input_tokens, or its cache_creation breakdown's sum
//     where that is larger; OpenAI-compatible
//     {prompt,input}_tokens_details.cache_write_tokens).
//   - CacheWrite1h is the part of CacheWrite written with the 1-hour TTL
//     (Anthropic cache_creation.ephemeral_1h_input_tokens); the rest has
//     the 5-minute TTL.
//   - AudioInput is the audio part of Input
//     ({prompt,input}_tokens_details.audio_tokens).
//   - Output is every output token, reasoning included
//     (completion_tokens / output_tokens, plus a total_tokens excess
//     under ExcessAsOutput).
//   - Reasoning is the reasoning part of Output
//     (*_tokens_details.reasoning_tokens, at least a total_tokens excess
//     under ExcessAsOutput).
//   - AudioOutput is the audio part of Output
//     ({completion,output}_tokens_details.audio_tokens).
type Usage = tokens.Counts

// Result is what a Meter read from one response body.
type Result struct {
	Usage
	// Reported: the provider reported usage (input, final output or both).
	Reported bool
	// Estimated: some counts were computed by Sluice — the input from the
	// caller's fallback, the output from the tokenizer. See README.md.
	Estimated bool
	// OutputEstimated: the output count is Sluice's (the tokenizer's count
	// of the text seen, or Anthropic's provisional message_start count),
	// not the provider's final one. It implies Estimated.
	OutputEstimated bool
	// Unparsed: the body was not what the endpoint returns (HTML, garbage,
	// empty, not JSON, too large with no usage found): nothing was read.
	Unparsed bool
	// Events is the number of SSE events dispatched (0 for JSON bodies).
	Events int
	// OutputTextRunes is the number of runes of generated text seen: every
	// text delta of a stream; for a JSON body, its text only when it
	// carried no usage (the body is not read for text otherwise).
	OutputTextRunes int64
	// Err says why parsing stopped or failed, if it did: one of the Code*
	// constants or "gzip: …" / "deflate: …". Short and stable (a metrics
	// label value).
	Err string
	// ProviderError is the error type (or code) of a JSON error body or of
	// an SSE error event, e.g. "invalid_request_error" or
	// "overloaded_error"; lower-case [a-z0-9_.-], at most 64 bytes; "" if
	// the provider reported no error.
	ProviderError string
}

// Stable values of Result.Err besides the decoder ones.
const (
	CodeEmptyBody           = "empty_body"
	CodeNotJSON             = "not_json"
	CodeNotSSE              = "not_sse"
	CodeBadJSON             = "bad_json"
	CodeTruncatedJSON       = "truncated_json"
	CodeBodyTooLarge        = "body_too_large"
	CodeEventTooLarge       = "event_too_large"
	CodeUnsupportedEncoding = "unsupported_encoding"
	// CodeBadUsage: the provider reported a count that cannot be one
	// (negative, fractional, above a billion tokens); its usage is not
	// believed and the result is Unparsed.
	CodeBadUsage = "bad_usage"
)

// DefaultMaxJSONBytes bounds a buffered JSON body (and one SSE event's
// data) when Options.MaxJSONBytes is 0.
const DefaultMaxJSONBytes = 8 << 20

// Options describe the response a Meter reads.
type Options struct {
	// Endpoint is the API the request called; it selects the schema.
	// Unknown is read as OpenAI-compatible.
	Endpoint llmapi.Endpoint
	// Stream: the request asked for a stream (text/event-stream expected).
	Stream bool
	// ContentType is the response content-type header.
	ContentType string
	// ContentEncoding is the response content-encoding header: "",
	// "identity", "gzip" (or "x-gzip") or "deflate"; anything else makes
	// the body Unparsed with Err "unsupported_encoding".
	ContentEncoding string
	// Model chooses the tokenizer for the fallback.
	Model string
	// MaxJSONBytes bounds the buffered JSON body and each buffered SSE
	// event's data; 0 means DefaultMaxJSONBytes.
	MaxJSONBytes int
	// TotalExcess is the provider's rule for an OpenAI-shaped
	// total_tokens above input + output (default ExcessAsOutput).
	TotalExcess TotalExcess
}

// TotalExcess says what a Meter does with the part of an OpenAI-shaped
// usage's total_tokens above its input + output counts (prompt_tokens +
// completion_tokens, or input_tokens + output_tokens): tokens the
// provider counted but put in neither.
type TotalExcess uint8

const (
	// ExcessAsOutput charges the excess as output tokens, and as
	// reasoning tokens: the servers known to send one (Gemini's
	// OpenAI-compatible endpoint) leave thinking out of
	// completion_tokens but bill it. It is the zero value, so that
	// nothing the provider counted is dropped unless asked.
	ExcessAsOutput TotalExcess = iota
	// ExcessIgnored charges input and output as reported, for a provider
	// whose total_tokens counts tokens it does not bill.
	ExcessIgnored
)

// schema is the shape of a response body: which fields carry usage and
// which SSE events exist. It is not the API family (llmapi.Dialect): the
// OpenAI family has two schemas, chat-style and the Responses API's.
type schema uint8

const (
	openAI schema = iota // chat/completions, completions, embeddings, unknown
	responses
	anthropic
)

type format uint8

const (
	fmtSniff    format = iota // first bytes not seen yet
	fmtSSE                    // text/event-stream
	fmtJSON                   // one JSON document
	fmtRejected               // not a body this package reads
)

type encoding uint8

const (
	encIdentity encoding = iota
	encGzip
	encDeflate
)

// Meter reads token usage from one response body fed chunk by chunk.
type Meter struct {
	max        int
	schema     schema
	embeddings bool
	expectSSE  bool
	enc        encoding
	excess     TotalExcess

	format format
	done   bool   // stop reading: parsing ended or failed
	head   []byte // undecided first bytes (at most a few)
	sse    sseParser
	js     jsonBody
	inf    *inflater
	text   textCounter
	c      counts

	scratch [256]byte // unescaping room for short strings

	events     int
	understood bool // an SSE event was recognised
	parsed     bool // the JSON body was recognised
	badUsage   bool // a usage object held an impossible count: see distrustUsage
	err        string
	provErr    string

	closed bool
	res    Result
}

// NewMeter returns a Meter for a response described by opts. It starts no
// goroutine.
func NewMeter(opts Options) *Meter {
	m := &Meter{max: opts.MaxJSONBytes, excess: opts.TotalExcess}
	if m.max <= 0 {
		m.max = DefaultMaxJSONBytes
	}
	switch opts.Endpoint {
	case llmapi.Responses:
		m.schema = responses
	case llmapi.Messages:
		m.schema = anthropic
	case llmapi.Embeddings:
		m.embeddings = true
	}
	ct := strings.ToLower(opts.ContentType)
	switch {
	case strings.Contains(ct, "event-stream"):
		m.expectSSE = true
	case strings.Contains(ct, "json"):
	default:
		m.expectSSE = opts.Stream
	}
	m.sse.max = m.max
	m.js.sc.reset()
	m.text.enc = encodingFor(opts.Model)
	switch strings.ToLower(strings.TrimSpace(opts.ContentEncoding)) {
	case "", "identity":
	case "gzip", "x-gzip":
		m.enc = encGzip
	case "deflate":
		m.enc = encDeflate
	default:
		m.reject(CodeUnsupportedEncoding)
	}
	return m
}

// Write feeds the next chunk of the body exactly as it arrived (possibly
// compressed). It never returns an error and never retains p.
func (m *Meter) Write(p []byte) {
	if m.closed || len(p) == 0 {
		return
	}
	if m.enc != encIdentity {
		if m.inf == nil {
			m.inf = m.startInflate()
		}
		m.inf.write(p)
		return
	}
	m.feed(p)
}

// Close ends the body and returns what was read. complete=false means the
// body was cut (client gone, upstream reset): the result covers what was
// seen. fallbackInput is the caller's request-phase estimate of the input
// tokens, used when the provider reported none. Close may be called again;
// it returns the same Result.
func (m *Meter) Close(complete bool, fallbackInput int64) Result {
	if m.closed {
		return m.res
	}
	m.closed = true
	if m.inf != nil {
		if err := m.inf.close(); err != nil {
			if code := inflateCode(m.enc, err, complete); code != "" {
				m.setErr(code)
			}
		}
		m.inf = nil
	}
	m.finish()
	m.res = m.result(fallbackInput)
	m.text = textCounter{}
	m.head, m.sse, m.js = nil, sseParser{}, jsonBody{}
	return m.res
}

// feed parses plain (decoded) body bytes. It reports whether more bytes
// are wanted.
func (m *Meter) feed(p []byte) bool {
	if m.done {
		return false
	}
	if m.format == fmtSniff {
		p = m.sniff(p, false)
		if m.format == fmtSniff || m.done {
			return !m.done
		}
	}
	switch m.format {
	case fmtSSE:
		if !m.sse.feed(p, m) {
			m.setErr(m.sse.err)
			m.done = true
		}
	case fmtJSON:
		m.feedJSON(p)
	}
	return !m.done
}

// sniff decides the body's format from its first bytes. It returns the
// bytes that belong to the decided format (nil while undecided). At the
// end of the body (final) it decides with what there is.
func (m *Meter) sniff(p []byte, final bool) []byte {
	b := p
	if len(m.head) > 0 {
		m.head = append(m.head, p...)
		b = m.head
	}
	i := 0
	for i < len(b) {
		if jsonlex.IsSpace(b[i]) {
			i++
			continue
		}
		if b[i] == 0xEF {
			if len(b)-i < 3 && !final {
				break
			}
			if len(b)-i >= 3 && b[i+1] == 0xBB && b[i+2] == 0xBF {
				i += 3
				continue
			}
		}
		break
	}
	b = b[i:]
	if len(b) == 0 {
		// Only whitespace so far (a BOM split across chunks leaves it in
		// head): nothing to keep, and its buffer may be as large as a chunk.
		m.head = nil
		if final {
			m.reject(CodeEmptyBody)
		}
		return nil
	}
	switch sniffFormat(b, final) {
	case fmtJSON:
		m.format = fmtJSON
	case fmtSSE:
		m.format = fmtSSE
	case fmtSniff:
		// A proper prefix of an SSE field name or of a BOM: at most 5
		// bytes, kept for the next Write.
		if len(m.head) == 0 {
			m.head = append(m.head, b...)
		} else {
			m.head = append(m.head[:0], b...)
		}
		return nil
	default:
		if m.expectSSE {
			m.reject(CodeNotSSE)
		} else {
			m.reject(CodeNotJSON)
		}
		return nil
	}
	if len(m.head) > 0 {
		// b aliases m.head: hand it over and forget head.
		m.head = nil
	}
	return b
}

var sseFields = [...]string{"data", "event", "id", "retry"}

// sniffFormat classifies a body starting with b (no leading whitespace).
// fmtSniff means "need more bytes"; fmtRejected means neither JSON nor SSE.
func sniffFormat(b []byte, final bool) format {
	switch b[0] {
	case '{', '[':
		return fmtJSON
	case ':':
		return fmtSSE
	case 0xEF:
		if len(b) < 3 && !final {
			return fmtSniff
		}
		return fmtRejected
	}
	for _, f := range sseFields {
		n := min(len(b), len(f))
		if string(b[:n]) != f[:n] {
			continue
		}
		if len(b) <= len(f) {
			if final && len(b) == len(f) {
				return fmtSSE // "data" alone: a field with an empty value
			}
			if !final {
				return fmtSniff
			}
			continue
		}
		switch b[len(f)] {
		case ':', '\n', '\r':
			return fmtSSE
		}
	}
	return fmtRejected
}

func (m *Meter) reject(code string) {
	m.format = fmtRejected
	m.done = true
	m.head = nil
	m.setErr(code)
}

func (m *Meter) setErr(code string) {
	if m.err == "" {
		m.err = code
	}
}

// finish ends parsing at the end of the body.
func (m *Meter) finish() {
	if m.format == fmtSniff && !m.done {
		b := m.sniff(nil, true)
		if m.format == fmtSSE {
			m.sse.feed(b, m)
		} else if m.format == fmtJSON {
			m.feedJSON(b)
		}
	}
	switch m.format {
	case fmtSniff:
		if !m.done {
			m.reject(CodeEmptyBody)
		}
	case fmtSSE:
		if !m.done {
			m.sse.finish(m)
			m.setErr(m.sse.err)
		}
	case fmtJSON:
		if !m.done {
			m.finishJSON()
		}
	}
	m.done = true
}

// maxCount bounds each count: a provider's count above it is not
// believed (parseCount), and Sluice's own estimates are clamped to it. A
// billion tokens is some hundred times the largest context window of any
// model; sums of provider numbers saturate (internal/sat) all the same.
const maxCount = 1 << 30

func clampCount(v int64) int64 { return min(max(v, 0), maxCount) }

// counts is what the provider reported so far.
type counts struct {
	input, cacheRead, cacheCreate int64 // Anthropic: input excludes the cache counts
	cacheCreate5m, cacheCreate1h  int64 // Anthropic's cache_creation breakdown
	audioIn                       int64
	output, reasoning, audioOut   int64
	provisionalOut                int64 // Anthropic message_start output_tokens
	haveIn, haveOut               bool
}

func (m *Meter) result(fallbackInput int64) Result {
	r := Result{
		Events:          m.events,
		OutputTextRunes: m.text.runes,
		Err:             m.err,
		ProviderError:   m.provErr,
	}
	switch m.format {
	case fmtSSE:
		r.Unparsed = !m.understood
	case fmtJSON:
		r.Unparsed = !m.parsed
	default:
		r.Unparsed = true
	}
	if m.badUsage {
		r.Unparsed = true
	}
	c := m.c
	r.Reported = c.haveIn || c.haveOut
	if c.haveIn {
		r.Usage[tokens.Input] = c.input
		r.Usage[tokens.CachedInput] = c.cacheRead
		r.Usage[tokens.CacheWrite] = c.cacheCreate
		r.Usage[tokens.CacheWrite1h] = c.cacheCreate1h
		r.Usage[tokens.AudioInput] = c.audioIn
		if m.schema == anthropic {
			// The breakdown should add up to cache_creation_input_tokens;
			// where it does not (or comes alone), the larger is charged,
			// so a write is never charged below a count the provider
			// reported. The 1-hour part is as reported; the rest is
			// 5-minute. So CacheWrite1h ≤ CacheWrite, and the clamp
			// below cannot cut CacheWrite (it is part of Input here);
			// OpenAI-shaped usage has no 1-hour count.
			bd := min(c.cacheCreate5m+c.cacheCreate1h, maxCount) // each ≤ maxCount: no overflow
			r.Usage[tokens.CacheWrite] = max(r.Usage[tokens.CacheWrite], bd)
			r.Usage[tokens.Input] = sat.Add(r.Usage[tokens.Input], sat.Add(c.cacheRead, r.Usage[tokens.CacheWrite]))
		}
	} else {
		r.Usage[tokens.Input] = clampCount(fallbackInput)
		r.Estimated = true
	}
	if c.haveOut {
		r.Usage[tokens.Output] = c.output
		r.Usage[tokens.Reasoning] = c.reasoning
		r.Usage[tokens.AudioOutput] = c.audioOut
	} else {
		r.Usage[tokens.Output] = max(c.provisionalOut, m.text.tokens())
		r.Estimated, r.OutputEstimated = true, true
	}
	r.Usage[tokens.CachedInput] = min(r.Usage[tokens.CachedInput], r.Usage[tokens.Input])
	r.Usage[tokens.CacheWrite] = min(r.Usage[tokens.CacheWrite], r.Usage[tokens.Input]-r.Usage[tokens.CachedInput])
	r.Usage[tokens.AudioInput] = min(r.Usage[tokens.AudioInput], r.Usage[tokens.Input])
	r.Usage[tokens.Reasoning] = min(r.Usage[tokens.Reasoning], r.Usage[tokens.Output])
	r.Usage[tokens.AudioOutput] = min(r.Usage[tokens.AudioOutput], r.Usage[tokens.Output])
	return r
}
