package extproc

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/testctx"
)

func getHeaders(path string, extra ...string) *extprocsvc.ProcessingRequest {
	return signAll(&extprocsvc.ProcessingRequest{MetadataContext: authzMeta("config:k"), Request: &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocsvc.HttpHeaders{
		Headers: hdrs(append([]string{":method", "GET", ":path", path, ":authority", "gw"}, extra...)...), EndOfStream: true,
	}}})
}

// TestModelListAnswered: GET /v1/models is answered from the request
// headers with the team's OpenAI-family models in configured order (no
// aliases, no Anthropic models: TestModelListByDialect), counted as
// answered; the local reply coming back through the filter is not
// metered, and nothing is recorded.
func TestModelListAnswered(t *testing.T) {
	ctx := testctx.Deadline(t)
	d, led := newDeps(t)
	p := NewProcessor(d)
	resp := p.Handle(ctx, getHeaders("/v1/models"))
	ir := resp.GetImmediateResponse()
	if ir.GetStatus().GetCode() != 200 {
		t.Fatalf("GET /v1/models answered %v, want an immediate 200", resp)
	}
	var raw struct {
		Object string           `json:"object"`
		Data   []map[string]any `json:"data"`
	}
	if err := json.Unmarshal(ir.GetBody(), &raw); err != nil || raw.Object != "list" {
		t.Fatalf("body %s: %v", ir.GetBody(), err)
	}
	var ids []string
	for _, m := range raw.Data {
		ids = append(ids, m["id"].(string))
		if m["object"] != "model" || m["owned_by"] != "sluice" || m["created"] != 0.0 {
			t.Errorf("model entry %v", m)
		}
	}
	want := []string{"gpt-4o-mini", "plain", "az-4o", "mix", "mix-az", "fb"}
	if !slices.Equal(ids, want) {
		t.Errorf("ids %v, want %v (gpt-4o is not the team's)", ids, want)
	}
	if got := counterValue(t, d.Metrics.requests.WithLabelValues("models", outcomeAnswered)); got != 1 {
		t.Errorf("answered models requests %v, want 1", got)
	}
	if resp := p.Handle(ctx, respHeaders("200", "application/json")); resp.GetResponseHeaders() == nil || resp.GetDynamicMetadata() != nil {
		t.Errorf("the answer's response headers got %v", resp)
	}
	p.Cancel(ctx)
	if len(led.records) != 0 {
		t.Errorf("records %+v for an answered request", led.records)
	}
}

// TestCountTokensUnmetered: a count_tokens request for a fallback model
// is routed like a completion, its served-by headers removed from the
// response, and nothing is reserved, metered or recorded — not at the end
// of the response, nor on cancellation.
func TestCountTokensUnmetered(t *testing.T) {
	ctx := testctx.Deadline(t)
	for _, cancel := range []bool{false, true} {
		d, led := newDeps(t)
		p := NewProcessor(d)
		p.Handle(ctx, reqHeaders("/v1/messages/count_tokens", false, authzMeta("config:k")))
		resp := p.Handle(ctx, reqBody(`{"model":"fb-claude","messages":[{"role":"user","content":"hi"}]}`))
		if got := setHeaders(resp.GetRequestBody().GetResponse().GetHeaderMutation())["x-sluice-provider"]; got != "sluice.fallback.fb-claude" {
			t.Fatalf("count_tokens body reply %v, want it routed to the fallback cluster", resp)
		}
		if got := counterValue(t, d.Metrics.requests.WithLabelValues("count_tokens", outcomeForwarded)); got != 1 {
			t.Errorf("forwarded count_tokens requests %v, want 1", got)
		}
		if cancel {
			p.Cancel(ctx)
		} else {
			rh := &extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocsvc.HttpHeaders{
				Headers: hdrs(":status", "200", "content-type", "application/json", "x-sluice-served-by", "claude", "x-sluice-served-model", "claude-sonnet-4")}}}
			resp = p.Handle(ctx, rh)
			if rm := resp.GetResponseHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders(); !slices.Contains(rm, "x-sluice-served-by") {
				t.Errorf("response headers reply %v, want the served-by headers removed", resp)
			}
			if resp = p.Handle(ctx, respBody(`{"input_tokens":7}`, true)); resp.GetDynamicMetadata() != nil {
				t.Errorf("count_tokens response carried usage metadata %v", resp.GetDynamicMetadata())
			}
		}
		if len(led.records) != 0 {
			t.Errorf("cancel %v: records %+v for count_tokens", cancel, led.records)
		}
		if n := counterValue(t, d.Metrics.unpriced.WithLabelValues("fb-claude")) + counterValue(t, d.Metrics.tokens.WithLabelValues("fb-claude", "input")); n != 0 {
			t.Errorf("cancel %v: count_tokens settled (unpriced or token counters %v)", cancel, n)
		}
	}
}

