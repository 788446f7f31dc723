package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/fixtures"
	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/policies"
)

// fixturesDir is ../shared/fixtures/openai; tests skip, naming it, when
// it is absent.
func fixturesDir(t *testing.T) string { return fixtures.OpenAI(t) }

// recordedUsage reads [input, cached input, output] from a recorded
// response body: JSON usage, or the usage chunk of an SSE stream.
func recordedUsage(t *testing.T, body string) ([3]int64, bool) {
	t.Helper()
	var u struct {
		Usage *struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
			PromptDetails    struct {
				Cached int64 `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	docs := []string{body}
	if strings.HasPrefix(strings.TrimSpace(body), "data:") {
		docs = nil
		for _, line := range strings.Split(body, "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok && d != "[DONE]" {
				docs = append(docs, d)
			}
		}
	}
	for _, d := range docs {
		u.Usage = nil
		if json.Unmarshal([]byte(d), &u) == nil && u.Usage != nil {
			return [3]int64{u.Usage.PromptTokens, u.Usage.PromptDetails.Cached, u.Usage.CompletionTokens}, true
		}
	}
	return [3]int64{}, false
}

// wantReasoning reads completion_tokens_details.reasoning_tokens.
func wantReasoning(body string) int64 {
	var u struct {
		Usage struct {
			Details struct {
				Reasoning int64 `json:"reasoning_tokens"`
			} `json:"completion_tokens_details"`
		} `json:"usage"`
	}
	json.Unmarshal([]byte(body), &u)
	return u.Usage.Details.Reasoning
}

// record reads the spend record of a request through `sluice spend`:
// the one whose client request id is requestID, the x-request-id that
// reached Sluice (the client's own through a proxy that keeps it; through
// Sluice's listener, Envoy's, which the response carries).
func (p *sluiceProcess) record(t *testing.T, requestID string) ledger.Record {
	t.Helper()
	return p.awaitRecord(t, requestID)
}

// awaitRecord waits for a request's spend record (see record): a
// cancelled stream is settled when Envoy closes the ext_proc stream, after
// the client left.
func (p *sluiceProcess) awaitRecord(t *testing.T, requestID string) ledger.Record {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out := p.run(t, "spend", "--records", "--format", "json", "--limit", "0")
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var r ledger.Record
			if json.Unmarshal([]byte(line), &r) == nil && r.ClientRequestID == requestID {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no spend record for request %s", requestID)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// setRoutes replaces the inline route configuration of b's listener.
func setRoutes(b *bootstrapv3.Bootstrap, rc *routev3.RouteConfiguration) {
	f := b.StaticResources.Listeners[0].FilterChains[0].Filters[0]
	hcm := &hcmv3.HttpConnectionManager{}
	if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
		panic(err)
	}
	hcm.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: rc}
	a, err := anypb.New(hcm)
	if err != nil {
		panic(err)
	}
	f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: a}
}

// sluiceListener gives b's listener what Sluice's own listener has
// (xds/build.go) for a gateway whose body limit is maxBody: a buffer of
// the limit plus the margin (policies.Gateway.BodyBufferBytes), so a body
// a little over the limit reaches Sluice, and the local_reply_config that
// answers Envoy's own replies (the buffer's 413 past it) in the API's
// JSON error shape (chain.LocalReply).
func sluiceListener(b *bootstrapv3.Bootstrap, maxBody int64) {
	l := b.StaticResources.Listeners[0]
	l.PerConnectionBufferLimitBytes = wrapperspb.UInt32(uint32(policies.Gateway{MaxRequestBodyBytes: maxBody}.BodyBufferBytes()))
	f := l.FilterChains[0].Filters[0]
	hcm := &hcmv3.HttpConnectionManager{}
	if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
		panic(err)
	}
	hcm.LocalReplyConfig = chain.LocalReply(maxBody)
	a, err := anypb.New(hcm)
	if err != nil {
		panic(err)
	}
	f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: a}
}

func (p proxy) name() string {
	if p.emu != nil {
		return "emulator"
	}
	return "envoy"
}
