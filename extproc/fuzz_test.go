package extproc_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/authz"
	"github.com/sluicegw/sluice/extproc"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/principal"
	"github.com/sluicegw/sluice/internal/tokens"
	"github.com/sluicegw/sluice/policies"
)

// fuzzConfig has every kind of model the processor treats differently:
// priced (at a price where 2^32 tokens × 128 choices overflows an int64),
// with a per-request fee, unpriced, capped by max_output_tokens, weighted,
// fallback over three providers and over two Anthropic ones, and
// Anthropic; budgets, token and request limits on the team, a tiny budget
// on a second key. A small body limit, so bodies cross it. %[1]s is the
// gateway block's policy fields, %[2]s the key's hash.
const fuzzConfig = `
gateway: {max_request_body_bytes: 4096, %[1]s}
providers:
  - {name: openai, kind: openai, base_url: "https://api.openai.com", api_key: "sk-upstream"}
  - {name: claude, kind: anthropic, base_url: "https://api.anthropic.com", api_key: "sk-ant"}
  - {name: claude2, kind: anthropic, base_url: "https://claude2.example", api_key: "sk-ant2"}
  - {name: az, kind: azure-openai, base_url: "https://x.openai.azure.com", api_key: "azkey", api_version: "2024-10-21"}
  - {name: compat, kind: openai-compatible, base_url: "http://llm.internal:8000", api_key: "sk-compat"}
models:
  - {name: gpt, provider: openai, upstream: gpt-4o}
  - {name: free, provider: compat}
  - {name: capped, provider: openai, max_output_tokens: 16}
  - {name: sonnet, provider: claude, upstream: claude-sonnet-4}
  - {name: mix, routing: weighted, providers: [{name: openai, weight: 1}, {name: compat, weight: 3}]}
  - {name: fb, providers: [{name: openai}, {name: az, upstream: dep-fb}, {name: compat}]}
  - {name: fb-claude, providers: [{name: claude}, {name: claude2}]}
pricing:
  gpt: {input: 2500000, cached_input: 1250000, output: 10000000, per_request: 100}
  capped: {input: 1000000, output: 2000000}
  sonnet: {input: 3000000, cached_input: 300000, output: 15000000}
  mix: {input: 1000000, output: 1000000}
  fb: {input: 1000000, output: 2000000}
  fb-claude: {input: 3000000, output: 15000000}
teams:
  - name: t
    limits:
      requests: {per_minute: 1000}
      tokens: {total: {per_minute: 10000000}, output: {per_hour: 50000000}}
      budgets:
        - {micro_usd: 1000000, period: day}
        - {micro_usd: 500000, period: rolling, window: 1h}
      models:
        sonnet: {budgets: [{micro_usd: 200000, period: lifetime}]}
keys:
  - {name: k, team: t, sha256: "%[2]s"}
  - {name: poor, team: t, sha256: "%[3]s", limits: {budgets: [{micro_usd: 50, period: day}]}}
`

const fuzzPoorKey = "sk-sluice-POOR56789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefg"

// fuzzEnv is what every iteration of one fuzz worker shares: the compiled
// policies (lenient and strict gateway), the key ring and the metrics.
// Limits, admission and the ledger are new in every iteration.
type fuzzEnv struct {
	snaps   [2]*policies.Snapshot
	rings   [2]*keyring.Ring
	metrics *extproc.Metrics
	log     *slog.Logger
}

