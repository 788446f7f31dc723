package mockllm

import (
	"bytes"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/fixtures"
)

// fixturesDir is ../shared/fixtures/openai; tests skip, naming it, when
// it is absent.
func fixturesDir(t *testing.T) string { return fixtures.OpenAI(t) }

func loadFixtures(t *testing.T) []*Cassette {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(fixturesDir(t), "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no cassettes: %v", err)
	}
	var out []*Cassette
	for _, f := range files {
		c, err := LoadCassette(f)
		if err != nil {
			t.Fatalf("LoadCassette(%s): %v", f, err)
		}
		out = append(out, c)
	}
	return out
}

// TestReplayFixtures replays every recorded interaction from one server
// holding all the cassettes (so matching has to pick among many on the
// same path) and compares status, headers and body byte for byte.
func TestReplayFixtures(t *testing.T) {
	cassettes := loadFixtures(t)
	s, base := start(t, Options{Cassettes: cassettes})
	c := client(t, false)
	h2 := client(t, true)
	for _, cas := range cassettes {
		for i, in := range cas.Interactions {
			u, err := url.Parse(in.Request.URL)
			if err != nil {
				t.Fatal(err)
			}
			t.Run(cas.Name+"#"+strconv.Itoa(i), func(t *testing.T) {
				for _, v := range []struct {
					name    string
					c       *http.Client
					headers []string
				}{
					{"plain", c, nil},
					{"split 7", c, []string{"x-mock-split", "7"}},
					{"h2c split 1", h2, []string{"x-mock-split", "1"}},
				} {
					r := post(t, v.c, base+u.Path, in.Request.Body, v.headers...)
					if r.status != in.Response.Code || r.readErr != nil {
						t.Fatalf("%s: status %d (read %v), want %d", v.name, r.status, r.readErr, in.Response.Code)
					}
					if !bytes.Equal(r.body, []byte(in.Response.Body)) {
						t.Fatalf("%s: body differs from the recording:\n%s\n---\n%s", v.name, r.body, in.Response.Body)
					}
					for k, want := range in.Response.Headers {
						switch k {
						case "Content-Length", "Transfer-Encoding", "Connection":
							continue
						}
						if got := r.header.Values(k); strings.Join(got, "\x00") != strings.Join(want, "\x00") {
							t.Errorf("%s: header %s = %q, want %q", v.name, k, got, want)
						}
					}
					if cl := r.header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(r.body)) {
						t.Errorf("%s: content-length %s for %d bytes", v.name, cl, len(r.body))
					}
				}
			})
		}
	}
	if s.Requests() == 0 {
		t.Error("no request reached the server")
	}
}

func TestReplayDeliveryControls(t *testing.T) {
	cassettes := loadFixtures(t)
	var streaming *Cassette
	for _, c := range cassettes {
		if c.Name == "chat-streaming.yaml" {
			streaming = c
		}
	}
	if streaming == nil {
		t.Fatal("chat-streaming.yaml not among the fixtures")
	}
	_, base := start(t, Options{Cassettes: []*Cassette{streaming}})
	c := client(t, false)
	in := streaming.Interactions[0]
	recorded := []byte(in.Response.Body)

	r := post(t, c, base+"/v1/chat/completions", in.Request.Body, "x-mock-gzip", "1", "x-mock-split", "11")
	if r.header.Get("Content-Encoding") != "gzip" || !bytes.Equal(gunzip(t, r.body), recorded) {
		t.Errorf("gzip replay differs")
	}
	r = post(t, c, base+"/v1/chat/completions", in.Request.Body, "x-mock-abort-after", "3")
	if r.readErr == nil || !bytes.Equal(r.body, bytes.Join(splitEvents(recorded)[:3], nil)) {
		t.Errorf("abort after 3 events: %v, %d bytes", r.readErr, len(r.body))
	}
	r = post(t, c, base+"/v1/chat/completions", in.Request.Body, "x-mock-error-after", "2")
	events := parseSSE(t, r.body)
	if len(events) != 3 || dig(obj(t, []byte(events[2].data)), "error", "type") != "server_error" {
		t.Errorf("error after 2 events: %s", r.body)
	}
	// Content controls do not touch a replay.
	r = post(t, c, base+"/v1/chat/completions", in.Request.Body, "x-mock-words", "2", "x-mock-usage", "omit")
	if !bytes.Equal(r.body, recorded) {
		t.Error("content controls changed a replay")
	}
	// A request no interaction matches is synthesised.
	r = post(t, c, base+"/v1/messages", withStream(messagesBody, ""))
	if r.status != 200 || obj(t, r.body)["type"] != "message" {
		t.Errorf("unmatched path: %d %s", r.status, r.body)
	}
}

