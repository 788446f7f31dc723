package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicegw/sluice/internal/admin"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/ledger"
	ledgersqlite "github.com/sluicegw/sluice/internal/ledger/sqlite"
	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/store/sqlite"
	"github.com/sluicegw/sluice/internal/testenv"
	"github.com/sluicegw/sluice/internal/tokens"
	"github.com/sluicegw/sluice/policies"
)

const (
	token     = "test-admin-token-0123456789"
	botSecret = "sk-sluice-AAAA456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefg"
)

// config is the policy of every test: a team with a daily budget in an
// org with a monthly one, and a key declared in the file. tokenLine sets
// admin.token (or not).
func config(tokenLine string) string {
	return `
providers: [{name: local, kind: openai-compatible, base_url: "http://127.0.0.1:8000"}]
models: [{name: m1, aliases: [one], provider: local}, {name: m2, provider: local}]
pricing: {m1: {input: 1000000, output: 2000000}}
orgs: [{name: acme, limits: {budgets: [{micro_usd: 100000000, period: month}]}}]
teams:
  - {name: red, org: acme, models: [m1], limits: {budgets: [{micro_usd: 10000000, period: day}]}}
keys:
  - {name: bot, team: red, sha256: ` + apikey.HashHex(botSecret) + `, prefix: sk-sluice-AAAA45}
` + tokenLine
}

var withToken = config("admin: {token: " + token + "}\n")

// t0 is a Monday, noon UTC.
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// harness is the admin server on 127.0.0.1:0 over a real SQLite store and
// ledger, a keyring and an admission.Local.
type harness struct {
	t      *testing.T
	base   string
	client *http.Client
	st     *sqlite.Store
	ring   *keyring.Ring
	adm    *admission.Local
	led    *ledgersqlite.Ledger
	policy atomic.Pointer[policies.Snapshot]
	clock  clock
}

