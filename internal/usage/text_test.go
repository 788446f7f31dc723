package usage

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer"
)

func TestEncodingFor(t *testing.T) {
	for model, want := range map[string]tokenizer.Encoding{
		"gpt-4o":                  tokenizer.O200kBase,
		"gpt-4o-mini-2024-07-18":  tokenizer.O200kBase,
		"gpt-4.1-nano":            tokenizer.O200kBase,
		"gpt-5-nano":              tokenizer.O200kBase,
		"o3-mini":                 tokenizer.O200kBase,
		"o1":                      tokenizer.O200kBase,
		"ft:gpt-4o-mini:org::id":  tokenizer.O200kBase,
		"openai/GPT-4o":           tokenizer.O200kBase,
		"azure/gpt-4":             tokenizer.Cl100kBase,
		"org/team/gpt-3.5-turbo":  tokenizer.Cl100kBase,
		"/gpt-4":                  tokenizer.Cl100kBase,
		"gpt-4":                   tokenizer.Cl100kBase,
		"gpt-4-turbo":             tokenizer.Cl100kBase,
		"gpt-3.5-turbo":           tokenizer.Cl100kBase,
		"gpt-35-turbo":            tokenizer.Cl100kBase,
		"babbage-002":             tokenizer.Cl100kBase,
		"davinci-002":             tokenizer.Cl100kBase,
		"text-embedding-3-small":  tokenizer.Cl100kBase,
		"ft:gpt-3.5-turbo:org::x": tokenizer.Cl100kBase,
		"claude-sonnet-4-5":       tokenizer.O200kBase,
		"llama-3.1-70b":           tokenizer.O200kBase,
		"":                        tokenizer.O200kBase,
	} {
		if got := encodingFor(model); got != want {
			t.Errorf("encodingFor(%q) = %s, want %s", model, got, want)
		}
	}
}

// words mixes what trips pre-tokenizers: contractions, digit runs,
// punctuation runs, newlines and runs of spaces, letters with marks,
// CJK, emoji.
var words = []string{
	"the", "The", "don't", "I'll", "12345", "3.14", "!!", "?", ",", "—", "é", "naïve",
	"日本語", "🙂", "\n", "\n\n", "  ", "\t", " ", "x", "a/b", "<|endoftext|>", "'s", "CamelCase",
	"\r\n", "…", "ß", "   \n", "''", "(", ")", "{\"k\":", "1}", ".", "e\u0301",
}

