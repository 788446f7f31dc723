package authz_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicegw/sluice/authz"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/principal"
	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/internal/store/sqlite"
	"github.com/sluicegw/sluice/internal/testenv"
	"github.com/sluicegw/sluice/policies"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Fixed test keys (valid format).
const (
	keyGood     = "sk-sluice-GOOD456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefg"
	keyRevoked  = "sk-sluice-REVO456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefg"
	keyExpired  = "sk-sluice-EXPI456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefg"
	keyLimited  = "sk-sluice-LIMI456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefg"
	keyOrphan   = "sk-sluice-ORPH456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefg"
	keyDeclared = "sk-sluice-DECL456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefg"
	keyUnknown  = "sk-sluice-UNKN456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefg"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

const configYAML = `
providers:
  - {name: openai, kind: openai, base_url: "https://api.openai.com", api_key: "${OPENAI_API_KEY}"}
models:
  - {name: gpt-4o, provider: openai}
  - {name: gpt-4o-mini, provider: openai}
orgs:
  - {name: acme}
teams:
  - name: search
    org: acme
    models: ["gpt-4o*"]
    limits: {requests: {per_minute: 1000}}
  - name: tight
    limits: {requests: {per_minute: 3}}
keys:
  - name: gitops-bot
    team: search
    sha256: %s
    prefix: sk-sluice-DECL45
    models: [gpt-4o-mini]
    expires_at: 2027-01-01T00:00:00Z
`

// fixture is a checker over a real SQLite store, with a settable clock.
type fixture struct {
	ring    *keyring.Ring
	store   store.Store
	checker *authz.Checker
	now     atomic.Pointer[time.Time]
	ids     map[string]string // secret → key id
	dbPath  string
	keys    *principal.Keys // signs the principals; nil: none
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	dir := t.TempDir()
	env := func(k string) (string, bool) {
		v, ok := map[string]string{"OPENAI_API_KEY": "sk-upstream"}[k]
		return v, ok
	}
	cfg, err := policies.Parse(fmt.Appendf(nil, configYAML, apikey.HashHex(keyDeclared)), "sluice.yaml", env)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := policies.Compile(cfg, filepath.Join(dir, "sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := sqlite.Open(ctx, snap.SQLitePath())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := &fixture{store: st, ids: map[string]string{}, dbPath: snap.SQLitePath()}
	f.setNow(t0)
	add := func(secret, team string, mutate func(*store.Key)) {
		k := store.Key{
			ID: "key_" + secret[len(apikey.Prefix):len(apikey.Prefix)+4], Prefix: apikey.PublicPrefix(secret),
			Hash: apikey.Hash(secret), Team: team, Name: strings.ToLower(secret[10:14]), CreatedAt: t0.Add(-time.Hour),
		}
		if mutate != nil {
			mutate(&k)
		}
		if err := st.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		f.ids[secret] = k.ID
	}
	add(keyGood, "search", nil)
	add(keyRevoked, "search", nil)
	add(keyExpired, "search", func(k *store.Key) { k.ExpiresAt = t0.Add(-time.Minute) })
	add(keyLimited, "tight", func(k *store.Key) { k.Limits.Requests.PerMinute = 2 })
	add(keyOrphan, "gone", nil)
	if _, err := st.RevokeKey(ctx, f.ids[keyRevoked], t0.Add(-30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	f.ring = keyring.New(testenv.Quiet())
	f.ring.SetPolicy(snap)
	if err := f.ring.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	f.keys = testKeys(t)
	f.checker = authz.NewChecker(f.ring, admission.NewLocal(limits.New(limits.Options{}), admission.LocalOptions{}), func() *principal.Keys { return f.keys }, func() time.Time { return *f.now.Load() })
	return f
}

func (f *fixture) setNow(t time.Time) { f.now.Store(&t) }

// serve runs the authz gRPC server on 127.0.0.1:0 and returns a client.
func (f *fixture) serve(t *testing.T) authv3.AuthorizationClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	log := testenv.Quiet()
	authv3.RegisterAuthorizationServer(gs, authz.NewServer(f.checker, authz.NewMetrics(prometheus.NewRegistry()), log))
	go gs.Serve(ln)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); gs.Stop() })
	return authv3.NewAuthorizationClient(conn)
}

var streamID atomic.Uint64

// envoyCheck builds a CheckRequest the way Envoy's ext_authz filter does
// (check_request_utils.cc): every header including pseudo-headers, keys
// lower-cased, duplicates comma-joined; http.id the numeric stream id;
// path with query; host from :authority; protocol string.
func envoyCheck(method, path string, hdrs ...string) *authv3.CheckRequest {
	headers := map[string]string{
		":method":      method,
		":path":        path,
		":scheme":      "http",
		":authority":   "llm.internal:10000",
		"user-agent":   "OpenAI/Python 1.54.0",
		"x-request-id": "0c5c4b0e-3c9f-4f0e-8f53-6d1f3b1b2c3d",
	}
	for i := 0; i+1 < len(hdrs); i += 2 {
		k := strings.ToLower(hdrs[i])
		if old, ok := headers[k]; ok {
			headers[k] = old + "," + hdrs[i+1]
		} else {
			headers[k] = hdrs[i+1]
		}
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:      &authv3.AttributeContext_Peer{Address: sockAddr("127.0.0.1", 51234)},
		Destination: &authv3.AttributeContext_Peer{Address: sockAddr("127.0.0.1", 10000)},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id:       fmt.Sprint(streamID.Add(1) + 1_000_000),
			Method:   method,
			Headers:  headers,
			Path:     path,
			Host:     headers[":authority"],
			Scheme:   "http",
			Protocol: "HTTP/1.1",
		}},
	}}
}