func compile(t *testing.T, yaml string) *policies.Snapshot {
	t.Helper()
	cfg, err := policies.Parse([]byte(yaml), "sluice.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := policies.Compile(cfg, filepath.Join(t.TempDir(), "sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func start(t *testing.T, yaml string) *harness {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	log := testenv.Quiet()
	h := &harness{t: t}
	h.clock.Set(t0)
	h.policy.Store(compile(t, yaml))

	st, err := sqlite.Open(ctx, filepath.Join(dir, "store.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h.st = st
	h.ring = keyring.New(log)
	h.ring.SetPolicy(h.policy.Load())
	if err := h.ring.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	h.adm = admission.NewLocal(limits.New(limits.Options{}), admission.LocalOptions{})

	led, err := ledgersqlite.Open(ctx, filepath.Join(dir, "ledger.sqlite"), ledgersqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	h.led = led
	lctx, stopLedger := context.WithCancel(ctx)
	ledgerDone := make(chan error, 1)
	go func() { ledgerDone <- led.Run(lctx) }()
	t.Cleanup(func() {
		stopLedger()
		if err := <-ledgerDone; err != nil {
			t.Errorf("ledger Run: %v", err)
		}
	})

	srv, err := admin.New(admin.Deps{
		Gatherer: prometheus.NewRegistry(), Ready: func() error { return nil }, Log: log,
		Policy: h.policy.Load, Keys: st, Groups: st, Principals: h.ring,
		Budgets: h.adm, Spend: led, Now: h.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.base = "http://" + ln.Addr().String()
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln) }()
	tr := &http.Transport{}
	h.client = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return h
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request with the admin token; body is sent as is if it is a
// string, else as JSON.
func (h *harness) do(method, path string, body any) response {
	h.t.Helper()
	return h.doAuth(method, path, "Bearer "+token, body)
}

func (h *harness) doAuth(method, path, authorization string, body any) response {
	h.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, h.base+path, r)
	if err != nil {
		h.t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, data}
}

// want checks the status and decodes the body into v (if not nil).
func (r response) want(t *testing.T, status int, v any) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body: %s", r.status, status, r.body)
	}
	if v != nil {
		if err := json.Unmarshal(r.body, v); err != nil {
			t.Fatalf("decode %s: %v", r.body, err)
		}
	}
}

type problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

type apiError struct {
	Error struct {
		Code     string    `json:"code"`
		Message  string    `json:"message"`
		Problems []problem `json:"problems"`
	} `json:"error"`
}

func (r response) apiError(t *testing.T) apiError {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(r.body, &e); err != nil || e.Error.Code == "" {
		t.Fatalf("body is not an API error (%v): %s", err, r.body)
	}
	if ct := r.header.Get("content-type"); ct != "application/json" {
		t.Errorf("error content-type %q", ct)
	}
	return e
}

type key struct {
	ID        string          `json:"id"`
	Prefix    string          `json:"prefix"`
	Name      string          `json:"name"`
	Team      string          `json:"team"`
	Source    string          `json:"source"`
	State     string          `json:"state"`
	Models    []string        `json:"models"`
	Limits    json.RawMessage `json:"limits"`
	CreatedAt *time.Time      `json:"created_at"`
	ExpiresAt *time.Time      `json:"expires_at"`
	RevokedAt *time.Time      `json:"revoked_at"`
	Secret    string          `json:"secret"`
}

type budget struct {
	Scope     string `json:"scope"`
	ID        string `json:"id"`
	Model     string `json:"model"`
	Period    string `json:"period"`
	Window    string `json:"window"`
	Limit     int64  `json:"limit_micro_usd"`
	Spent     int64  `json:"spent_micro_usd"`
	Reserved  int64  `json:"reserved_micro_usd"`
	Remaining int64  `json:"remaining_micro_usd"`
	// The exact amounts, in pico-dollars.
	SpentPico     json.Number `json:"spent_pico_usd"`
	ReservedPico  json.Number `json:"reserved_pico_usd"`
	RemainingPico json.Number `json:"remaining_pico_usd"`
	ResetsAt      *time.Time  `json:"resets_at"`
}

func ptr[T any](v T) *T { return &v }

// jsonEqual compares two JSON documents by value.
func jsonEqual(t *testing.T, what string, want string, got []byte) {
	t.Helper()
	var w, g any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v: %s", what, err, got)
	}
	if diff := cmp.Diff(w, g); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestKeyLifecycle: a key created through the API works in the keyring;
// its limits, replaced through the API, reach the keyring through Follow;
// budgets report what admission settled against it; revoking it shows.
func TestKeyLifecycle(t *testing.T) {
	h := start(t, withToken)
	ctx := context.Background()

	res := h.do("POST", "/v1/keys", map[string]any{
		"team": "red", "name": "laptop", "models": []string{"m1"},
		"limits":     map[string]any{"requests": map[string]any{"per_minute": 5}},
		"expires_at": t0.Add(48 * time.Hour).Format(time.RFC3339),
	})
	var created key
	res.want(t, http.StatusCreated, &created)
	if err := apikey.Validate(created.Secret); err != nil {
		t.Fatalf("secret %q: %v", created.Secret, err)
	}
	if got := res.header.Get("location"); got != "/v1/keys/"+created.ID {
		t.Errorf("location %q", got)
	}
	if got := res.header.Get("cache-control"); got != "no-store" {
		t.Errorf("cache-control %q; want no-store (the reply holds a secret)", got)
	}
	want := key{
		ID: created.ID, Prefix: apikey.PublicPrefix(created.Secret), Name: "laptop", Team: "red",
		Source: "store", State: "active", Models: []string{"m1"}, Limits: created.Limits,
		CreatedAt: ptr(t0), ExpiresAt: ptr(t0.Add(48 * time.Hour)), Secret: created.Secret,
	}
	if diff := cmp.Diff(want, created); diff != "" || !strings.HasPrefix(created.ID, "key_") {
		t.Errorf("created key (-want +got):\n%s", diff)
	}
	jsonEqual(t, "created key's limits", `{"requests": {"per_minute": 5}}`, created.Limits)

	// Listed and read back, never with the secret.
	res = h.do("GET", "/v1/keys", nil)
	var list struct{ Keys []key }
	res.want(t, http.StatusOK, &list)
	if bytes.Contains(res.body, []byte(created.Secret)) {
		t.Fatal("GET /v1/keys shows a secret")
	}
	var ids []string
	for _, k := range list.Keys {
		ids = append(ids, k.Source+" "+k.ID)
	}
	if diff := cmp.Diff([]string{"config config:bot", "store " + created.ID}, ids); diff != "" {
		t.Errorf("listed keys (-want +got):\n%s", diff)
	}
	var got key
	h.do("GET", "/v1/keys/"+created.ID, nil).want(t, http.StatusOK, &got)
	want.Secret = ""
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GET the key (-want +got):\n%s", diff)
	}

	// The keyring resolves the secret once it has synced.
	if err := h.ring.Sync(ctx, h.st); err != nil {
		t.Fatal(err)
	}
	p := h.ring.Resolve(apikey.Hash(created.Secret))
	if p == nil || p.KeyID != created.ID || p.KeyLimits.Requests.PerMinute != 5 || !p.KeyModels.Allows("m1") || p.KeyModels.Allows("m2") {
		t.Fatalf("keyring principal %+v", p)
	}

	// New limits reach a following keyring.
	fctx, stopFollow := context.WithCancel(ctx)
	followed := make(chan error, 1)
	go func() { followed <- h.ring.Follow(fctx, h.st, 10*time.Millisecond, nil) }()
	defer func() {
		stopFollow()
		if err := <-followed; err != nil {
			t.Errorf("Follow: %v", err)
		}
	}()
	newLimits := `{
		"budgets": [{"micro_usd": 2000000, "period": "rolling", "window": "24h"}],
		"models": {"m1": {"budgets": [{"micro_usd": 1000000, "period": "day"}]}}
	}`
	res = h.do("PUT", "/v1/keys/"+created.ID+"/limits", newLimits)
	res.want(t, http.StatusOK, &got)
	jsonEqual(t, "limits in the reply", newLimits, got.Limits)
	wantLimits := policies.Limits{
		Budgets: []policies.Budget{{MicroUSD: 2_000_000, Period: policies.PeriodRolling, Window: 24 * time.Hour}},
		Models:  map[string]policies.Limits{"m1": {Budgets: []policies.Budget{{MicroUSD: 1_000_000, Period: policies.PeriodDay}}}},
	}
	waitFor(t, "new limits in the keyring", func() bool { return cmp.Equal(wantLimits, h.ring.ByID(created.ID).KeyLimits) })

	// A request admitted and settled through admission shows in every
	// budget that covers the key: it cost 300,000.4 µ$, which the
	// micro-dollar fields show as 300,001 spent and, of 10,000,000,
	// 9,699,999 left (never more room than there is), and the pico-dollar
	// fields exactly.
	p = h.ring.ByID(created.ID)
	g, err := h.adm.Admit(ctx, admission.Claim{Principal: p, Model: "m1", CostPico: 400_000_000_000, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	h.adm.Settle(ctx, g, admission.Actual{CostPico: 300_000_400_000, At: t0})
	var budgets struct{ Budgets []budget }
	h.do("GET", "/v1/keys/"+created.ID+"/budgets", nil).want(t, http.StatusOK, &budgets)
	// t0 is the last day of November: the day and the month end together.
	tomorrow, nextMonth := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	spent := func(limit int64, remaining json.Number) budget {
		return budget{Limit: limit, Spent: 300_001, Remaining: limit - 300_001, SpentPico: "300000400000", ReservedPico: "0", RemainingPico: remaining}
	}
	with := func(b budget, scope, id, model, period, window string, resets *time.Time) budget {
		b.Scope, b.ID, b.Model, b.Period, b.Window, b.ResetsAt = scope, id, model, period, window, resets
		return b
	}
	teamDay := with(spent(10_000_000, "9699999600000"), "team", "red", "", "day", "", &tomorrow)
	orgMonth := with(spent(100_000_000, "99699999600000"), "org", "acme", "", "month", "", &nextMonth)
	wantBudgets := []budget{
		with(spent(2_000_000, "1699999600000"), "key", created.ID, "", "rolling", "24h", nil),
		with(spent(1_000_000, "699999600000"), "key", created.ID, "m1", "day", "", &tomorrow),
		teamDay, orgMonth,
	}
	if diff := cmp.Diff(wantBudgets, budgets.Budgets); diff != "" {
		t.Errorf("key budgets (-want +got):\n%s", diff)
	}
	budgets.Budgets = nil
	h.do("GET", "/v1/teams/red/budgets", nil).want(t, http.StatusOK, &budgets)
	if diff := cmp.Diff([]budget{teamDay, orgMonth}, budgets.Budgets); diff != "" {
		t.Errorf("team budgets (-want +got):\n%s", diff)
	}
	budgets.Budgets = nil
	h.do("GET", "/v1/orgs/acme/budgets", nil).want(t, http.StatusOK, &budgets)
	if diff := cmp.Diff([]budget{orgMonth}, budgets.Budgets); diff != "" {
		t.Errorf("org budgets (-want +got):\n%s", diff)
	}

	// Revoked: the reply, a second revocation and the keyring agree.
	h.do("POST", "/v1/keys/"+created.ID+"/revoke", nil).want(t, http.StatusOK, &got)
	if got.State != "revoked" || got.RevokedAt == nil || !got.RevokedAt.Equal(t0) {
		t.Errorf("revoked key: state %q revoked_at %v", got.State, got.RevokedAt)
	}
	h.clock.Set(t0.Add(time.Hour))
	h.do("POST", "/v1/keys/"+created.ID+"/revoke", nil).want(t, http.StatusOK, &got)
	if got.RevokedAt == nil || !got.RevokedAt.Equal(t0) {
		t.Errorf("second revocation moved revoked_at to %v", got.RevokedAt)
	}
	waitFor(t, "revocation in the keyring", func() bool { return h.ring.ByID(created.ID).Revoked() })
}

// TestTeamsAndOrgs: a stored org's limits cover its teams' keys through
// the keyring; config teams and orgs are listed and cannot be put.
func TestTeamsAndOrgs(t *testing.T) {
	h := start(t, withToken)
	ctx := context.Background()

	weekly := `{"limits": {"budgets": [{"micro_usd": 5000000, "period": "week"}]}}`
	var org map[string]any
	h.do("PUT", "/v1/orgs/beta", weekly).want(t, http.StatusOK, &org)
	jsonEqual(t, "put org", `{"name": "beta", "source": "store", "limits": {"budgets": [{"micro_usd": 5000000, "period": "week"}]}}`, mustJSON(t, org))
	var team map[string]any
	h.do("PUT", "/v1/teams/blue", `{"org": "beta", "models": ["m2"], "limits": {"requests": {"per_minute": 7}}}`).want(t, http.StatusOK, &team)
	jsonEqual(t, "put team", `{"name": "blue", "org": "beta", "models": ["m2"], "source": "store", "limits": {"requests": {"per_minute": 7}}}`, mustJSON(t, team))

	res := h.do("GET", "/v1/teams", nil)
	res.want(t, http.StatusOK, nil)
	jsonEqual(t, "teams", `{"teams": [
		{"name": "red", "org": "acme", "models": ["m1"], "source": "config", "limits": {"budgets": [{"micro_usd": 10000000, "period": "day"}]}},
		{"name": "blue", "org": "beta", "models": ["m2"], "source": "store", "limits": {"requests": {"per_minute": 7}}}
	]}`, res.body)
	res = h.do("GET", "/v1/orgs", nil)
	res.want(t, http.StatusOK, nil)
	jsonEqual(t, "orgs", `{"orgs": [
		{"name": "acme", "source": "config", "limits": {"budgets": [{"micro_usd": 100000000, "period": "month"}]}},
		{"name": "beta", "source": "store", "limits": {"budgets": [{"micro_usd": 5000000, "period": "week"}]}}
	]}`, res.body)
	res = h.do("GET", "/v1/teams/red", nil)
	res.want(t, http.StatusOK, nil)
	jsonEqual(t, "config team", `{"name": "red", "org": "acme", "models": ["m1"], "source": "config", "limits": {"budgets": [{"micro_usd": 10000000, "period": "day"}]}}`, res.body)
	res = h.do("GET", "/v1/orgs/beta", nil)
	res.want(t, http.StatusOK, nil)
	jsonEqual(t, "stored org", `{"name": "beta", "source": "store", "limits": {"budgets": [{"micro_usd": 5000000, "period": "week"}]}}`, res.body)

	var created key
	h.do("POST", "/v1/keys", `{"team": "blue"}`).want(t, http.StatusCreated, &created)
	if err := h.ring.Sync(ctx, h.st); err != nil {
		t.Fatal(err)
	}
	p := h.ring.ByID(created.ID)
	if p == nil || p.Org != "beta" || p.TeamLimits.Requests.PerMinute != 7 || len(p.OrgLimits.Budgets) != 1 || p.OrgLimits.Budgets[0].Period != "week" {
		t.Fatalf("principal of a key of a stored team of a stored org: %+v", p)
	}
	var budgets struct{ Budgets []budget }
	h.do("GET", "/v1/teams/blue/budgets", nil).want(t, http.StatusOK, &budgets)
	nextMonday := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	if diff := cmp.Diff([]budget{{Scope: "org", ID: "beta", Period: "week", Limit: 5_000_000, Remaining: 5_000_000,
		SpentPico: "0", ReservedPico: "0", RemainingPico: "5000000000000", ResetsAt: &nextMonday}}, budgets.Budgets); diff != "" {
		t.Errorf("team budgets (-want +got):\n%s", diff)
	}

	// Replacing the org's limits reaches its keys.
	h.do("PUT", "/v1/orgs/beta", `{}`).want(t, http.StatusOK, nil)
	if err := h.ring.Sync(ctx, h.st); err != nil {
		t.Fatal(err)
	}
	if p := h.ring.ByID(created.ID); len(p.OrgLimits.Budgets) != 0 {
		t.Errorf("org limits after clearing them: %+v", p.OrgLimits)
	}

	var list struct{ Keys []key }
	h.do("GET", "/v1/keys?team=blue", nil).want(t, http.StatusOK, &list)
	if len(list.Keys) != 1 || list.Keys[0].ID != created.ID {
		t.Errorf("keys of team blue: %+v", list.Keys)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSpend reads totals through the API from records in the ledger.
func TestSpend(t *testing.T) {
	h := start(t, withToken)
	ctx := context.Background()
	for _, r := range []ledger.Record{
		// 99.5 µ$, 300 µ$ and 49.000001 µ$.
		{RequestID: "r1", KeyID: "key_1", Team: "red", Org: "acme", Model: "m1", CostPico: 99_500_000, Tokens: tokens.Counts{tokens.Input: 10}, Priced: true, StartedAt: t0.Add(-2 * time.Hour)},
		{RequestID: "r2", KeyID: "key_2", Team: "red", Org: "acme", Model: "m2", CostPico: 300_000_000, Tokens: tokens.Counts{tokens.Input: 30}, StartedAt: t0.Add(-time.Hour)},
		{RequestID: "r3", KeyID: "key_3", Team: "blue", Model: "m1", CostPico: 49_000_001, Tokens: tokens.Counts{tokens.Input: 5}, Priced: true, Estimated: true, StartedAt: t0.Add(-48 * time.Hour)},
	} {
		if err := h.led.Append(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	type total struct {
		Group     string      `json:"group"`
		Requests  int64       `json:"requests"`
		Input     int64       `json:"input_tokens"`
		Cost      int64       `json:"cost_micro_usd"` // rounded up
		Pico      json.Number `json:"cost_pico_usd"`  // exact
		Estimated int64       `json:"estimated"`
		Unpriced  int64       `json:"unpriced"`
	}
	for _, tt := range []struct {
		query string
		by    string
		want  []total
	}{
		{"", "key", []total{{"key_2", 1, 30, 300, "300000000", 0, 1}, {"key_1", 1, 10, 100, "99500000", 0, 0}, {"key_3", 1, 5, 50, "49000001", 1, 0}}},
		{"?by=team", "team", []total{{"red", 2, 40, 400, "399500000", 0, 1}, {"blue", 1, 5, 50, "49000001", 1, 0}}},
		{"?by=org", "org", []total{{"acme", 2, 40, 400, "399500000", 0, 1}, {"", 1, 5, 50, "49000001", 1, 0}}},
		{"?by=model&since=" + t0.Add(-24*time.Hour).Format(time.RFC3339), "model", []total{{"m2", 1, 30, 300, "300000000", 0, 1}, {"m1", 1, 10, 100, "99500000", 0, 0}}},
		{"?by=none&team=red&until=" + t0.Add(-90*time.Minute).Format(time.RFC3339), "none", []total{{"", 1, 10, 100, "99500000", 0, 0}}},
		{"?by=day&since=2026-11-28&until=2026-11-29", "day", []total{{"2026-11-28", 1, 5, 50, "49000001", 1, 0}}},
		{"?by=model&limit=1", "model", []total{{"m2", 1, 30, 300, "300000000", 0, 1}}},
		{"?by=team&key=key_none", "team", []total{}},
	} {
		t.Run(tt.query, func(t *testing.T) {
			var got struct {
				By     string
				Totals []total
			}
			h.do("GET", "/v1/spend"+tt.query, nil).want(t, http.StatusOK, &got)
			if got.By != tt.by {
				t.Errorf("by = %q, want %q", got.By, tt.by)
			}
			if diff := cmp.Diff(tt.want, got.Totals); diff != "" {
				t.Errorf("totals (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAuth: with no admin.token every /v1 route is 403 and says how to
// turn the API on; with one, a missing or wrong token is 401; health and
// metrics stay open; a reload changes the token at once.
func TestAuth(t *testing.T) {
	h := start(t, config(""))
	routes := []struct{ method, path string }{
		{"GET", "/v1/keys"}, {"POST", "/v1/keys"}, {"GET", "/v1/keys/key_x"}, {"POST", "/v1/keys/key_x/revoke"},
		{"PUT", "/v1/keys/key_x/limits"}, {"GET", "/v1/keys/key_x/budgets"},
		{"GET", "/v1/teams"}, {"GET", "/v1/teams/red"}, {"PUT", "/v1/teams/red"}, {"GET", "/v1/teams/red/budgets"},
		{"GET", "/v1/orgs"}, {"GET", "/v1/orgs/acme"}, {"PUT", "/v1/orgs/acme"}, {"GET", "/v1/orgs/acme/budgets"},
		{"GET", "/v1/spend"}, {"GET", "/v1/nope"},
	}
	for _, rt := range routes {
		for _, auth := range []string{"", "Bearer " + token} {
			res := h.doAuth(rt.method, rt.path, auth, "{}")
			if res.status != http.StatusForbidden {
				t.Errorf("API off: %s %s = %d, want 403", rt.method, rt.path, res.status)
				continue
			}
			if e := res.apiError(t); e.Error.Code != "admin_api_disabled" || !strings.Contains(e.Error.Message, "set admin.token in sluice.yaml") {
				t.Errorf("API off: %s %s: %+v", rt.method, rt.path, e)
			}
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if res := h.doAuth("GET", path, "", nil); res.status != http.StatusOK {
			t.Errorf("GET %s without a token = %d, want 200", path, res.status)
		}
	}

	// The config reloads with a token.
	h.policy.Store(compile(t, withToken))
	for _, tt := range []struct {
		auth string
		want int
	}{
		{"", http.StatusUnauthorized},
		{"Bearer", http.StatusUnauthorized},
		{"Bearer ", http.StatusUnauthorized},
		{"Bearer wrong-token-0123456789", http.StatusUnauthorized},
		{"Bearer " + token[:len(token)-1], http.StatusUnauthorized},
		{"Bearer " + token + "x", http.StatusUnauthorized},
		{"Basic " + token, http.StatusUnauthorized},
		{token, http.StatusUnauthorized},
		{"Bearer " + token, http.StatusOK},
		{"bearer " + token, http.StatusOK},
	} {
		res := h.doAuth("GET", "/v1/keys", tt.auth, nil)
		if res.status != tt.want {
			t.Errorf("Authorization %q: %d, want %d", tt.auth, res.status, tt.want)
			continue
		}
		if tt.want == http.StatusUnauthorized {
			if e := res.apiError(t); e.Error.Code != "unauthorized" {
				t.Errorf("Authorization %q: code %q", tt.auth, e.Error.Code)
			}
			if got := res.header.Get("www-authenticate"); got != `Bearer realm="sluice-admin"` {
				t.Errorf("Authorization %q: www-authenticate %q", tt.auth, got)
			}
		}
	}
	// Unknown routes are refused before they are looked up.
	if res := h.doAuth("GET", "/v1/nope", "", nil); res.status != http.StatusUnauthorized {
		t.Errorf("unknown route without a token = %d, want 401", res.status)
	}

	// Another reload, another token: the old one stops working at once.
	h.policy.Store(compile(t, config("admin: {token: another-token-9876543210}\n")))
	if res := h.do("GET", "/v1/keys", nil); res.status != http.StatusUnauthorized {
		t.Errorf("old token after a reload = %d, want 401", res.status)
	}
	if res := h.doAuth("GET", "/v1/keys", "Bearer another-token-9876543210", nil); res.status != http.StatusOK {
		t.Errorf("new token after a reload = %d, want 200", res.status)
	}
}

// TestErrors: invalid requests are refused with every problem at its path,
// limits with the config's own messages; unknown routes and methods,
// config-declared records and missing ones with their codes.
func TestErrors(t *testing.T) {
	h := start(t, withToken)
	var stored key
	h.do("POST", "/v1/keys", `{"team": "red"}`).want(t, http.StatusCreated, &stored)

	for _, tt := range []struct {
		name, method, path string
		body               any
		status             int
		code               string
		problems           []problem
	}{
		{"no team", "POST", "/v1/keys", `{}`, 400, "invalid_request", []problem{{"team", "required"}}},
		{"everything wrong", "POST", "/v1/keys", `{
			"team": "nope", "name": "a\tb", "models": ["m9"],
			"limits": {"requests": {"per_minute": -1}, "budgets": [{"micro_usd": 5, "period": "rolling", "window": "a day"}]},
			"expires_at": "2020-01-01T00:00:00Z"}`, 400, "invalid_request", []problem{
			{"team", `unknown team "nope" (see GET /v1/teams)`},
			{"name", "must not contain control characters"},
			{"models[0]", `"m9" matches no configured model (did you mean "m1"?)`},
			{"limits.budgets[0].window", `want a duration such as 24h or 168h, got "a day"`},
			{"limits.requests.per_minute", "must not be negative, got -1"},
			{"expires_at", "2020-01-01T00:00:00Z is not in the future"},
		}},
		{"bad expiry", "POST", "/v1/keys", `{"team": "red", "expires_at": "tomorrow"}`, 400, "invalid_request",
			[]problem{{"expires_at", `want an RFC 3339 time such as 2027-01-31T00:00:00Z, got "tomorrow"`}}},
		{"per-model limit by alias", "POST", "/v1/keys", `{"team": "red", "limits": {"models": {"one": {}, "m3": {}}}}`, 400, "invalid_request", []problem{
			{"limits.models.m3", `unknown model "m3"`},
			{"limits.models.one", `"one" is an alias of "m1"; limit the model by its name`},
		}},
		{"two budgets of a period", "POST", "/v1/keys", `{"team": "red", "limits": {"budgets": [{"micro_usd": 1, "period": "day"}, {"micro_usd": 2, "period": "day"}]}}`, 400, "invalid_request",
			[]problem{{"limits.budgets[1]", "a second day budget (first at limits.budgets[0]): one budget per period"}}},
		{"unknown field", "POST", "/v1/keys", `{"team": "red", "colour": "blue"}`, 400, "invalid_request", []problem{{"colour", "unknown field (fields: team, name, models, limits, expires_at)"}}},
		{"wrong type", "POST", "/v1/keys", `{"team": "red", "limits": {"requests": {"per_minute": "ten"}}}`, 400, "invalid_request",
			[]problem{{"limits.requests.per_minute", "want an integer, got string"}}},
		{"bad JSON", "POST", "/v1/keys", `{"team":`, 400, "invalid_json", nil},
		{"two values", "POST", "/v1/keys", `{"team": "red"} {}`, 400, "invalid_json", nil},
		{"no body", "POST", "/v1/keys", nil, 400, "invalid_json", nil},
		{"too large", "POST", "/v1/keys", `{"name": "` + strings.Repeat("x", 1<<20) + `"}`, 413, "body_too_large", nil},

		{"limits from the root", "PUT", "/v1/keys/" + stored.ID + "/limits", `{"budgets": [{"micro_usd": 0, "period": "day"}], "tokens": {"total": {"per_day": -5}}}`, 400, "invalid_request", []problem{
			{"budgets[0].micro_usd", "must be more than 0 (micro-dollars: $50 is 50000000), got 0"},
			{"tokens.total.per_day", "must not be negative, got -5"},
		}},
		{"limits of an unknown key", "PUT", "/v1/keys/key_nope/limits", `{}`, 404, "not_found", nil},
		{"limits of a config key", "PUT", "/v1/keys/config:bot/limits", `{}`, 409, "declared_in_config", nil},
		{"revoke a config key", "POST", "/v1/keys/config:bot/revoke", nil, 409, "declared_in_config", nil},
		{"revoke an unknown key", "POST", "/v1/keys/key_nope/revoke", nil, 404, "not_found", nil},
		{"get an unknown key", "GET", "/v1/keys/key_nope", nil, 404, "not_found", nil},
		{"budgets of an unknown key", "GET", "/v1/keys/key_nope/budgets", nil, 404, "not_found", nil},
		{"repeated query", "GET", "/v1/keys?team=red&team=blue", nil, 400, "invalid_request", []problem{{"query.team", "given more than once"}}},
		{"unknown query", "GET", "/v1/teams?org=acme", nil, 400, "invalid_request", []problem{{"query.org", "unknown parameter (parameters: none)"}}},

		{"put a config team", "PUT", "/v1/teams/red", `{}`, 409, "declared_in_config", nil},
		{"put a team wrongly", "PUT", "/v1/teams/blue", `{"org": "nope", "models": ["zz*"]}`, 400, "invalid_request", []problem{
			{"org", `unknown org "nope" (see GET /v1/orgs)`},
			{"models[0]", `"zz*" matches no configured model`},
		}},
		{"put a config org", "PUT", "/v1/orgs/acme", `{}`, 409, "declared_in_config", nil},
		{"put an org with a bad budget", "PUT", "/v1/orgs/beta", `{"limits": {"budgets": [{"micro_usd": 1, "period": "yearly"}]}}`, 400, "invalid_request",
			[]problem{{"limits.budgets[0].period", `unknown period "yearly" (one of day, week, month, rolling, lifetime)`}}},
		{"unknown team", "GET", "/v1/teams/nope", nil, 404, "not_found", nil},
		{"budgets of an unknown team", "GET", "/v1/teams/nope/budgets", nil, 404, "not_found", nil},
		{"unknown org", "GET", "/v1/orgs/nope", nil, 404, "not_found", nil},
		{"budgets of an unknown org", "GET", "/v1/orgs/nope/budgets", nil, 404, "not_found", nil},

		{"spend: everything wrong", "GET", "/v1/spend?by=week&since=yesterday&limit=-1&colour=red", nil, 400, "invalid_request", []problem{
			{"query.colour", "unknown parameter (parameters: by, since, until, key, team, org, model, limit)"},
			{"query.by", `want key, team, org, model, day or none, got "week"`},
			{"query.since", `want an RFC 3339 time (2026-11-01T00:00:00Z) or a date (2026-11-01), got "yesterday"`},
			{"query.limit", `want a whole number, 0 or more (0: no limit), got "-1"`},
		}},
		{"spend: until before since", "GET", "/v1/spend?since=2026-11-02&until=2026-11-01", nil, 400, "invalid_request", []problem{{"query.until", "is before since"}}},

		{"unknown route", "GET", "/v1/nope", nil, 404, "not_found", nil},
		{"unknown method", "DELETE", "/v1/keys", nil, 405, "method_not_allowed", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := h.do(tt.method, tt.path, tt.body)
			if res.status != tt.status {
				t.Fatalf("status %d, want %d; body %s", res.status, tt.status, res.body)
			}
			e := res.apiError(t)
			if e.Error.Code != tt.code {
				t.Errorf("code %q, want %q (%s)", e.Error.Code, tt.code, e.Error.Message)
			}
			if diff := cmp.Diff(tt.problems, e.Error.Problems); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
	if res := h.do("DELETE", "/v1/keys", nil); res.header.Get("allow") != "GET, POST" {
		t.Errorf("405 allow = %q, want GET, POST", res.header.Get("allow"))
	}
}
