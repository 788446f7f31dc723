package devcmd

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicegw/sluice/internal/logbuf"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer = logbuf.Buffer

func TestUsage(t *testing.T) {
	for _, tt := range []struct {
		args     []string
		wantErr  error
		inOutput string // in stdout or stderr
	}{
		{nil, errUsage, "Commands:"},
		{[]string{"frobnicate"}, errUsage, `unknown command "frobnicate"`},
		{[]string{"envoy", "--help"}, nil, "Usage: sluice-dev envoy"},
		{[]string{"envoy"}, errUsage, "sluice-dev envoy needs --config FILE"},
		{[]string{"envoy", "--config", "x.yaml", "--log-level", "loud"}, errUsage, "--log-level: want debug, info, warn or error"},
		{[]string{"envoy", "--nope"}, errUsage, "flag provided but not defined: -nope"},
		{[]string{"llm", "--help"}, nil, "mockllm [flags]"},
		{[]string{"llm", "--nope"}, errUsage, "flag provided but not defined: -nope"},
	} {
		var stdout, stderr bytes.Buffer
		err := Run(context.Background(), tt.args, &stdout, &stderr)
		if !errors.Is(err, tt.wantErr) && !(err == nil && tt.wantErr == nil) {
			t.Errorf("%v: err = %v, want %v", tt.args, err, tt.wantErr)
		}
		if out := stdout.String() + stderr.String(); !strings.Contains(out, tt.inOutput) {
			t.Errorf("%v: output lacks %q:\n%s", tt.args, tt.inOutput, out)
		}
	}
	var stdout bytes.Buffer
	if err := Run(context.Background(), []string{"help"}, &stdout, io.Discard); err != nil || !strings.Contains(stdout.String(), "envoy ") || !strings.Contains(stdout.String(), "llm ") {
		t.Errorf("help: %v\n%s", err, stdout.String())
	}
	if got := ExitCode(errUsage); got != 2 {
		t.Errorf("ExitCode(usage) = %d, want 2", got)
	}
	if got := ExitCode(errors.New("boom")); got != 1 {
		t.Errorf("ExitCode(other) = %d, want 1", got)
	}
	if err := Run(context.Background(), []string{"envoy", "--config", filepath.Join(t.TempDir(), "missing.yaml")}, io.Discard, io.Discard); err == nil || ExitCode(err) != 1 {
		t.Errorf("envoy with a missing bootstrap: %v", err)
	}
}

var urlRE = regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`)

// start runs sluice-dev with args until the test ends, and returns the
// address it says it listens on.
func start(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() { done <- Run(ctx, args, &stdout, &stderr) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%v returned %v", args, err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := urlRE.FindStringSubmatch(stdout.String() + stderr.String()); m != nil {
			return m[1]
		}
		select {
		case err := <-done:
			t.Fatalf("%v exited early: %v\nstderr:\n%s", args, err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v did not start; stderr:\n%s", args, stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestLLMServes(t *testing.T) {
	url := start(t, "llm", "--addr", "127.0.0.1:0")
	resp, err := http.Get(url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(string(body), "ok") {
		t.Errorf("/healthz = %d %q", resp.StatusCode, body)
	}
}

func TestEnvoyServes(t *testing.T) {
	// The static quickstart bootstrap, with no Sluice behind it: the
	// emulator answers as Envoy does when its ext_authz service is down
	// (the bootstrap's status_on_error).
	bootstrap := filepath.Join("..", "..", "examples", "envoy-quickstart.yaml")
	url := start(t, "envoy", "--config", bootstrap, "--addr", "127.0.0.1:0", "--log-level", "warn")
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503 (ext_authz unreachable)", resp.StatusCode)
	}
}