func sockAddr(ip string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

func okResponse(meta map[string]any) *authv3.CheckResponse {
	s, err := structpb.NewStruct(meta)
	if err != nil {
		panic(err)
	}
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
			HeadersToRemove: []string{"authorization", "x-api-key", "api-key"},
		}},
		DynamicMetadata: s,
	}
}

func hdr(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: v}, Append: wrapperspb.Bool(false)}
}

func denied(grpcCode int32, reason string, status int, body string, extra ...*corev3.HeaderValueOption) *authv3.CheckResponse {
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: grpcCode, Message: reason},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(status)},
			Headers: append([]*corev3.HeaderValueOption{hdr("content-type", "application/json")}, extra...),
			Body:    body,
		}},
	}
}

const (
	grpcUnauthenticated  = 16
	grpcPermissionDenied = 7
	chat                 = "/v1/chat/completions"
	messages             = "/v1/messages"
	wwwAuth              = `Bearer realm="sluice"`
	// OpenAI's and Anthropic's own words for a missing and an unknown
	// key; OpenAI's echoes the key's first 8 and last 4 characters.
	missingMsg          = "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY). This gateway also reads it from the x-api-key header; its keys start with sk-sluice-."
	missingMsgAnthropic = "x-api-key header is required"
	unknownMsg          = "Incorrect API key provided: sk-sluic*****************************************defg. You can get an API key from this gateway's operator (`sluice keys create`)."
	unknownMsgAnthropic = "invalid x-api-key"
)

