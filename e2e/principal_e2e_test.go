package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/xds"
)

// The provider credentials of the attack tests: no reply to a forged
// stream may carry either.
const (
	attackP1Key = "sk-attack-p1-provider-credential"
	attackP2Key = "sk-attack-p2-provider-credential"
	// attackPrincipalKey is the fleet's signing secret in these tests.
	attackPrincipalKey = "e2e-principal-secret-0123456789abcdef"
	// expiredDeclared is the secret of a declared key past its expires_at.
	expiredDeclared = "sk-sluice-EXPIREDdeclared0123456789abcdefghijklmnopq"
)

func sha256Hex(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

// attackPolicy: a single-provider model, a fallback model over both
// providers, unknown paths passed to p1, a team with a budget the attacks
// would otherwise be charged to, and a declared key that has expired.
const attackPolicy = `
listen: {envoy: "127.0.0.1:0"}
store: {sqlite: sluice.db}
ledger: {sqlite: ledger.db}
gateway: {unknown_paths: pass, pass_to: {openai: p1}}
providers:
  - {name: p1, kind: openai, base_url: "http://%s", api_key: ` + attackP1Key + `}
  - {name: p2, kind: openai, base_url: "http://%s", api_key: ` + attackP2Key + `}
  - {name: claude, kind: anthropic, base_url: "http://%s", api_key: ` + attackP1Key + `-ant}
models:
  - {name: m1, provider: p1}
  - {name: m-ha, providers: [{name: p1}, {name: p2}]}
  - {name: claude-x, provider: claude}
pricing:
  m1: {input: 150000, output: 600000}
  m-ha: {input: 150000, output: 600000}
  claude-x: {input: 150000, output: 600000}
teams: [{name: t, limits: {budgets: [{micro_usd: 1000000, period: day}]}}]
keys:
  - {name: old, team: t, sha256: "%s", expires_at: 2020-01-01T00:00:00Z}
security:
  principal_keys: [{value: "` + attackPrincipalKey + `"}]
`

// extprocStream opens an ext_proc stream to addr as any process that can
// reach the port could, marked as a fallback attempt when upstream.
func extprocStream(t *testing.T, addr string, upstream bool) extprocsvc.ExternalProcessor_ProcessClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx := t.Context()
	if upstream {
		ctx = metadata.AppendToOutgoingContext(ctx, chain.UpstreamMetadataKey, chain.UpstreamMetadataValue)
	}
	s, err := extprocsvc.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// forged is one attack: the messages of one stream.
type forged struct {
	name     string
	upstream bool
	msgs     []*extprocsvc.ProcessingRequest
}

func headersMsg(method, path, rid string, md *corev3.Metadata, extra ...string) *extprocsvc.ProcessingRequest {
	hs := &corev3.HeaderMap{}
	kv := append([]string{":method", method, ":path", path, ":authority", "gw", ":scheme", "http", "x-request-id", rid, "content-type", "application/json"}, extra...)
	for i := 0; i+1 < len(kv); i += 2 {
		hs.Headers = append(hs.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return &extprocsvc.ProcessingRequest{MetadataContext: md, Request: &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocsvc.HttpHeaders{Headers: hs}}}
}

func bodyMsg(b string) *extprocsvc.ProcessingRequest {
	return &extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_RequestBody{RequestBody: &extprocsvc.HttpBody{Body: []byte(b), EndOfStream: true}}}
}

func authzMD(fields map[string]any) *corev3.Metadata {
	s, err := structpb.NewStruct(fields)
	if err != nil {
		panic(err)
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{chain.AuthzNamespace: s}}
}

func handoffMD(path, model, sig string) *corev3.Metadata {
	f := map[string]any{chain.FallbackPathKey: path, chain.FallbackAnthropicVersionKey: false, chain.FallbackModelKey: model}
	if sig != "" {
		f[chain.FallbackSignatureKey] = sig
	}
	s, _ := structpb.NewStruct(f)
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{chain.UsageNamespace: s}}
}

