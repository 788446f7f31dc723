package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicegw/sluice/internal/logbuf"
	"github.com/sluicegw/sluice/internal/testenv/pgtest"
	"github.com/sluicegw/sluice/internal/testtls"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) { pgtest.Stop(); os.Exit(code) }))
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer = logbuf.Buffer

func noEnv(string) (string, bool) { return "", false }

// run runs the CLI synchronously.
func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	err = Run(context.Background(), args, &o, &e, noEnv)
	return o.String(), e.String(), err
}

// quickstart copies examples/quickstart.yaml into a temp dir.
func quickstart(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "quickstart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

var (
	secretRE = regexp.MustCompile(`sk-sluice-[0-9A-Za-z]{43}`)
	addrRE   = regexp.MustCompile(`grpc=(127\.0\.0\.1:\d+) admin=(127\.0\.0\.1:\d+)`)
)

type server struct {
	grpcAddr, adminAddr string
	demoKey             string
	stdout, stderr      *syncBuffer
	stop                func() error
}

// startServe runs `sluice serve` on random loopback ports and waits until
// it logs its addresses.
func startServe(t *testing.T, config string, extra ...string) *server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	args := append([]string{"serve", "--shutdown-drain", "0", "--config", config, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--xds-addr", "127.0.0.1:0"}, extra...)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, args, s.stdout, s.stderr, noEnv) }()
	var once sync.Once
	var stopErr error
	s.stop = func() error {
		once.Do(func() { cancel(); stopErr = <-done })
		return stopErr
	}
	t.Cleanup(func() { s.stop() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := addrRE.FindStringSubmatch(s.stderr.String()); m != nil {
			s.grpcAddr, s.adminAddr = m[1], m[2]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve exited early: %v\nstderr:\n%s", err, s.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start; stderr:\n%s", s.stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.demoKey = secretRE.FindString(s.stdout.String())
	return s
}

func (s *server) client(t *testing.T) (authv3.AuthorizationClient, healthpb.HealthClient) {
	t.Helper()
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return authv3.NewAuthorizationClient(conn), healthpb.NewHealthClient(conn)
}

func (s *server) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.adminAddr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// checkAs builds the CheckRequest Envoy would send for a chat completion
// carrying key, and returns the HTTP status Envoy would act on.
func checkAs(t *testing.T, c authv3.AuthorizationClient, key string) int {
	t.Helper()
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{
			Id: "7", Method: "POST", Path: "/v1/chat/completions", Host: "127.0.0.1:10000", Scheme: "http", Protocol: "HTTP/1.1",
			Headers: map[string]string{
				":method": "POST", ":path": "/v1/chat/completions", ":scheme": "http", ":authority": "127.0.0.1:10000",
				"authorization": "Bearer " + key, "content-type": "application/json",
				"x-request-id": "0c5c4b0e-3c9f-4f0e-8f53-6d1f3b1b2c3d",
			},
		},
	}}}
	resp, err := c.Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetStatus().GetCode() == 0 {
		return 200
	}
	return int(resp.GetDeniedResponse().GetStatus().GetCode())
}

// within polls cond until it holds or limit passes, and reports how long
// it took.
func within(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// TestServeQuickstart is the "done when": make run's config
// serves; a Check built as Envoy builds it is OK for the demo key and 401
// for a wrong one; keys created and revoked through the CLI take effect on
// the running server within a second; health, readiness and metrics answer.
func TestServeQuickstart(t *testing.T) {
	config := quickstart(t)
	// Debug logging: denials are logged, and still no secret may appear.
	s := startServe(t, config, "--demo-key", "--log-level", "debug")
	if s.demoKey == "" {
		t.Fatalf("no demo key printed; stdout:\n%s", s.stdout.String())
	}
	az, health := s.client(t)

	hr, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "envoy.service.auth.v3.Authorization"})
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health: %v %v", hr, err)
	}
	if code, body := s.get(t, "/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("/readyz = %d %q", code, body)
	}
	if code, _ := s.get(t, "/healthz"); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	// The quickstart sets no admin.token: the admin API is wired, and off.
	if code, body := s.get(t, "/v1/keys"); code != 403 || !strings.Contains(body, "admin_api_disabled") {
		t.Errorf("/v1/keys = %d %q; want 403 admin_api_disabled", code, body)
	}

	if got := checkAs(t, az, s.demoKey); got != 200 {
		t.Fatalf("demo key: %d, want 200", got)
	}
	if got := checkAs(t, az, "sk-sluice-"+strings.Repeat("W", 43)); got != 401 {
		t.Fatalf("wrong key: %d, want 401", got)
	}

	// A key created by another process works on the running server.
	out, _, err := run(t, "keys", "create", "--config", config, "--team", "demo", "--name", "ci", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var created struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatalf("keys create --json: %v\n%s", err, out)
	}
	took := within(t, time.Second, "new key accepted", func() bool { return checkAs(t, az, created.Secret) == 200 })
	t.Logf("new key accepted after %s", took)

	// Revoked through the CLI: refused within a second, no restart.
	if out, _, err := run(t, "keys", "revoke", "--config", config, created.ID); err != nil || !strings.HasPrefix(out, "Revoked key "+created.ID) {
		t.Fatalf("keys revoke: %v %q", err, out)
	}
	took = within(t, time.Second, "revoked key refused", func() bool { return checkAs(t, az, created.Secret) == 403 })
	t.Logf("revocation took effect after %s", took)

	_, metrics := s.get(t, "/metrics")
	for _, want := range []string{
		`sluice_authz_checks_total{decision="allow",reason="ok"}`,
		`sluice_authz_checks_total{decision="deny",reason="unknown_key"}`,
		`sluice_authz_checks_total{decision="deny",reason="revoked_key"}`,
		"sluice_authz_check_duration_seconds_bucket",
		"sluice_keys_cached 2",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(s.stderr.String(), s.demoKey[len("sk-sluice-")+6:]) || strings.Contains(s.stderr.String(), created.Secret[len("sk-sluice-")+6:]) {
		t.Error("a secret reached the log")
	}

	if err := s.stop(); err != nil {
		t.Fatalf("serve returned %v", err)
	}
}

func TestServeReloadsConfig(t *testing.T) {
	config := quickstart(t)
	s := startServe(t, config, "--demo-key")
	az, _ := s.client(t)
	if got := checkAs(t, az, s.demoKey); got != 200 {
		t.Fatalf("demo key: %d", got)
	}
	orig, _ := os.ReadFile(config)

	// A broken edit is refused; the last good config stays in force.
	if err := os.WriteFile(config, append(orig, []byte("\nbogus: 1\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	within(t, 2*time.Second, "failed reload counted", func() bool {
		_, m := s.get(t, "/metrics")
		return strings.Contains(m, `sluice_config_reloads_total{result="failed"} 1`)
	})
	if got := checkAs(t, az, s.demoKey); got != 200 {
		t.Fatalf("after bad reload: %d", got)
	}
	if !strings.Contains(s.stderr.String(), "bogus: unknown field") {
		t.Errorf("the failed reload was not logged with its problem:\n%s", s.stderr.String())
	}

	// Removing the team makes the demo key's team unknown: 403.
	edited := strings.Replace(string(orig), "  - name: demo\n", "  - name: renamed\n", 1)
	if err := os.WriteFile(config, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	within(t, time.Second, "reload applied", func() bool { return checkAs(t, az, s.demoKey) == 403 })
	if _, m := s.get(t, "/metrics"); !strings.Contains(m, `sluice_config_reloads_total{result="ok"} 1`) {
		t.Errorf("ok reload not counted")
	}
}

func TestServeRefusesBadConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	os.WriteFile(path, []byte("providers:\n  - name: x\n    kind: opnai\n"), 0o600)
	_, _, err := run(t, "serve", "--shutdown-drain", "0", "--config", path, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--xds-addr", "127.0.0.1:0")
	if err == nil || !strings.Contains(err.Error(), `providers[0].kind: unknown kind "opnai" (did you mean "openai"?)`) {
		t.Fatalf("serve with a bad config: %v", err)
	}
}

func TestCheckConfig(t *testing.T) {
	out, _, err := run(t, "check-config", filepath.Join("..", "..", "examples", "quickstart.yaml"))
	if err != nil || !strings.Contains(out, "quickstart.yaml: ok (version ") {
		t.Fatalf("quickstart: %v %q", err, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte(`providers:
  - name: openai
    kind: openai
    base_url: api.openai.com
    api_key: ${OPENAI_API_KEY}
models:
  - name: gpt-4o
    provider: opnai
teams:
  - name: t
    limits: {requests: {per_minute: -5}}
`), 0o600)
	_, stderr, err := run(t, "check-config", bad)
	if ExitCode(err) != 1 {
		t.Fatalf("exit code %d (%v), want 1", ExitCode(err), err)
	}
	want := bad + `:4:15: providers[0].base_url: must be an absolute http(s) URL, got "api.openai.com"
` + bad + `:5:14: providers[0].api_key: environment variable OPENAI_API_KEY is not set
` + bad + `:8:15: models[0].provider: unknown provider "opnai" (did you mean "openai"?)
` + bad + `:11:37: teams[0].limits.requests.per_minute: must not be negative, got -5
` + bad + `: 4 problem(s)
`
	if stderr != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", stderr, want)
	}
	if _, _, err := run(t, "check-config", filepath.Join(t.TempDir(), "missing.yaml")); ExitCode(err) != 1 || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing file: %v", err)
	}
}

// TestCheckConfigCAFiles: check-config names, for each https provider,
// the CA file Envoy is told to verify it with — per node group where that
// differs — and warns, without failing, about a file this machine does
// not have or that holds no certificate (Envoy may run elsewhere).
func TestCheckConfigCAFiles(t *testing.T) {
	dir := t.TempDir()
	good := testtls.NewCA(t, "corp CA").WriteFile(t)
	empty := filepath.Join(dir, "empty.pem")
	os.WriteFile(empty, []byte("not a certificate\n"), 0o600)
	missing := filepath.Join(dir, "missing.pem")
	config := filepath.Join(dir, "sluice.yaml")
	os.WriteFile(config, []byte(fmt.Sprintf(`providers:
  - {name: corp, kind: openai-compatible, base_url: "https://llm.corp.example", ca_file: %q}
  - {name: public, kind: openai-compatible, base_url: "https://API.example.com/v1"}
  - {name: plain, kind: openai-compatible, base_url: "http://127.0.0.1:8000"}
models:
  - {name: m, provider: corp, context_window: 128000}
pricing: {m: {input: 1, output: 1}}
xds:
  upstream_ca_file: %q
  node_groups:
    - {name: rhel, cluster: "rhel-*", upstream_ca_file: %q}
    - {name: same, cluster: "same-*", upstream_ca_file: %q}
security: {principal_keys: [{value: test-principal-key-0123456789abcdef}]}
`, good, missing, empty, missing)), 0o600)
	stdout, stderr, err := run(t, "check-config", config)
	if err != nil {
		t.Fatalf("check-config: %v\n%s", err, stderr)
	}
	want := []string{
		"provider corp: Envoy verifies llm.corp.example against CA file " + good + " (found here)",
		"provider public: Envoy verifies api.example.com against CA file " + missing + " (not usable here)",
		"provider public (node group rhel): Envoy verifies api.example.com against CA file " + empty + " (not usable here)",
	}
	if got := strings.Split(strings.TrimSpace(stdout), "\n")[1:]; !slices.Equal(got, want) {
		t.Errorf("stdout:\n%s\nwant after the ok line:\n%s", stdout, strings.Join(want, "\n"))
	}
	wantErr := "warning: provider public: CA file " + missing + " does not exist on this machine; Envoy reads it on its own machine, so make sure it is there\n" +
		"warning: provider public (node group rhel): CA file " + empty + " holds no PEM certificate on this machine; Envoy reads it on its own machine, so make sure it is there\n"
	if stderr != wantErr {
		t.Errorf("stderr:\n%s\nwant:\n%s", stderr, wantErr)
	}
}

func TestKeysCLI(t *testing.T) {
	config := quickstart(t)
	out, _, err := run(t, "keys", "create", "--config", config, "--team", "demo", "--name", "laptop", "--rpm", "5", "--models", "gpt-4o-mini", "--expires", "720h")
	if err != nil {
		t.Fatal(err)
	}
	secret := secretRE.FindString(out)
	id := regexp.MustCompile(`key_[0-9A-Za-z]{16}`).FindString(out)
	if secret == "" || id == "" {
		t.Fatalf("create output lacks id or secret:\n%s", out)
	}
	list, _, err := run(t, "keys", "list", "--config", config)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(list, secret[16:]) {
		t.Fatalf("keys list shows a secret:\n%s", list)
	}
	if !strings.Contains(list, id) || !strings.Contains(list, secret[:16]+"…") || !strings.Contains(list, "active") {
		t.Errorf("keys list:\n%s", list)
	}
	if _, _, err := run(t, "keys", "revoke", "--config", config, id); err != nil {
		t.Fatal(err)
	}
	if list, _, _ := run(t, "keys", "list", "--config", config, "--json"); !strings.Contains(list, `"state":"revoked"`) || !strings.Contains(list, `"per_minute":5`) {
		t.Errorf("keys list --json after revoke:\n%s", list)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"keys", "create", "--config", config}, "--team is required"},
		{[]string{"keys", "create", "--config", config, "--team", "nope"}, `--team: unknown team "nope" (teams: demo)`},
		{[]string{"keys", "create", "--config", config, "--team", "demo", "--rpm", "-1"}, "--rpm must not be negative, got -1"},
		{[]string{"keys", "create", "--config", config, "--team", "demo", "--expires", "yesterday"}, `--expires: want a duration (720h), a date (2027-01-31) or an RFC 3339 time, got "yesterday"`},
		{[]string{"keys", "create", "--config", config, "--team", "demo", "--models", "gemini*"}, `--models: "gemini*" matches no model`},
		{[]string{"keys", "revoke", "--config", config, "key_nope"}, `no key with id "key_nope"`},
	} {
		_, _, err := run(t, tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err = %v, want %q", tt.args, err, tt.want)
		}
	}
}