const matchCassette = `---
version: 2
interactions:
  - request:
      method: POST
      url: https://api.example/v1/chat/completions
      body: '{"model":"a","messages":[{"role":"user","content":"one"}]}'
    response:
      code: 200
      headers: {Content-Type: [application/json]}
      body: 'a-one'
  - request:
      method: POST
      url: https://api.example/v1/chat/completions
      body: '{"model":"a","stream":true,"messages":[{"role":"user","content":"two"}]}'
    response:
      code: 200
      headers: {Content-Type: [application/json]}
      body: 'a-stream'
  - request:
      method: POST
      url: https://api.example/v1/chat/completions
      body: '{"model":"b","messages":[{"role":"user","content":"three"}]}'
    response:
      code: 201
      headers: {Content-Type: [text/plain], X-Recorded: [yes], Content-Length: ['999'], Transfer-Encoding: [chunked]}
      body: 'b-three'
  - request:
      method: POST
      url: https://api.example/v1/chat/completions
      body: '{"model":"a","messages":[{"role":"user","content":"four"}]}'
    response:
      code: 200
      headers: {Content-Type: [application/json]}
      body: 'a-four'
  - request:
      method: POST
      url: https://api.example/v1/embeddings
      body: 'not json'
    response:
      code: 200
      body: 'raw-body'
`

func TestReplayMatching(t *testing.T) {
	cas, err := fixtures.ParseCassette("match.yaml", []byte(matchCassette))
	if err != nil {
		t.Fatal(err)
	}
	_, base := start(t, Options{Cassettes: []*Cassette{cas}})
	c := client(t, false)
	for _, tc := range []struct {
		name, path, body, want string
	}{
		{"same JSON, other spacing and key order", "/v1/chat/completions", `{ "messages": [{"content":"three","role":"user"}], "model": "b" }`, "b-three"},
		{"same JSON beats same model", "/v1/chat/completions", `{"messages":[{"content":"four", "role":"user"}],"model":"a"}`, "a-four"},
		{"exact body", "/v1/chat/completions", `{"model":"a","messages":[{"role":"user","content":"one"}]}`, "a-one"},
		{"model and stream", "/v1/chat/completions", `{"model":"a","stream":true,"messages":[{"role":"user","content":"other"}]}`, "a-stream"},
		{"model only", "/v1/chat/completions", `{"model":"b","stream":true,"messages":[{"role":"user","content":"other"}]}`, "b-three"},
		{"nothing but the path: first", "/v1/chat/completions", `{"model":"z","messages":[{"role":"user","content":"other"}]}`, "a-one"},
		{"raw body", "/v1/embeddings", `not json`, "raw-body"},
		{"other body on a one-interaction path", "/v1/embeddings", `{"model":"e","input":"x"}`, "raw-body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := post(t, c, base+tc.path, tc.body); string(r.body) != tc.want {
				t.Errorf("got %d %q, want %q", r.status, r.body, tc.want)
			}
		})
	}
	r := post(t, c, base+"/v1/chat/completions", `{"model":"b","messages":[{"role":"user","content":"three"}]}`)
	if r.status != 201 || r.header.Get("X-Recorded") != "yes" || r.header.Get("Content-Type") != "text/plain" ||
		r.header.Get("Content-Length") != "7" || len(r.header.Values("Transfer-Encoding")) != 0 {
		t.Errorf("replayed headers: %d %v", r.status, r.header)
	}
	// Another path is not recorded: synthesised.
	if r := post(t, c, base+"/v1/completions", `{"model":"m","prompt":"x"}`); obj(t, r.body)["object"] != "text_completion" {
		t.Errorf("unrecorded path: %s", r.body)
	}
}

func TestSplitEvents(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"data: a\n\ndata: b\n\n", []string{"data: a\n\n", "data: b\n\n"}},
		{"data: a\r\n\r\ndata: b", []string{"data: a\r\n\r\n", "data: b"}},
		{"event: x\ndata: {}\n\n", []string{"event: x\ndata: {}\n\n"}},
		{"", nil},
	} {
		var got []string
		for _, e := range splitEvents([]byte(tc.in)) {
			got = append(got, string(e))
		}
		if strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
			t.Errorf("splitEvents(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