func withHostAttr(m *extprocsvc.ProcessingRequest, provider string) *extprocsvc.ProcessingRequest {
	m.Attributes = map[string]*structpb.Struct{chain.ExtProcAttributesKey: {Fields: map[string]*structpb.Value{
		chain.UpstreamHostProviderAttribute: structpb.NewStringValue(provider),
	}}}
	return m
}

// signedPrincipal asks s's ext_authz, as Envoy does, to accept secret for
// the request rid, and returns the principal metadata it signed.
func signedPrincipal(t *testing.T, addr, secret, path, rid string) *structpb.Struct {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := authv3.NewAuthorizationClient(conn).Check(t.Context(), &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
		Method: "POST", Path: path, Headers: map[string]string{":method": "POST", ":path": path, "authorization": "Bearer " + secret, "x-request-id": rid},
	}}}})
	if err != nil || resp.GetOkResponse() == nil {
		t.Fatalf("ext_authz did not accept the key: %v %v", resp, err)
	}
	if resp.GetDynamicMetadata().GetFields()[chain.PrincipalSignatureKey].GetStringValue() == "" {
		t.Fatalf("ext_authz's principal is unsigned: %v", resp.GetDynamicMetadata())
	}
	return resp.GetDynamicMetadata()
}

// TestForgedStreamsGetNoCredential: every way a process that can reach
// Sluice's gRPC port, but is not Envoy acting for a valid key, has tried
// to obtain a provider credential gets none, writes no spend record and
// is counted and logged with its peer; a real request through the
// emulator, fallback included, still works with signing on.
func TestForgedStreamsGetNoCredential(t *testing.T) {
	p1, p1Addr := mockProvider(t, mockllm.Options{APIKey: attackP1Key})
	p2, p2Addr := mockProvider(t, mockllm.Options{APIKey: attackP2Key})
	s := startSluice(t, fmt.Sprintf(attackPolicy, p1Addr, p2Addr, p1Addr, sha256Hex(expiredDeclared)))
	victimID, victim := s.createKey(t, "t")
	revokedID, _ := s.createKey(t, "t")
	var out, errb bytes.Buffer
	if err := app.Run(t.Context(), []string{"keys", "revoke", "--config", s.config, revokedID}, &out, &errb, noEnv); err != nil {
		t.Fatalf("keys revoke: %v %s", err, errb.String())
	}

	chat := `{"model":"m1","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	ha := `{"model":"m-ha","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	count := `{"model":"claude-x","messages":[{"role":"user","content":"hi"}]}`
	// A genuine principal of the victim's key, for request "real-1".
	real := signedPrincipal(t, s.grpcAddr, victim, "/v1/chat/completions", "real-1")
	sig := real.GetFields()[chain.PrincipalSignatureKey].GetStringValue()
	victimMD := func(extra map[string]any) *corev3.Metadata {
		f := map[string]any{"key_id": victimID, "team": "t", "org": ""}
		for k, v := range extra {
			f[k] = v
		}
		return authzMD(f)
	}
	attacks := []forged{
		{name: "no key: a fallback attempt naming a provider's host", upstream: true, msgs: []*extprocsvc.ProcessingRequest{
			withHostAttr(headersMsg("POST", "/v1/chat/completions", "a-1", nil, chain.RoutingHeader, "sluice.fallback.m-ha"), "p1"), bodyMsg(ha)}},
		{name: "no key: a fallback attempt with a forged handoff", upstream: true, msgs: []*extprocsvc.ProcessingRequest{
			withHostAttr(headersMsg("POST", "/v1/chat/completions", "a-2", handoffMD("/v1/chat/completions", "m-ha", "")), "p2"), bodyMsg(ha)}},
		{name: "a fallback attempt with a principal's signature as its handoff's", upstream: true, msgs: []*extprocsvc.ProcessingRequest{
			withHostAttr(headersMsg("POST", "/v1/chat/completions", "real-1", handoffMD("/v1/chat/completions", "m-ha", sig)), "p1"), bodyMsg(ha)}},
		{name: "forged key id", msgs: []*extprocsvc.ProcessingRequest{headersMsg("POST", "/v1/chat/completions", "a-3", victimMD(nil)), bodyMsg(chat)}},
		{name: "forged key id with a made-up signature", msgs: []*extprocsvc.ProcessingRequest{
			headersMsg("POST", "/v1/chat/completions", "a-4", victimMD(map[string]any{"sig": "v1.1765000000000.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"})), bodyMsg(chat)}},
		{name: "revoked key id", msgs: []*extprocsvc.ProcessingRequest{
			headersMsg("POST", "/v1/chat/completions", "a-5", authzMD(map[string]any{"key_id": revokedID, "team": "t", "org": ""})), bodyMsg(chat)}},
		{name: "expired declared key", msgs: []*extprocsvc.ProcessingRequest{
			headersMsg("POST", "/v1/chat/completions", "a-6", authzMD(map[string]any{"key_id": "config:old", "team": "t", "org": ""})), bodyMsg(chat)}},
		{name: "a real signature replayed on another request id", msgs: []*extprocsvc.ProcessingRequest{
			headersMsg("POST", "/v1/chat/completions", "a-7", &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{chain.AuthzNamespace: real}}), bodyMsg(chat)}},
		{name: "a real signature for another key id", msgs: []*extprocsvc.ProcessingRequest{
			headersMsg("POST", "/v1/chat/completions", "real-1", authzMD(map[string]any{"key_id": revokedID, "team": "t", "org": "", "sig": sig})), bodyMsg(chat)}},
		{name: "count_tokens, which reserves nothing", msgs: []*extprocsvc.ProcessingRequest{
			headersMsg("POST", "/v1/messages/count_tokens", "a-8", victimMD(nil), "anthropic-version", "2023-06-01"), bodyMsg(count)}},
		{name: "an unknown path passed through", msgs: []*extprocsvc.ProcessingRequest{
			headersMsg("POST", "/v1/chat%2Fcompletions", "a-9", victimMD(nil)), bodyMsg(chat)}},
		{name: "a forged response of 100M prompt tokens", msgs: []*extprocsvc.ProcessingRequest{
			headersMsg("POST", "/v1/chat/completions", "a-10", victimMD(nil)), bodyMsg(chat),
			{Request: &extprocsvc.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocsvc.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
				{Key: ":status", RawValue: []byte("200")}, {Key: "content-type", RawValue: []byte("application/json")}}}}}},
			{Request: &extprocsvc.ProcessingRequest_ResponseBody{ResponseBody: &extprocsvc.HttpBody{EndOfStream: true,
				Body: []byte(`{"id":"x","object":"chat.completion","model":"m1","choices":[],"usage":{"prompt_tokens":100000000,"completion_tokens":1,"total_tokens":100000001}}`)}}},
		}},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			st := extprocStream(t, s.grpcAddr, a.upstream)
			var replies []string
			for _, m := range a.msgs {
				if err := st.Send(m); err != nil {
					break
				}
				r, err := st.Recv()
				if err != nil {
					break
				}
				replies = append(replies, prototext.Format(r))
				if r.GetImmediateResponse() != nil {
					break
				}
			}
			all := strings.Join(replies, "\n")
			for _, secret := range []string{attackP1Key, attackP2Key} {
				if strings.Contains(all, secret) {
					t.Fatalf("a forged stream got provider credential %s:\n%s", secret, all)
				}
			}
			if !strings.Contains(all, "immediate_response") {
				t.Errorf("the forged stream was not refused:\n%s", all)
			}
		})
	}
	if recs := strings.TrimSpace(s.run(t, "spend", "--records", "--format", "json", "--limit", "0")); recs != "" {
		t.Errorf("forged streams left spend records:\n%s", recs)
	}
	if p1.Requests()+p2.Requests() != 0 {
		t.Errorf("the providers were called")
	}
	page := s.metrics(t)
	if n := metricValue(page, `sluice_principal_refused_total{reason="missing"}`); n < 5 {
		t.Errorf("sluice_principal_refused_total{reason=missing} = %v, want at least 5", n)
	}
	if n := metricValue(page, `sluice_principal_refused_total{reason="bad_signature"}`); n < 3 {
		t.Errorf("sluice_principal_refused_total{reason=bad_signature} = %v, want at least 3", n)
	}
	logs := s.log.String()
	if !strings.Contains(logs, "refused: no provider credential sent") || !strings.Contains(logs, "peer=127.0.0.1:") {
		t.Errorf("no log line naming the peer of a refused stream:\n%s", logs)
	}
	if strings.Contains(logs, sig) || strings.Contains(logs, "v1.1765000000000") {
		t.Errorf("a signature reached the log:\n%s", logs)
	}

	// Through Envoy (the emulator, over Sluice's own xDS), with signing
	// on: a plain request and a fallback one work and are recorded.
	b, err := xds.Bootstrap(xds.BootstrapOptions{NodeID: "e2e-principal", XDSAddress: s.xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	eachProxy(t, b, func(t *testing.T, p proxy) {
		for _, body := range []string{chat, ha} {
			st, h, resp := call{path: "/v1/chat/completions", body: body}.do(t, p.url, victim)
			if st != 200 {
				t.Fatalf("%s: %d %s", body, st, resp)
			}
			if rec := s.awaitRecord(t, h.Get("x-sluice-request-id")); rec.KeyID != victimID {
				t.Errorf("record %+v, want the victim key's", rec)
			}
		}
	})
}

// TestPrincipalAcrossTwoProcesses: ext_authz answered by one Sluice,
// ext_proc by another, both with the same security.principal_keys: the
// request is served and recorded by the second. With another key on the
// second, the principal does not verify: 403 principal_refused, and the
// provider is never called.
func TestPrincipalAcrossTwoProcesses(t *testing.T) {
	const secret = "sk-sluice-TWOPROCESSkey0123456789abcdefghijklmnopqrstu"
	mock, mockAddr := mockProvider(t, mockllm.Options{APIKey: attackP1Key})
	policy := func(principalKey string) string {
		return fmt.Sprintf(`
store: {sqlite: sluice.db}
ledger: {sqlite: ledger.db}
providers: [{name: p1, kind: openai, base_url: "http://%s", api_key: %s}]
models: [{name: m1, provider: p1}]
pricing: {m1: {input: 150000, output: 600000}}
teams: [{name: t}]
keys: [{name: k, team: t, sha256: "%s"}]
security: {principal_keys: [{value: "%s"}]}
`, mockAddr, attackP1Key, sha256Hex(secret), principalKey)
	}
	authzSide := startSluice(t, policy(attackPrincipalKey))
	for _, tc := range []struct {
		name   string
		key    string
		status int
	}{
		{"same keys", attackPrincipalKey, 200},
		{"another key", "another-principal-secret-0123456789abcdef", 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			extprocSide := startSluice(t, policy(tc.key))
			b := bootstrap(t, []*clusterv3.Cluster{
				staticCluster(t, "authz", authzSide.grpcAddr, true),
				staticCluster(t, "extproc", extprocSide.grpcAddr, true),
				staticCluster(t, "provider", mockAddr, false),
			}, filter(t, chain.AuthzFilterName, chain.Authz(chain.Options{Cluster: "authz"})),
				filter(t, chain.ExtProcFilterName, chain.ExtProc(chain.Options{Cluster: "extproc"})))
			eachProxy(t, b, func(t *testing.T, p proxy) {
				before := mock.Requests()
				rid := "two-processes-" + tc.key[:7]
				st, _, body := call{path: "/v1/chat/completions", body: `{"model":"m1","messages":[{"role":"user","content":"hi"}]}`,
					headers: map[string]string{"x-request-id": rid}}.do(t, p.url, secret)
				if st != tc.status {
					t.Fatalf("%d %s, want %d", st, body, tc.status)
				}
				if tc.status == 200 {
					if rec := extprocSide.awaitRecord(t, rid); rec.KeyID != "config:k" {
						t.Errorf("record %+v", rec)
					}
					return
				}
				if !strings.Contains(body, "principal_refused") || mock.Requests() != before {
					t.Errorf("refusal %q; the provider saw %d requests", body, mock.Requests()-before)
				}
			})
		})
	}
}