func TestCheckOverGRPC(t *testing.T) {
	f := newFixture(t)
	client := f.serve(t)
	tests := []struct {
		name string
		req  *authv3.CheckRequest
		want *authv3.CheckResponse
	}{
		{"bearer key, OpenAI path", envoyCheck("POST", chat, "authorization", "Bearer "+keyGood, "content-type", "application/json"),
			okResponse(map[string]any{"key_id": "key_GOOD", "key_prefix": "sk-sluice-GOOD45", "key_name": "good", "team": "search", "org": "acme", "team_models": []any{"gpt-4o*"}})},
		{"x-api-key, Anthropic path with query", envoyCheck("POST", messages+"?beta=true", "x-api-key", keyGood, "anthropic-version", "2023-06-01"),
			okResponse(map[string]any{"key_id": "key_GOOD", "key_prefix": "sk-sluice-GOOD45", "key_name": "good", "team": "search", "org": "acme", "team_models": []any{"gpt-4o*"}})},
		{"key declared in config by hash", envoyCheck("POST", chat, "authorization", "Bearer "+keyDeclared),
			okResponse(map[string]any{"key_id": "config:gitops-bot", "key_prefix": "sk-sluice-DECL45", "key_name": "gitops-bot", "team": "search", "org": "acme", "key_models": []any{"gpt-4o-mini"}, "team_models": []any{"gpt-4o*"}})},
		{"no credential, OpenAI dialect", envoyCheck("POST", chat),
			denied(grpcUnauthenticated, "missing_credential", 401, `{"error":{"message":"`+missingMsg+`","type":"invalid_request_error","param":null,"code":null}}`, hdr("www-authenticate", wwwAuth))},
		{"no credential, Anthropic dialect", envoyCheck("POST", messages),
			denied(grpcUnauthenticated, "missing_credential", 401, `{"type":"error","error":{"type":"authentication_error","message":"`+missingMsgAnthropic+`"}}`, hdr("www-authenticate", wwwAuth))},
		{"Bearer with nothing after it", envoyCheck("POST", chat, "authorization", "Bearer "),
			denied(grpcUnauthenticated, "malformed_credential", 401, `{"error":{"message":"the authorization header says \"Bearer\" but carries no API key","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, hdr("www-authenticate", wwwAuth))},
		{"wrong prefix", envoyCheck("POST", chat, "authorization", "Bearer sk-proj-abcdefabcdefabcdefabcdefabcdefabcdef"),
			denied(grpcUnauthenticated, "malformed_credential", 401, `{"error":{"message":"the API key must start with \"sk-sluice-\" (in the authorization header)","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, hdr("www-authenticate", wwwAuth))},
		// Envoy sanitises header values to UTF-8 (bad bytes become '!').
		{"non-ASCII garbage", envoyCheck("POST", chat, "x-api-key", "sk-sluice-!!"+strings.Repeat("é", 20)),
			denied(grpcUnauthenticated, "malformed_credential", 401, `{"error":{"message":"the API key contains a character outside [0-9A-Za-z] at position 11 (in the x-api-key header)","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, hdr("www-authenticate", wwwAuth))},
		{"10 KB header value", envoyCheck("POST", chat, "authorization", "Bearer "+strings.Repeat("x", 10240)),
			denied(grpcUnauthenticated, "malformed_credential", 401, `{"error":{"message":"the authorization header is too long (10247 bytes)","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, hdr("www-authenticate", wwwAuth))},
		{"two authorization headers, joined by Envoy", envoyCheck("POST", chat, "authorization", "Bearer "+keyGood, "authorization", "Bearer "+keyGood),
			denied(grpcUnauthenticated, "malformed_credential", 401, `{"error":{"message":"more than one authorization header (or a comma in it); send exactly one API key","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, hdr("www-authenticate", wwwAuth))},
		{"unknown key", envoyCheck("POST", chat, "authorization", "Bearer "+keyUnknown),
			denied(grpcUnauthenticated, "unknown_key", 401, `{"error":{"message":"`+unknownMsg+`","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, hdr("www-authenticate", wwwAuth))},
		{"revoked key, Anthropic dialect", envoyCheck("POST", messages, "x-api-key", keyRevoked),
			denied(grpcPermissionDenied, "revoked_key", 403, `{"type":"error","error":{"type":"permission_error","message":"API key key_REVO (sk-sluice-REVO45…) was revoked at 2026-11-30T11:30:00Z"}}`)},
		{"unknown key on the model list asked by an Anthropic client: Anthropic's shape", envoyCheck("GET", "/v1/models", "x-api-key", keyUnknown, "anthropic-version", "2023-06-01"),
			denied(grpcUnauthenticated, "unknown_key", 401, `{"type":"error","error":{"type":"authentication_error","message":"`+unknownMsgAnthropic+`"}}`, hdr("www-authenticate", wwwAuth))},
		{"unknown key on the model list without anthropic-version: OpenAI's shape", envoyCheck("GET", "/v1/models", "x-api-key", keyUnknown),
			denied(grpcUnauthenticated, "unknown_key", 401, `{"error":{"message":"`+unknownMsg+`","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, hdr("www-authenticate", wwwAuth))},
		{"expired key", envoyCheck("POST", chat, "authorization", "Bearer "+keyExpired),
			denied(grpcPermissionDenied, "expired_key", 403, `{"error":{"message":"API key key_EXPI (sk-sluice-EXPI45…) expired at 2026-11-30T11:59:00Z","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`)},
		{"key of a team that no longer exists", envoyCheck("POST", chat, "authorization", "Bearer "+keyOrphan),
			denied(grpcPermissionDenied, "unknown_team", 403, `{"error":{"message":"API key key_ORPH belongs to team \"gone\", which no longer exists","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := client.Check(context.Background(), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			f.checkSignature(t, tt.req, got)
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("CheckResponse mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRateLimits(t *testing.T) {
	f := newFixture(t)
	client := f.serve(t)
	check := func(path string) *authv3.CheckResponse {
		t.Helper()
		resp, err := client.Check(context.Background(), envoyCheck("POST", path, "authorization", "Bearer "+keyLimited))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// The key allows 2 per minute; its team 3 per minute.
	f.setNow(t0.Add(10 * time.Second))
	for i := range 2 {
		if c := check(chat).GetStatus().GetCode(); c != 0 {
			t.Fatalf("request %d: status %d, want OK", i, c)
		}
	}
	// The window started at t0+10s; buckets are 1 s wide, so the count
	// frees at t0+10s+61s: 51 s after t0+20s.
	f.setNow(t0.Add(20 * time.Second))
	want := denied(grpcPermissionDenied, "rate_limited", 429,
		`{"error":{"message":"Rate limit reached for key key_LIMI on requests per min (RPM): Limit 2, Used 2, Requested 1. Please try again in 51s.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
		hdr("retry-after", "51"))
	if diff := cmp.Diff(want, check(chat), protocmp.Transform()); diff != "" {
		t.Errorf("429 mismatch (-want +got):\n%s", diff)
	}
	wantAnthropic := denied(grpcPermissionDenied, "rate_limited", 429,
		`{"type":"error","error":{"type":"rate_limit_error","message":"rate limit reached: key key_LIMI allows 2 requests per minute; retry in 51s"}}`,
		hdr("retry-after", "51"))
	if diff := cmp.Diff(wantAnthropic, check(messages), protocmp.Transform()); diff != "" {
		t.Errorf("Anthropic 429 mismatch (-want +got):\n%s", diff)
	}
	// Once the window has moved on, one more fits the key, and then the
	// team's limit (3 per minute over both keys' requests) is the one hit.
	f.setNow(t0.Add(71 * time.Second))
	if c := check(chat).GetStatus().GetCode(); c != 0 {
		t.Fatalf("after retry-after: status %d, want OK", c)
	}
	if c := check(chat).GetStatus().GetCode(); c != 0 {
		t.Fatalf("second after retry-after: status %d, want OK", c)
	}
	got := check(chat)
	if !strings.Contains(got.GetDeniedResponse().GetBody(), "Rate limit reached for key key_LIMI on requests per min (RPM): Limit 2, Used 2, Requested 1.") {
		t.Errorf("third: %s", got.GetDeniedResponse().GetBody())
	}
}

func TestTeamLimitSharedByKeys(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// A second key in team "tight" (3 per minute for the whole team).
	other := "sk-sluice-OTHR456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefg"
	if err := f.store.CreateKey(ctx, store.Key{ID: "key_OTHR", Prefix: apikey.PublicPrefix(other), Hash: apikey.Hash(other), Team: "tight", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := f.ring.Sync(ctx, f.store); err != nil {
		t.Fatal(err)
	}
	var statuses []int
	for _, k := range []string{keyLimited, other, other, other, keyLimited} {
		d := f.checker.Check(context.Background(), envoyCheck("POST", chat, "authorization", "Bearer "+k))
		statuses = append(statuses, status(d))
	}
	if diff := cmp.Diff([]int{200, 200, 200, 429, 429}, statuses); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	d := f.checker.Check(context.Background(), envoyCheck("POST", chat, "authorization", "Bearer "+other))
	if want := "rate limit reached: team tight allows 3 requests per minute; retry in 61s"; d.Err == nil || d.Err.Message != want {
		t.Errorf("refusal = %v, want %q", d.Err, want)
	}
}

// unreachable is an admission backend that cannot be reached.
type unreachable struct{ admission.Backend }

func (unreachable) CountRequest(context.Context, *keyring.Principal, time.Time) error {
	return errors.New("dial tcp 127.0.0.1:6379: connection refused")
}

// TestAdmissionUnavailable: a backend that cannot count the request (an
// error that is not a refusal) refuses it with 503 admission_unavailable,
// as ext_proc does, and says nothing of the error.
func TestAdmissionUnavailable(t *testing.T) {
	f := newFixture(t)
	c := authz.NewChecker(f.ring, unreachable{}, func() *principal.Keys { return f.keys }, func() time.Time { return t0 })
	d := c.Check(context.Background(), envoyCheck("POST", chat, "authorization", "Bearer "+keyGood))
	if d.Allowed() {
		t.Fatal("allowed without counting the request")
	}
	if status(d) != 503 || d.Reason() != apierr.CodeAdmissionUnavailable || strings.Contains(d.Err.Message, "6379") {
		t.Errorf("decision %d %s %q; want 503 admission_unavailable", status(d), d.Reason(), d.Err.Message)
	}
}

// TestConcurrentChecks hammers one key with a limit from many goroutines
// at one instant: exactly the limit is admitted.
func TestConcurrentChecks(t *testing.T) {
	f := newFixture(t)
	client := f.serve(t)
	const workers, each = 8, 40
	var ok, limited, other atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				key := keyLimited
				if (w+i)%2 == 0 {
					key = keyGood
				}
				resp, err := client.Check(context.Background(), envoyCheck("POST", chat, "authorization", "Bearer "+key))
				if err != nil {
					errs <- err
					return
				}
				switch {
				case resp.GetStatus().GetCode() == 0:
					ok.Add(1)
				case resp.GetDeniedResponse().GetStatus().GetCode() == 429:
					limited.Add(1)
				default:
					other.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Half the calls use keyGood (team limit 1000/min: all pass); the
	// other half keyLimited (2/min): exactly 2 pass.
	if got, want := ok.Load(), int64(workers*each/2+2); got != want {
		t.Errorf("admitted %d, want %d", got, want)
	}
	if got, want := limited.Load(), int64(workers*each/2-2); got != want {
		t.Errorf("rate limited %d, want %d", got, want)
	}
	if other.Load() != 0 {
		t.Errorf("%d unexpected responses", other.Load())
	}
}

func TestRevocationReachesRunningChecker(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if d := f.checker.Check(context.Background(), envoyCheck("POST", chat, "authorization", "Bearer "+keyGood)); !d.Allowed() {
		t.Fatalf("before revoke: %d %s", d.Err.Status, d.Err.Message)
	}
	// Another handle on the same file, as `sluice keys revoke` would use.
	other, err := sqlite.Open(ctx, f.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.RevokeKey(ctx, f.ids[keyGood], t0); err != nil {
		t.Fatal(err)
	}
	if err := f.ring.Sync(ctx, f.store); err != nil {
		t.Fatal(err)
	}
	d := f.checker.Check(context.Background(), envoyCheck("POST", chat, "authorization", "Bearer "+keyGood))
	if status(d) != 403 || d.Reason() != apierr.CodeRevokedKey {
		t.Fatalf("after revoke: %d %s", status(d), d.Reason())
	}
}

// status is the HTTP status a decision answers with: 200 admits.
func status(d authz.Decision) int {
	if d.Allowed() {
		return 200
	}
	return d.Err.Status
}

func BenchmarkCheck(b *testing.B) {
	f := newFixture(b)
	req := envoyCheck("POST", chat, "authorization", "Bearer "+keyGood, "content-type", "application/json")
	b.ReportAllocs()
	now := t0
	for b.Loop() {
		// 10 checks a second keeps the key's team (1000/min) under its
		// limit, so every iteration takes the full admit path.
		now = now.Add(100 * time.Millisecond)
		f.setNow(now)
		d := f.checker.Check(context.Background(), req)
		if !d.Allowed() {
			b.Fatal(d.Err.Message)
		}
		_ = authz.Response(&d)
	}
}
