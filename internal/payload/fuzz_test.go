package payload

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/fixtures"
	"github.com/sluicegw/sluice/internal/llmapi"
)

// Seeds beyond the checked-in corpus in testdata/fuzz/<Name>/, which holds
// a few edge cases (edge-*) and inputs the fuzzer found interesting (hash
// names). The request bodies of ../shared/fixtures/openai are added at run
// time when the folder is there (fixtureSeeds); they are never copied into
// the repository.
var fuzzSeeds = []string{
	anthropicBody,
	responsesBody,
	`{"model":"a","model":"b","stream":true,"stream":false,"max_tokens":5,"max_tokens":null}`,
	`{"mod\u0065l":"gpt\u002d4o","str\u0065am":true,"n":2}`,
	`{"model":"m\ud800x\udc00\ud83d\ude00","prompt":["\ud800",[1,2,3]]}`,
	`{"Model":"a","model":"b","ſtream":true}`,
	`{"model":"a","stream_options":{"include_usage":false,"x":{"include_usage":true}},"stream_options":null}`,
	`{"model":"a","max_tokens":-0,"max_completion_tokens":4294967295,"n":1024}`,
	`{"model":"a","max_tokens":1e3,"n":0}`,
	"{\"model\":\"a\xffb\"}",
	`{"model":"a",}`,
	` [ {"model":"a"} ] `,
	"",
	`{"model":"x","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:,"}}]}]}`,
	`{"model":"x","x":` + strings.Repeat("[", 127) + strings.Repeat("]", 127) + `}`,
	"{\n  \"model\": \"gpt\",\n  \"stream\": true\n}",
	`{"model":"c","messages":[{"role":"user","content":[{"type":"document","source":{"data":"plain text","media_type":"text/plain","type":"text"}},{"type":"input_audio","input_audio":{"data":"UklG","format":"w\u0061v"}},{"type":"file","file":{"file_data":"data\u003aimage\/png;base64,AAAA"}}]}]}`,
	`{"model":"a","stream_options":{"include_usage":true,"include_usage":false},"n":128}`,
}

// FuzzParse feeds any bytes to Parse for every endpoint. Invariants: no
// panic and the body is not modified; a body encoding/json calls invalid is
// an error, and one it calls valid (UTF-8, nesting within the limit) is not
// a syntax error; an error is an *apierr.Error with a known code quoting at most 64
// bytes of the body; a body refused as duplicate_field has that field twice
// and one accepted has no field Parse reads twice (both checked against
// encoding/json's member list, duplicateRead); on success encoding/json
// decodes the same model, stream, max output tokens, n and include_usage,
// background and the kinds of input by reference (referenceRefs), and the
// estimate is not negative.
func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(uint8(llmapi.ChatCompletions), []byte(s))
	}
	for _, r := range fixtureSeeds(f) {
		f.Add(uint8(r.ep), r.body)
	}
	for _, c := range refCases {
		f.Add(uint8(c.ep), []byte(c.body))
	}
	f.Fuzz(func(t *testing.T, epb uint8, body []byte) {
		ep := llmapi.Endpoint(epb % 6)
		orig := bytes.Clone(body)
		req, err := Parse(ep, body)
		if !bytes.Equal(body, orig) {
			t.Fatal("Parse modified the body")
		}
		valid := json.Valid(body)
		wellFormed := valid && utf8.Valid(body) && depthOf(body) <= maxDepth
		if err != nil {
			var e *apierr.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is %T, want *apierr.Error", err, err)
			}
			syntax := false
			switch e.Code {
			case apierr.CodeEmptyBody, apierr.CodeInvalidJSON, apierr.CodeInvalidUTF8:
				syntax = true
			case apierr.CodeNotAnObject, apierr.CodeMissingModel, apierr.CodeInvalidModel, apierr.CodeInvalidField,
				apierr.CodeInvalidType, apierr.CodeIntegerBelowMin, apierr.CodeIntegerAboveMax:
			case apierr.CodeDuplicateField:
				dups, derr := duplicateRead(ep, body)
				if derr != nil || !slices.Contains(dups, e.Param) {
					t.Fatalf("refused as duplicate %q, but encoding/json finds duplicates %q (%v)", e.Param, dups, derr)
				}
			default:
				t.Fatalf("unknown code %q", e.Code)
			}
			if !valid && !syntax {
				t.Fatalf("invalid JSON reported as %s: %s", e.Code, e.Message)
			}
			if wellFormed && syntax {
				t.Fatalf("well-formed JSON reported as %s: %s", e.Code, e.Message)
			}
			for _, m := range []string{e.Message, e.OpenAIMessage, e.AnthropicMessage} {
				if q := quotes(m, body, 65); q != "" {
					t.Fatalf("message %q quotes %d bytes of the body: %q", m, len(q), q)
				}
			}
			return
		}
		if !wellFormed {
			t.Fatalf("Parse accepted a body encoding/json rejects (valid %v, UTF-8 %v, depth %d)", valid, utf8.Valid(body), depthOf(body))
		}
		if req.InputTokens < 0 {
			t.Fatalf("InputTokens = %d", req.InputTokens)
		}
		if dups, err := duplicateRead(ep, body); err != nil || len(dups) > 0 {
			t.Fatalf("Parse accepted a body with %q twice (%v)", dups, err)
		}
		est, err := referenceEstimate(ep, body)
		if err != nil {
			t.Fatal(err)
		}
		if est != req.InputTokens {
			t.Fatalf("InputTokens = %d, recomputed from encoding/json's tokens: %d", req.InputTokens, est)
		}
		ref, err := reference(ep, body)
		if err != nil {
			t.Fatalf("Parse accepted %q, encoding/json: %v", body, err)
		}
		req.InputTokens = 0
		if diff := cmp.Diff(ref, req); diff != "" {
			t.Fatalf("Parse disagrees with encoding/json (-json +Parse):\n%s", diff)
		}
	})
}