func randomText(rng *rand.Rand, n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(words[rng.IntN(len(words))])
		if rng.IntN(3) > 0 {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// TestSafeCutExact: cutting at safeCut never changes the token count,
// for both encodings.
func TestSafeCutExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, enc := range []tokenizer.Encoding{tokenizer.O200kBase, tokenizer.Cl100kBase} {
		codec, err := tokenizer.Get(enc)
		if err != nil {
			t.Fatal(err)
		}
		count := func(s string) int {
			n, err := codec.Count(s)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		trials := 0
		for range 3000 {
			s := randomText(rng, 1+rng.IntN(60))
			cut := safeCut([]byte(s[:rng.IntN(len(s)+1)]))
			if cut == 0 {
				continue
			}
			trials++
			if a, b, whole := count(s[:cut]), count(s[cut:]), count(s); a+b != whole {
				t.Fatalf("%s: %q cut at %d: %d+%d tokens, whole %d", enc, s, cut, a, b, whole)
			}
		}
		if trials < 1000 {
			t.Fatalf("only %d trials had a safe cut", trials)
		}
	}
}

// TestTextCounterIncremental: text far over the budget, in random deltas
// over several channels, counts exactly what tokenizing each channel's
// text whole counts, while holding little.
func TestTextCounterIncremental(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	codec, err := tokenizer.Get(tokenizer.O200kBase)
	if err != nil {
		t.Fatal(err)
	}
	tc := textCounter{enc: tokenizer.O200kBase}
	texts := []string{randomText(rng, 40000), randomText(rng, 30000), randomText(rng, 500)}
	rest := slices.Clone(texts)
	maxHeld := 0
	for rest[0] != "" || rest[1] != "" || rest[2] != "" {
		ch := rng.IntN(3)
		// A delta of up to 12 bytes, cut anywhere on a rune boundary.
		n := min(len(rest[ch]), 1+rng.IntN(12))
		for n < len(rest[ch]) && !utf8.RuneStart(rest[ch][n]) {
			n++
		}
		tc.add(chanKey{a: int32(ch)}, []byte(rest[ch][:n]))
		rest[ch] = rest[ch][n:]
		maxHeld = max(maxHeld, tc.pending)
	}
	var want int64
	for _, s := range texts {
		n, err := codec.Count(s)
		if err != nil {
			t.Fatal(err)
		}
		want += int64(n)
	}
	if got := tc.tokens(); got != want {
		t.Errorf("incremental count %d, whole-text count %d", got, want)
	}
	if maxHeld > textBudget+64 {
		t.Errorf("held %d bytes of text, budget %d", maxHeld, textBudget)
	}
	if tc.counted == 0 {
		t.Fatal("nothing was tokenized before the end: the test did not exercise the budget")
	}
}

// TestTextCounterNoSafeCut: text without a safe cut (CJK) is cut every
// maxTail bytes anyway; the count stays within a token per cut.
func TestTextCounterNoSafeCut(t *testing.T) {
	codec, err := tokenizer.Get(tokenizer.O200kBase)
	if err != nil {
		t.Fatal(err)
	}
	tc := textCounter{enc: tokenizer.O200kBase}
	s := strings.Repeat("日本語のテキスト", 3000) // 72 KB, no ASCII
	for i := 0; i < len(s); i += 24 {
		tc.add(chanKey{}, []byte(s[i:min(i+24, len(s))]))
		if tc.pending > textBudget+24 {
			t.Fatalf("holding %d bytes", tc.pending)
		}
	}
	want, err := codec.Count(s)
	if err != nil {
		t.Fatal(err)
	}
	got := tc.tokens()
	cuts := int64(len(s)/maxTail + 1)
	if d := got - int64(want); d < -cuts || d > cuts {
		t.Errorf("count %d, whole %d: off by more than %d cuts", got, want, cuts)
	}
}

func TestTextCounterChannelsBounded(t *testing.T) {
	tc := textCounter{enc: tokenizer.O200kBase}
	for i := range 1000 {
		tc.add(chanKey{a: int32(i)}, []byte("word "))
	}
	if len(tc.chans) != maxChannels {
		t.Errorf("%d channels, want %d", len(tc.chans), maxChannels)
	}
	if got := tc.tokens(); got < 1000 || got > 1100 {
		t.Errorf("1000 × %q counted %d tokens", "word ", got)
	}
}

// TestCountPiecesBounded: text without safe cuts is tokenized in pieces of
// at most maxTail bytes, cut on rune boundaries, and still counted within
// a token per cut.
func TestCountPiecesBounded(t *testing.T) {
	codec, err := tokenizer.Get(tokenizer.O200kBase)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		strings.Repeat(" \n", 8<<10),
		"a" + strings.Repeat(" \n", 8<<10) + " b",
		strings.Repeat("é🙂", 2000),
		strings.Repeat("word ", 3000),
	} {
		want, err := codec.Count(s)
		if err != nil {
			t.Fatal(err)
		}
		got := countPieces(tokenizer.O200kBase, []byte(s))
		cuts := int64(len(s)/maxTail + 1)
		if d := got - int64(want); d < -cuts || d > cuts {
			t.Errorf("%.20q…: %d tokens in pieces, %d whole", s, got, want)
		}
	}
	// With safe cuts available the pieces are exact.
	s := strings.Repeat("lorem ipsum, dolor sit amet. ", 1000)
	want, _ := codec.Count(s)
	if got := countPieces(tokenizer.O200kBase, []byte(s)); got != int64(want) {
		t.Errorf("prose: %d tokens in pieces, %d whole", got, want)
	}
}

// TestSafeCut: a safe cut is a space right after a printable non-space
// ASCII byte ('!' to '~'); the last one wins, and none is 0. A control
// byte (tab, DEL), a space or a byte of a multi-byte rune before the
// space is not one.
func TestSafeCut(t *testing.T) {
	for in, want := range map[string]int{
		"": 0, " ": 0, "a": 0, " a": 0, "a ": 1, "a b": 1, "a b c": 3, "a b  c": 3, "a  b": 1,
		"! x": 1, "~ x": 1, "\x7f x": 0, "\t x": 0, "\n x": 0, "é x": 0, "\x80 x": 0, "a \x7f x": 1,
	} {
		if got := safeCut([]byte(in)); got != want {
			t.Errorf("safeCut(%q) = %d, want %d", in, got, want)
		}
	}
}

// TestTextCounterKeepsTextUntilBudget: text is held untokenized (so that
// it costs nothing when the provider reports usage) while the channels
// hold at most textBudget bytes; the add that goes over tokenizes each
// channel up to its last safe cut.
func TestTextCounterKeepsTextUntilBudget(t *testing.T) {
	quarter := strings.Repeat("abc ", textBudget/16) // textBudget/4 bytes
	tests := []struct {
		name        string
		channels    int // add i goes to channel i%channels
		adds        []string
		wantPending int
		tokenized   bool
	}{
		{name: "one word", channels: 1, adds: []string{"abc "}, wantPending: 4},
		{name: "exactly the budget", channels: 1, adds: []string{quarter, quarter, quarter, quarter}, wantPending: textBudget},
		{name: "exactly the budget over two channels", channels: 2, adds: []string{quarter, quarter, quarter, quarter},
			wantPending: textBudget},
		{name: "one byte over", channels: 1, adds: []string{quarter, quarter, quarter, quarter, "x"}, wantPending: len(" x"),
			tokenized: true},
		{name: "one byte over two channels", channels: 2, adds: []string{quarter, quarter, quarter, quarter, "x"},
			wantPending: len(" x") + len(" "), tokenized: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := textCounter{enc: tokenizer.O200kBase}
			for i, s := range tt.adds {
				tc.add(chanKey{a: int32(i % tt.channels)}, []byte(s))
			}
			if tc.pending != tt.wantPending || (tc.counted > 0) != tt.tokenized {
				t.Errorf("holding %d bytes, %d tokens counted; want %d bytes, tokenized %v", tc.pending, tc.counted, tt.wantPending, tt.tokenized)
			}
		})
	}
}