func TestUsage(t *testing.T) {
	for _, tt := range []struct {
		args     []string
		wantErr  error
		inStderr string
	}{
		{nil, errUsage, "Commands:"},
		{[]string{"frobnicate"}, errUsage, `unknown command "frobnicate"`},
		{[]string{"serve", "--help"}, nil, "Usage: sluice serve"},
		{[]string{"check-config", "--help"}, nil, "Usage: sluice check-config"},
		{[]string{"keys", "create", "--help"}, nil, "Usage: sluice keys create"},
		{[]string{"keys", "list", "--help"}, nil, "Usage: sluice keys list"},
		{[]string{"keys", "revoke", "--help"}, nil, "Usage: sluice keys revoke"},
		{[]string{"version", "--help"}, nil, "Usage: sluice version"},
		{[]string{"keys"}, errUsage, "Usage: sluice keys"},
		{[]string{"serve", "--log-level", "loud"}, errUsage, "--log-level: want debug, info, warn or error"},
		{[]string{"serve", "--nope"}, errUsage, "flag provided but not defined: -nope"},
		{[]string{"envoy"}, errUsage, "usage: sluice envoy bootstrap"},
		{[]string{"envoy", "bootstrap", "--help"}, nil, "Usage: sluice envoy bootstrap"},
		{[]string{"envoy", "bootstrap", "--admin-port", "0"}, errUsage, "--admin-port must be a port number"},
		{[]string{"dev-envoy"}, errUsage, "run sluice-dev envoy"},
	} {
		_, stderr, err := run(t, tt.args...)
		if !errors.Is(err, tt.wantErr) && !(err == nil && tt.wantErr == nil) {
			t.Errorf("%v: err = %v, want %v", tt.args, err, tt.wantErr)
		}
		if !strings.Contains(stderr, tt.inStderr) {
			t.Errorf("%v: stderr lacks %q:\n%s", tt.args, tt.inStderr, stderr)
		}
	}
	if out, _, err := run(t, "version"); err != nil || !strings.HasPrefix(out, "sluice ") {
		t.Errorf("version: %q %v", out, err)
	}
	if got := ExitCode(fmt.Errorf("x: %w", errUsage)); got != 2 {
		t.Errorf("ExitCode(usage) = %d", got)
	}
}

