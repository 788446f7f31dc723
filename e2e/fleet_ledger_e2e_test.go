package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/ledger"
	ledgerpg "github.com/sluicegw/sluice/internal/ledger/postgres"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/testenv"
	"github.com/sluicegw/sluice/internal/testenv/pgtest"
)

// fleetLedgerPolicy: a replica of a fleet whose keys and spend ledger are
// in one PostgreSQL database; its spool beside its config. Arguments: the
// mock provider's address, the database URL, the replicas' gRPC
// addresses.
const fleetLedgerPolicy = `
listen: {envoy: "127.0.0.1:0"}
store: {postgres: "%[2]s"}
ledger: {postgres: "%[2]s", spool: ledger-spool}
providers: [{name: p, kind: openai-compatible, base_url: "http://%[1]s"}]
models: [{name: m, provider: p}]
teams: [{name: t}]
keys: [{name: k, team: t, sha256: "%[4]s"}]
admin: {token: ` + fleetAdminToken + `}
security: {principal_keys: [{value: "` + attackPrincipalKey + `"}]}
xds:
  sluice_addresses: [%[3]s]
  extension_health_check: {interval: 200ms, timeout: 200ms, unhealthy_threshold: 2, healthy_threshold: 1}
`

const fleetLedgerSecret = "sk-sluice-FLEETledger0123456789abcdefghijklmnopqrstu"

