package e2e

import (
	"bufio"
	"context"
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
)

// replicaPolicy is one Sluice replica of a pair: the same declared key
// and principal key on both (ext_authz on one replica, ext_proc on the
// other, must agree), the replicas Envoy calls, and a health check quick
// enough for a test.
const replicaPolicy = `
listen: {envoy: "127.0.0.1:0"}
store: {sqlite: sluice.db}
ledger: {sqlite: ledger.db}
providers: [{name: p, kind: openai-compatible, base_url: "http://%s"}]
models: [{name: m, provider: p}]
teams: [{name: t}]
keys: [{name: k, team: t, sha256: "%s"}]
security: {principal_keys: [{value: "` + attackPrincipalKey + `"}]}
xds:
  sluice_addresses: [%s]
  extension_health_check: {interval: 200ms, timeout: 200ms, unhealthy_threshold: 2, healthy_threshold: 1}
`

const replicaSecret = "sk-sluice-REPLICApair0123456789abcdefghijklmnopqrstuv"

// TestReplicaLost: two Sluice replicas behind one Envoy, under load, and
// one of them goes. Told to stop (SIGTERM), it reports NOT_SERVING and
// goes on serving for its drain, so Envoy's health check takes it out
// first: no request fails at all. Killed (SIGKILL), the requests routed to
// it fail closed until Envoy finds it out — by outlier detection or by
// the health check, within the checks' interval times the unhealthy
// threshold — and from then on none fails.
func TestReplicaLost(t *testing.T) {
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
	}{{"stopped", syscall.SIGTERM}, {"killed", syscall.SIGKILL}} {
		t.Run(tc.name, func(t *testing.T) { replicaLost(t, tc.sig) })
	}
}

func replicaLost(t *testing.T, sig syscall.Signal) {
	_, mockAddr := mockProvider(t, mockllm.Options{})
	policy := func(addrs ...string) string {
		return fmt.Sprintf(replicaPolicy, mockAddr, sha256Hex(replicaSecret), strings.Join(addrs, ", "))
	}
	// b, the replica that goes, in a process of its own with its default
	// drain (the health check's interval plus its timeout).
	bConfig := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(bConfig, []byte(policy("127.0.0.1:9")), 0o600); err != nil {
		t.Fatal(err)
	}
	bCmd, b := startChildArgs(t, bConfig, nil)
	// a serves the xDS Envoy subscribes to; its own gRPC address is known
	// once it listens, so the pair is configured by a reload.
	a := startSluice(t, policy(b.grpcAddr))
	if err := os.WriteFile(a.config, []byte(policy(a.grpcAddr, b.grpcAddr)), 0o600); err != nil {
		t.Fatal(err)
	}
	url := emulatorFor(t, a, "e2e-replicas-"+strings.ToLower(t.Name()[strings.LastIndex(t.Name(), "/")+1:]))

	client := &http.Client{Timeout: 10 * time.Second}
	chat := func() int {
		req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("content-type", "application/json")
		req.Header.Set("authorization", "Bearer "+replicaSecret)
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// Both replicas take requests once the reload reaches Envoy.
	deadline := time.Now().Add(15 * time.Second)
	for authzChecks(t, a.adminAddr) == 0 || authzChecks(t, b.adminAddr) == 0 {
		if st := chat(); st != 200 {
			t.Fatalf("before the pair was configured: status %d", st)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pair never both took requests: a %v, b %v checks", authzChecks(t, a.adminAddr), authzChecks(t, b.adminAddr))
		}
	}

	type result struct {
		at     time.Time
		status int
	}
	var (
		mu      sync.Mutex
		results []result
		wg      sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(context.Background())
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				st := chat()
				mu.Lock()
				results = append(results, result{time.Now(), st})
				mu.Unlock()
			}
		}()
	}
	time.Sleep(500 * time.Millisecond) // load on both replicas
	gone := time.Now()
	if err := bCmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	// Found out within the checks' interval × unhealthy_threshold plus a
	// timeout; the load runs on well past it.
	settled := gone.Add(2*200*time.Millisecond + 200*time.Millisecond + 300*time.Millisecond)
	time.Sleep(time.Until(settled) + 1500*time.Millisecond)
	cancel()
	wg.Wait()

	var before, window, after, failedWindow, failedAfter, failedBefore int
	for _, r := range results {
		switch {
		case r.at.Before(gone):
			before++
			if r.status != 200 {
				failedBefore++
			}
		case r.at.Before(settled):
			window++
			if r.status != 200 {
				failedWindow++
			}
		default:
			after++
			if r.status != 200 {
				failedAfter++
			}
		}
	}
	t.Logf("%s: %d requests before, %d (%d failed) while it was found out, %d after", sig, before, window, failedWindow, after)
	if before == 0 || after < 20 {
		t.Fatalf("too little load to tell: %d before, %d after", before, after)
	}
	if failedBefore > 0 {
		t.Errorf("%d requests failed with both replicas up", failedBefore)
	}
	if failedAfter > 0 {
		t.Errorf("%d of %d requests failed after the health check's interval", failedAfter, after)
	}
	if sig == syscall.SIGTERM && failedWindow > 0 {
		t.Errorf("a replica told to stop drained, yet %d requests failed", failedWindow)
	}
}

// authzChecks is the sum of sluice_authz_checks_total on a replica's
// /metrics.
func authzChecks(t *testing.T, adminAddr string) float64 {
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
		if !strings.HasPrefix(line, "sluice_authz_checks_total") {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}
