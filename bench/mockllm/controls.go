package mockllm

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ControlPrefix starts every per-request control header.
const ControlPrefix = "X-Mock-"

// The per-request control headers (canonical form). The package
// documentation describes each.
const (
	HeaderLatency          = "X-Mock-Latency"
	HeaderFirstByte        = "X-Mock-First-Byte"
	HeaderInterval         = "X-Mock-Interval"
	HeaderWords            = "X-Mock-Words"
	HeaderChunks           = "X-Mock-Chunks"
	HeaderSplit            = "X-Mock-Split"
	HeaderGzip             = "X-Mock-Gzip"
	HeaderCRLF             = "X-Mock-Crlf"
	HeaderUsage            = "X-Mock-Usage"
	HeaderStatus           = "X-Mock-Status"
	HeaderRetryAfter       = "X-Mock-Retry-After"
	HeaderAbortAfter       = "X-Mock-Abort-After"
	HeaderErrorAfter       = "X-Mock-Error-After"
	HeaderCachedTokens     = "X-Mock-Cached-Tokens"
	HeaderCacheWriteTokens = "X-Mock-Cache-Write-Tokens"
	HeaderReasoningTokens  = "X-Mock-Reasoning-Tokens"
	// The part of the cache writes with the 1-hour TTL (Anthropic's
	// cache_creation breakdown), and the audio parts of the prompt and of
	// the output (OpenAI's *_tokens_details.audio_tokens).
	HeaderCacheWrite1hTokens = "X-Mock-Cache-Write-1h-Tokens"
	HeaderAudioInputTokens   = "X-Mock-Audio-Input-Tokens"
	HeaderAudioOutputTokens  = "X-Mock-Audio-Output-Tokens"
	HeaderInputTokens        = "X-Mock-Input-Tokens"
	HeaderDimensions         = "X-Mock-Dimensions"
	HeaderTrailer            = "X-Mock-Trailer"
)

// controls is the behaviour of one request: Options overlaid with the
// request's x-mock-* headers.
type controls struct {
	latency, firstByte, interval time.Duration

	words, chunks int // chunks ≤ words; before the request's max-token cap

	split      int
	gzip       bool
	crlf       bool
	omitUsage  bool
	status     int    // 0: no injected error
	retryAfter string // "": the default for the status
	abortAfter int    // -1: never
	errorAfter int    // -1: never

	cachedTokens, cacheWriteTokens, reasoningTokens int64
	cacheWrite1hTokens, audioInputTokens            int64 // parts of cacheWriteTokens and the prompt
	audioOutputTokens                               int64 // added to the output, as reasoningTokens are
	inputTokens                                     int64 // 0: counted from the request
	dimensions                                      int   // 0: not set by a header

	trailerName, trailerValue string // trailerName "": no trailer
}

