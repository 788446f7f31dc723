package extproc

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/principal"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/policies"
)

// principalMeta is ext_authz's metadata for key id of team t, with sig
// as written (no sig field when "").
func principalMeta(id, sig string) *corev3.Metadata {
	f := map[string]any{"key_id": id, "team": "t", "org": ""}
	if sig != "" {
		f[chain.PrincipalSignatureKey] = sig
	}
	s, _ := structpb.NewStruct(f)
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{chain.AuthzNamespace: s}}
}

// TestPrincipalRefusals: the downstream processor serves a request only
// for a principal whose signature verifies for its key id, team, org and
// the request's x-request-id, issued within security.principal_maxAge
// either way; every other is refused at the request headers — before any
// credential, reservation or record — with the reason counted and logged
// (the signature never).
func TestPrincipalRefusals(t *testing.T) {
	other, err := principal.New([][]byte{bytes.Repeat([]byte("o"), principal.MinSecretBytes)})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(k *principal.Keys, rid string, at time.Time, id, team string) string {
		return k.Sign(principal.ForPrincipal, rid, at, id, team, "")
	}
	good := sign(testKeys, "rid-1", t0, "config:k", "t")
	for _, tc := range []struct {
		name   string
		md     *corev3.Metadata
		keys   func() *principal.Keys
		status int
		code   string
		reason string
	}{
		{"no signature", principalMeta("config:k", ""), testPrincipals, 403, "principal_refused", "missing"},
		{"a signature without a key id", principalMeta("", good), testPrincipals, 403, "principal_refused", "missing"},
		{"made up", principalMeta("config:k", "v1.1764504000000.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"), testPrincipals, 403, "principal_refused", "bad_signature"},
		{"not a signature", principalMeta("config:k", "hello"), testPrincipals, 403, "principal_refused", "malformed"},
		{"another request's", principalMeta("config:k", sign(testKeys, "rid-2", t0, "config:k", "t")), testPrincipals, 403, "principal_refused", "bad_signature"},
		{"another team's", principalMeta("config:k", sign(testKeys, "rid-1", t0, "config:k", "u")), testPrincipals, 403, "principal_refused", "bad_signature"},
		{"another fleet's key", principalMeta("config:k", sign(other, "rid-1", t0, "config:k", "t")), testPrincipals, 403, "principal_refused", "bad_signature"},
		{"a handoff's signature", principalMeta("config:k", testKeys.Sign(principal.ForHandoff, "rid-1", t0, "config:k", "t", "")), testPrincipals, 403, "principal_refused", "bad_signature"},
		{"too old", principalMeta("config:k", sign(testKeys, "rid-1", t0.Add(-31*time.Second), "config:k", "t")), testPrincipals, 503, "principal_refused", "expired"},
		{"from the future", principalMeta("config:k", sign(testKeys, "rid-1", t0.Add(31*time.Second), "config:k", "t")), testPrincipals, 503, "principal_refused", "future"},
		{"no keys to verify with", principalMeta("config:k", good), nil, 503, "principal_refused", "no_keys"},
		{"valid, for a key that is gone", principalMeta("config:gone", sign(testKeys, "rid-1", t0, "config:gone", "t")), testPrincipals, 401, "unknown_key", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, led := newDeps(t)
			d.Now = func() time.Time { return t0 }
			d.Principals = tc.keys
			var logs bytes.Buffer
			d.Log = slog.New(slog.NewTextHandler(&logs, nil))
			d.Metrics = NewMetrics(prometheus.NewRegistry())
			for _, path := range []string{"/v1/chat/completions", "/v1/messages/count_tokens", "/v1/unknown"} {
				p := NewProcessor(d)
				// Not reqHeaders, which would sign the principal.
				m := &extprocsvc.ProcessingRequest{MetadataContext: tc.md, Request: &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocsvc.HttpHeaders{
					Headers: hdrs(":method", "POST", ":path", path, ":authority", "gw", "x-request-id", "rid-1", "anthropic-version", "2023-06-01")}}}
				resp := p.Handle(testctx.Deadline(t), m)
				ir := resp.GetImmediateResponse()
				if int(ir.GetStatus().GetCode()) != tc.status || ir.GetDetails() != "sluice_"+tc.code {
					t.Fatalf("%s: %s, want %d %s", path, prototext.Format(resp), tc.status, tc.code)
				}
				if txt := prototext.Format(resp); strings.Contains(txt, "sk-") {
					t.Errorf("%s: a refusal carries a credential: %s", path, txt)
				}
			}
			if len(led.records) != 0 {
				t.Errorf("records: %v", led.records)
			}
			if tc.reason != "" {
				if n := counterValue(t, d.Metrics.principalRefused.WithLabelValues(tc.reason)); n != 3 {
					t.Errorf("sluice_principal_refused_total{reason=%s} = %v, want 3", tc.reason, n)
				}
				if !strings.Contains(logs.String(), "reason="+tc.reason) || !strings.Contains(logs.String(), "peer=") {
					t.Errorf("log has no refusal naming the reason and peer:\n%s", logs.String())
				}
			}
			if sig := tc.md.GetFilterMetadata()[chain.AuthzNamespace].GetFields()[chain.PrincipalSignatureKey].GetStringValue(); sig != "" && strings.Contains(logs.String(), sig) {
				t.Errorf("the signature reached the log:\n%s", logs.String())
			}
		})
	}
}

