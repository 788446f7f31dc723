package extproc

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicegw/sluice/authz"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/tokens"
	"github.com/sluicegw/sluice/policies"
)

// unmeteredConfig has a model with a built-in context window (gpt-4o,
// 128,000), one with its own (small), one with none (mystery) and a
// Claude model (200,000); %s is the key's hash, and gatewayBackground
// is replaced by the gateway section.
const unmeteredConfig = `
gatewayBackground
providers:
  - {name: openai, kind: openai, base_url: "https://api.openai.com", api_key: "sk-upstream"}
  - {name: claude, kind: anthropic, base_url: "https://api.anthropic.com", api_key: "sk-ant"}
models:
  - {name: gpt-4o, provider: openai}
  - {name: small, provider: openai, upstream: my-finetune, context_window: 32000}
  - {name: mystery, provider: openai, upstream: my-model}
  - {name: sonnet, provider: claude, upstream: claude-sonnet-4-20250514}
pricing:
  gpt-4o: {input: 2500000, output: 10000000}
  small: {input: 1000000, output: 1000000}
  sonnet: {input: 3000000, output: 15000000}
teams:
  - {name: t, models: [gpt-4o, small, mystery, sonnet]}
keys:
  - {name: k, team: t, sha256: %s}
`

func unmeteredDeps(t *testing.T, gateway string) (*Deps, *spyAdmitter, *recordingLedger) {
	t.Helper()
	snap, ring, log := compileTestPolicy(t, strings.Replace(unmeteredConfig, "gatewayBackground", gateway, 1))
	counters := limits.New(limits.Options{})
	spy := &spyAdmitter{next: admission.NewLocal(counters, admission.LocalOptions{})}
	led := &recordingLedger{}
	return &Deps{
		Policy:     func() *policies.Snapshot { return snap },
		Ring:       ring,
		Auth:       authz.NewChecker(ring, admission.NewLocal(counters, admission.LocalOptions{}), nil, func() time.Time { return t0 }),
		Admitter:   spy,
		Ledger:     led,
		Principals: testPrincipals,
		Metrics:    NewMetrics(prometheus.NewRegistry()),
		Log:        log,
		Now:        func() time.Time { return t0 },
	}, spy, led
}

// TestReserveContextWindowForInputByReference: a prompt that points at
// content Sluice cannot see is reserved at the model's context window —
// built in, or set — for every kind of reference; a prompt carried whole
// is reserved at its estimate.
func TestReserveContextWindowForInputByReference(t *testing.T) {
	ctx := testctx.Deadline(t)
	const fileBlock = `{"type":"document","source":{"type":"file","file_id":"file_011"}}`
	for _, tc := range []struct {
		name, path, body string
		window           int64 // 0: the estimate
	}{
		{"responses input_file file_id", "/v1/responses", `{"model":"gpt-4o","input":[{"role":"user","content":[{"type":"input_file","file_id":"file-abc"}]}]}`, 128000},
		{"responses input_file file_url", "/v1/responses", `{"model":"gpt-4o","input":[{"role":"user","content":[{"type":"input_file","file_url":"https://example.com/a.pdf"}]}]}`, 128000},
		{"responses input_image file_id", "/v1/responses", `{"model":"gpt-4o","input":[{"role":"user","content":[{"type":"input_image","file_id":"file-img"}]}]}`, 128000},
		{"responses previous_response_id", "/v1/responses", `{"model":"gpt-4o","previous_response_id":"resp_1","input":"go on"}`, 128000},
		{"responses conversation", "/v1/responses", `{"model":"gpt-4o","conversation":"conv_1","input":"go on"}`, 128000},
		{"responses stored prompt", "/v1/responses", `{"model":"gpt-4o","prompt":{"id":"pmpt_1"}}`, 128000},
		{"responses item_reference", "/v1/responses", `{"model":"gpt-4o","input":[{"type":"item_reference","id":"msg_1"}]}`, 128000},
		{"chat file part", "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-abc"}}]}]}`, 128000},
		{"chat image by file_id", "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"file_id":"file-abc"}}]}]}`, 128000},
		{"chat assistant audio id", "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"assistant","audio":{"id":"audio_1"}},{"role":"user","content":"and?"}]}`, 128000},
		{"configured window", "/v1/chat/completions", `{"model":"small","messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-abc"}}]}]}`, 32000},
		{"anthropic document by file", "/v1/messages", `{"model":"sonnet","max_tokens":10,"messages":[{"role":"user","content":[` + fileBlock + `]}]}`, 200000},
		{"anthropic document by url", "/v1/messages", `{"model":"sonnet","max_tokens":10,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"url","url":"https://example.com/a.pdf"}}]}]}`, 200000},
		{"anthropic image by url", "/v1/messages", `{"model":"sonnet","max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]}]}`, 200000},
		{"chat image by url: an image, estimated", "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}`, 0},
		{"plain chat: estimated", "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, spy, _ := unmeteredDeps(t, "")
			p := NewProcessor(d)
			p.Handle(ctx, reqHeaders(tc.path, false, authzMeta("config:k")))
			resp := p.Handle(ctx, reqBody(tc.body))
			if im := resp.GetImmediateResponse(); im != nil {
				t.Fatalf("refused: %d %s", im.GetStatus().GetCode(), im.GetBody())
			}
			if len(spy.claims) != 1 {
				t.Fatalf("%d claims, want 1", len(spy.claims))
			}
			in := spy.claims[0].InputTokens
			switch {
			case tc.window > 0 && in != tc.window:
				t.Errorf("reserved %d input tokens, want the context window %d", in, tc.window)
			case tc.window == 0 && in >= 2000:
				t.Errorf("reserved %d input tokens for a prompt carried whole, want its estimate", in)
			}
		})
	}
}