// TestTextCounterFlushKeepsShortTail: flushing a channel tokenizes it up
// to its last safe cut and keeps the rest, unless the rest is longer than
// maxTail: then all of it is tokenized. Exactly maxTail bytes are kept.
// What was tokenized is exactly the text before what is kept.
func TestTextCounterFlushKeepsShortTail(t *testing.T) {
	tests := []struct {
		name     string
		text     string
		wantHeld int
	}{
		{name: "tail after a safe cut", text: "abc def", wantHeld: len(" def")},
		{name: "no safe cut, maxTail bytes", text: strings.Repeat("x", maxTail), wantHeld: maxTail},
		{name: "no safe cut, one byte more", text: strings.Repeat("x", maxTail+1), wantHeld: 0},
		{name: "tail of maxTail bytes", text: "a " + strings.Repeat("x", maxTail-1), wantHeld: maxTail},
		{name: "tail of one byte more", text: "a " + strings.Repeat("x", maxTail), wantHeld: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := textCounter{enc: tokenizer.O200kBase}
			tc.add(chanKey{}, []byte(tt.text))
			tc.flush(false)
			if tc.pending != tt.wantHeld || len(tc.chans[0].buf) != tt.wantHeld {
				t.Errorf("holding %d bytes (channel %d), want %d", tc.pending, len(tc.chans[0].buf), tt.wantHeld)
			}
			if want := countPieces(tc.enc, []byte(tt.text[:len(tt.text)-tt.wantHeld])); tc.counted != want {
				t.Errorf("counted %d tokens, want %d", tc.counted, want)
			}
		})
	}
}

// TestCountPiecesCutsAtRuneBoundary: text without a safe cut in its first
// maxTail bytes is cut at the last rune boundary at or before maxTail
// (splitting a rune would count its bytes as broken text); bytes that
// start no rune at all (invalid UTF-8, as an Anthropic tool call's raw
// input may hold) go one byte at a time, never as an empty piece (which
// would loop forever).
func TestCountPiecesCutsAtRuneBoundary(t *testing.T) {
	runes := "x" + strings.Repeat("é", 600) // byte maxTail is the second byte of an é
	bad := strings.Repeat("\x80", 2000)
	tests := []struct {
		name   string
		text   string
		pieces []string
	}{
		{name: "two-byte runes", text: runes, pieces: []string{runes[:maxTail-1], runes[maxTail-1:]}},
		{name: "no rune starts", text: bad, pieces: append(slices.Repeat([]string{"\x80"}, len(bad)-maxTail), bad[:maxTail])},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, want := countPieces(tokenizer.O200kBase, []byte(tt.text)), o200k(t, tt.pieces...); got != want {
				t.Errorf("%d tokens, want %d", got, want)
			}
		})
	}
}