// TestPrincipalKeyRechecked: a principal that verifies is still refused
// when its key has expired since (or was revoked, or lost its team: the
// same check, authz.Usable; e2e tries a revoked one): the key is resolved
// again, with ext_authz's own codes.
func TestPrincipalKeyRechecked(t *testing.T) {
	cfg := strings.Replace(testConfig, "keys:\n  - {name: k, team: t, sha256: %s}", `keys:
  - {name: k, team: t, sha256: %s}
  - {name: old, team: t, sha256: "`+strings.Repeat("ab", 32)+`", expires_at: 2026-11-30T11:00:00Z}`, 1)
	snap, ring, log := compileTestPolicy(t, cfg)
	_ = snap
	d, _ := newDeps(t)
	d.Ring, d.Log = ring, log
	for id, code := range map[string]string{"config:old": "expired_key"} {
		p := NewProcessor(d)
		resp := p.Handle(context.Background(), reqHeaders("/v1/chat/completions", false, principalMeta(id, testKeys.Sign(principal.ForPrincipal, "rid-1", t0, id, "t", ""))))
		if ir := resp.GetImmediateResponse(); ir.GetStatus().GetCode() != 403 || ir.GetDetails() != "sluice_"+code {
			t.Errorf("%s: %s, want 403 %s", id, prototext.Format(resp), code)
		}
	}
}

// TestHandoffRefusals: an attempt is served only with a handoff signed
// for its own request and fields, issued within the reservation's TTL.
func TestHandoffRefusals(t *testing.T) {
	sign := func(rid string, at time.Time, path, model string) string {
		return testKeys.Sign(principal.ForHandoff, rid, at, path, "0", model)
	}
	md := func(path, model, sig string) *corev3.Metadata {
		f := map[string]any{chain.FallbackPathKey: path, chain.FallbackAnthropicVersionKey: false, chain.FallbackModelKey: model}
		if sig != "" {
			f[chain.FallbackSignatureKey] = sig
		}
		s, _ := structpb.NewStruct(f)
		return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{chain.UsageNamespace: s}}
	}
	const chat = "/v1/chat/completions"
	for _, tc := range []struct {
		name   string
		md     *corev3.Metadata
		reason string
	}{
		{"none", nil, "missing"},
		{"unsigned", md(chat, "fb", ""), "missing"},
		{"another request's", md(chat, "fb", sign("rid-2", t0, chat, "fb")), "bad_signature"},
		{"another model's", md(chat, "fb", sign("rid-1", t0, chat, "fb-claude")), "bad_signature"},
		{"another path's", md(chat, "fb", sign("rid-1", t0, "/v1/embeddings", "fb")), "bad_signature"},
		{"a principal's", md(chat, "fb", testKeys.Sign(principal.ForPrincipal, "rid-1", t0, chat, "0", "fb")), "bad_signature"},
		{"older than the reservation", md(chat, "fb", sign("rid-1", t0.Add(-16*time.Minute), chat, "fb")), "expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, led := newDeps(t)
			d.Now = func() time.Time { return t0 }
			d.Metrics = NewMetrics(prometheus.NewRegistry())
			u := NewUpstreamProcessor(d)
			m := &extprocsvc.ProcessingRequest{MetadataContext: tc.md, Request: &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocsvc.HttpHeaders{
				Headers: hdrs(":method", "POST", ":path", chat, "x-request-id", "rid-1", chain.RoutingHeader, "sluice.fallback.fb")}}}
			resp := u.Handle(t.Context(), withHost(m, "openai"))
			if ir := resp.GetImmediateResponse(); ir.GetStatus().GetCode() != 403 || ir.GetDetails() != "sluice_handoff_refused" {
				t.Fatalf("%s, want 403 handoff_refused", prototext.Format(resp))
			}
			if next := u.Handle(t.Context(), reqBody(`{"model":"fb","messages":[]}`)); strings.Contains(prototext.Format(next), "sk-upstream") {
				t.Errorf("the body after a refusal got the credential: %s", prototext.Format(next))
			}
			if n := counterValue(t, d.Metrics.principalRefused.WithLabelValues(tc.reason)); n != 1 {
				t.Errorf("sluice_principal_refused_total{reason=%s} = %v, want 1", tc.reason, n)
			}
			if len(led.records) != 0 {
				t.Errorf("records: %v", led.records)
			}
		})
	}
}

