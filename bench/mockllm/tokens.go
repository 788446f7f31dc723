package mockllm

import (
	"encoding/json"
	"hash/fnv"
	"math"
	"strings"
	"unicode/utf8"
)

// vocabulary is cycled to make replies: word i of every reply is
// vocabulary[i%len]. It holds 2-, 3- and 4-byte UTF-8 runes so that
// byte-offset splits land inside runes.
var vocabulary = [...]string{
	"Héllo", "🙂", "from", "Sluice's", "mock", "provider", "—", "a", "test",
	"double,", "not", "a", "model.", "Café", "naïve", "日本語",
}

// Word returns word i (0-based) of every reply.
func Word(i int) string { return vocabulary[i%len(vocabulary)] }

// Text returns the reply text of n words: Word(0) … Word(n-1) joined by
// single spaces. Streams carry the same text spread over their chunks.
func Text(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(Word(i))
	}
	return b.String()
}

// ChunkTexts returns the contents of the content chunks of a stream of n
// words in c chunks (c is capped at n): chunk k holds words
// [k·n/c, (k+1)·n/c), with a leading space unless it starts the reply.
// Their concatenation is Text(n).
func ChunkTexts(n, c int) []string {
	c = max(min(c, n), 0)
	out := make([]string, c)
	var b strings.Builder
	for k := range c {
		b.Reset()
		for i := k * n / c; i < (k+1)*n/c; i++ {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(Word(i))
		}
		out[k] = b.String()
	}
	return out
}

// TextTokens is the token count the mock charges for a piece of prompt
// text: one token per four runes, rounded up.
func TextTokens(s string) int64 {
	return int64((utf8.RuneCountInString(s) + 3) / 4)
}

// promptTokens counts the tokens of a prompt-shaped JSON value: a string
// is TextTokens(string); a number (a token id) is one token; an array is
// the sum of its elements; an object counts its "text" string if it has
// one, else its "content". Anything else counts zero. The value was
// decoded by encoding/json, so it is well-formed.
func promptTokens(raw json.RawMessage) int64 {
	if len(raw) == 0 {
		return 0
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return 0
	}
	return walkTokens(v)
}

func walkTokens(v any) int64 {
	switch v := v.(type) {
	case string:
		return TextTokens(v)
	case float64:
		return 1
	case []any:
		var n int64
		for _, e := range v {
			n += walkTokens(e)
		}
		return n
	case map[string]any:
		if t, ok := v["text"].(string); ok {
			return TextTokens(t)
		}
		if c, ok := v["content"]; ok {
			return walkTokens(c)
		}
	}
	return 0
}

// embedInputs splits an embeddings "input" into its items: a string or a
// flat token array is one item; an array of strings or of token arrays
// is one item per element. Each item is returned as its canonical JSON
// (the vector seed) with its token count.
func embedInputs(raw json.RawMessage) (items []embedItem, ok bool) {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return nil, false
	}
	one := func(e any) embedItem {
		b, _ := json.Marshal(e) // re-encoding a decoded value cannot fail
		return embedItem{seed: b, tokens: walkTokens(e)}
	}
	switch v := v.(type) {
	case string:
		return []embedItem{one(v)}, true
	case []any:
		if len(v) == 0 {
			return nil, false
		}
		if _, isNum := v[0].(float64); isNum {
			for _, e := range v {
				if _, ok := e.(float64); !ok {
					return nil, false
				}
			}
			return []embedItem{one(v)}, true
		}
		for _, e := range v {
			switch e.(type) {
			case string, []any:
				items = append(items, one(e))
			default:
				return nil, false
			}
		}
		return items, true
	}
	return nil, false
}

type embedItem struct {
	seed   []byte
	tokens int64
}

// vector is the deterministic embedding of seed: dims values in [-1, 1)
// drawn from a splitmix64 sequence seeded by the FNV-1a hash of seed.
func vector(seed []byte, dims int) []float32 {
	h := fnv.New64a()
	h.Write(seed)
	x := h.Sum64()
	out := make([]float32, dims)
	for i := range out {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		out[i] = float32(z>>40)/float32(1<<23) - 1
	}
	return out
}

// float32Bytes is the little-endian IEEE-754 encoding OpenAI uses for
// encoding_format "base64".
func float32Bytes(v []float32) []byte {
	out := make([]byte, 0, 4*len(v))
	for _, f := range v {
		u := math.Float32bits(f)
		out = append(out, byte(u), byte(u>>8), byte(u>>16), byte(u>>24))
	}
	return out
}

// usage is what one reply reports, in dialect-neutral terms.
type usage struct {
	prompt     int64 // whole prompt, cached part included
	cached     int64 // part of prompt read from the cache (≤ prompt)
	cacheWrite int64 // part of prompt written to the cache (Anthropic; ≤ prompt-cached)
	words      int64 // reply words
	reasoning  int64 // hidden reasoning tokens
	// cacheWrite1h is the part of cacheWrite with the 1-hour TTL, audioIn
	// the audio part of prompt (≤ prompt-cached-cacheWrite), audioOut
	// audio output tokens (added to the output, like reasoning).
	cacheWrite1h, audioIn, audioOut int64
}

func (u usage) output() int64 { return u.words + u.reasoning + u.audioOut }
func (u usage) total() int64  { return u.prompt + u.output() }

func newUsage(prompt, words int64, c *controls) usage {
	cached := min(c.cachedTokens, prompt)
	write := min(c.cacheWriteTokens, prompt-cached)
	return usage{
		prompt:       prompt,
		cached:       cached,
		cacheWrite:   write,
		words:        words,
		reasoning:    c.reasoningTokens,
		cacheWrite1h: min(c.cacheWrite1hTokens, write),
		audioIn:      min(c.audioInputTokens, prompt-cached-write),
		audioOut:     c.audioOutputTokens,
	}
}