// TestFleetLedger: three replicas share one PostgreSQL store and spend
// ledger behind one Envoy, which load-balances ext_authz and ext_proc
// across them independently, so a request is authorized by one replica
// and metered by another. Then, under streaming load: PostgreSQL crashes
// (pg_ctl stop -m immediate) and comes back — requests go on being
// served, the replicas' spools grow and drain; and one replica is
// SIGKILLed and restarted — its spool is replayed. Through all of it,
// every response a client received complete has exactly one record, and
// no record is of a request that was never sent.
func TestFleetLedger(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and sluice subprocesses; not in -short")
	}
	srv := pgtest.Own(t)
	url := srv.Database(t)
	_, mockAddr := mockProvider(t, mockllm.Options{Words: 100})
	policy := func(addrs ...string) string {
		return fmt.Sprintf(fleetLedgerPolicy, mockAddr, url, strings.Join(addrs, ", "), sha256Hex(fleetLedgerSecret))
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
	cCmd, c := startChildArgs(t, cConfig, nil)
	// One configuration for the three: each reloads it.
	for _, config := range []string{a.config, bConfig, cConfig} {
		if err := os.WriteFile(config, []byte(policy(a.grpcAddr, b.grpcAddr, c.grpcAddr)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	envoy := emulatorFor(t, a, "e2e-fleet-ledger")
	db, err := ledgerpg.OpenDB(t.Context(), url, ledgerpg.Options{Log: testenv.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	var (
		mu   sync.Mutex
		sent = map[string]bool{} // every request id Sluice gave a request
		done []string            // the ids of responses received complete
		fail = map[int]int{}     // statuses other than 200, and 0 for a transport error
	)
	stream := func(i int) {
		req, _ := http.NewRequest("POST", envoy+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"go"}]}`))
		req.Header.Set("authorization", "Bearer "+fleetLedgerSecret)
		req.Header.Set("x-mock-chunks", "10")
		req.Header.Set("x-mock-interval", "2ms")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			mu.Lock()
			fail[0]++
			mu.Unlock()
			return
		}
		body, _ := io.ReadAll(bufio.NewReader(resp.Body))
		resp.Body.Close()
		id := resp.Header.Get("x-sluice-request-id")
		mu.Lock()
		defer mu.Unlock()
		if id != "" {
			sent[id] = true
		}
		if resp.StatusCode == 200 && bytes.Contains(body, []byte("data: [DONE]")) {
			done = append(done, id)
		} else {
			fail[resp.StatusCode]++
		}
	}
	completed := func() int { mu.Lock(); defer mu.Unlock(); return len(done) }
	// load streams from 4 clients until stop is called.
	load := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					stream(w*1_000_000 + i)
				}
			})
		}
		return func() { cancel(); wg.Wait() }
	}
	waitCompleted := func(what string, n int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for completed() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: only %d responses completed, want %d", what, completed(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// checkLedger waits until the ledger holds a record of every
	// completed response, and checks each once and none unsent.
	checkLedger := func(what string) {
		t.Helper()
		mu.Lock()
		want := append([]string(nil), done...)
		mu.Unlock()
		var recs []ledger.Record
		deadline := time.Now().Add(30 * time.Second)
		for {
			recs, err = db.Records(t.Context(), ledger.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			have := map[string]bool{}
			for _, r := range recs {
				have[r.ClientRequestID] = true
			}
			missing := 0
			for _, id := range want {
				if !have[id] {
					missing++
				}
			}
			if missing == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d completed responses have no spend record", what, missing, len(want))
			}
			time.Sleep(20 * time.Millisecond)
		}
		count := map[string]int{}
		mu.Lock()
		defer mu.Unlock()
		for _, r := range recs {
			count[r.ClientRequestID]++
			if !sent[r.ClientRequestID] {
				t.Errorf("%s: a record of %q, a request no client sent", what, r.ClientRequestID)
			}
		}
		for _, id := range want {
			if count[id] != 1 {
				t.Errorf("%s: completed response %s has %d records; want 1", what, id, count[id])
			}
		}
		t.Logf("%s: %d responses completed, %d records, failures by status %v", what, len(want), len(recs), fail)
	}

	// The three take requests once the reload reaches Envoy.
	replicas := []*sluiceProcess{a, b, c}
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		stream(i)
		all := true
		for _, r := range replicas {
			all = all && authzChecks(t, r.adminAddr) > 0
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the three replicas never all took requests")
		}
	}
	mu.Lock()
	clear(fail) // the requests before the reload reached Envoy
	mu.Unlock()
	// Which replica checked a request and which metered it, seen from
	// their counters around each of a few requests made one at a time:
	// some request is checked by one and metered by another.
	counters := func() (checks, metered [3]float64) {
		for i, r := range replicas {
			checks[i] = authzChecks(t, r.adminAddr)
			metered[i] = metricSum(t, r.adminAddr, "sluice_extproc_requests_total")
		}
		return
	}
	crossed := 0
	for i := range 6 {
		c0, m0 := counters()
		stream(1000 + i)
		c1, m1 := counters()
		checker, meterer := -1, -1
		for j := range replicas {
			if c1[j] > c0[j] {
				checker = j
			}
			if m1[j] > m0[j] {
				meterer = j
			}
		}
		if checker < 0 || meterer < 0 {
			t.Fatalf("request %d: no replica checked (%d) or metered (%d) it", i, checker, meterer)
		}
		if checker != meterer {
			crossed++
		}
	}
	if crossed == 0 {
		t.Error("each of 6 requests was checked and metered by the same replica; want ext_authz and ext_proc spread independently")
	}
	t.Logf("%d of 6 requests were checked by one replica and metered by another", crossed)
	for i := range 24 {
		stream(2000 + i)
	}
	checkLedger("three replicas")

	// The same xDS version from each (an Envoy that switches control
	// planes is sent nothing new: xds/reconnect.go).
	testctx.Wait(t, "the three replicas serving one xDS version", func() bool {
		va := xdsVersion(t, a)
		return va != "" && va == xdsVersion(t, b) && va == xdsVersion(t, c)
	})
	// A key made through a's admin API is honoured by b and c, and once
	// revoked by the CLI refused by all three, each within a second.
	body := strings.NewReader(`{"team":"t","name":"fleet3"}`)
	req, _ := http.NewRequest("POST", "http://"+a.adminAddr+"/v1/keys", body)
	req.Header.Set("authorization", "Bearer "+fleetAdminToken)
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var created struct{ ID, Secret string }
	err = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /v1/keys on a: %d %v", resp.StatusCode, err)
	}
	for _, r := range []*sluiceProcess{b, c} {
		if took := awaitCheck(t, r.grpcAddr, created.Secret, true); took > time.Second {
			t.Errorf("a key made on a was honoured by %s after %v; want within 1 s", r.grpcAddr, took)
		}
	}
	var out, errb bytes.Buffer
	if err := app.Run(t.Context(), []string{"keys", "revoke", "--config", bConfig, created.ID}, &out, &errb, noEnv); err != nil {
		t.Fatalf("keys revoke: %v %s", err, errb.String())
	}
	for _, r := range replicas {
		if took := awaitCheck(t, r.grpcAddr, created.Secret, false); took > time.Second {
			t.Errorf("the revoked key was refused by %s after %v; want within 1 s", r.grpcAddr, took)
		}
	}
	// The same spend seen from each replica's configuration.
	var spends []string
	for _, config := range []string{a.config, bConfig, cConfig} {
		var out, errb bytes.Buffer
		if err := app.Run(t.Context(), []string{"spend", "--config", config, "--by", "key", "--format", "json"}, &out, &errb, noEnv); err != nil {
			t.Fatalf("spend --config %s: %v %s", config, err, errb.String())
		}
		spends = append(spends, out.String())
	}
	if spends[0] == "" || spends[0] != spends[1] || spends[0] != spends[2] {
		t.Errorf("spend differs between the replicas' configurations:\n%s", strings.Join(spends, "\n"))
	}

	// PostgreSQL crashes under load, and returns.
	stop := load()
	waitCompleted("before PostgreSQL stopped", completed()+20)
	if err := srv.Halt(); err != nil {
		t.Fatal(err)
	}
	downAt := completed()
	waitCompleted("with PostgreSQL down", downAt+40)
	backlog := 0.0
	for _, r := range replicas {
		backlog += metricSum(t, r.adminAddr, "sluice_ledger_spool_backlog")
	}
	if backlog == 0 {
		t.Error("with PostgreSQL down, no replica's spool holds a backlog")
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitCompleted("after PostgreSQL returned", completed()+20)
	stop()
	mu.Lock()
	failed := fail[0] + fail[500] + fail[502] + fail[503] + fail[504]
	mu.Unlock()
	if failed > 0 {
		t.Errorf("%d requests failed while PostgreSQL was down and back (by status: %v); want every one served", failed, fail)
	}
	checkLedger("PostgreSQL down and back")

	// A replica is killed under load, and restarted on its spool.
	stop = load()
	waitCompleted("before the kill", completed()+20)
	if err := cCmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitCompleted("after the kill", completed()+40)
	stop()
	startChildArgs(t, cConfig, nil) // replays its spool
	checkLedger("a replica killed and restarted")
}

// metricSum is the sum of a metric's series on a replica's /metrics.
func metricSum(t *testing.T, adminAddr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		return -1 // gone
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// TestTenReplicasMigrateOnce: ten replicas start at once with --migrate
// against an empty database: the store's and the ledger's migrations are
// each applied by one of them, the others wait for the lock and find
// nothing to do, and every replica becomes ready.
func TestTenReplicasMigrateOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ten servers; not in -short")
	}
	// A password the server (trust authentication) ignores, and no log
	// may show.
	url := strings.Replace(pgtest.Database(t), "postgres://postgres@", "postgres://postgres:SECRET-pw@", 1)
	_, mockAddr := mockProvider(t, mockllm.Options{})
	cfg := fmt.Sprintf(fleetLedgerPolicy, mockAddr, url, "sluice.fleet.internal:9001", sha256Hex(fleetLedgerSecret))
	const n = 10
	type replica struct {
		ready string
		log   *syncBuf
		done  chan error
	}
	ctx, cancel := context.WithCancel(context.Background())
	replicas := make([]replica, n)
	for i := range replicas {
		dir := t.TempDir()
		config := filepath.Join(dir, "sluice.yaml")
		if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		r := replica{ready: filepath.Join(dir, "ready.json"), log: &syncBuf{}, done: make(chan error, 1)}
		replicas[i] = r
		go func() {
			r.done <- app.Run(ctx, []string{"serve", "--config", config, "--migrate", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
				"--xds-addr", "127.0.0.1:0", "--ready-file", r.ready, "--log-level", "info", "--shutdown-drain", "0"}, r.log, r.log, noEnv)
		}()
	}
	defer func() {
		cancel()
		for i, r := range replicas {
			if err := <-r.done; err != nil {
				t.Errorf("replica %d: %v\n%s", i, err, r.log.String())
			}
		}
	}()
	deadline := time.Now().Add(60 * time.Second)
	for i, r := range replicas {
		for {
			if _, err := os.Stat(r.ready); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %d never became ready:\n%s", i, r.log.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, component := range []string{"store", "ledger"} {
		migrated := 0
		for _, r := range replicas {
			migrated += strings.Count(r.log.String(), `msg="`+component+` schema migrated"`)
		}
		if migrated != 1 {
			t.Errorf("%d replicas migrated the %s schema; want one", migrated, component)
		}
	}
	for i, r := range replicas {
		// serve logs that it serves just after it writes the ready file.
		for !strings.Contains(r.log.String(), `msg="sluice serving"`) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		log := r.log.String()
		if !strings.Contains(log, "store=postgres ledger=postgres") || strings.Contains(log, "SECRET-pw") {
			t.Errorf("replica %d's log does not name its backends, or shows the password:\n%s", i, log)
		}
	}
}