func TestEnvoyBootstrap(t *testing.T) {
	// The quickstart's listen.xds, as the checked-in envoy/bootstrap.yaml.
	out, stderr, err := run(t, "envoy", "bootstrap", "--config", quickstart(t))
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	shipped, err := os.ReadFile(filepath.Join("..", "..", "envoy", "bootstrap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	body := func(s string) string { // without the leading comment lines
		lines := strings.Split(s, "\n")
		for len(lines) > 0 && strings.HasPrefix(lines[0], "#") {
			lines = lines[1:]
		}
		return strings.Join(lines, "\n")
	}
	if body(out) != body(string(shipped)) {
		t.Errorf("sluice envoy bootstrap differs from envoy/bootstrap.yaml:\n%s", out)
	}
	out, _, err = run(t, "envoy", "bootstrap", "--xds-addr", "sluice.internal:18000", "--node-id", "edge-7", "--admin-port", "9902")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"id: edge-7", "address: sluice.internal", "type: STRICT_DNS", "port_value: 9902"} {
		if !strings.Contains(out, want) {
			t.Errorf("bootstrap lacks %q:\n%s", want, out)
		}
	}
	if _, _, err := run(t, "envoy", "bootstrap", "--xds-addr", "0.0.0.0:18000"); err == nil || !strings.Contains(err.Error(), "name an address Envoy can connect to") {
		t.Errorf("an unspecified xDS address: %v", err)
	}
	if strings.Contains(body(string(shipped)), "overload_manager") {
		t.Error("the default bootstrap has an overload manager; it needs --max-heap-bytes")
	}
	out, _, err = run(t, "envoy", "bootstrap", "--max-heap-bytes", "2147483648")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"overload_manager:", "max_heap_size_bytes: \"2147483648\"", "envoy.overload_actions.stop_accepting_requests"} {
		if !strings.Contains(out, want) {
			t.Errorf("bootstrap with --max-heap-bytes lacks %q:\n%s", want, out)
		}
	}
}