// TestInputByReferenceWithoutWindowRefused: with no context window known
// for the model, a prompt by reference is refused before anything is
// reserved, naming the field; the same model serves a prompt carried
// whole.
func TestInputByReferenceWithoutWindowRefused(t *testing.T) {
	ctx := testctx.Deadline(t)
	d, spy, led := unmeteredDeps(t, "")
	p := NewProcessor(d)
	p.Handle(ctx, reqHeaders("/v1/responses", false, authzMeta("config:k")))
	resp := p.Handle(ctx, reqBody(`{"model":"mystery","previous_response_id":"resp_1","input":"go on"}`))
	im := resp.GetImmediateResponse()
	if im == nil || im.GetStatus().GetCode() != 400 {
		t.Fatalf("got %v, want 400", resp)
	}
	body := string(im.GetBody())
	for _, want := range []string{"input_by_reference", `"param":"previous_response_id"`, "mystery"} {
		if !strings.Contains(body, want) {
			t.Errorf("body %s lacks %s", body, want)
		}
	}
	if len(spy.claims) != 0 || len(led.records) != 0 {
		t.Errorf("a refused request reserved %d claims, %d records", len(spy.claims), len(led.records))
	}

	p = NewProcessor(d)
	p.Handle(ctx, reqHeaders("/v1/responses", false, authzMeta("config:k")))
	if im := p.Handle(ctx, reqBody(`{"model":"mystery","input":"hi"}`)).GetImmediateResponse(); im != nil {
		t.Errorf("a prompt carried whole was refused: %s", im.GetBody())
	}
}

// TestBackgroundRefused: "background": true is refused by default, before
// any reservation, naming the parameter; background: false is served.
func TestBackgroundRefused(t *testing.T) {
	ctx := testctx.Deadline(t)
	for _, gw := range []string{"", "gateway: {background: deny}"} {
		d, spy, led := unmeteredDeps(t, gw)
		p := NewProcessor(d)
		p.Handle(ctx, reqHeaders("/v1/responses", false, authzMeta("config:k")))
		resp := p.Handle(ctx, reqBody(`{"model":"gpt-4o","background":true,"input":"write a novel"}`))
		im := resp.GetImmediateResponse()
		if im == nil || im.GetStatus().GetCode() != 400 || !strings.Contains(string(im.GetBody()), "background_not_metered") ||
			!strings.Contains(string(im.GetBody()), `"param":"background"`) {
			t.Fatalf("%q: got %v, want 400 background_not_metered", gw, resp)
		}
		if len(spy.claims) != 0 || len(led.records) != 0 {
			t.Errorf("%q: a refused request reserved %d claims, %d records", gw, len(spy.claims), len(led.records))
		}
		p = NewProcessor(d)
		p.Handle(ctx, reqHeaders("/v1/responses", false, authzMeta("config:k")))
		if im := p.Handle(ctx, reqBody(`{"model":"gpt-4o","background":false,"input":"hi"}`)).GetImmediateResponse(); im != nil {
			t.Errorf("%q: background false refused: %s", gw, im.GetBody())
		}
	}
}