// controls resolves the behaviour of the request with header h. A
// malformed or unknown x-mock-* header is an error naming every bad one.
func (s *Server) controls(h http.Header) (controls, error) {
	o := &s.opts
	c := controls{
		latency:          o.Latency,
		firstByte:        o.FirstByte,
		interval:         o.Interval,
		split:            o.Split,
		gzip:             o.Gzip,
		crlf:             o.CRLF,
		omitUsage:        o.OmitUsage,
		status:           o.Status,
		abortAfter:       -1,
		errorAfter:       -1,
		cachedTokens:     o.CachedTokens,
		cacheWriteTokens: o.CacheWriteTokens,
		reasoningTokens:  o.ReasoningTokens,
		inputTokens:      o.InputTokens,
	}
	wordsH, chunksH := -1, -1
	var problems []string
	bad := func(name, v, want string) {
		problems = append(problems, fmt.Sprintf("%s: %q is not %s", strings.ToLower(name), v, want))
	}
	for name, vals := range h {
		if !strings.HasPrefix(name, ControlPrefix) || len(vals) == 0 {
			continue
		}
		v := strings.TrimSpace(vals[0])
		switch name {
		case HeaderLatency, HeaderFirstByte, HeaderInterval:
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				bad(name, v, "a non-negative Go duration (250ms, 2s)")
				continue
			}
			switch name {
			case HeaderLatency:
				c.latency = d
			case HeaderFirstByte:
				c.firstByte = d
			default:
				c.interval = d
			}
		case HeaderWords, HeaderChunks:
			n, err := strconv.Atoi(v)
			lo := 0 // a reply may be empty, a stream cannot have zero chunks
			if name == HeaderChunks {
				lo = 1
			}
			if err != nil || n < lo || n > maxWords {
				bad(name, v, fmt.Sprintf("an integer in [%d, %d]", lo, maxWords))
				continue
			}
			if name == HeaderWords {
				wordsH = n
			} else {
				chunksH = n
			}
		case HeaderSplit:
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				bad(name, v, "a piece size in bytes (0 turns splitting off)")
				continue
			}
			c.split = n
		case HeaderGzip:
			switch strings.ToLower(v) {
			case "1", "true", "on":
				c.gzip = true
			case "0", "false", "off":
				c.gzip = false
			case "auto":
				c.gzip = acceptsGzip(h)
			default:
				bad(name, v, "1, 0 or auto")
			}
		case HeaderCRLF:
			b, ok := parseBool(v)
			if !ok {
				bad(name, v, "1 or 0")
				continue
			}
			c.crlf = b
		case HeaderUsage:
			switch strings.ToLower(v) {
			case "omit":
				c.omitUsage = true
			case "default":
				c.omitUsage = false
			default:
				bad(name, v, "omit or default")
			}
		case HeaderStatus:
			n, err := strconv.Atoi(v)
			if err != nil || n < 400 || n > 599 {
				bad(name, v, "an error status in [400, 599]")
				continue
			}
			c.status = n
		case HeaderRetryAfter:
			if n, err := strconv.Atoi(v); err != nil || n < 0 {
				bad(name, v, "a number of seconds")
				continue
			}
			c.retryAfter = v
		case HeaderAbortAfter, HeaderErrorAfter:
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				bad(name, v, "a non-negative integer")
				continue
			}
			if name == HeaderAbortAfter {
				c.abortAfter = n
			} else {
				c.errorAfter = n
			}
		case HeaderInputTokens:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 || n > 1<<40 {
				bad(name, v, "a token count in [1, 2^40]")
				continue
			}
			c.inputTokens = n
		case HeaderCachedTokens, HeaderCacheWriteTokens, HeaderReasoningTokens, HeaderCacheWrite1hTokens, HeaderAudioInputTokens, HeaderAudioOutputTokens:
			n, err := strconv.ParseInt(v, 10, 64)
			low, want := int64(0), "a non-negative token count"
			if name == HeaderReasoningTokens {
				// Down to -2^40: a broken provider's count, for a gateway
				// to prove it does not believe one.
				low, want = -1<<40, "a token count in [-2^40, 2^40]"
			}
			if err != nil || n < low || n > 1<<40 {
				bad(name, v, want)
				continue
			}
			switch name {
			case HeaderCachedTokens:
				c.cachedTokens = n
			case HeaderCacheWriteTokens:
				c.cacheWriteTokens = n
			case HeaderCacheWrite1hTokens:
				c.cacheWrite1hTokens = n
			case HeaderAudioInputTokens:
				c.audioInputTokens = n
			case HeaderAudioOutputTokens:
				c.audioOutputTokens = n
			default:
				c.reasoningTokens = n
			}
		case HeaderTrailer:
			tn, tv, ok := strings.Cut(v, "=")
			tn = http.CanonicalHeaderKey(strings.TrimSpace(tn))
			if !ok || !trailerAllowed(tn) || !validValue(tv) {
				bad(name, v, "name=value, a trailer field (a token, not a framing, routing or x-mock- header) and a visible ASCII value")
				continue
			}
			c.trailerName, c.trailerValue = tn, strings.TrimSpace(tv)
		case HeaderDimensions:
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > maxDimensions {
				bad(name, v, fmt.Sprintf("an integer in [1, %d]", maxDimensions))
				continue
			}
			c.dimensions = n
		default:
			problems = append(problems, fmt.Sprintf("%s: unknown control header", strings.ToLower(name)))
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return c, fmt.Errorf("mock control: %s", strings.Join(problems, "; "))
	}
	c.words, c.chunks = resolveSize(wordsH, chunksH, o.Words, o.Chunks)
	return c, nil
}

// resolveSize turns the word and chunk settings (headers: -1 unset;
// options: 0 unset) into the reply's words and content chunks. A header beats an
// option; a chunk count set without a word count at the same level means
// one word per chunk; chunks never exceed words.
func resolveSize(wordsH, chunksH, wordsO, chunksO int) (words, chunks int) {
	switch {
	case wordsH >= 0:
		words = wordsH
	case chunksH > 0:
		words = chunksH
	case wordsO > 0:
		words = wordsO
	case chunksO > 0:
		words = chunksO
	default:
		words = DefaultWords
	}
	switch {
	case chunksH > 0:
		chunks = chunksH
	case chunksO > 0:
		chunks = chunksO
	default:
		chunks = words
	}
	return words, min(chunks, words)
}

// acceptsGzip reports whether accept-encoding lists gzip with a non-zero
// quality.
func acceptsGzip(h http.Header) bool {
	for _, v := range h.Values("Accept-Encoding") {
		for part := range strings.SplitSeq(v, ",") {
			coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
				continue
			}
			q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
			if q == "q=0" || q == "q=0.0" || q == "q=0.00" || q == "q=0.000" {
				return false
			}
			return true
		}
	}
	return false
}

// trailerAllowed reports whether name may be a trailer field the mock
// sends: a token (RFC 9110 §5.6.2), not one of the fields that frame,
// route or describe the message (RFC 9110 §6.5.1, which net/http drops
// or a proxy refuses in trailers), and not a control.
func trailerAllowed(name string) bool {
	if name == "" || strings.HasPrefix(name, ControlPrefix) {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r)) {
			return false
		}
	}
	switch name {
	case "Content-Length", "Content-Type", "Content-Encoding", "Content-Range", "Transfer-Encoding",
		"Trailer", "Te", "Connection", "Host", "Keep-Alive", "Upgrade", "Authorization", "Set-Cookie",
		"Cache-Control", "Expect", "Max-Forwards", "Pragma", "Range":
		return false
	}
	return true
}

// validValue reports whether v is a field value of visible ASCII and
// spaces.
func validValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 || c > 0x7e) && c != '\t' {
			return false
		}
	}
	return true
}

func parseBool(v string) (b, ok bool) {
	switch strings.ToLower(v) {
	case "1", "true", "on":
		return true, true
	case "0", "false", "off":
		return false, true
	}
	return false, false
}