func newFuzzEnv(t testing.TB) *fuzzEnv {
	e := &fuzzEnv{metrics: extproc.NewMetrics(prometheus.NewRegistry()), log: slog.New(slog.DiscardHandler)}
	for i, gw := range []string{"unknown_paths: pass, pass_to: {openai: openai, anthropic: claude}, unpriced_models: allow", "unknown_paths: deny, unpriced_models: deny"} {
		cfg, err := policies.Parse(fmt.Appendf(nil, fuzzConfig, gw, apikey.HashHex(goldenKey), apikey.HashHex(fuzzPoorKey)), "sluice.yaml", nil)
		if err != nil {
			t.Fatal(err)
		}
		snap, err := policies.Compile(cfg, filepath.Join(t.TempDir(), "sluice.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		e.snaps[i] = snap
		e.rings[i] = keyring.New(e.log)
		e.rings[i].SetPolicy(snap)
	}
	return e
}

// FuzzProcessor drives the whole ext_proc processor — NewProcessor and
// NewUpstreamProcessor with real policies, limits and admission — over a
// random sequence of messages on up to ten interleaved streams (decoded
// by parseScript from a line-based script, so the seeds in
// testdata/fuzz/FuzzProcessor read as exchanges), and checks what must
// hold whatever Envoy, the client and the provider send:
//
//   - nothing panics;
//   - every message gets exactly one reply, of its own type or an
//     ImmediateResponse;
//   - no spend record has a negative count or cost, or an empty or
//     repeated identity;
//   - output Sluice counted itself (no usage anywhere in the response) is
//     never charged above what admission reserved for it;
//   - once every stream has ended (cancelled, or closed at the end of the
//     script as Envoy closes it), no reservation is held.
func FuzzProcessor(f *testing.F) {
	f.Add([]byte("h0 POST /v1/chat/completions a\nb0 {\"model\":\"gpt\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}\ns0 200 application/json\nD0 {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7}}\n"))
	f.Add([]byte("h0 POST /v1/chat/completions a\nb0 {\"model\":\"gpt\",\"max_tokens\":4294967295,\"n\":128,\"messages\":[]}\n"))
	f.Add([]byte("h0 POST /v1/messages x\nb0 {\"model\":\"sonnet\",\"max_tokens\":13,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}\ns0 200 text/event-stream\nd0 event: content_block_delta\\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"a b c d e f g h i j k l m n o p q r s t u v w x y z\"}}\\n\\n\nc0\n"))
	env := newFuzzEnv(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		runScript(t, env, data)
	})
}

// Script lines: an op letter, a stream digit (0–4 downstream, 5–9 an
// upstream attempt), then the op's text, in which \n, \r, \\ and \xHH are
// escapes. A first line "strict" picks the gateway that denies unknown
// paths and unpriced models.
//
//	hS METHOD PATH [FLAGS] [name:value]…   request headers; FLAGS: a = ext_authz
//	                                       metadata for the key, p = for the poor key,
//	                                       u = for an unknown key, b = bearer, x = x-api-key,
//	                                       e = end_of_stream, m = the handoff of the
//	                                       downstream stream S-5, n = no attempt count;
//	                                       an upstream attempt's host is a provider's
//	                                       (5 openai, 6 az, 7 compat, 8 claude,
//	                                       9 claude2), g = no host provider, v = an
//	                                       unknown one
//	bS BODY        request body (end_of_stream)
//	pS BODY        request body chunk without end_of_stream
//	zS N           a chat request body of N bytes (the body limit is 4096)
//	qS             request trailers
//	sS STATUS [CONTENT-TYPE [ENCODING]] [e] [name:value]…  response headers (e: end_of_stream)
//	dS BODY        response body chunk
//	DS BODY        response body chunk with end_of_stream
//	tS             response trailers
//	xS             a message with no request set
//	cS             the stream is reset (Cancel); its next message opens a new one
type scriptStep struct {
	op     byte
	stream int
	text   string
}

const maxScriptSteps = 64

func parseScript(data []byte) (strict bool, steps []scriptStep) {
	lines := strings.Split(string(data), "\n")
	if len(lines) > 0 && lines[0] == "strict" {
		strict, lines = true, lines[1:]
	}
	for _, l := range lines {
		if len(l) < 2 || l[1] < '0' || l[1] > '9' {
			continue
		}
		steps = append(steps, scriptStep{op: l[0], stream: int(l[1] - '0'), text: unescape(strings.TrimPrefix(l[2:], " "))})
		if len(steps) == maxScriptSteps {
			break
		}
	}
	return strict, steps
}

func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'x':
			if i+2 < len(s) {
				if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
					b.WriteByte(byte(v))
					i += 2
					continue
				}
			}
			b.WriteString(`\x`)
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// fuzzProc is one open stream of a script.
type fuzzProc interface {
	Handle(ctx context.Context, m *extprocsvc.ProcessingRequest) *extprocsvc.ProcessingResponse
	Cancel(ctx context.Context)
}