// FuzzApply applies any Rewrite to any bytes. Invariants: no panic and the
// body is not modified; a well-formed JSON object is rewritten without
// error into valid JSON that differs only as asked (checkApplied); an
// unchanged result is the body itself; what Parse read before it reads
// after, but for the model and include_usage asked for.
func FuzzApply(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s), "gpt-4o-2024-08-06", true, false)
	}
	for _, r := range fixtureSeeds(f) {
		f.Add(r.body, "gpt-4o-2024-08-06", true, false)
	}
	f.Fuzz(func(t *testing.T, body []byte, model string, force, drop bool) {
		rw := Rewrite{Model: model, ForceIncludeUsage: force, DropModel: drop}
		orig := bytes.Clone(body)
		out, err := Apply(body, rw)
		if !bytes.Equal(body, orig) {
			t.Fatal("Apply modified the body")
		}
		wellFormed := json.Valid(body) && utf8.Valid(body) && depthOf(body) <= maxDepth
		if err != nil {
			var e *apierr.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is %T, want *apierr.Error", err, err)
			}
			if wellFormed && e.Code != apierr.CodeNotAnObject {
				t.Fatalf("Apply rejected well-formed JSON: %s: %s", e.Code, e.Message)
			}
			return
		}
		if rw == (Rewrite{}) {
			if len(out) != len(body) || len(body) > 0 && &out[0] != &body[0] {
				t.Fatal("a zero Rewrite did not return the body itself")
			}
			return
		}
		if !wellFormed {
			t.Fatalf("Apply accepted a body encoding/json rejects")
		}
		if err := checkApplied(body, out, rw); err != nil {
			t.Fatalf("Apply(%q, %+v): %v", body, rw, err)
		}
		if bytes.Equal(out, body) && &out[0] != &body[0] {
			t.Fatal("Apply changed nothing but returned a copy")
		}
		before, err := Parse(llmapi.Unknown, body)
		if err != nil || drop {
			return
		}
		after, err := Parse(llmapi.Unknown, out)
		if model != "" {
			if _, merr := decodeModel([]byte(model), false); merr != nil || !utf8.ValidString(model) {
				return // a model name Parse refuses; Apply writes it anyway
			}
			before.Model = model
		}
		if err != nil {
			t.Fatalf("Parse(Apply(%q, %+v)) = %v\n%s", body, rw, err, out)
		}
		if force {
			before.IncludeUsage = true
		}
		if diff := cmp.Diff(before, after); diff != "" {
			t.Fatalf("Parse(Apply(%q, %+v)) (-want +got):\n%s", body, rw, diff)
		}
	})
}

// duplicateRead lists, by encoding/json's reading of body, the fields Parse
// reads on ep that occur more than once: top-level keys (fieldOf) and
// include_usage inside a top-level stream_options object.
func duplicateRead(ep llmapi.Endpoint, body []byte) ([]string, error) {
	ms, err := members(body)
	if err != nil {
		return nil, err
	}
	var dups []string
	count := map[string]int{}
	for _, m := range ms {
		f := fieldOf(ep, []byte(m.key))
		if f == fNone {
			continue
		}
		if count[m.key]++; count[m.key] == 2 {
			dups = append(dups, m.key)
		}
		if f == fStreamOptions && strings.HasPrefix(m.raw, "{") {
			inner, err := members([]byte(m.raw))
			if err != nil {
				return nil, err
			}
			n := 0
			for _, im := range inner {
				if im.key == "include_usage" {
					n++
				}
			}
			if n > 1 {
				dups = append(dups, "stream_options.include_usage")
			}
		}
	}
	return dups, nil
}

// depthOf is the deepest nesting of objects and arrays in valid JSON.
func depthOf(b []byte) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

// quotes returns a run of n bytes of msg found in body, or "".
func quotes(msg string, body []byte, n int) string {
	for i := 0; i+n <= len(msg); i++ {
		if bytes.Contains(body, []byte(msg[i:i+n])) {
			return msg[i : i+n]
		}
	}
	return ""
}

// fixtureSeeds returns the recorded request bodies when
// ../shared/fixtures/openai is present, and none otherwise (the checked-in
// corpus still runs).
func fixtureSeeds(f *testing.F) []recorded {
	wd, err := os.Getwd()
	if err != nil {
		return nil
	}
	dir, err := fixtures.Find(wd)
	if err != nil {
		f.Logf("fuzz seeds from fixtures skipped: %v", err)
		return nil
	}
	return readRecorded(f, dir)
}
