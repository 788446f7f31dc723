package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/testctx"
)

// TestDrainTimeoutCancelsStreams: a replica told to stop (SIGTERM) turns
// not ready (/readyz 503, saying it drains) at once, lets an open stream
// go on, and at gateway.drain_timeout cancels what is still open: the
// stream is cut, settled as cancelled, charged what it delivered, and
// recorded before the process exits.
func TestDrainTimeoutCancelsStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a sluice subprocess; not in -short")
	}
	_, mockAddr := mockProvider(t, mockllm.Options{Words: 100})
	config := filepath.Join(t.TempDir(), "sluice.yaml")
	policy := fmt.Sprintf(replicaPolicy, mockAddr, sha256Hex(replicaSecret), "127.0.0.1:9") +
		"pricing: {m: {input: 1000000, output: 1000000}}\ngateway: {drain_timeout: 1s}\n"
	if err := os.WriteFile(config, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, r := startChildArgs(t, config, nil)
	if err := os.WriteFile(config, []byte(strings.Replace(policy, "127.0.0.1:9", r.grpcAddr, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	envoy := emulatorFor(t, r, "e2e-drain-timeout")
	testctx.Wait(t, "the replica to take requests", func() bool {
		code, _ := chat(t, envoy, replicaSecret)
		return code == 200
	})

	// A stream of 100 chunks 50 ms apart: five seconds, past the drain.
	req, _ := http.NewRequest("POST", envoy+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"max_tokens":200,"messages":[{"role":"user","content":"go"}]}`))
	req.Header.Set("authorization", "Bearer "+replicaSecret)
	req.Header.Set("x-mock-chunks", "100")
	req.Header.Set("x-mock-interval", "50ms")
	resp, err := burstClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the stream: %v, %v", resp, err)
	}
	id := resp.Header.Get("x-sluice-request-id")
	buf := make([]byte, 256)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testctx.Wait(t, "/readyz to say the replica drains", func() bool {
		got, err := http.Get("http://" + r.adminAddr + "/readyz")
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(got.Body)
		got.Body.Close()
		return got.StatusCode == 503 && strings.Contains(string(body), "draining")
	})
	rest, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	cut := time.Since(stopped)
	if err == nil && bytes.Contains(rest, []byte("data: [DONE]")) {
		t.Fatal("the stream finished; want it cut at the drain timeout")
	}
	if cut < time.Second || cut > 4*time.Second {
		t.Errorf("the stream was cut %v after SIGTERM; want at the 1s drain timeout (after the health check's drain)", cut)
	}
	pid := cmd.Process.Pid
	testctx.Wait(t, "the replica to exit", func() bool { return syscall.Kill(pid, 0) == syscall.ESRCH })

	var out, errb bytes.Buffer
	if err := app.Run(t.Context(), []string{"spend", "--config", config, "--records", "--format", "json"}, &out, &errb, noEnv); err != nil {
		t.Fatalf("spend: %v %s", err, errb.String())
	}
	// One JSON record a line.
	type record struct {
		ClientRequestID, Outcome string
		OutputTokens, CostPico   int64
	}
	var recs []record
	dec := json.NewDecoder(&out)
	for dec.More() {
		var rec record
		if err := dec.Decode(&rec); err != nil {
			t.Fatalf("spend --records: %v\n%s", err, out.String())
		}
		recs = append(recs, rec)
	}
	for _, rec := range recs {
		if rec.ClientRequestID != id {
			continue
		}
		if rec.Outcome != "cancelled" || rec.OutputTokens <= 0 || rec.CostPico <= 0 {
			t.Errorf("the cut stream's record: %+v; want cancelled, charged what it delivered", rec)
		}
		return
	}
	t.Fatalf("no record of the stream cut at the drain timeout (%s) among %+v", id, recs)
}