// fuzzAdmitter is the real admitter, remembering each grant's reserved
// output cap by its settlement so the record can be checked against it.
type fuzzAdmitter struct {
	*admission.Local
	mu      sync.Mutex
	settled []admission.Grant
}

func (a *fuzzAdmitter) Settle(ctx context.Context, g admission.Grant, act admission.Actual) {
	a.Local.Settle(ctx, g, act)
	a.mu.Lock()
	a.settled = append(a.settled, g)
	a.mu.Unlock()
}

var _ extproc.Admitter = (*fuzzAdmitter)(nil)

func runScript(t *testing.T, env *fuzzEnv, data []byte) {
	strict, steps := parseScript(data)
	pol := 0
	if strict {
		pol = 1
	}
	snap := env.snaps[pol]
	now := goldenStart
	clock := func() time.Time { return now }
	counters := limits.New(limits.Options{})
	adm := &fuzzAdmitter{Local: admission.NewLocal(counters, admission.LocalOptions{})}
	led := &goldenLedger{}
	var draw uint64
	deps := &extproc.Deps{
		Policy:     func() *policies.Snapshot { return snap },
		Ring:       env.rings[pol],
		Auth:       authz.NewChecker(env.rings[pol], admission.NewLocal(counters, admission.LocalOptions{}), nil, clock),
		Admitter:   adm,
		Ledger:     led,
		Principals: harnessPrincipals,
		Metrics:    env.metrics,
		Log:        env.log,
		Now:        clock,
		Rand:       func() uint64 { draw += 0x9e3779b97f4a7c15; return draw >> 1 },
		NewID:      sequentialIDs(),
	}
	ctx := t.Context()

	var procs [10]fuzzProc
	var handoff [5]*structpb.Struct // the last request-body metadata of each downstream stream
	// responseUsage says whether a stream's response carried anything a
	// meter could read as a provider's count, for the output-cap check.
	var responseUsage [10]bool
	// settledUsage pairs each settlement with whether its response had usage.
	var settledUsage []bool
	end := func(i int) {
		n := len(adm.settled)
		procs[i].Cancel(ctx)
		if len(adm.settled) > n {
			settledUsage = append(settledUsage, responseUsage[i])
		}
		procs[i] = nil
	}
	for _, s := range steps {
		now = now.Add(time.Second)
		i := s.stream
		if s.op == 'c' {
			if procs[i] != nil {
				end(i)
			}
			continue
		}
		m := scriptMessage(s, handoff)
		if m == nil {
			continue
		}
		if procs[i] == nil {
			if i < 5 {
				procs[i] = extproc.NewProcessor(deps)
			} else {
				procs[i] = extproc.NewUpstreamProcessor(deps)
			}
			responseUsage[i] = false
		}
		if m.GetResponseBody() != nil || m.GetResponseHeaders() != nil {
			if bytes.Contains(m.GetResponseBody().GetBody(), []byte("usage")) || bytes.Contains(m.GetResponseBody().GetBody(), []byte(`\`)) {
				responseUsage[i] = true
			}
		}
		n := len(adm.settled)
		resp := procs[i].Handle(ctx, m)
		if len(adm.settled) > n {
			settledUsage = append(settledUsage, responseUsage[i])
		}
		checkReply(t, s, m, resp)
		if i < 5 && m.GetRequestBody() != nil && resp.GetDynamicMetadata() != nil {
			handoff[i] = resp.GetDynamicMetadata()
		}
		if resp.GetImmediateResponse() != nil {
			// Envoy ends the stream after a local reply.
			end(i)
		}
	}
	// The end: Envoy closes every stream still open.
	now = now.Add(time.Second)
	for i := range procs {
		if procs[i] != nil {
			end(i)
		}
	}

	if held := adm.Held(); held != 0 {
		t.Fatalf("%d reservations still held after every stream ended", held)
	}
	recs := led.all()
	if len(recs) != len(adm.settled) {
		t.Fatalf("%d spend records for %d settlements", len(recs), len(adm.settled))
	}
	ids := map[string]bool{}
	for k, r := range recs {
		for name, v := range map[string]int64{"input": r.Tokens[tokens.Input], "cached input": r.Tokens[tokens.CachedInput], "cache creation": r.Tokens[tokens.CacheWrite],
			"output": r.Tokens[tokens.Output], "reasoning": r.Tokens[tokens.Reasoning], "cost": r.CostPico} {
			if v < 0 {
				t.Errorf("record %s: %s %d < 0: %+v", r.RequestID, name, v, r)
			}
		}
		if r.RequestID == "" || ids[r.RequestID] {
			t.Errorf("record identity %q empty or repeated", r.RequestID)
		}
		ids[r.RequestID] = true
		if g := adm.settled[k]; !settledUsage[k] && r.Tokens[tokens.Output] > g.Claim.MaxOutputTokens {
			t.Errorf("record %s: %d output tokens Sluice counted itself, above the %d reserved: %+v", r.RequestID, r.Tokens[tokens.Output], g.Claim.MaxOutputTokens, r)
		}
	}
}

// scriptMessage is the ProcessingRequest of step s (nil: not a message).
func scriptMessage(s scriptStep, handoff [5]*structpb.Struct) *extprocsvc.ProcessingRequest {
	switch s.op {
	case 'h':
		return scriptHeaders(s, handoff)
	case 'b', 'p':
		return &extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_RequestBody{RequestBody: &extprocsvc.HttpBody{Body: []byte(s.text), EndOfStream: s.op == 'b'}}}
	case 'z':
		n, _ := strconv.Atoi(s.text)
		n = min(max(n, 0), 1<<16)
		body := `{"model":"gpt","messages":[{"role":"user","content":"` + strings.Repeat("a", max(n-57, 0)) + `"}]}`
		return &extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_RequestBody{RequestBody: &extprocsvc.HttpBody{Body: []byte(body), EndOfStream: true}}}
	case 'q':
		return &extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocsvc.HttpTrailers{}}}
	case 's':
		var f, kv []string
		eos := false
		for _, w := range strings.Fields(s.text) {
			if k, v, ok := strings.Cut(w, ":"); ok && k != "" {
				kv = append(kv, strings.ToLower(k), v)
				continue
			}
			if w == "e" {
				eos = true
				continue
			}
			f = append(f, w)
		}
		for j, name := range []string{":status", "content-type", "content-encoding"} {
			if j < len(f) {
				kv = append(kv, name, f[j])
			}
		}
		return &extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocsvc.HttpHeaders{Headers: fuzzHeaders(kv...), EndOfStream: eos}}}
	case 'd', 'D':
		return &extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_ResponseBody{ResponseBody: &extprocsvc.HttpBody{Body: []byte(s.text), EndOfStream: s.op == 'D'}}}
	case 't':
		return &extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocsvc.HttpTrailers{}}}
	case 'x':
		return &extprocsvc.ProcessingRequest{}
	}
	return nil
}

func scriptHeaders(s scriptStep, handoff [5]*structpb.Struct) *extprocsvc.ProcessingRequest {
	f := strings.Fields(s.text)
	for len(f) < 3 {
		f = append(f, "")
	}
	method, path, flags := f[0], f[1], f[2]
	// An attempt's stream (5-9) carries its request's x-request-id, the
	// one of the downstream stream it is an attempt of (0-4).
	kv := []string{":method", method, ":path", path, ":authority", "gw", "x-request-id", "rid-" + strconv.Itoa(s.stream%5)}
	if s.stream >= 5 && !strings.Contains(flags, "n") {
		kv = append(kv, chain.AttemptCountHeader, strconv.Itoa(s.stream-4))
	}
	for _, c := range flags {
		switch c {
		case 'b':
			kv = append(kv, "authorization", "Bearer "+goldenKey)
		case 'x':
			kv = append(kv, "x-api-key", goldenKey)
		}
	}
	for _, h := range f[3:] {
		if k, v, ok := strings.Cut(h, ":"); ok {
			kv = append(kv, strings.ToLower(k), v)
		}
	}
	m := &extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocsvc.HttpHeaders{
		Headers: fuzzHeaders(kv...), EndOfStream: strings.Contains(flags, "e"),
	}}}
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
	for c, id := range map[rune]string{'a': "config:k", 'p': "config:poor", 'u': "config:gone"} {
		if strings.ContainsRune(flags, c) {
			st, _ := structpb.NewStruct(map[string]any{"key_id": id, "team": "t"})
			if !strings.ContainsRune(flags, 'f') { // f: a forged principal, unsigned
				st.Fields[chain.PrincipalSignatureKey] = structpb.NewStringValue(
					harnessKeys.Sign(principal.ForPrincipal, "rid-"+strconv.Itoa(s.stream%5), goldenStart, id, "t", ""))
			}
			md.FilterMetadata[chain.AuthzNamespace] = st
		}
	}
	if s.stream >= 5 && !strings.Contains(flags, "g") {
		host := [5]string{"openai", "az", "compat", "claude", "claude2"}[s.stream-5]
		if strings.Contains(flags, "v") {
			host = "nosuch"
		}
		m.Attributes = map[string]*structpb.Struct{chain.ExtProcAttributesKey: {Fields: map[string]*structpb.Value{
			chain.UpstreamHostProviderAttribute: structpb.NewStringValue(host),
		}}}
	}
	if strings.Contains(flags, "m") && s.stream >= 5 {
		if h := handoff[s.stream-5]; h != nil {
			for ns, v := range h.GetFields() {
				md.FilterMetadata[ns] = v.GetStructValue()
			}
		}
	}
	if len(md.FilterMetadata) > 0 {
		m.MetadataContext = md
	}
	return m
}

func fuzzHeaders(kv ...string) *corev3.HeaderMap {
	h := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Headers = append(h.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return h
}

// checkReply: exactly one reply, of the message's own type or an
// ImmediateResponse (an empty message gets an empty reply).
func checkReply(t *testing.T, s scriptStep, m *extprocsvc.ProcessingRequest, resp *extprocsvc.ProcessingResponse) {
	t.Helper()
	if resp == nil {
		t.Fatalf("%c%d: no reply", s.op, s.stream)
	}
	if resp.GetImmediateResponse() != nil {
		return
	}
	var ok bool
	switch m.GetRequest().(type) {
	case *extprocsvc.ProcessingRequest_RequestHeaders:
		ok = resp.GetRequestHeaders() != nil
	case *extprocsvc.ProcessingRequest_RequestBody:
		ok = resp.GetRequestBody() != nil
	case *extprocsvc.ProcessingRequest_RequestTrailers:
		ok = resp.GetRequestTrailers() != nil
	case *extprocsvc.ProcessingRequest_ResponseHeaders:
		ok = resp.GetResponseHeaders() != nil
	case *extprocsvc.ProcessingRequest_ResponseBody:
		ok = resp.GetResponseBody() != nil
	case *extprocsvc.ProcessingRequest_ResponseTrailers:
		ok = resp.GetResponseTrailers() != nil
	case nil:
		ok = resp.GetResponse() == nil
	}
	if !ok {
		t.Fatalf("%c%d: a %T answered with %T", s.op, s.stream, m.GetRequest(), resp.GetResponse())
	}
}
