package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/internal/tokens"
	"github.com/sluicegw/sluice/xds"
)

// unmeteredPolicy: o4-mini (a built-in context window of 200,000 tokens)
// at $2 per 1M input tokens, so a prompt by reference reserves $0.40 of
// input; teams f (file ids) and r (previous responses) each have $1.00 a
// day. The mock reports every prompt as 200,000 tokens: a file the
// provider bills in full, which the body does not show. Argument: the
// mock's address.
const unmeteredPolicy = `
listen: {envoy: "127.0.0.1:0"}
store: {sqlite: sluice.db}
ledger: {sqlite: ledger.db}
providers:
  - {name: mock, kind: openai-compatible, base_url: "http://%s"}
models:
  - {name: o4-mini, provider: mock}
pricing:
  o4-mini: {input: 2000000, output: 8000000}
teams:
  - {name: f, limits: {budgets: [{micro_usd: 1000000, period: day}]}}
  - {name: r, limits: {budgets: [{micro_usd: 1000000, period: day}]}}
  - {name: b}
`

// TestUnmeteredInputsEndToEnd: 64 concurrent requests naming a file the
// provider bills at 200,000 input tokens ($0.40 each) against a $1.00
// daily budget spend no more than the budget: each reserves the model's
// context window, so at most two are admitted and the rest are refused
// with 429 insufficient_quota (with the old 1,600-token guess all 64
// were served, $25.60). The same for previous_response_id. A background
// request is refused with 400 and never reaches the provider.
func TestUnmeteredInputsEndToEnd(t *testing.T) {
	mock, mockAddr := mockProvider(t, mockllm.Options{Words: 10, InputTokens: 200_000})
	s := startSluice(t, fmt.Sprintf(unmeteredPolicy, mockAddr))
	_, keyF := s.createKey(t, "f")
	_, keyR := s.createKey(t, "r")
	_, keyB := s.createKey(t, "b")
	b, err := xds.Bootstrap(xds.BootstrapOptions{NodeID: "e2e-unmetered", XDSAddress: s.xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	const budgetPico = 1_000_000 * 1_000_000 // $1.00
	eachProxy(t, b, func(t *testing.T, p proxy) {
		for _, tc := range []struct {
			name, team, key, body string
		}{
			{"file_id", "f", keyF, `{"model":"o4-mini","max_output_tokens":16,"input":[{"role":"user","content":[{"type":"input_file","file_id":"file-big"},{"type":"input_text","text":"summarize"}]}]}`},
			{"previous_response_id", "r", keyR, `{"model":"o4-mini","max_output_tokens":16,"previous_response_id":"resp_big","input":"go on"}`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				const clients = 64
				client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
				results := make([]result, clients)
				var wg sync.WaitGroup
				for i := range clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						req, _ := http.NewRequest("POST", p.url+"/v1/responses", strings.NewReader(tc.body))
						req.Header.Set("content-type", "application/json")
						req.Header.Set("authorization", "Bearer "+tc.key)
						req.Header.Set("x-request-id", fmt.Sprintf("unmetered-%s-%s-%d", p.name(), tc.name, i))
						results[i] = doResult(client, req)
					}()
				}
				wg.Wait()
				served := 0
				for i, r := range results {
					switch {
					case r.err != nil:
						t.Fatalf("request %d: %v", i, r.err)
					case r.status == 200:
						served++
					case r.status == 429 && strings.Contains(r.body, `"code":"insufficient_quota"`):
					default:
						t.Fatalf("request %d: %d %s", i, r.status, r.body)
					}
				}
				if served == 0 && p.name() == "emulator" {
					t.Errorf("no request served; the budget affords two")
				}
				if served > 2 {
					t.Errorf("%d requests served; a $1.00 budget affords two of $0.40", served)
				}
				var spent int64
				for _, r := range s.records(t) {
					if r.Team == tc.team {
						spent += r.CostPico
						if r.Tokens[tokens.Input] != 200_000 {
							t.Errorf("record %s: %d input tokens, want the 200,000 reported", r.RequestID, r.Tokens[tokens.Input])
						}
					}
				}
				if spent > budgetPico {
					t.Errorf("team %s spent %d p$, over its budget of %d", tc.team, spent, budgetPico)
				}
			})
		}
		t.Run("background", func(t *testing.T) {
			before := mock.Requests()
			st, _, body := call{path: "/v1/responses", body: `{"model":"o4-mini","background":true,"input":"write a novel"}`}.do(t, p.url, keyB)
			if st != 400 || !strings.Contains(body, "background_not_metered") || !strings.Contains(body, `"param":"background"`) {
				t.Fatalf("%d %s, want 400 background_not_metered", st, body)
			}
			if got := mock.Requests(); got != before {
				t.Errorf("the provider saw %d requests for a refused background request", got-before)
			}
		})
	})
}

// doResult sends req; it is safe in a goroutine (no t).
func doResult(client *http.Client, req *http.Request) result {
	resp, err := client.Do(req)
	if err != nil {
		return result{err: err}
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return result{status: resp.StatusCode, body: string(body), requestID: resp.Header.Get("x-sluice-request-id"), err: err}
}
