package payload

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/llmapi"
)

const usageTrue = `"stream_options":{"include_usage":true}`

func TestApply(t *testing.T) {
	model := Rewrite{Model: "b"}
	force := Rewrite{ForceIncludeUsage: true}
	drop := Rewrite{DropModel: true}
	for _, tc := range []struct {
		name      string
		in        string
		rw        Rewrite
		want      string // "" means body itself, unchanged
		notJSONed bool   // skip the encoding/json check (input not checked)
	}{
		{name: "model replaced, nested ones kept", rw: model,
			in:   `{"model":"a","messages":[{"model":"nested"}],"tools":[{"model":"z"}],"metadata":{"model":"m"}}`,
			want: `{"model":"b","messages":[{"model":"nested"}],"tools":[{"model":"z"}],"metadata":{"model":"m"}}`},
		{name: "same model: body itself", rw: model, in: `{"model":"b","stream":true}`},
		{name: "escaped model rewritten plainly", rw: model, in: `{"model":"\u0062"}`, want: `{"model":"b"}`},
		{name: "escaped key found", rw: model, in: `{"mod\u0065l":"a"}`, want: `{"mod\u0065l":"b"}`},
		{name: "model needing escapes", rw: Rewrite{Model: "a\"b\\c\n\x01é\xff"},
			in: `{"model":"a"}`, want: `{"model":"a\"b\\c\n\u0001é\ufffd"}`},
		{name: "every duplicate replaced", rw: model, in: `{"model":"a","x":1,"model":"c"}`, want: `{"model":"b","x":1,"model":"b"}`},
		{name: "non-string model replaced", rw: model, in: `{"model":5}`, want: `{"model":"b"}`},
		{name: "missing model added", rw: model, in: `{"messages":[]}`, want: `{"messages":[],"model":"b"}`},
		{name: "model added to an empty object", rw: model, in: `{ }`, want: `{"model":"b" }`},
		{name: "pretty-printed: model replaced, stream_options added", rw: Rewrite{Model: "new", ForceIncludeUsage: true},
			in:   "{\n  \"messages\": [],\n  \"model\": \"gpt-5-nano\",\n  \"stream\": true\n}",
			want: "{\n  \"messages\": [],\n  \"model\": \"new\",\n  \"stream\": true,\n  " + usageTrue + "\n}"},
		{name: "pretty-printed: model added", rw: model,
			in:   "{\r\n\t\"messages\": []\r\n}\r\n",
			want: "{\r\n\t\"messages\": [],\r\n\t\"model\":\"b\"\r\n}\r\n"},

		{name: "stream_options added", rw: force, in: `{"model":"a","stream":true}`, want: `{"model":"a","stream":true,` + usageTrue + `}`},
		{name: "include_usage false made true", rw: force,
			in:   `{"stream_options":{"include_usage":false,"x":1}}`,
			want: `{"stream_options":{"include_usage":true,"x":1}}`},
		{name: "include_usage null made true", rw: force,
			in:   `{"stream_options": { "x": [1], "include_usage" : null } }`,
			want: `{"stream_options": { "x": [1], "include_usage" : true } }`},
		{name: "include_usage added first", rw: force,
			in:   `{"stream_options":{"x":1}}`,
			want: `{"stream_options":{"include_usage":true,"x":1}}`},
		{name: "include_usage added to an empty object", rw: force,
			in:   `{"stream_options":{ }}`,
			want: `{"stream_options":{"include_usage":true }}`},
		{name: "nested include_usage is not the one", rw: force,
			in:   `{"stream_options":{"x":{"include_usage":false}}}`,
			want: `{"stream_options":{"include_usage":true,"x":{"include_usage":false}}}`},
		{name: "null stream_options replaced", rw: force, in: `{"stream_options":null}`, want: `{` + usageTrue + `}`},
		{name: "non-object stream_options replaced", rw: force, in: `{"stream_options":[true]}`, want: `{` + usageTrue + `}`},
		{name: "already true: body itself", rw: force, in: `{"stream_options":{"include_usage":true}}`},
		{name: "every duplicate fixed", rw: force,
			in:   `{"stream_options":{"include_usage":false},"stream_options":{"include_usage":true,"include_usage":0}}`,
			want: `{"stream_options":{"include_usage":true},"stream_options":{"include_usage":true,"include_usage":true}}`},

		{name: "drop first", rw: drop, in: `{"model":"a","b":1}`, want: `{"b":1}`},
		{name: "drop middle", rw: drop, in: `{"a":1, "model":"x", "b":2}`, want: `{"a":1, "b":2}`},
		{name: "drop last", rw: drop, in: `{"a":1, "model":"x" }`, want: `{"a":1 }`},
		{name: "drop only", rw: drop, in: `{ "model":"x" }`, want: `{  }`},
		{name: "drop adjacent duplicates", rw: drop, in: `{"model":"a","model":"b"}`, want: `{}`},
		{name: "drop trailing duplicates", rw: drop, in: `{"a":1,"model":"x","model":"y"}`, want: `{"a":1}`},
		{name: "drop scattered duplicates", rw: drop, in: `{"model":"x","a":1,"model":"y","b":[],"model":{}}`, want: `{"a":1,"b":[]}`},
		{name: "drop pretty-printed", rw: drop,
			in:   "{\n  \"model\": \"gpt\",\n  \"stream\": true\n}",
			want: "{\n  \"stream\": true\n}"},
		{name: "drop without model: body itself", rw: drop, in: `{"a":{"model":1}}`},
		{name: "drop wins over model", rw: Rewrite{Model: "b", DropModel: true}, in: `{"a":1,"model":"x"}`, want: `{"a":1}`},
		{name: "drop everything, then add stream_options", rw: Rewrite{DropModel: true, ForceIncludeUsage: true},
			in: `{"model":"x"}`, want: `{` + usageTrue + `}`},
		{name: "drop before an edited stream_options (fuzz)", rw: Rewrite{DropModel: true, ForceIncludeUsage: true},
			in: `{"model":"","stream_options":null}`, want: `{` + usageTrue + `}`},
		{name: "drop around an edited stream_options", rw: Rewrite{DropModel: true, ForceIncludeUsage: true},
			in:   `{"model":1,"stream_options":{"include_usage":false},"model":2,"a":3,"model":4}`,
			want: `{"stream_options":{"include_usage":true},"a":3}`},
		{name: "drop last, then add stream_options", rw: Rewrite{DropModel: true, ForceIncludeUsage: true},
			in: "{\n  \"stream\": true,\n  \"model\": \"x\"\n}", want: "{\n  \"stream\": true,\n  " + usageTrue + "\n}"},
		{name: "all three edits", rw: Rewrite{Model: "b", ForceIncludeUsage: true},
			in:   `{"model":"a","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":false}}`,
			want: `{"model":"b","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`},

		{name: "zero Rewrite: body unread", in: `not json`, notJSONed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			got, err := Apply(in, tc.rw)
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if tc.want == "" {
				if len(got) != len(in) || len(in) > 0 && &got[0] != &in[0] {
					t.Errorf("Apply = %q, want the body itself", got)
				}
			} else if string(got) != tc.want {
				t.Errorf("Apply:\n got %s\nwant %s", got, tc.want)
			}
			if string(in) != tc.in {
				t.Errorf("Apply modified its input: %q", in)
			}
			if !tc.notJSONed {
				if err := checkApplied(in, got, tc.rw); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

func TestApplyErrors(t *testing.T) {
	for _, tc := range []struct {
		body, code, msg string
	}{
		{"", apierr.CodeEmptyBody, "the request body is empty"},
		{`[1]`, apierr.CodeNotAnObject, "the request body must be a JSON object, got an array"},
		{`{"model":"a",}`, apierr.CodeInvalidJSON, "invalid JSON at byte 13: invalid character '}' looking for beginning of object key string"},
		{`{"model":"a"}{}`, apierr.CodeInvalidJSON, "invalid JSON at byte 13: invalid character '{' after top-level value"},
		{`{"stream_options":{"include_usage":tru}}`, apierr.CodeInvalidJSON, "invalid JSON at byte 38: invalid character '}' in literal true (expecting 'e')"},
		{"{\"x\":\"\xff\"}", apierr.CodeInvalidUTF8, "invalid UTF-8 in a string at byte 6"},
		// cut short right after a model of the new one's length, or after
		// stream_options' colon: nothing is read past the body's end
		{`{"model":"a"`, apierr.CodeInvalidJSON, "invalid JSON at byte 12: unexpected end of input"},
		{`{"stream_options":`, apierr.CodeInvalidJSON, "invalid JSON at byte 18: unexpected end of input"},
	} {
		body := []byte(tc.body)
		body = body[:len(body):len(body)] // no spare capacity to read into
		_, err := Apply(body, Rewrite{Model: "b", ForceIncludeUsage: true})
		var e *apierr.Error
		if !errors.As(err, &e) || e.Code != tc.code || e.Message != tc.msg {
			t.Errorf("Apply(%q) = %v, want %s: %s", tc.body, err, tc.code, tc.msg)
		}
	}
}

// The recorded requests rewritten every way: valid JSON, only the asked-for
// change, and what Parse reads afterwards is what was asked for.
func TestApplyFixtures(t *testing.T) {
	for _, r := range loadRecorded(t) {
		t.Run(r.name, func(t *testing.T) {
			before, err := Parse(r.ep, r.body)
			if err != nil {
				t.Fatal(err)
			}
			for _, rw := range []Rewrite{
				{Model: "upstream-model"},
				{ForceIncludeUsage: true},
				{Model: "upstream-model", ForceIncludeUsage: true},
				{DropModel: true},
				{DropModel: true, ForceIncludeUsage: true},
			} {
				out, err := Apply(r.body, rw)
				if err != nil {
					t.Fatalf("Apply(%+v): %v", rw, err)
				}
				if err := checkApplied(r.body, out, rw); err != nil {
					t.Errorf("Apply(%+v): %v", rw, err)
				}
				if rw.DropModel {
					continue
				}
				after, err := Parse(r.ep, out)
				if err != nil {
					t.Fatalf("Parse(Apply(%+v)): %v\n%s", rw, err, out)
				}
				want := before
				if rw.Model != "" {
					want.Model = rw.Model
				}
				if rw.ForceIncludeUsage && r.ep != llmapi.Embeddings {
					want.IncludeUsage = true
				}
				after.InputTokens = before.InputTokens // a added stream_options is not prompt
				if diff := cmp.Diff(want, after); diff != "" {
					t.Errorf("Parse(Apply(%+v)) (-want +got):\n%s", rw, diff)
				}
			}
			// Byte for byte: replacing the model changes its value and
			// nothing else.
			old := `"model": "` + before.Model + `"`
			if strings.Count(string(r.body), old) != 1 {
				t.Fatalf("%s does not hold %s exactly once", r.name, old)
			}
			out, err := Apply(r.body, Rewrite{Model: "upstream-model"})
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.Replace(string(r.body), old, `"model": "upstream-model"`, 1); string(out) != want {
				t.Errorf("Apply:\n got %s\nwant %s", out, want)
			}
		})
	}
}

// TestApplyAllocatesOnceAtExactLength: a rewritten body is allocated once,
// with capacity exactly its length. That holds only if every edit's size
// is exact: a quoted model with each escape form (two bytes, six for a
// control character or a byte of invalid UTF-8, a multi-byte rune or a
// literal U+FFFD as it is), an inserted member with its comma, indentation
// and key, and a removed run of members. Too small and append regrows the
// buffer (a second allocation); too large and a 1 MB body carries slack.
func TestApplyAllocatesOnceAtExactLength(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		rw       Rewrite
		want     string
	}{
		{name: "model with every escape", in: `{"model":"a"}`, rw: Rewrite{Model: "x\"\\\n\r\t\x01\x1fy"},
			want: `{"model":"x\"\\\n\r\t\u0001\u001fy"}`},
		{name: "model with multi-byte runes and invalid UTF-8", in: `{"model":"a"}`, rw: Rewrite{Model: "é中😀\xff\x80\uFFFD"},
			want: `{"model":"é中😀\ufffd\ufffd` + "\uFFFD" + `"}`},
		{name: "model and stream_options added after a pretty-printed member", in: "{\n  \"a\": 1\n}",
			rw:   Rewrite{Model: "b", ForceIncludeUsage: true},
			want: "{\n  \"a\": 1,\n  \"model\":\"b\",\n  " + usageTrue + "\n}"},
		{name: "models removed, include_usage made true and added", rw: Rewrite{DropModel: true, ForceIncludeUsage: true},
			in:   `{"model":"x","a":1,"stream_options":{"include_usage":false},"model":"y","stream_options":{"z":0}}`,
			want: `{"a":1,"stream_options":{"include_usage":true},"stream_options":{"include_usage":true,"z":0}}`},
		{name: "non-object stream_options replaced", rw: Rewrite{ForceIncludeUsage: true},
			in: `{"stream_options":[1,2]}`, want: `{` + usageTrue + `}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			var got []byte
			allocs := testing.AllocsPerRun(10, func() {
				var err error
				if got, err = Apply(in, tc.rw); err != nil {
					t.Fatal(err)
				}
			})
			if string(got) != tc.want {
				t.Fatalf("Apply:\n got %s\nwant %s", got, tc.want)
			}
			if allocs != 1 || cap(got) != len(got) {
				t.Errorf("Apply: %v allocations, capacity %d for %d bytes; want 1 allocation of exactly the output", allocs, cap(got), len(got))
			}
		})
	}
}
