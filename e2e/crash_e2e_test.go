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
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/envoy/envoytest"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/testenv/pgtest"
	"github.com/sluicegw/sluice/xds"
)

// childEnv makes the test binary run `sluice` with the arguments after
// "--" instead of the tests: TestCrashSafety SIGKILLs a real process.
const childEnv = "SLUICE_E2E_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		args := os.Args[1:]
		for i, a := range args {
			if a == "--" {
				args = args[i+1:]
				break
			}
		}
		// As cmd/sluice: SIGTERM and SIGINT stop it gracefully.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := app.Run(ctx, args, os.Stdout, os.Stderr, os.LookupEnv)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(app.ExitCode(err))
	}
	code := m.Run()
	pgtest.Stop()
	os.Exit(code)
}

// startLimitsChild serves limitsPolicy with an unbinding budget against a
// mock provider of opts in a child process (startChild).
func startLimitsChild(t *testing.T, opts mockllm.Options, env ...string) (*exec.Cmd, *sluiceProcess) {
	t.Helper()
	_, mockAddr := mockProvider(t, opts)
	config := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(limitsPolicy, mockAddr, 1_000_000_000)), 0o600); err != nil {
		t.Fatal(err)
	}
	return startChild(t, config, env...)
}

// startChild runs `sluice serve` as a subprocess, with env added to its
// environment, and waits for it to be ready. It stops at once when told
// to (no drain).
func startChild(t *testing.T, config string, env ...string) (*exec.Cmd, *sluiceProcess) {
	t.Helper()
	return startChildArgs(t, config, []string{"--shutdown-drain", "0"}, env...)
}

// startChildArgs is startChild with more serve flags.
func startChildArgs(t *testing.T, config string, flags []string, env ...string) (*exec.Cmd, *sluiceProcess) {
	t.Helper()
	dir := filepath.Dir(config)
	ready := filepath.Join(dir, fmt.Sprintf("ready-%d.json", time.Now().UnixNano()))
	args := append([]string{"-test.run=^$", "--", "serve", "--config", config,
		"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--xds-addr", "127.0.0.1:0", "--ready-file", ready, "--log-level", "warn"}, flags...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), childEnv+"=1"), env...)
	var logs syncBuf
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("sluice child output:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(ready); err == nil {
			var addrs map[string]string
			if err := json.Unmarshal(b, &addrs); err != nil {
				t.Fatal(err)
			}
			return cmd, &sluiceProcess{config: config, grpcAddr: addrs["grpc"], adminAddr: addrs["admin"], xdsAddr: addrs["xds"], log: &syncBuf{}}
		}
		select {
		case <-exited:
			t.Fatalf("sluice child exited:\n%s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice child not ready:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// emulatorFor serves an emulator configured over xDS by s.
func emulatorFor(t *testing.T, s *sluiceProcess, node string) string {
	t.Helper()
	b, err := xds.Bootstrap(xds.BootstrapOptions{NodeID: node, XDSAddress: s.xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	e, err := envoytest.New(b, envoytest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	xdsDone, done := make(chan error, 1), make(chan error, 1)
	go func() { xdsDone <- e.Run(ctx) }()
	lctx, lcancel := context.WithTimeout(ctx, 20*time.Second)
	ln, err := e.Listen(lctx)
	lcancel()
	if err != nil {
		cancel()
		<-xdsDone
		t.Fatal(err)
	}
	go func() { done <- e.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done; <-xdsDone })
	return "http://" + ln.Addr().String()
}

// TestCrashSafety: Sluice is SIGKILLed while streams are in flight. After
// a restart, every request whose final reply reached the client has its
// spend record, and the budget, rebuilt from the ledger, admits exactly
// what the records leave of it.
func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills a sluice subprocess; not in -short")
	}
	_, mockAddr := mockProvider(t, mockllm.Options{Words: 100})
	config := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(limitsPolicy, mockAddr, 6000)), 0o600); err != nil { // a budget for 60 requests
		t.Fatal(err)
	}
	child, s := startChild(t, config)
	_, key := s.createKey(t, "t")
	url := emulatorFor(t, s, "crash-1")

	// Load: 8 clients stream requests back to back (20 chunks 5 ms apart,
	// about 100 ms each) until Sluice dies under them.
	type outcome struct {
		id       string
		complete bool // the final chunk ([DONE]) reached the client
	}
	var mu sync.Mutex
	var outcomes []outcome
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("crash-%d-%d", c, i)
				req, _ := http.NewRequest("POST", url+"/v1/chat/completions",
					strings.NewReader(`{"model":"m","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"go"}]}`))
				req.Header.Set("authorization", "Bearer "+key)
				req.Header.Set("x-request-id", id)
				req.Header.Set("x-mock-chunks", "20")
				req.Header.Set("x-mock-words", "100")
				req.Header.Set("x-mock-interval", "5ms")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					mu.Lock()
					outcomes = append(outcomes, outcome{id: id})
					mu.Unlock()
					continue
				}
				body, _ := io.ReadAll(bufio.NewReader(resp.Body))
				resp.Body.Close()
				id = resp.Header.Get("x-sluice-request-id") // what Sluice's listener replaced it with
				done := resp.StatusCode == 200 && bytes.Contains(body, []byte("data: [DONE]"))
				mu.Lock()
				outcomes = append(outcomes, outcome{id: id, complete: done})
				mu.Unlock()
				if resp.StatusCode == 429 {
					return // the budget is spent
				}
			}
		}()
	}
	// Kill once some requests have completed and others are in flight.
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := 0
		for _, o := range outcomes {
			if o.complete {
				n++
			}
		}
		mu.Unlock()
		if n >= 12 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d requests completed before the deadline", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()

	// Restart on the same files.
	_, s2 := startChild(t, config)
	records := map[string]int64{}
	var charged int64
	for _, r := range s2.records(t) {
		records[r.ClientRequestID] = r.CostPico
		charged += r.CostPico / 1_000_000 // whole micro-dollars at these prices
	}
	completed := 0
	for _, o := range outcomes {
		if !o.complete {
			continue
		}
		completed++
		if _, ok := records[o.id]; !ok {
			t.Errorf("request %s reached the client complete but has no spend record", o.id)
		}
	}
	if completed == 0 || charged%100 != 0 || charged > 6000 {
		t.Fatalf("%d complete requests, %d micro-dollars charged in %d records", completed, charged, len(records))
	}
	t.Logf("%d requests completed before the kill; %d records, %d micro-dollars charged", completed, len(records), charged)

	// The restarted Sluice admits exactly what the ledger leaves of the
	// budget: (6000 - charged) / 100 more requests, then refuses.
	s2.waitForKey(t, key)
	url2 := emulatorFor(t, s2, "crash-2")
	admitted := 0
	for i := 0; ; i++ {
		st, _, body := call{path: "/v1/chat/completions", body: `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"go"}]}`,
			headers: map[string]string{"x-request-id": fmt.Sprintf("after-%d", i)}}.do(t, url2, key)
		if st == 429 {
			if !strings.Contains(body, "insufficient_quota") {
				t.Fatalf("refusal %s", body)
			}
			break
		}
		if st != 200 {
			t.Fatalf("request after restart: %d %s", st, body)
		}
		admitted++
		if admitted > 60 {
			t.Fatal("the budget never ran out")
		}
	}
	if want := int((6000 - charged) / 100); admitted != want {
		t.Errorf("after the restart %d requests were admitted; the ledger charged %d of 6000, leaving room for %d", admitted, charged, want)
	}
}
