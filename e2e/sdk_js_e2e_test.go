package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/internal/testctx"
)

// jsResult is one scenario's line from jsclients/clients.mjs.
type jsResult struct {
	Name   string          `json:"name"`
	OK     bool            `json:"ok"`
	Detail json.RawMessage `json:"detail"`
}

// runJSClients runs jsclients/clients.mjs against base with key and
// returns its results by scenario name. It skips, saying why, where
// Node.js or the SDKs (make test installs them: npm ci in e2e/jsclients)
// are absent.
func runJSClients(t *testing.T, base, key, denied string) map[string]jsResult {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node on PATH, so the JavaScript SDK clients cannot run (install Node.js 20+; make test then installs the SDKs)")
	}
	if _, err := os.Stat(filepath.Join("jsclients", "node_modules", "openai")); err != nil {
		t.Skip("the JavaScript SDKs are not installed in e2e/jsclients/node_modules: run make test, or npm ci in e2e/jsclients")
	}
	cmd := exec.CommandContext(testctx.Deadline(t), node, "clients.mjs")
	cmd.Dir = "jsclients"
	cmd.Env = append(os.Environ(), "SLUICE_BASE="+base, "SLUICE_KEY="+key, "SLUICE_DENIED_MODEL="+denied)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node clients.mjs: %v\n%s\n%s", err, out, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Logf("clients.mjs stderr: %s", stderr.Bytes()) // the SDKs' warnings
	}
	res := map[string]jsResult{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line, ok := bytes.CutPrefix(sc.Bytes(), []byte("sluice-result "))
		if !ok {
			t.Logf("clients.mjs: %s", sc.Bytes()) // the SDKs' own output
			continue
		}
		var r jsResult
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("clients.mjs printed %q: %v", sc.Text(), err)
		}
		res[r.Name] = r
	}
	return res
}

// TestJSClients: the official OpenAI and Anthropic JavaScript SDKs and the
// Vercel AI SDK, as a user's code calls them, through Envoy and Sluice:
// chat (plain, streamed as the common loop reads it — chunk.choices[0] on
// every chunk — and streamed with include_usage), embeddings, Responses
// (plain and streamed), Anthropic messages (plain, streamed), count_tokens,
// each SDK's models.list(), and each refusal as the SDK's typed error.
func TestJSClients(t *testing.T) {
	_, mockAddr := mockProvider(t, mockllm.Options{APIKey: openaiKey, AnthropicAPIKey: anthropicKey, AzureAPIKey: azureKey})
	s := startSluice(t, gatewayConfig)
	_, key := s.createKey(t, "apps")
	b := gatewayBootstrap(t, s.grpcAddr, mockAddr)
	eachProxy(t, b, func(t *testing.T, p proxy) {
		res := runJSClients(t, p.url, key, "babbage-002")
		want := []string{
			"openai chat", "openai chat stream", "openai chat stream with include_usage", "openai embeddings",
			"openai responses", "openai responses stream", "openai models.list",
			"openai unknown key", "openai model not allowed", "openai unknown model",
			"anthropic messages", "anthropic messages stream", "anthropic count_tokens", "anthropic models.list",
			"anthropic unknown key", "anthropic model not allowed",
			"vercel generateText chat", "vercel streamText chat", "vercel generateText responses", "vercel embed", "vercel streamText anthropic",
		}
		for _, name := range want {
			r, ok := res[name]
			switch {
			case !ok:
				t.Errorf("%s: no result", name)
			case !r.OK:
				t.Errorf("%s: %s", name, r.Detail)
			}
		}
		for name := range res {
			if !slices.Contains(want, name) {
				t.Errorf("clients.mjs ran %q, which this test does not check", name)
			}
		}
		var stream struct {
			Text   string          `json:"text"`
			Chunks int             `json:"chunks"`
			Usage  json.RawMessage `json:"usage"`
		}
		if r := res["openai chat stream"]; r.OK {
			if err := json.Unmarshal(r.Detail, &stream); err != nil || stream.Text == "" || string(stream.Usage) != "null" {
				t.Errorf("openai chat stream without include_usage: %s; want text and no usage chunk", r.Detail)
			}
		}
		var withUsage struct {
			Usage struct {
				TotalTokens int `json:"total_tokens"`
			} `json:"usage"`
			UsageChunkChoices int `json:"usageChunkChoices"`
		}
		if r := res["openai chat stream with include_usage"]; r.OK {
			if err := json.Unmarshal(r.Detail, &withUsage); err != nil || withUsage.Usage.TotalTokens == 0 || withUsage.UsageChunkChoices != 0 {
				t.Errorf("openai chat stream with include_usage: %s; want the usage chunk the client asked for", r.Detail)
			}
		}
		for name, status := range map[string]int{"openai unknown key": 401, "openai model not allowed": 403, "openai unknown model": 404, "anthropic unknown key": 401, "anthropic model not allowed": 403} {
			var e struct {
				Status int `json:"status"`
			}
			if r := res[name]; r.OK && (json.Unmarshal(r.Detail, &e) != nil || e.Status != status) {
				t.Errorf("%s: %s, want status %d", name, r.Detail, status)
			}
		}
	})
}
