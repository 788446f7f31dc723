package extproc

import (
	"context"
	"errors"
	"strings"
	"testing"

	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/uuid"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/ledger/ledgertest"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/tokens"
)

// chatOnce runs one non-streaming chat request whose headers carry
// extra (x-request-id among them, or not) through a new processor.
func chatOnce(t *testing.T, d *Deps, extra ...string) *extprocsvc.ProcessingResponse {
	t.Helper()
	ctx := testctx.Deadline(t)
	p := NewProcessor(d)
	h := append([]string{":method", "POST", ":path", "/v1/chat/completions", ":authority", "gw"}, extra...)
	p.Handle(ctx, signAll(&extprocsvc.ProcessingRequest{MetadataContext: authzMeta("config:k"), Request: &extprocsvc.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocsvc.HttpHeaders{Headers: hdrs(h...)},
	}}))
	resp := p.Handle(ctx, reqBody(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
	if resp.GetImmediateResponse() != nil {
		return resp
	}
	p.Handle(ctx, respHeaders("200", "application/json"))
	return p.Handle(ctx, respBody(chatJSON, true))
}

// TestRecordIdentity: the spend record's identity is Sluice's, one per
// admitted request — a UUIDv7 — whatever x-request-id the client sent:
// reused, empty, missing or huge, every request has its record, and the
// client's id is kept, bounded, only as the correlation field. The ledger
// is a real one as far as identity goes (ledgertest.Memory refuses an
// empty id and keeps the first record of an id).
func TestRecordIdentity(t *testing.T) {
	d, _ := newDeps(t)
	mem := &ledgertest.Memory{}
	d.Ledger = mem
	huge := strings.Repeat("x", 10_000)
	sent := [][]string{
		{"x-request-id", "rid-1"}, {"x-request-id", "rid-1"}, {"x-request-id", "rid-1"},
		{"x-request-id", ""}, nil, {"x-request-id", huge},
	}
	for _, h := range sent {
		chatOnce(t, d, h...)
	}
	recs, err := mem.Records(t.Context(), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(sent) {
		t.Fatalf("%d records for %d requests", len(recs), len(sent))
	}
	ids := map[string]bool{}
	clients := map[string]int{}
	for _, r := range recs {
		u, err := uuid.Parse(r.RequestID)
		if err != nil || u.Version() != 7 {
			t.Errorf("record id %q: want a UUIDv7 (%v)", r.RequestID, err)
		}
		if ids[r.RequestID] {
			t.Errorf("record id %s given twice", r.RequestID)
		}
		ids[r.RequestID] = true
		clients[r.ClientRequestID]++
	}
	want := map[string]int{"rid-1": 3, "": 2, huge[:maxClientRequestID]: 1}
	for k, n := range want {
		if clients[k] != n {
			t.Errorf("%d records with client request id %.20q; want %d (all: %v)", clients[k], k, n, clients)
		}
	}
}

// TestRecordIDUnavailable: a request that cannot get a record id is
// refused before anything is reserved, in the API's dialect.
func TestRecordIDUnavailable(t *testing.T) {
	d, led := newDeps(t)
	var admitted int
	d.Admitter = admitCounting{next: d.Admitter, n: &admitted}
	d.NewID = func() (string, error) { return "", errors.New("no entropy") }
	resp := chatOnce(t, d, "x-request-id", "rid-1")
	if got := resp.GetImmediateResponse().GetStatus().GetCode(); got != 503 {
		t.Fatalf("status %v; want 503 (%v)", got, resp)
	}
	if admitted != 0 || len(led.records) != 0 {
		t.Errorf("%d admissions and %d records; want none", admitted, len(led.records))
	}
}

// admitCounting is an Admitter that counts Admit calls.
type admitCounting struct {
	next Admitter
	n    *int
}

func (a admitCounting) Admit(ctx context.Context, c admission.Claim) (admission.Grant, error) {
	*a.n++
	return a.next.Admit(ctx, c)
}

func (a admitCounting) Settle(ctx context.Context, g admission.Grant, u admission.Actual) {
	a.next.Settle(ctx, g, u)
}

// TestProviderErrorMidStream: an Anthropic stream that ends in `event:
// error` after content was delivered is recorded as the provider's error
// (outcome upstream_error, its type in the record) although the status
// was 200, and charged what was delivered: message_start's input and the
// text streamed.
func TestProviderErrorMidStream(t *testing.T) {
	ctx := testctx.Deadline(t)
	d, led := newDeps(t)
	p := NewProcessor(d)
	p.Handle(ctx, reqHeaders("/v1/messages", false, authzMeta("config:k")))
	p.Handle(ctx, reqBody(`{"model":"sonnet","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	p.Handle(ctx, respHeaders("200", "text/event-stream"))
	p.Handle(ctx, respBody("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":15,\"output_tokens\":1}}}\n\n"+
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi there! How are you doing today?\"}}\n\n", false))
	p.Handle(ctx, respBody("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", true))
	if len(led.records) != 1 {
		t.Fatalf("%d records; want 1", len(led.records))
	}
	r := led.records[0]
	if r.Outcome != "upstream_error" || r.ErrorType != "overloaded_error" || r.Status != 200 {
		t.Errorf("outcome %q, error type %q, status %d; want upstream_error, overloaded_error, 200", r.Outcome, r.ErrorType, r.Status)
	}
	if r.Tokens[tokens.Input] != 15 || r.Tokens[tokens.Output] < 5 || !r.Estimated {
		t.Errorf("charged %d in, %d out (estimated %v); want 15 in and the delivered text's tokens, estimated", r.Tokens[tokens.Input], r.Tokens[tokens.Output], r.Estimated)
	}
}

// TestBadReportedUsage: a 200 whose usage holds a count that cannot be
// one (negative, above the cap) is not charged $0 with outcome ok: it is
// unparsed, charged the estimate, marked estimated and counted.
func TestBadReportedUsage(t *testing.T) {
	for name, u := range map[string]string{
		"negative prompt":     `{"prompt_tokens":-5,"completion_tokens":-5,"total_tokens":-10}`,
		"negative completion": `{"prompt_tokens":0,"completion_tokens":-1}`,
		"above the cap":       `{"prompt_tokens":2000000000000,"completion_tokens":1}`,
		"int64 overflow":      `{"prompt_tokens":99999999999999999999,"completion_tokens":1}`,
	} {
		t.Run(name, func(t *testing.T) {
			ctx := testctx.Deadline(t)
			d, led := newDeps(t)
			p := NewProcessor(d)
			p.Handle(ctx, reqHeaders("/v1/chat/completions", false, authzMeta("config:k")))
			p.Handle(ctx, reqBody(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"tell me about the weather in Lisbon in May"}]}`))
			p.Handle(ctx, respHeaders("200", "application/json"))
			p.Handle(ctx, respBody(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Sunny and mild."}}],"usage":`+u+`}`, true))
			if len(led.records) != 1 {
				t.Fatalf("%d records; want 1", len(led.records))
			}
			r := led.records[0]
			if r.Outcome != "unparsed" || !r.Estimated || r.Tokens[tokens.Input] <= 0 || r.Tokens[tokens.Output] <= 0 || r.CostPico <= 0 {
				t.Errorf("record %+v; want unparsed, estimated, charged the input estimate and the text's tokens", r)
			}
			m := &dto.Metric{}
			if err := d.Metrics.unparsed.WithLabelValues("chat_completions").Write(m); err != nil {
				t.Fatal(err)
			}
			if n := m.GetCounter().GetValue(); n != 1 {
				t.Errorf("sluice_unparsed_responses_total = %v; want 1", n)
			}
		})
	}
}
