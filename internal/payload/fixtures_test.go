package payload

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/fixtures"
	"github.com/sluicegw/sluice/internal/llmapi"
)

// recorded is one request from the recorded provider traffic in
// ../shared/fixtures/openai (go-vcr v2 YAML).
type recorded struct {
	name         string // file base name, "#n" appended after the first interaction
	ep           llmapi.Endpoint
	body         []byte
	promptTokens int64 // usage.prompt_tokens of the recorded response, -1 if none
}

// fixturesDir is ../shared/fixtures/openai; tests skip, naming it, when
// it is absent.
func fixturesDir(t testing.TB) string { return fixtures.OpenAI(t) }

// loadRecorded reads every request body in the fixtures folder.
func loadRecorded(t testing.TB) []recorded {
	t.Helper()
	return readRecorded(t, fixturesDir(t))
}

func readRecorded(t testing.TB, dir string) []recorded {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	var out []recorded
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ins, err := vcrInteractions(string(data))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for i, in := range ins {
			u, err := url.Parse(in.url)
			if err != nil {
				t.Fatalf("%s: interactions[%d].request.url: %v", f, i, err)
			}
			r := recorded{name: filepath.Base(f), ep: llmapi.EndpointFor(u.Path), body: []byte(in.reqBody), promptTokens: -1}
			if i > 0 {
				r.name += "#" + strconv.Itoa(i)
			}
			if m := promptTokensRE.FindStringSubmatch(in.respBody); m != nil {
				r.promptTokens, _ = strconv.ParseInt(m[1], 10, 64)
			}
			out = append(out, r)
		}
	}
	return out
}

var promptTokensRE = regexp.MustCompile(`"prompt_tokens":\s*(\d+)`)

type vcrInteraction struct {
	url, reqBody, respBody string
}

// vcrInteractions extracts request URL and body and response body from
// go-vcr v2 YAML with the standard library. It reads the two scalar styles
// go-vcr writes for bodies (literal block "|-" and single-line double
// quoted) and fails on anything else; a request body whose length differs
// from the recorded content_length is an error, so a misread shows.
func vcrInteractions(doc string) ([]vcrInteraction, error) {
	lines := strings.Split(doc, "\n")
	var (
		out          []vcrInteraction
		section      string // "request", "response" or ""
		secIndent    int
		childIndent  = -1
		contentLen   = -1
		checkReqBody = func() error {
			if n := len(out); n > 0 && contentLen > 0 && len(out[n-1].reqBody) != contentLen {
				return fmt.Errorf("interactions[%d]: request body read as %d bytes, content_length says %d", n-1, len(out[n-1].reqBody), contentLen)
			}
			return nil
		}
	)
	for i := 0; i < len(lines); i++ {
		ln := lines[i]
		trimmed := strings.TrimLeft(ln, " ")
		indent := len(ln) - len(trimmed)
		if trimmed == "" {
			continue
		}
		if section != "" && indent <= secIndent {
			section = ""
		}
		if trimmed == "request:" || trimmed == "response:" {
			section, secIndent, childIndent = strings.TrimSuffix(trimmed, ":"), indent, -1
			if section == "request" {
				if err := checkReqBody(); err != nil {
					return nil, err
				}
				out = append(out, vcrInteraction{})
				contentLen = -1
			}
			continue
		}
		if section == "" {
			continue
		}
		if childIndent < 0 {
			childIndent = indent
		}
		if indent != childIndent {
			continue
		}
		key, val, _ := strings.Cut(trimmed, ":")
		val = strings.TrimSpace(val)
		cur := &out[len(out)-1]
		switch {
		case section == "request" && key == "url":
			cur.url = val
		case section == "request" && key == "content_length":
			contentLen, _ = strconv.Atoi(val)
		case key == "body":
			var body string
			switch {
			case val == "|-" || val == "|" || val == "|+":
				var block []string
				for i+1 < len(lines) {
					next := lines[i+1]
					if strings.TrimSpace(next) != "" && len(next)-len(strings.TrimLeft(next, " ")) <= childIndent {
						break
					}
					block = append(block, next)
					i++
				}
				trailing := 0 // blank lines at the end: kept only by "|+"
				for trailing < len(block) && strings.TrimSpace(block[len(block)-1-trailing]) == "" {
					trailing++
				}
				block = block[:len(block)-trailing]
				if len(block) > 0 {
					cut := len(block[0]) - len(strings.TrimLeft(block[0], " "))
					for j, b := range block {
						if len(b) >= cut {
							block[j] = b[cut:]
						} else {
							block[j] = ""
						}
					}
				}
				body = strings.Join(block, "\n")
				switch {
				case val == "|+":
					body += strings.Repeat("\n", trailing+1)
				case val == "|" && len(block) > 0:
					body += "\n"
				}
			case strings.HasPrefix(val, `"`) && strings.HasSuffix(val, `"`) && len(val) >= 2:
				if err := json.Unmarshal([]byte(val), &body); err != nil {
					return nil, fmt.Errorf("line %d: double-quoted body not read: %v", i+1, err)
				}
			default:
				return nil, fmt.Errorf("line %d: body in a YAML style this reader does not handle: %.20q", i+1, val)
			}
			if section == "request" {
				cur.reqBody = body
			} else {
				cur.respBody = body
			}
		}
	}
	if err := checkReqBody(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no interactions found")
	}
	return out, nil
}
