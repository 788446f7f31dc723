package payload

import (
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tiktoken-go/tokenizer"

	"github.com/sluicegw/sluice/internal/llmapi"
)

// words is n bytes of deterministic English-like text (no tokenizer
// counts it as anything but ordinary words).
func words(n int) string {
	words := strings.Fields(`the budget of every team is checked before a request reaches its provider
		and the ledger records what was spent so that a restart forgets nothing while tokens are counted
		from the body with a bound that holds for text documents images audio and files alike`)
	r := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(words[r.IntN(len(words))])
		if r.IntN(12) == 0 {
			b.WriteString(". ")
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()[:n]
}

// count is text's token count with the o200k_base tokenizer (GPT-4o and
// later; the closest public stand-in for Anthropic's).
func count(t *testing.T, text string) int64 {
	t.Helper()
	c, err := tokenizer.Get(tokenizer.O200kBase)
	if err != nil {
		t.Fatal(err)
	}
	n, err := c.Count(text)
	if err != nil {
		t.Fatal(err)
	}
	return int64(n)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTextDocumentCountsAsText: a plain-text document sent as an Anthropic
// document source (Anthropic bills it as text), or as inline data anywhere
// else, costs at least its text's tokens: a string under a media key is no
// longer a flat 1,600 tokens whatever its length.
func TestTextDocumentCountsAsText(t *testing.T) {
	text := words(200_000)
	want := count(t, text)
	doc := func(source map[string]any) string {
		return mustJSON(t, map[string]any{
			"model": "claude-sonnet-4-5", "max_tokens": 16,
			"messages": []any{map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "document", "source": source},
				map[string]any{"type": "text", "text": "Summarise."},
			}}},
		})
	}
	b64 := base64.StdEncoding.EncodeToString([]byte(text))
	for _, tc := range []struct {
		name string
		ep   llmapi.Endpoint
		body string
	}{
		{"anthropic text source", llmapi.Messages, doc(map[string]any{"type": "text", "media_type": "text/plain", "data": text})},
		{"anthropic text source, data first", llmapi.Messages, `{"model":"c","messages":[{"role":"user","content":[{"type":"document","source":{"data":` + mustJSON(t, text) + `,"media_type":"text/plain","type":"text"}}]}]}`},
		{"anthropic base64 text", llmapi.Messages, doc(map[string]any{"type": "base64", "media_type": "text/plain", "data": b64})},
		{"anthropic base64 pdf", llmapi.Messages, doc(map[string]any{"type": "base64", "media_type": "application/pdf", "data": b64})},
		{"media type and format disagree", llmapi.Messages, doc(map[string]any{"type": "base64", "media_type": "image/png", "format": "wav", "data": text})},
		{"openai file_data text", llmapi.ChatCompletions, mustJSON(t, map[string]any{"model": "gpt-4o", "messages": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "file", "file": map[string]any{"filename": "a.txt", "file_data": "data:text/plain;base64," + b64}}}}}})},
		{"responses input_file", llmapi.Responses, mustJSON(t, map[string]any{"model": "gpt-5", "input": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "input_file", "filename": "a.txt", "file_data": "data:text/plain," + text}}}}})},
		{"text under an image url key", llmapi.ChatCompletions, mustJSON(t, map[string]any{"model": "gpt-4o", "messages": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": text}}}}}})},
		{"escaped prefix", llmapi.ChatCompletions, `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"file","file":{"file_data":"data\u003atext\/plain,` + text + `"}}]}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := Parse(tc.ep, []byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if req.InputTokens < want {
				t.Errorf("estimate %d < the document text's %d tokens", req.InputTokens, want)
			}
		})
	}
}

// TestMediaEstimate: what each kind of media string costs (README.md,
// "Media").
func TestMediaEstimate(t *testing.T) {
	img := strings.Repeat("iVBORw0K", 50_000)  // 400,000 base64 characters
	audio := strings.Repeat("UklGRiQA", 8_000) // 64,000
	msg := func(part string) string {
		return `{"model":"m","messages":[{"role":"user","content":[` + part + `]}]}`
	}
	const base = perRequestTokens + perItemTokens
	for _, tc := range []struct {
		name string
		part string
		want int64
	}{
		{"image url", `{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}`, mediaTokens},
		{"escaped image url", `{"type":"image_url","image_url":{"url":"https:\/\/example.com\/a.png"}}`, mediaTokens},
		{"inline image: flat, whatever its size", `{"type":"image_url","image_url":{"url":"data:image/png;base64,` + img + `"}}`, mediaTokens},
		{"inline image, escaped prefix", `{"type":"image_url","image_url":{"url":"data:image\/png;base64,` + img + `"}}`, mediaTokens},
		{"anthropic image", `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + img + `"}}`, mediaTokens},
		{"anthropic image, data first", `{"type":"image","source":{"data":"` + img + `","type":"base64","media_type":"image/jpeg"}}`, mediaTokens},
		{"anthropic pdf url", `{"type":"document","source":{"type":"url","url":"https://example.com/a.pdf"}}`, mediaTokens},
		{"file id", `{"type":"file","file":{"file_id":"` + strings.Repeat("f", 9000) + `"}}`, mediaTokens},
		{"inline pdf: its length as text", `{"type":"file","file":{"file_data":"data:application/pdf;base64,` + img + `"}}`, (int64(len(img)) + 28 + 3) / 4},
		{"small inline data: at least one image", `{"type":"document","source":{"type":"text","media_type":"text/plain","data":"hi"}}`, mediaTokens},
		{"raw data without a hint", `{"type":"x","data":"` + img + `"}`, int64(len(img)) / 4},
		// (the format string itself costs 1 token as text)
		{"audio by its format", `{"type":"input_audio","input_audio":{"data":"` + audio + `","format":"wav"}}`, int64(len(audio))/audioUnitsPerToken + 1},
		{"audio format, escaped", `{"type":"input_audio","input_audio":{"format":"w\u0061v","data":"` + audio + `"}}`, int64(len(audio))/audioUnitsPerToken + 1},
		{"unknown format: data", `{"type":"input_audio","input_audio":{"data":"` + audio + `","format":"txt"}}`, int64(len(audio))/4 + 1},
		{"data URL audio is data", `{"type":"file","file":{"file_data":"data:audio/wav;base64,` + audio + `"}}`, (int64(len(audio)) + 22 + 3) / 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := msg(tc.part)
			req, err := Parse(llmapi.ChatCompletions, []byte(body))
			if err != nil {
				t.Fatal(err)
			}
			got := req.InputTokens - base
			// the part's other strings (type values are free) cost nothing
			if got != tc.want {
				t.Errorf("media cost %d, want %d", got, tc.want)
			}
			if est, err := referenceEstimate(llmapi.ChatCompletions, []byte(body)); err != nil || est != req.InputTokens {
				t.Errorf("reference estimate %d (%v), Parse %d", est, err, req.InputTokens)
			}
		})
	}
}

