package usage

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/fixtures"
	"github.com/sluicegw/sluice/internal/llmapi"
)

// fixturesDir is ../shared/fixtures/openai beside the module root (the
// directory holding go.mod above the test's working directory). Tests that
// need it skip, naming the folder, when it is absent.
func fixturesDir(t testing.TB) string { return fixtures.OpenAI(t) }

// findFixtures returns the fixtures folder or why it is absent.
func findFixtures() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return fixtures.Find(wd)
}

// cassette is the part of a go-vcr v2 cassette these tests read: its first
// interaction.
type cassette struct {
	Name    string
	URL     string
	ReqBody string
	Code    int
	Header  map[string][]string
	Body    string
}

func loadCassettes(t testing.TB) []cassette {
	t.Helper()
	dir := fixturesDir(t)
	cs := readCassettes(t, dir)
	if len(cs) == 0 {
		t.Skipf("no *.yaml in fixtures folder %s", dir)
	}
	return cs
}

// loadCassettesOrNone is loadCassettes for tests that also run without
// the fixtures: it logs the missing folder instead of skipping. It holds
// the third-party cassettes too.
func loadCassettesOrNone(t testing.TB) []cassette {
	t.Helper()
	dir, err := findFixtures()
	if err != nil {
		t.Logf("fixtures not used: %v", err)
		return nil
	}
	return append(readCassettes(t, dir), readThirdParty(t, dir)...)
}

// readThirdParty reads the third-party cassettes, ../thirdparty/{anthropic,
// openai} beside the OpenAI folder dir.
func readThirdParty(t testing.TB, dir string) []cassette {
	t.Helper()
	var out []cassette
	for _, sub := range []string{"anthropic", "openai"} {
		out = append(out, readCassettes(t, filepath.Join(dir, "..", "thirdparty", sub))...)
	}
	return out
}

func readCassettes(t testing.TB, dir string) []cassette {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	var out []cassette
	for _, f := range files {
		in := fixtures.One(t, f)
		out = append(out, cassette{
			Name:    strings.TrimSuffix(filepath.Base(f), ".yaml"),
			URL:     in.Request.URL,
			ReqBody: in.Request.Body,
			Code:    in.Response.Code,
			Header:  in.Response.Headers,
			Body:    in.Response.Body,
		})
	}
	return out
}

// options derives a Meter's options from a recorded exchange, as the
// ext_proc request and response phases would.
func (c cassette) options() Options {
	u, err := url.Parse(c.URL)
	if err != nil {
		panic(fmt.Sprintf("%s: %v", c.Name, err))
	}
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	_ = json.Unmarshal([]byte(c.ReqBody), &req) // a bad request body leaves zero values
	o := Options{Endpoint: llmapi.EndpointFor(u.Path), Stream: req.Stream, Model: req.Model}
	for k, v := range c.Header {
		if strings.EqualFold(k, "content-type") && len(v) > 0 {
			o.ContentType = v[0]
		}
	}
	return o
}
