package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicegw/sluice/bench/mockllm"
	admredis "github.com/sluicegw/sluice/internal/admission/redis"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/ledger"
	ledgerpg "github.com/sluicegw/sluice/internal/ledger/postgres"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/testenv"
	"github.com/sluicegw/sluice/internal/testenv/pgtest"
	"github.com/sluicegw/sluice/internal/testenv/redistest"
	"github.com/sluicegw/sluice/policies"
)

// fleetRedisPolicy: a replica of a fleet whose keys and ledger are in one
// PostgreSQL and whose counters are in one Redis. Team "budget" may spend
// $1 over its lifetime at $0.01 a request (a per-request fee, the only
// price): 100 requests; team "rate" may make 60 requests a minute. Redis
// is given 150 ms a call, not 50: the tests' bursts put 500 requests on
// three replicas, Redis, PostgreSQL and the emulator sharing two cores.
// Arguments: the mock provider's address, the database URL, the
// replicas' gRPC addresses, Redis's address, then the keys' hashes
// (warm-up, budget, rate).
const fleetRedisPolicy = `
listen: {envoy: "127.0.0.1:0"}
store: {postgres: "%[2]s"}
ledger: {postgres: "%[2]s", spool: ledger-spool}
admission: {redis: {url: "redis://%[4]s/0", timeout: 150ms}}
providers: [{name: p, kind: openai-compatible, base_url: "http://%[1]s"}]
models: [{name: m, provider: p}]
pricing: {m: {input: 0, output: 0, per_request: 10000}}
teams:
  - {name: warm}
  - {name: budget, limits: {budgets: [{period: lifetime, micro_usd: 1000000}]}}
  - {name: rate, limits: {requests: {per_minute: 60}}}
keys:
  - {name: kw, team: warm, sha256: "%[5]s"}
  - {name: kb, team: budget, sha256: "%[6]s"}
  - {name: kr, team: rate, sha256: "%[7]s"}
admin: {token: ` + fleetAdminToken + `}
security: {principal_keys: [{value: "` + attackPrincipalKey + `"}]}
xds:
  sluice_addresses: [%[3]s]
  extension_health_check: {interval: 200ms, timeout: 200ms, unhealthy_threshold: 2, healthy_threshold: 1}
`

const (
	fleetRedisWarm   = "sk-sluice-REDISwarm0123456789abcdefghijklmnopqrstuvw"
	fleetRedisBudget = "sk-sluice-REDISbudget0123456789abcdefghijklmnopqrstu"
	fleetRedisRate   = "sk-sluice-REDISrate0123456789abcdefghijklmnopqrstuvw"
)

// redisFleet starts three replicas sharing one PostgreSQL and one Redis
// behind one emulator, and returns the emulator's URL once all three
// take requests.
func redisFleet(t *testing.T, rs *redistest.Server, dbURL string) (envoy string, replicas []*sluiceProcess) {
	t.Helper()
	_, mockAddr := mockProvider(t, mockllm.Options{Words: 5})
	policy := func(addrs ...string) string {
		return fmt.Sprintf(fleetRedisPolicy, mockAddr, dbURL, strings.Join(addrs, ", "), rs.Addr(),
			sha256Hex(fleetRedisWarm), sha256Hex(fleetRedisBudget), sha256Hex(fleetRedisRate))
	}
	childConfig := func() string {
		p := filepath.Join(t.TempDir(), "sluice.yaml")
		if err := os.WriteFile(p, []byte(policy("127.0.0.1:9")), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := startSluiceMigrated(t, policy("127.0.0.1:9"))
	bConfig, cConfig := childConfig(), childConfig()
	_, b := startChildArgs(t, bConfig, nil)
	_, c := startChildArgs(t, cConfig, nil)
	for _, config := range []string{a.config, bConfig, cConfig} {
		if err := os.WriteFile(config, []byte(policy(a.grpcAddr, b.grpcAddr, c.grpcAddr)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	envoy = emulatorFor(t, a, "e2e-fleet-redis")
	replicas = []*sluiceProcess{a, b, c}
	testctx.Wait(t, "the three replicas to take requests", func() bool {
		if code, _ := chat(t, envoy, fleetRedisWarm); code != 200 {
			return false
		}
		for _, r := range replicas {
			if authzChecks(t, r.adminAddr) == 0 {
				return false
			}
		}
		return true
	})
	return envoy, replicas
}

var burstClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 600, MaxConnsPerHost: 0}, Timeout: time.Minute}

func chat(t *testing.T, envoy, secret string) (int, string) {
	req, _ := http.NewRequest("POST", envoy+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"go"}]}`))
	req.Header.Set("authorization", "Bearer "+secret)
	resp, err := burstClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(body)
}

// burst sends n requests with secret at once and counts the answers by
// status.
func burst(t *testing.T, envoy, secret string, n int) map[int]int {
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			code, body := chat(t, envoy, secret)
			mu.Lock()
			statuses[code]++
			if code != 200 && code != 429 && statuses[code] == 1 {
				t.Logf("a %d: %s", code, body)
			}
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	return statuses
}

// TestFleetRedisExactLimits: three replicas behind one Envoy share their
// counters in one Redis, so limits hold across the fleet exactly: 500
// requests at once against a budget that affords 100 — each checked by
// one replica and metered by another as Envoy spreads them — are 100
// served and 400 refused, and the ledger holds exactly the budget; 150
// at once against 60 a minute are 60 served.
func TestFleetRedisExactLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, Redis and sluice subprocesses; not in -short")
	}
	rs := redistest.Own(t)
	dbURL := pgtest.Database(t)
	envoy, _ := redisFleet(t, rs, dbURL)

	got := burst(t, envoy, fleetRedisBudget, 500)
	if got[200] != 100 || got[429] != 400 {
		t.Fatalf("500 requests at once against a budget of 100: %v; want 100 × 200 and 400 × 429", got)
	}
	db, err := ledgerpg.OpenDB(t.Context(), dbURL, ledgerpg.Options{Log: testenv.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var total ledger.Total
	testctx.Wait(t, "the ledger to hold the budget's 100 records", func() bool {
		ts, err := db.Totals(t.Context(), ledger.Filter{Team: "budget"}, ledger.ByNone)
		if err != nil || len(ts) != 1 {
			return false
		}
		total = ts[0]
		return total.Requests == 100
	})
	if total.Cost != money.FromMicros(1_000_000) {
		t.Errorf("the ledger's cost for the budget's team: %v; want exactly the $1 budget", total.Cost)
	}
	c := goredis.NewClient(&goredis.Options{Addr: rs.Addr()})
	defer c.Close()
	p := &keyring.Principal{KeyID: "kb", Team: "budget",
		TeamLimits: policies.Limits{Budgets: []policies.Budget{{Period: policies.PeriodLifetime, MicroUSD: 1_000_000}}}}
	bs := admredis.New(c, admredis.Options{}).Budgets(p, time.Now())
	if len(bs) != 1 || bs[0].Spent != total.Cost || !bs[0].Reserved.IsZero() {
		t.Errorf("Redis's budget counter: %+v; want the ledger's %v spent, nothing reserved", bs, total.Cost)
	}

	got = burst(t, envoy, fleetRedisRate, 150)
	if got[200] != 60 || got[429] != 90 {
		t.Fatalf("150 requests at once against 60 a minute: %v; want 60 × 200 and 90 × 429", got)
	}
}
