package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/xds"
)

// pathsPolicy: unknown paths passed (OpenAI's to p1, Anthropic's to its
// only provider), a team allowed m1 and c1 but not m-other.
const pathsPolicy = `
listen: {envoy: "127.0.0.1:0"}
store: {sqlite: sluice.db}
ledger: {sqlite: ledger.db}
gateway: {unknown_paths: pass, pass_to: {openai: p1}}
providers:
  - {name: p1, kind: openai, base_url: "http://%[1]s", api_key: sk-paths-p1}
  - {name: claude, kind: anthropic, base_url: "http://%[1]s", api_key: sk-paths-ant}
models:
  - {name: m1, provider: p1}
  - {name: m-other, provider: p1}
  - {name: c1, provider: claude}
pricing:
  m1: {input: 150000, output: 600000}
  m-other: {input: 150000, output: 600000}
  c1: {input: 150000, output: 600000}
teams: [{name: t, models: [m1, c1]}]
`

// TestPathTricks: under unknown_paths: pass, every other spelling of a
// metered endpoint's path — escaped slashes and letters, dot segments,
// repeated and trailing slashes, path parameters, case, Azure's
// deployment path, double encoding — ends metered (the provider called
// once, at the endpoint's own path, and a spend record written) or
// refused (no provider call); never served unmetered. With a model
// outside the team's allow-list, only refused. Whether the proxy
// normalizes paths itself or not, the invariant is the same; the test
// does not say which of the two happens. A path that is unknown once
// canonical is passed with its canonical path, never the raw one.
func TestPathTricks(t *testing.T) {
	mock, addr := mockProvider(t, mockllm.Options{APIKey: "sk-paths-p1", AnthropicAPIKey: "sk-paths-ant"})
	s := startSluice(t, fmt.Sprintf(pathsPolicy, addr))
	_, key := s.createKey(t, "t")
	b, err := xds.Bootstrap(xds.BootstrapOptions{NodeID: "e2e-" + strings.ReplaceAll(t.Name(), "/", "-"), XDSAddress: s.xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	openai := []string{
		"/v1/chat%2Fcompletions",
		"/v1/chat%2fcompletions",
		"/v1%2Fchat%2Fcompletions",
		"/v1/chat/completion%73",
		"/%76%31/chat/completions",
		"/v1/chat%5Ccompletions",
		`/v1\chat\completions`,
		"/v1/chat/completions/",
		"//v1/chat/completions",
		"/v1//chat/completions",
		"/v1/./chat/completions",
		"/./v1/chat/completions",
		"/v1/x/../chat/completions",
		"/../v1/chat/completions",
		"/v1/x/%2E%2E/chat/completions",
		"/v1/x/..;y/chat/completions",
		"/v1/chat/completions;x",
		"/v1;x/chat/completions",
		"/V1/chat/completions",
		"/v1/Chat/Completions",
		"/v1/chat/completions/?stream=false",
		"/v1/chat%252Fcompletions",
		"/v1/chat/completions%00",
		"/openai/deployments/m1/chat/completions?api-version=2024-10-21",
		"/openai/deployments/m-other/chat/completions?api-version=2024-10-21",
		"/openai/v1/chat/completions",
		"/v1/embeddings/",
		"/v1/responses%2F",
	}
	anthropic := []string{
		"/v1/messages/",
		"/v1//messages",
		"/V1/messages",
		"/v1/messages;x",
		"/v1/messag%65s",
		"/v1/x/../messages",
	}
	type trick struct{ path, body, want string }
	var tricks []trick
	for _, p := range openai {
		want := "/v1/chat/completions"
		body := `{"model":"%s","messages":[{"role":"user","content":"hi"}]}`
		switch {
		case strings.HasPrefix(p, "/v1/embeddings"):
			want, body = "/v1/embeddings", `{"model":"%s","input":"hi"}`
		case strings.HasPrefix(p, "/v1/responses"):
			want, body = "/v1/responses", `{"model":"%s","input":"hi"}`
		}
		tricks = append(tricks, trick{p, body, want})
	}
	for _, p := range anthropic {
		tricks = append(tricks, trick{p, `{"model":"%s","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`, "/v1/messages"})
	}

	metered := map[string]bool{} // request id → metered
	eachProxy(t, b, func(t *testing.T, px proxy) {
		for i, tc := range tricks {
			allowed, other := "m1", "m-other"
			if tc.want == "/v1/messages" {
				allowed = "c1" // no Anthropic model outside the list: m-other is refused as the wrong API
			}
			for _, model := range []string{allowed, other} {
				rid := fmt.Sprintf("paths-%s-%d-%s", strings.TrimPrefix(t.Name(), "TestPathTricks/"), i, model)
				n := mock.Requests()
				st, h, body := rawCall(t, px.url, tc.path, key, fmt.Sprintf(tc.body, model), rid)
				calls := mock.Requests() - n
				if calls == 0 {
					if st >= 200 && st < 300 {
						t.Errorf("%s (%s): %d %s without a provider call", tc.path, model, st, body)
					}
					continue
				}
				// The provider was called: it must be metered.
				got := mock.Received()
				r := got[len(got)-1]
				var bad string
				switch {
				case calls != 1:
					bad = fmt.Sprintf("%d provider calls", calls)
				case model != allowed:
					bad = fmt.Sprintf("a model outside the allow-list reached the provider at %s (answered %d)", r.Path, st)
				case st != 200:
					bad = fmt.Sprintf("%d %s after a provider call", st, body)
				case r.Path != tc.want:
					bad = fmt.Sprintf("the provider got %s, want the metered %s", r.Path, tc.want)
				}
				if bad != "" {
					t.Errorf("%s (%s): %s", tc.path, model, bad)
					continue
				}
				if id := h.Get("x-sluice-request-id"); id != "" {
					rid = id
				}
				if rec := s.awaitRecord(t, rid); rec.Model != allowed || rec.CostPico <= 0 {
					t.Errorf("%s (%s): record %+v", tc.path, model, rec)
				}
				metered[rid] = true
			}
		}

		// Batch APIs are billed later, where Sluice cannot meter them:
		// refused, never passed.
		for _, path := range []string{"/v1/batches", "/V1/batches", "/v1/messages/batches", "/v1//messages/batches/"} {
			n := mock.Requests()
			if st, _, body := rawCall(t, px.url, path, key, `{}`, ""); st != 400 || mock.Requests() != n {
				t.Errorf("%s: %d %s with %d provider calls, want 400 and none", path, st, body, mock.Requests()-n)
			}
		}

		// Unknown once canonical: passed with the canonical path (or
		// refused by a proxy that normalizes paths itself).
		for _, tc := range []struct{ path, want string }{
			{"/v1//files/", "/v1/files"},
			{"/v1/files/./x/../file-1;v=2", "/v1/files/file-1"},
			{"/V1/files", "/v1/files"},
			{"/v1/files%2Ffile-1", "/v1/files/file-1"},
		} {
			n := mock.Requests()
			st, _, body := rawCall(t, px.url, tc.path, key, `{}`, "")
			got := mock.Received()
			switch calls := mock.Requests() - n; {
			case calls == 0 && st >= 400 && st < 500:
				continue // refused by the proxy's own path normalization
			case calls != 1:
				t.Errorf("%s: %d provider calls (%d %s), want 1", tc.path, calls, st, body)
				continue
			}
			if r := got[len(got)-1]; r.Path != tc.want || st != 404 {
				t.Errorf("%s: the provider got %s (answered %d %s), want %s", tc.path, r.Path, st, body, tc.want)
			}
		}

	})
	// Only the metered requests were recorded (the records of every
	// proxy's run are in the one ledger).
	recs := s.records(t)
	for _, r := range recs {
		if !metered[r.ClientRequestID] {
			t.Errorf("a spend record of no metered request: %+v", r)
		}
	}
	if len(recs) != len(metered) {
		t.Errorf("%d spend records, want %d (the metered requests)", len(recs), len(metered))
	}
}

// rawCall POSTs body to base with the request-target path exactly as
// written (Go's client would otherwise re-escape it), with key as the
// credential of the path's API and rid as x-request-id ("": none).
func rawCall(t *testing.T, base, path, key, body, rid string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest("POST", base+"/", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	p, q, _ := strings.Cut(path, "?")
	if strings.HasPrefix(p, "//") {
		// An opaque "//…" would be written as an absolute URI.
		req.URL.Path = p
	} else {
		req.URL.Opaque = p
	}
	req.URL.RawQuery = q
	req.Header.Set("content-type", "application/json")
	if strings.Contains(strings.ToLower(path), "messag") {
		req.Header.Set("x-api-key", key)
		req.Header.Set("anthropic-version", "2023-06-01")
	} else {
		req.Header.Set("authorization", "Bearer "+key)
	}
	if rid != "" {
		req.Header.Set("x-request-id", rid)
	}
	return do(t, req)
}