// TestBackgroundChargedItsReservation: with gateway.background:
// charge_reservation, a background request is served and its 2xx reply,
// "usage": null, settles the reservation to itself: the spend record
// holds the reserved input and output and the reserved cost.
func TestBackgroundChargedItsReservation(t *testing.T) {
	ctx := testctx.Deadline(t)
	d, spy, led := unmeteredDeps(t, "gateway: {background: charge_reservation}")
	p := NewProcessor(d)
	p.Handle(ctx, reqHeaders("/v1/responses", false, authzMeta("config:k")))
	if im := p.Handle(ctx, reqBody(`{"model":"gpt-4o","background":true,"max_output_tokens":1000,"input":"write"}`)).GetImmediateResponse(); im != nil {
		t.Fatalf("refused: %s", im.GetBody())
	}
	p.Handle(ctx, respHeaders("200", "application/json"))
	p.Handle(ctx, respBody(`{"id":"resp_1","object":"response","status":"queued","background":true,"output":[],"usage":null}`, true))
	if len(led.records) != 1 || len(spy.claims) != 1 {
		t.Fatalf("%d records, %d claims, want 1 each", len(led.records), len(spy.claims))
	}
	r, c := led.records[0], spy.claims[0]
	if r.Tokens[tokens.Input] != c.InputTokens || r.Tokens[tokens.Output] != 1000 || r.CostPico != c.CostPico || c.CostPico == 0 || !r.Estimated {
		t.Errorf("record in %d out %d cost %d estimated %v; want the reservation: in %d out 1000 cost %d, estimated",
			r.Tokens[tokens.Input], r.Tokens[tokens.Output], r.CostPico, r.Estimated, c.InputTokens, c.CostPico)
	}
}

// TestInputByReferenceSettles: a prompt by reference settles to the input
// the provider reports; when the reply reports no usage, it is charged
// the input reserved — the context window — not the estimate.
func TestInputByReferenceSettles(t *testing.T) {
	ctx := testctx.Deadline(t)
	const req = `{"model":"gpt-4o","max_output_tokens":100,"input":[{"role":"user","content":[{"type":"input_file","file_id":"file-abc"}]}]}`
	for _, tc := range []struct {
		name, reply   string
		wantIn        int64
		wantEstimated bool
	}{
		{"reported", `{"id":"r","object":"response","status":"completed","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]}],"usage":{"input_tokens":200000,"output_tokens":2,"total_tokens":200002}}`, 200000, false},
		{"missing", `{"id":"r","object":"response","status":"completed","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]}]}`, 128000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _, led := unmeteredDeps(t, "")
			p := NewProcessor(d)
			p.Handle(ctx, reqHeaders("/v1/responses", false, authzMeta("config:k")))
			if im := p.Handle(ctx, reqBody(req)).GetImmediateResponse(); im != nil {
				t.Fatalf("refused: %s", im.GetBody())
			}
			p.Handle(ctx, respHeaders("200", "application/json"))
			p.Handle(ctx, respBody(tc.reply, true))
			if len(led.records) != 1 {
				t.Fatalf("%d records", len(led.records))
			}
			r := led.records[0]
			if r.Tokens[tokens.Input] != tc.wantIn || r.Estimated != tc.wantEstimated {
				t.Errorf("record input %d estimated %v, want %d %v", r.Tokens[tokens.Input], r.Estimated, tc.wantIn, tc.wantEstimated)
			}
			if want := tc.wantIn * 2_500_000; r.CostPico < want {
				t.Errorf("cost %d p$, want at least the input's %d", r.CostPico, want)
			}
		})
	}
}

// TestContext1MReserved: a prompt by reference for a client that asks
// Anthropic for the 1M-token window (anthropic-beta: context-1m-…, which
// Sluice forwards) reserves that window, not the model's default.
func TestContext1MReserved(t *testing.T) {
	ctx := testctx.Deadline(t)
	const body = `{"model":"sonnet","max_tokens":10,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"file_011"}}]}]}`
	for beta, want := range map[string]int64{"files-api-2025-04-14,context-1m-2025-08-07": 1_000_000, "files-api-2025-04-14": 200_000} {
		d, spy, _ := unmeteredDeps(t, "")
		p := NewProcessor(d)
		p.Handle(ctx, reqHeaders("/v1/messages", false, authzMeta("config:k"), "anthropic-beta", beta))
		if im := p.Handle(ctx, reqBody(body)).GetImmediateResponse(); im != nil {
			t.Fatalf("%s: refused: %s", beta, im.GetBody())
		}
		if got := spy.claims[0].InputTokens; got != want {
			t.Errorf("anthropic-beta %s: reserved %d input tokens, want %d", beta, got, want)
		}
	}
}