// TestServeReleasesWhatItOpenedOnFailure: when a listener cannot be
// bound, serve fails naming it, and everything opened before it — the
// store, the ledger, the other listeners — is closed (the listeners'
// ports are free again; goleak in TestMain catches an unclosed database).
func TestServeReleasesWhatItOpenedOnFailure(t *testing.T) {
	for _, busy := range []string{"admin", "xds"} {
		t.Run(busy, func(t *testing.T) {
			taken, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer taken.Close()
			free, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			grpcAddr := free.Addr().String()
			free.Close()
			addrs := map[string]string{"admin": "127.0.0.1:0", "xds": "127.0.0.1:0"}
			addrs[busy] = taken.Addr().String()
			_, _, err = run(t, "serve", "--shutdown-drain", "0", "--config", quickstart(t), "--grpc-addr", grpcAddr, "--admin-addr", addrs["admin"], "--xds-addr", addrs["xds"])
			if err == nil || !strings.Contains(err.Error(), "listen."+busy+":") {
				t.Fatalf("serve with listen.%s taken: %v", busy, err)
			}
			ln, err := net.Listen("tcp", grpcAddr)
			if err != nil {
				t.Fatalf("the gRPC listener was left open: %v", err)
			}
			ln.Close()
		})
	}
}

// TestCheckConfigPricingWarnings: check-config warns, without failing,
// about models without a price and about kinds of token a model's
// provider reports that its price leaves to a default: cache reads on
// OpenAI and Anthropic, cache writes on Anthropic, audio on a model whose
// name says audio. A model priced for all of them draws no warning.
func TestCheckConfigPricingWarnings(t *testing.T) {
	config := filepath.Join(t.TempDir(), "sluice.yaml")
	os.WriteFile(config, []byte(`providers:
  - {name: openai, kind: openai, base_url: "https://api.openai.com", api_key: sk}
  - {name: anthropic, kind: anthropic, base_url: "https://api.anthropic.com", api_key: sk}
  - {name: local, kind: openai-compatible, base_url: "http://127.0.0.1:8000"}
models:
  - {name: gpt-4o, provider: openai}
  - {name: voice, provider: openai, upstream: gpt-4o-audio-preview}
  - {name: claude, provider: anthropic}
  - {name: claude-priced, provider: anthropic}
  - {name: llama, provider: local}
  - {name: free, provider: local}
pricing:
  gpt-4o: {input: 2500000, output: 10000000}
  voice: {input: 2500000, cached_input: 1250000, audio_input: 40000000, output: 10000000}
  claude: {input: 3000000, output: 15000000}
  claude-priced: {input: 3000000, cached_input: 300000, cache_write: 3750000, cache_write_1h: 6000000, output: 15000000}
  llama: {input: 1, output: 1}
security: {principal_keys: [{value: test-principal-key-0123456789abcdef}]}
`), 0o600)
	stdout, stderr, err := run(t, "check-config", config)
	if err != nil || !strings.Contains(stdout, ": ok (version ") {
		t.Fatalf("check-config: %v\n%s%s", err, stdout, stderr)
	}
	want := "" +
		"warning: pricing.claude.cache_write: not set: Anthropic reports 5-minute cache writes, charged at the default, 1.25 × input\n" +
		"warning: pricing.claude.cache_write_1h: not set: Anthropic reports 1-hour cache writes, charged at the default, 2 × input\n" +
		"warning: pricing.claude.cached_input: not set: the provider reports cached prompt tokens, and they are charged at the input price (OpenAI bills them at a discount, Anthropic at 0.1 × input)\n" +
		`warning: pricing.free: model "free" has no price: its requests are recorded at cost 0, which no budget counts (gateway.unpriced_models: allow)` + "\n" +
		"warning: pricing.gpt-4o.cached_input: not set: the provider reports cached prompt tokens, and they are charged at the input price (OpenAI bills them at a discount, Anthropic at 0.1 × input)\n" +
		"warning: pricing.voice.audio_output: not set: the model's name says it speaks audio, and audio output tokens are charged at the text output price\n" +
		"warning: models.llama.context_window: not set and not known for this model: requests whose input is by reference (file ids, document URLs, stored responses, conversations, prompts) are refused\n" +
		"warning: models.free.context_window: not set and not known for this model: requests whose input is by reference (file ids, document URLs, stored responses, conversations, prompts) are refused\n"
	if stderr != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", stderr, want)
	}
}
