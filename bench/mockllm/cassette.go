package mockllm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/sluicegw/sluice/internal/fixtures"
)

// Cassette is a go-vcr (version 2) recording of provider traffic, read
// by internal/fixtures (the one reader of these files). A Server given
// cassettes answers a request whose method and URL path match a recorded
// interaction with the recorded status, headers and body, byte for byte.
//
// When several interactions match the method and path, the one whose
// request body is the same JSON value wins; failing that, the one with
// the same "model" and "stream"; then the same "model"; then the first
// loaded. Hop-by-hop headers and Content-Length are not replayed.
type Cassette = fixtures.Cassette

// LoadCassette reads and checks a go-vcr version 2 YAML cassette, every
// problem reported with the field it concerns.
func LoadCassette(path string) (*Cassette, error) { return fixtures.ReadCassette(path) }

// notReplayed are the recorded response headers that describe the
// recording connection rather than the response.
var notReplayed = []string{
	"Connection", "Content-Length", "Keep-Alive", "Proxy-Connection",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// replayEntry is an interaction compiled for matching and replay.
type replayEntry struct {
	name         string // cassette#index
	method, path string
	reqBody      []byte
	canon        string // canonical JSON of the request body; "" if not JSON
	model        string
	stream       bool

	code   int
	header http.Header
	body   []byte
	events [][]byte // the body split into SSE events when it is a stream
}

func compileCassettes(cs []*Cassette) []replayEntry {
	var out []replayEntry
	for _, c := range cs {
		if c == nil {
			continue
		}
		for i, in := range c.Interactions {
			path := in.Request.URL
			if u, err := url.Parse(in.Request.URL); err == nil {
				path = u.Path
			}
			body := []byte(in.Request.Body)
			canon, model, stream := canonicalJSON(body)
			header := in.Response.Headers.Clone()
			if header == nil {
				header = http.Header{}
			}
			for _, k := range notReplayed {
				header.Del(k)
			}
			e := replayEntry{
				name:    fmt.Sprintf("%s#%d", c.Name, i),
				method:  strings.ToUpper(in.Request.Method),
				path:    path,
				reqBody: body,
				canon:   canon,
				model:   model,
				stream:  stream,
				code:    in.Response.Code,
				header:  header,
				body:    []byte(in.Response.Body),
			}
			if strings.HasPrefix(strings.ToLower(header.Get("Content-Type")), "text/event-stream") {
				e.events = splitEvents(e.body)
			}
			out = append(out, e)
		}
	}
	return out
}

// canonicalJSON re-encodes a JSON body with sorted keys and normalised
// numbers and spacing, and picks out its model and stream fields. A body
// that is not JSON has no canonical form.
func canonicalJSON(body []byte) (canon, model string, stream bool) {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return "", "", false
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", "", false
	}
	if m, ok := v.(map[string]any); ok {
		model, _ = m["model"].(string)
		stream, _ = m["stream"].(bool)
	}
	return string(b), model, stream
}

// splitEvents cuts an SSE body after every blank line ("\n\n" or
// "\r\n\r\n"), keeping every byte; a trailing partial event is kept too.
func splitEvents(b []byte) [][]byte {
	var out [][]byte
	start := 0
	for i := range b {
		if b[i] != '\n' {
			continue
		}
		if (i >= 1 && b[i-1] == '\n') || (i >= 3 && b[i-1] == '\r' && b[i-2] == '\n' && b[i-3] == '\r') {
			out = append(out, b[start:i+1])
			start = i + 1
		}
	}
	if start < len(b) {
		out = append(out, b[start:])
	}
	return out
}

// match finds the interaction to replay for a request, or nil.
func (s *Server) match(method, path string, body []byte) *replayEntry {
	if len(s.replay) == 0 {
		return nil
	}
	var (
		best      *replayEntry
		bestScore = -1
		parsed    bool
		canon     string
		model     string
		stream    bool
	)
	for i := range s.replay {
		e := &s.replay[i]
		if e.method != method || e.path != path {
			continue
		}
		if !parsed {
			canon, model, stream = canonicalJSON(body)
			parsed = true
		}
		score := 0
		switch {
		case bytes.Equal(body, e.reqBody) || (canon != "" && canon == e.canon):
			score = 3
		case model != "" && model == e.model && stream == e.stream:
			score = 2
		case model != "" && model == e.model:
			score = 1
		}
		if score > bestScore {
			best, bestScore = e, score
		}
	}
	return best
}

// replayTo answers with a recorded interaction. Delivery controls
// (latency, first byte, split, gzip unless the recording is already
// encoded, interval, abort-after, error-after) apply; content controls
// (words, usage, tokens) do not. Every recorded event of a stream but
// the last counts as a content event.
func (s *Server) replayTo(w http.ResponseWriter, r *http.Request, c *controls, rt route, e *replayEntry) {
	s.log.Debug("replaying", "interaction", e.name, "status", e.code)
	h := w.Header()
	for k, v := range e.header {
		h[k] = slices.Clone(v)
	}
	rep := reply{status: e.code}
	if e.events == nil {
		rep.body = e.body
		s.send(w, r, c, rep)
		return
	}
	rep.events = make([]event, len(e.events))
	for i, data := range e.events {
		rep.events[i] = event{data: data, phase: phaseContent}
	}
	rep.events[len(rep.events)-1].phase = phasePost
	if rt.dialect() == anthropic {
		rep.errEvent = sseNamed(false, "error", errorBody(anthropic, 529, "", "", "Overloaded (mock: injected mid-stream error, x-mock-error-after)"))
	} else {
		rep.errEvent = openAIStreamError(false)
	}
	s.send(w, r, c, rep)
}
