package usage

import (
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer"
)

const (
	// textBudget is how much generated text a Meter keeps untokenized,
	// hoping the provider reports usage and it never needs counting.
	textBudget = 16 << 10
	// maxTail is how much text one channel may hold without a safe cut
	// before it is tokenized anyway (and the count may be off by a token).
	// It is also the most text tokenized in one call: tiktoken's
	// pre-tokenizer backtracks quadratically on some whitespace runs (16 KiB
	// of " \n" takes ~250 ms in one call, ~16 ms in 1 KiB pieces), and
	// models do emit such runs when they degenerate.
	maxTail = 1 << 10
	// maxChannels bounds the channels; later ones share the last.
	maxChannels = 8
)

// chanKey names an output channel: a choice, tool call or content block.
// Text of different channels is never tokenized together.
type chanKey struct {
	a, b int32
	kind uint8
}

type textChan struct {
	key chanKey
	buf []byte
}

// textCounter counts the tokens of generated text with bounded memory:
// text is kept untokenized up to textBudget and then tokenized in segments
// cut where tiktoken's pre-tokenizer always splits (see safeCut).
type textCounter struct {
	enc     tokenizer.Encoding
	runes   int64
	counted int64 // tokens of the segments already tokenized
	pending int   // bytes held in chans
	off     bool  // the provider reported final usage: stop collecting
	chans   []textChan
}

func (t *textCounter) add(k chanKey, s []byte) {
	if len(s) == 0 {
		return
	}
	t.runes += int64(utf8.RuneCount(s))
	if t.off {
		return
	}
	c := t.channel(k)
	c.buf = append(c.buf, s...)
	t.pending += len(s)
	if t.pending > textBudget {
		t.flush(false)
	}
}

func (t *textCounter) channel(k chanKey) *textChan {
	for i := range t.chans {
		if t.chans[i].key == k {
			return &t.chans[i]
		}
	}
	if len(t.chans) == maxChannels {
		return &t.chans[maxChannels-1]
	}
	t.chans = append(t.chans, textChan{key: k})
	return &t.chans[len(t.chans)-1]
}

// stopIfFinal stops collecting text once the provider has reported both
// input and final output: the count will never be needed.
func (t *textCounter) stopIfFinal(c *counts) {
	if c.haveIn && c.haveOut && !t.off {
		t.off, t.chans, t.pending = true, nil, 0
	}
}

// flush tokenizes what can be: with all=false only up to each channel's
// last safe cut (or the whole channel when it holds more than maxTail
// without one); with all=true everything.
func (t *textCounter) flush(all bool) {
	t.pending = 0
	for i := range t.chans {
		c := &t.chans[i]
		cut := len(c.buf)
		if !all {
			cut = safeCut(c.buf)
			if len(c.buf)-cut > maxTail {
				cut = len(c.buf)
			}
		}
		if cut > 0 {
			t.counted += countPieces(t.enc, c.buf[:cut])
			c.buf = c.buf[:copy(c.buf, c.buf[cut:])]
		}
		t.pending += len(c.buf)
	}
}

// tokens returns the token count of all text seen.
func (t *textCounter) tokens() int64 {
	t.flush(true)
	return t.counted
}

// safeCut returns the largest i such that b[i] is a space and b[i-1] a
// printable non-space ASCII byte, or 0. tiktoken's pre-tokenizers
// (cl100k_base and o200k_base) never put such a pair in one piece: a
// piece holds a space only at its start or among other whitespace, and
// their lookahead (`\s+(?!\S)`) never looks past a non-space. So the
// pieces of b[:i] and b[i:] are exactly the pieces of b, and the token
// counts add up.
func safeCut(b []byte) int {
	for i := len(b) - 1; i > 0; i-- {
		if b[i] == ' ' && b[i-1] > ' ' && b[i-1] < 0x7f {
			return i
		}
	}
	return 0
}

// encodingFor chooses the tokenizer encoding for a model name.
func encodingFor(model string) tokenizer.Encoding {
	m := strings.ToLower(strings.TrimSpace(model))
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:] // "openai/gpt-4o", Azure-style prefixes
	}
	m = strings.TrimPrefix(m, "ft:")
	for _, p := range [...]string{"gpt-4o", "gpt-4.1", "gpt-4.5", "chatgpt-4o"} {
		if strings.HasPrefix(m, p) {
			return tokenizer.O200kBase
		}
	}
	for _, p := range [...]string{"gpt-4", "gpt-3.5", "gpt-35", "babbage-002", "davinci-002", "text-embedding-"} {
		if strings.HasPrefix(m, p) {
			return tokenizer.Cl100kBase
		}
	}
	// gpt-5, o-series and every non-OpenAI model: o200k_base (for
	// non-OpenAI models an approximation).
	return tokenizer.O200kBase
}

type codecSlot struct {
	once  sync.Once
	codec tokenizer.Codec
}

// codecs holds the two tokenizers, built on first use: building one takes
// tens of milliseconds and several MiB, so it is done once per process and
// only if the fallback is ever needed (or Warm is called).
var codecs struct {
	o200k, cl100k codecSlot
}

func codecFor(enc tokenizer.Encoding) tokenizer.Codec {
	slot := &codecs.o200k
	if enc == tokenizer.Cl100kBase {
		slot = &codecs.cl100k
	}
	slot.once.Do(func() {
		c, err := tokenizer.Get(enc)
		if err == nil {
			slot.codec = c
		}
	})
	return slot.codec
}

// Warm builds the tokenizer the fallback uses for model, so the first
// response that needs it does not pay for building it (tens of
// milliseconds).
func Warm(model string) { codecFor(encodingFor(model)) }

// countPieces tokenizes b in pieces of at most maxTail bytes, cut at safe
// points where there are any and else at a rune boundary.
func countPieces(enc tokenizer.Encoding, b []byte) int64 {
	var n int64
	for len(b) > maxTail {
		cut := safeCut(b[:maxTail])
		if cut == 0 {
			cut = maxTail
			for cut > 1 && !utf8.RuneStart(b[cut]) {
				cut--
			}
		}
		n += countTokens(enc, b[:cut])
		b = b[cut:]
	}
	return n + countTokens(enc, b)
}

// countTokens tokenizes b. If the tokenizer fails (it cannot, short of a
// regexp engine error), it falls back to a rune-based estimate.
func countTokens(enc tokenizer.Encoding, b []byte) int64 {
	if c := codecFor(enc); c != nil {
		if n, err := c.Count(string(b)); err == nil {
			return int64(n)
		}
	}
	return int64(utf8.RuneCount(b)+3) / 4
}