// TestPassedResponseServedBy: the response of a request passed to its
// provider (gateway.unknown_paths: pass) that carries served-by headers —
// the provider's, or a direct stream's — has them removed, and nothing
// else happens (a passed request has no route).
func TestPassedResponseServedBy(t *testing.T) {
	d, led := newDeps(t)
	snap, ring, _ := compileTestPolicy(t, strings.Replace(testConfig, "providers:", "gateway: {unknown_paths: pass, pass_to: {openai: openai}}\nproviders:", 1))
	d.Policy, d.Ring = func() *policies.Snapshot { return snap }, ring
	p := NewProcessor(d)
	ctx := testctx.Deadline(t)
	if r := p.Handle(ctx, reqHeaders("/v1/files", true, authzMeta("config:k"))); r.GetRequestHeaders() == nil {
		t.Fatalf("not passed: %s", prototext.Format(r))
	}
	r := p.Handle(ctx, &extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocsvc.HttpHeaders{
		Headers: hdrs(":status", "200", chain.ServedByHeader, "x", chain.ServedModelHeader, "y")}}})
	got := r.GetResponseHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders()
	if want := append([]string{chain.ServedByHeader, chain.ServedModelHeader}, accountHeaders()...); !slices.Equal(got, want) {
		t.Errorf("removed %v, want the served-by and the account headers %v", got, want)
	}
	if len(led.records) != 0 {
		t.Errorf("records %v", led.records)
	}
}

// TestRefusalLogBounded: a flood of forged streams with 64 KiB key ids
// writes at most refusalLinesPerSecond clipped lines a second; the next
// second's first line says how many were left out; the counter counts
// every refusal.
func TestRefusalLogBounded(t *testing.T) {
	d, _ := newDeps(t)
	now := t0
	d.Now = func() time.Time { return now }
	var logs bytes.Buffer
	d.Log = slog.New(slog.NewTextHandler(&logs, nil))
	d.Metrics = NewMetrics(prometheus.NewRegistry())
	huge := strings.Repeat("k", 64<<10)
	for range 200 {
		NewProcessor(d).Handle(t.Context(), &extprocsvc.ProcessingRequest{MetadataContext: principalMeta(huge, "v1.1.x"), Request: &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocsvc.HttpHeaders{
			Headers: hdrs(":method", "POST", ":path", "/"+huge, "x-request-id", "r")}}})
	}
	now = now.Add(time.Second)
	NewProcessor(d).Handle(t.Context(), &extprocsvc.ProcessingRequest{MetadataContext: principalMeta("k", ""), Request: &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocsvc.HttpHeaders{
		Headers: hdrs(":method", "POST", ":path", "/v1/chat/completions", "x-request-id", "r")}}})
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != refusalLinesPerSecond+1 {
		t.Fatalf("%d lines, want %d", len(lines), refusalLinesPerSecond+1)
	}
	if logs.Len() > 20*refusalAttrBytes*len(lines) {
		t.Errorf("%d bytes of log for %d lines: values are not clipped", logs.Len(), len(lines))
	}
	if strings.Contains(lines[0], "refusals_not_logged") {
		t.Errorf("the first line counts lines left out, when none was: %s", lines[0])
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, "refusals_not_logged=190") {
		t.Errorf("the next second's line does not count the lines left out: %s", last)
	}
	if n := counterValue(t, d.Metrics.principalRefused.WithLabelValues("malformed")); n != 200 {
		t.Errorf("counted %v malformed, want 200", n)
	}
}