// TestEmptyModelList: a key that may use no model gets an empty list in
// either shape — Anthropic's with null first and last ids — not an error.
func TestEmptyModelList(t *testing.T) {
	for _, tt := range []struct {
		d    llmapi.Dialect
		want string
	}{
		{llmapi.OpenAI, `{"object":"list","data":[]}`},
		{llmapi.Anthropic, `{"data":[],"has_more":false,"first_id":null,"last_id":null}`},
	} {
		b, err := json.Marshal(modelListBody(tt.d, nil))
		if err != nil || string(b) != tt.want {
			t.Errorf("%v: %s %v, want %s", tt.d, b, err, tt.want)
		}
	}
}

// TestModelListByDialect: each API family's list holds the models its own
// API can call — OpenAI's the models of OpenAI-family providers (OpenAI,
// Azure OpenAI, OpenAI-compatible, weighted and fallback mixes of them),
// Anthropic's those of Anthropic providers — each once under its
// canonical name, in that API's exact list shape.
func TestModelListByDialect(t *testing.T) {
	openAI := func(ids ...string) string {
		var data []string
		for _, id := range ids {
			data = append(data, `{"id":"`+id+`","object":"model","created":0,"owned_by":"sluice"}`)
		}
		return `{"object":"list","data":[` + strings.Join(data, ",") + `]}`
	}
	anthropic := func(ids ...string) string {
		var data []string
		for _, id := range ids {
			data = append(data, `{"type":"model","id":"`+id+`","display_name":"`+id+`","created_at":"1970-01-01T00:00:00Z"}`)
		}
		return `{"data":[` + strings.Join(data, ",") + `],"has_more":false,"first_id":"` + ids[0] + `","last_id":"` + ids[len(ids)-1] + `"}`
	}
	for _, tt := range []struct {
		name  string
		extra []string
		want  string
	}{
		{"openai", nil, openAI("gpt-4o-mini", "plain", "az-4o", "mix", "mix-az", "fb")},
		{"anthropic", []string{"anthropic-version", "2023-06-01"}, anthropic("sonnet", "fb-claude")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, _ := newDeps(t)
			resp := NewProcessor(d).Handle(testctx.Deadline(t), getHeaders("/v1/models", tt.extra...))
			ir := resp.GetImmediateResponse()
			if ir.GetStatus().GetCode() != 200 || string(ir.GetBody()) != tt.want {
				t.Errorf("GET /v1/models answered %d\n%s\nwant\n%s", ir.GetStatus().GetCode(), ir.GetBody(), tt.want)
			}
		})
	}
}

// TestModelGet: GET /v1/models/{id} answers, in the caller's API's shape,
// with the model a name or an alias names, under its canonical id; 404
// model_not_found for a model the caller's API cannot call, one the key
// may not use, and one that does not exist alike.
func TestModelGet(t *testing.T) {
	anthropicVersion := []string{"anthropic-version", "2023-06-01"}
	for _, tt := range []struct {
		id     string
		extra  []string
		wantID string // "" for 404
	}{
		{"gpt-4o-mini", nil, "gpt-4o-mini"},
		{"mini", nil, "gpt-4o-mini"},
		{"fb-alias", nil, "fb"},
		{"mix", nil, "mix"},
		{"sonnet", anthropicVersion, "sonnet"},
		{"fb-claude", anthropicVersion, "fb-claude"},
		{"sonnet", nil, ""},                   // an Anthropic model, asked by an OpenAI client
		{"mini", anthropicVersion, ""},        // an OpenAI model, asked by an Anthropic client
		{"gpt-4o-mini", anthropicVersion, ""}, // the same
		{"gpt-4o", nil, ""},                   // configured, not the team's
		{"no-such-model", nil, ""},
	} {
		name := tt.id
		if tt.extra != nil {
			name += " (anthropic)"
		}
		t.Run(name, func(t *testing.T) {
			d, _ := newDeps(t)
			resp := NewProcessor(d).Handle(testctx.Deadline(t), getHeaders("/v1/models/"+tt.id, tt.extra...))
			ir := resp.GetImmediateResponse()
			var body map[string]any
			if err := json.Unmarshal(ir.GetBody(), &body); err != nil {
				t.Fatalf("body %q: %v", ir.GetBody(), err)
			}
			if tt.wantID == "" {
				if ir.GetStatus().GetCode() != 404 || !strings.Contains(string(ir.GetBody()), "model_not_found") && tt.extra == nil {
					t.Errorf("answered %d %s, want 404 model_not_found", ir.GetStatus().GetCode(), ir.GetBody())
				}
				return
			}
			if ir.GetStatus().GetCode() != 200 || body["id"] != tt.wantID {
				t.Fatalf("answered %d %s, want 200 with id %q", ir.GetStatus().GetCode(), ir.GetBody(), tt.wantID)
			}
			if tt.extra != nil && (body["type"] != "model" || body["display_name"] != tt.wantID) ||
				tt.extra == nil && (body["object"] != "model" || body["owned_by"] != "sluice") {
				t.Errorf("model object %s is not in the caller's API's shape", ir.GetBody())
			}
		})
	}
}