// TestEstimateErrorOnCraftedText measures the text estimate against the
// o200k_base tokenizer on crafted prompts, the figures docs/limits.md
// states: each ratio must stay within the bounds given there.
func TestEstimateErrorOnCraftedText(t *testing.T) {
	code := strings.Repeat("def f(x):\n    return [i * 2 for i in range(x) if i % 3 == 0]\n", 300)
	for _, tc := range []struct {
		name   string
		text   string
		lo, hi float64
	}{
		{"english prose", words(20_000), 1.0, 1.6},
		{"python", code, 0.5, 1.6},
		{"digits", strings.Repeat("3141592653 ", 2000), 0.5, 1.6},
		{"cyrillic", strings.Repeat("Бюджет команды проверяется до отправки запроса. ", 400), 0.4, 1.6},
		{"chinese", strings.Repeat("每个团队的预算在请求到达提供商之前都会被检查。", 400), 1.0, 4.0},
		{"emoji", strings.Repeat("🙂🚀", 2000), 0.6, 4.0},
	} {
		body := mustJSON(t, map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": tc.text}}})
		req, err := Parse(llmapi.ChatCompletions, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		n := count(t, tc.text)
		ratio := float64(req.InputTokens-perRequestTokens-perItemTokens) / float64(n)
		t.Logf("%-14s estimate ×%.2f of %d tokens", tc.name, ratio, n)
		if ratio < tc.lo || ratio > tc.hi {
			t.Errorf("%s: estimate ×%.2f of the tokenizer's %d, outside [%.1f, %.1f]", tc.name, ratio, n, tc.lo, tc.hi)
		}
	}
}
