package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/bench/mockllm"
)

// TestSecondServeOfALedgerRefused: a second `sluice serve` of the ledger
// file a running one writes — which would admit every budget a second
// time — exits non-zero saying why and what to do instead; the first
// keeps serving, and `sluice spend` still reads beside it.
func TestSecondServeOfALedgerRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sluice subprocesses; not in -short")
	}
	_, mockAddr := mockProvider(t, mockllm.Options{Words: 10})
	config := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(limitsPolicy, mockAddr, 1_000_000_000)), 0o600); err != nil {
		t.Fatal(err)
	}
	first, s := startChild(t, config)
	_, key := s.createKey(t, "t")
	url := emulatorFor(t, s, "writer-1")
	// chat makes a request through the first server and returns the
	// x-request-id its record carries (Sluice's listener sets its own).
	chat := func(id string) string {
		t.Helper()
		req, err := http.NewRequest("POST", url+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"go"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("authorization", "Bearer "+key)
		req.Header.Set("x-request-id", id)
		st, h, body := do(t, req)
		if st != 200 {
			t.Fatalf("request %s through the first server: %d %s", id, st, body)
		}
		return h.Get("x-sluice-request-id")
	}
	before := chat("before-second")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	second := exec.CommandContext(ctx, os.Args[0], "-test.run=^$", "--", "serve", "--shutdown-drain", "0", "--config", config,
		"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--xds-addr", "127.0.0.1:0", "--log-level", "warn")
	second.Env = append(os.Environ(), childEnv+"=1")
	var out bytes.Buffer
	second.Stdout, second.Stderr = &out, &out
	err := second.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 || ctx.Err() != nil {
		t.Fatalf("second serve of the same ledger: %v, want a non-zero exit\n%s", err, out.String())
	}
	ledgerPath := filepath.Join(filepath.Dir(config), "ledger.db")
	for _, want := range []string{
		fmt.Sprintf("ledger.sqlite %s is in use by another sluice process (pid %d)", ledgerPath, first.Process.Pid),
		"each replica needs its own ledger file",
		"replicas sharing a ledger need ledger.postgres",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the second serve's output lacks %q:\n%s", want, out.String())
		}
	}

	// The first still serves, and records what it serves.
	after := chat("after-second")
	for _, id := range []string{before, after} {
		s.awaitRecord(t, id)
	}
	if n := len(s.records(t)); n != 2 {
		t.Errorf("%d spend records, want 2", n)
	}
}
