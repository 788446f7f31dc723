package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
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
// price): 100 requests; team "rate" may make 60 requests a minute; team
// "open" is admitted by each replica's own counters when Redis does not
// answer (the others are refused: failure_mode closed, the default). Redis
// is given 150 ms a call, not 50: the tests' bursts put 500 requests on
// three replicas, Redis, PostgreSQL and the emulator sharing two cores.
// Arguments: the mock provider's address, the database URL, the
// replicas' gRPC addresses, Redis's address, then the keys' hashes
// (warm-up, budget, rate, open).
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
  - {name: open, limits: {failure_mode: open, budgets: [{period: lifetime, micro_usd: 1000000000}]}}
keys:
  - {name: kw, team: warm, sha256: "%[5]s"}
  - {name: kb, team: budget, sha256: "%[6]s"}
  - {name: kr, team: rate, sha256: "%[7]s"}
  - {name: ko, team: open, sha256: "%[8]s"}
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
	fleetRedisOpen   = "sk-sluice-REDISopen0123456789abcdefghijklmnopqrstuvw"
)

// redisFleet starts three replicas sharing one PostgreSQL and one Redis
// behind one emulator, and returns the emulator's URL once all three
// take requests.
func redisFleet(t *testing.T, rs *redistest.Server, dbURL string) (envoy string, replicas []*sluiceProcess) {
	t.Helper()
	_, mockAddr := mockProvider(t, mockllm.Options{Words: 5})
	policy := func(addrs ...string) string {
		return fmt.Sprintf(fleetRedisPolicy, mockAddr, dbURL, strings.Join(addrs, ", "), rs.Addr(),
			sha256Hex(fleetRedisWarm), sha256Hex(fleetRedisBudget), sha256Hex(fleetRedisRate), sha256Hex(fleetRedisOpen))
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

// burstInFlight bounds the requests a burst has in flight at once under
// the race detector: it makes the replicas and the emulator many times
// slower, and on two cores 500 at once outlast Envoy's 200 ms ext_authz
// timeout (504s and 503s from the emulator, not Sluice's answers).
// Without it, all of them are in flight at once.
const burstInFlight = 60

// burst sends n requests with secret at once (at most burstInFlight at a
// time under the race detector) and counts the answers by status.
func burst(t *testing.T, envoy, secret string, n int) map[int]int {
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	slots := make(chan struct{}, n)
	if testenv.Race {
		slots = make(chan struct{}, burstInFlight)
	}
	for range n {
		wg.Go(func() {
			<-start
			slots <- struct{}{}
			defer func() { <-slots }()
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

// child is a replica in a process of its own, restartable on its ports.
type child struct {
	cmd  *exec.Cmd
	proc *sluiceProcess
}

// stopChild signals c and waits until its process is gone.
func stopChild(t *testing.T, c *child, sig syscall.Signal) {
	t.Helper()
	pid := c.cmd.Process.Pid
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	testctx.Wait(t, fmt.Sprintf("process %d to exit after %v", pid, sig), func() bool {
		return syscall.Kill(pid, 0) == syscall.ESRCH
	})
}

// restartChild starts c again on the ports it had, its config and spool
// as they were.
func restartChild(t *testing.T, c *child) {
	t.Helper()
	p := c.proc
	c.cmd, c.proc = startChildArgs(t, p.config, []string{"--grpc-addr", p.grpcAddr, "--admin-addr", p.adminAddr, "--xds-addr", p.xdsAddr})
}

// TestFleetRedisRestarts: three replicas, one Redis, one PostgreSQL,
// under streaming load. A rolling restart of all three (SIGTERM, each
// back on its ports before the next goes) breaks no stream: each replica
// turns NOT_SERVING, takes no new stream, lets its open ones finish. A
// replica SIGKILLed mid-stream leaves reservations in Redis that expire
// after reservation_ttl, and the others keep serving. Through all of it
// every stream that completed is recorded once, and Redis's budget
// counter equals the ledger's spend.
func TestFleetRedisRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, Redis and sluice subprocesses; not in -short")
	}
	rs := redistest.Own(t)
	dbURL := pgtest.Database(t)
	_, mockAddr := mockProvider(t, mockllm.Options{Words: 100})
	dir := t.TempDir()
	policy := func(addrs ...string) string {
		p := fmt.Sprintf(fleetRedisPolicy, mockAddr, dbURL, strings.Join(addrs, ", "), rs.Addr(),
			sha256Hex(fleetRedisWarm), sha256Hex(fleetRedisBudget), sha256Hex(fleetRedisRate), sha256Hex(fleetRedisOpen))
		// A budget the load never exhausts, and reservations that expire
		// within the test.
		p = strings.Replace(p, "micro_usd: 1000000}", "micro_usd: 1000000000}", 1)
		return p + "gateway: {reservation_ttl: 1m}\n"
	}
	configs := make([]string, 3)
	for i := range configs {
		configs[i] = filepath.Join(dir, fmt.Sprintf("r%d", i), "sluice.yaml")
		if err := os.MkdirAll(filepath.Dir(configs[i]), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(configs[i], []byte(policy("127.0.0.1:9")), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	replicas := make([]*child, 3)
	for i := range replicas {
		var flags []string
		if i == 0 {
			flags = []string{"--migrate"}
		}
		cmd, p := startChildArgs(t, configs[i], flags)
		replicas[i] = &child{cmd, p}
	}
	addrs := []string{replicas[0].proc.grpcAddr, replicas[1].proc.grpcAddr, replicas[2].proc.grpcAddr}
	for _, config := range configs {
		if err := os.WriteFile(config, []byte(policy(addrs...)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var envoy string
	var (
		mu     sync.Mutex
		done   []string // request ids of the streams received whole
		broken []string // how the others ended
		sent   = map[string]bool{}
	)
	stream := func() {
		req, _ := http.NewRequest("POST", envoy+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"go"}]}`))
		req.Header.Set("authorization", "Bearer "+fleetRedisBudget)
		req.Header.Set("x-mock-chunks", "20")
		req.Header.Set("x-mock-interval", "25ms")
		resp, err := burstClient.Do(req)
		if err != nil {
			mu.Lock()
			broken = append(broken, err.Error())
			mu.Unlock()
			return
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		id := resp.Header.Get("x-sluice-request-id")
		mu.Lock()
		defer mu.Unlock()
		if id != "" {
			sent[id] = true
		}
		if resp.StatusCode == 200 && err == nil && strings.Contains(string(body), "data: [DONE]") {
			done = append(done, id)
			return
		}
		broken = append(broken, fmt.Sprintf("status %d, %v, %q", resp.StatusCode, err, tail(string(body))))
	}
	completed := func() int { mu.Lock(); defer mu.Unlock(); return len(done) }
	envoy = emulatorFor(t, replicas[0].proc, "e2e-fleet-redis-restarts")
	testctx.Wait(t, "the three replicas to take requests", func() bool {
		if stream(); completed() == 0 {
			return false
		}
		for _, r := range replicas {
			if authzChecks(t, r.proc.adminAddr) == 0 {
				return false
			}
		}
		return true
	})

	mu.Lock()
	broken = nil // the streams before the configuration reached Envoy
	mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for ctx.Err() == nil {
				stream()
			}
		})
	}
	waitMore := func(what string, n int) {
		t.Helper()
		want := completed() + n
		testctx.Wait(t, what, func() bool { return completed() >= want })
	}

	// A rolling restart of all three, the xDS server's last.
	waitMore("streams before the restarts", 12)
	for _, i := range []int{1, 2, 0} {
		r := replicas[i]
		checks := authzChecks(t, r.proc.adminAddr)
		stopChild(t, r, syscall.SIGTERM)
		restartChild(t, r)
		testctx.Wait(t, fmt.Sprintf("replica %d to take requests again", i), func() bool {
			return authzChecks(t, r.proc.adminAddr) > 0 || checks < 0
		})
		waitMore(fmt.Sprintf("streams after replica %d restarted", i), 12)
	}
	mu.Lock()
	if len(broken) > 0 {
		t.Errorf("a rolling restart broke %d streams; want none:\n%s", len(broken), strings.Join(broken, "\n"))
	}
	broken = nil
	mu.Unlock()

	// A replica killed mid-stream: the others keep serving.
	stopChild(t, replicas[2], syscall.SIGKILL)
	waitMore("streams after a replica was killed", 24)
	cancel()
	wg.Wait()
	t.Logf("%d streams completed; %d broken when a replica was killed", completed(), len(broken))

	// Every completed stream is recorded once, and nothing else is.
	db, err := ledgerpg.OpenDB(t.Context(), dbURL, ledgerpg.Options{Log: testenv.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	restartChild(t, replicas[2]) // replays its spool
	mu.Lock()
	want := append([]string(nil), done...)
	mu.Unlock()
	var recs []ledger.Record
	testctx.Wait(t, "the ledger to hold every completed stream", func() bool {
		recs, err = db.Records(t.Context(), ledger.Filter{Team: "budget"})
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, r := range recs {
			have[r.ClientRequestID] = true
		}
		for _, id := range want {
			if !have[id] {
				return false
			}
		}
		return true
	})
	count := map[string]int{}
	for _, r := range recs {
		count[r.ClientRequestID]++
		if !sent[r.ClientRequestID] {
			t.Errorf("a record of %q, a request no client sent", r.ClientRequestID)
		}
	}
	for _, id := range want {
		if count[id] != 1 {
			t.Errorf("completed stream %s has %d records; want 1", id, count[id])
		}
	}

	// Redis's counter: exactly what the ledger holds — every settled
	// stream, from whichever replica — and what the killed replica had
	// reserved for its streams in flight is held until reservation_ttl
	// after each was admitted, when the next call for the team releases
	// it (internal/admission/redis TestDeadReplicasReservationsExpire).
	c := goredis.NewClient(&goredis.Options{Addr: rs.Addr()})
	defer c.Close()
	p := &keyring.Principal{KeyID: "kb", Team: "budget",
		TeamLimits: policies.Limits{Budgets: []policies.Budget{{Period: policies.PeriodLifetime, MicroUSD: 1_000_000_000}}}}
	bs := admredis.New(c, admredis.Options{}).Budgets(p, time.Now())
	var total money.Sum
	for _, r := range recs {
		total = total.AddPico(r.CostPico)
	}
	if len(bs) != 1 || bs[0].Spent != total {
		t.Errorf("Redis's budget: %+v; want spent exactly the ledger's %v", bs, total)
	}
	// The team's hold set (gone when it holds nothing: Redis drops an
	// empty sorted set).
	holds, err := c.Keys(t.Context(), admredis.Prefix+"*}:holds").Result()
	if err != nil || len(holds) > 1 {
		t.Fatalf("hold sets %v, %v; want the team's one at most", holds, err)
	}
	var due []goredis.Z
	if len(holds) == 1 {
		if due, err = c.ZRangeWithScores(t.Context(), holds[0], 0, -1).Result(); err != nil {
			t.Fatal(err)
		}
	}
	if len(bs) == 1 && (len(due) == 0) != bs[0].Reserved.IsZero() {
		t.Errorf("%d reservations held, and %v reserved", len(due), bs[0].Reserved)
	}
	last := time.Time{}
	for _, z := range due {
		at := time.UnixMilli(int64(z.Score))
		if at.After(time.Now().Add(time.Minute)) {
			t.Errorf("a reservation held until %v, past reservation_ttl (1m) from now", at)
		}
		if at.After(last) {
			last = at
		}
	}
	if len(due) > 0 {
		// They are released once due, by the next call for the team from
		// any replica (a report here), and the spend stays the ledger's.
		time.Sleep(time.Until(last) + 100*time.Millisecond)
		after := admredis.New(c, admredis.Options{}).Budgets(p, time.Now())
		if len(after) != 1 || !after[0].Reserved.IsZero() || after[0].Spent != total {
			t.Errorf("past reservation_ttl: %+v; want nothing reserved and the ledger's %v spent", after, total)
		}
	} else {
		t.Log("the killed replica held no reservation when it died: nothing to expire")
	}
	t.Logf("ledger: %d records, %v; Redis: %+v, %d holds", len(recs), total, bs, len(due))
}

func tail(s string) string {
	if len(s) > 120 {
		return "…" + s[len(s)-120:]
	}
	return s
}

// TestFleetRedisOutage: Redis stops under load. Each team follows its
// failure mode: the closed one is refused with 503 admission_unavailable
// and a retry-after, the open one is served by each replica's own
// counters. Redis comes back empty: the budgets start again from the
// ledger, which holds what was served meanwhile, and nothing is counted
// twice — Redis's budget equals the ledger's spend.
func TestFleetRedisOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, Redis and sluice subprocesses; not in -short")
	}
	rs := redistest.Own(t)
	dbURL := pgtest.Database(t)
	envoy, replicas := redisFleet(t, rs, dbURL)
	for _, secret := range []string{fleetRedisBudget, fleetRedisOpen} {
		if got := burst(t, envoy, secret, 10); got[200] != 10 {
			t.Fatalf("before the outage: %v", got)
		}
	}
	rs.Halt()
	closed := burst(t, envoy, fleetRedisBudget, 20)
	open := burst(t, envoy, fleetRedisOpen, 20)
	if closed[503] != 20 {
		t.Errorf("a closed team with Redis down: %v; want 20 × 503", closed)
	}
	if open[200] != 20 {
		t.Errorf("an open team with Redis down: %v; want 20 × 200", open)
	}
	req, _ := http.NewRequest("POST", envoy+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"go"}]}`))
	req.Header.Set("authorization", "Bearer "+fleetRedisBudget)
	resp, err := burstClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(body), "admission_unavailable") || resp.Header.Get("retry-after") != "1" {
		t.Errorf("closed, Redis down: %d, retry-after %q, %s; want 503 admission_unavailable, retry-after 1", resp.StatusCode, resp.Header.Get("retry-after"), body)
	}
	var fallbacks float64
	for _, r := range replicas {
		fallbacks += metricSum(t, r.adminAddr, "sluice_admission_fallback_total")
	}
	if fallbacks < 20 {
		t.Errorf("sluice_admission_fallback_total %v across the replicas; want the 20 open requests at least", fallbacks)
	}

	if err := rs.Restart(); err != nil {
		t.Fatal(err)
	}
	// Once every replica finds Redis again and its spool has reached
	// PostgreSQL, the next requests start the budget from the ledger.
	testctx.Wait(t, "the replicas to find Redis again, their spools drained", func() bool {
		for _, r := range replicas {
			if metricSum(t, r.adminAddr, "sluice_admission_redis_down") != 0 || metricSum(t, r.adminAddr, "sluice_ledger_spool_backlog") != 0 {
				return false
			}
		}
		return true
	})
	for _, secret := range []string{fleetRedisBudget, fleetRedisOpen} {
		if got := burst(t, envoy, secret, 10); got[200] != 10 {
			t.Fatalf("after the outage: %v", got)
		}
	}
	db, err := ledgerpg.OpenDB(t.Context(), dbURL, ledgerpg.Options{Log: testenv.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c := goredis.NewClient(&goredis.Options{Addr: rs.Addr()})
	defer c.Close()
	for _, tc := range []struct {
		team     string
		requests int64
		micros   int64
	}{{"budget", 20, 1_000_000}, {"open", 40, 1_000_000_000}} {
		var total ledger.Total
		testctx.Wait(t, "the ledger to hold team "+tc.team+"'s requests", func() bool {
			ts, err := db.Totals(t.Context(), ledger.Filter{Team: tc.team}, ledger.ByNone)
			if err != nil || len(ts) != 1 {
				return false
			}
			total = ts[0]
			return total.Requests == tc.requests
		})
		p := &keyring.Principal{KeyID: "k", Team: tc.team,
			TeamLimits: policies.Limits{Budgets: []policies.Budget{{Period: policies.PeriodLifetime, MicroUSD: tc.micros}}}}
		bs := admredis.New(c, admredis.Options{}).Budgets(p, time.Now())
		if len(bs) != 1 || bs[0].Spent != total.Cost || !bs[0].Reserved.IsZero() {
			t.Errorf("team %s: Redis's budget %+v; want the ledger's %v spent, nothing reserved", tc.team, bs, total.Cost)
		}
	}
}
