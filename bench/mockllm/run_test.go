package mockllm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		usage bool     // wraps ErrUsage
		want  []string // in the error and stderr
	}{
		{"unknown flag", []string{"--nope"}, true, []string{"flag provided but not defined: -nope"}},
		{"bad duration", []string{"--latency", "soon"}, true, []string{"invalid value \"soon\" for flag -latency"}},
		{"bad int", []string{"--chunks", "many"}, true, []string{"-chunks"}},
		{"every range problem at once", []string{"--chunks", "-1", "--interval", "-1s", "--dimensions", "999999"}, true,
			[]string{"chunks: must not be negative", "interval: must not be negative", "dimensions: at most"}},
		{"positional", []string{"serve"}, true, []string{"unexpected arguments"}},
		{"missing cassette", []string{"--cassette", "nowhere.yaml"}, true, []string{"nowhere.yaml"}},
		{"bad address", []string{"--addr", "127.0.0.1:99999"}, false, []string{"listen"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := Run(context.Background(), tc.args, &stdout, &stderr)
			if err == nil {
				t.Fatal("Run succeeded")
			}
			if errors.Is(err, ErrUsage) != tc.usage {
				t.Errorf("errors.Is(%v, ErrUsage) = %v, want %v", err, !tc.usage, tc.usage)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
				if tc.usage && !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr does not mention %q:\n%s", want, stderr.String())
				}
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout: %s", stdout.String())
			}
		})
	}
}

func TestRunHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), []string{"--help"}, &stdout, &stderr); err != nil {
		t.Fatalf("--help: %v", err)
	}
	for _, want := range []string{"not a model", "-addr", "127.0.0.1:8081", "-cassette", "-api-key", "-chunks", "-interval", "-latency"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("--help output lacks %q:\n%s", want, stdout.String())
		}
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr: %s", stderr.String())
	}
}

func TestRunServes(t *testing.T) {
	dir := t.TempDir()
	cassette := filepath.Join(dir, "c.yaml")
	writeFile(t, cassette, matchCassette)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"--addr", "127.0.0.1:0", "--api-key", "sk-k", "--chunks", "2", "--cassette", cassette, "-v"}, &stdout, &stderr)
	}()
	addr := regexp.MustCompile(`^mock LLM provider \(a test double, not a real model\) listening on (http://127\.0\.0\.1:\d+)\n$`)
	var base string
	for deadline := time.Now().Add(20 * time.Second); base == ""; {
		if m := addr.FindStringSubmatch(stdout.String()); m != nil {
			base = m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned early: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no address printed; stdout %q", stdout.String())
		}
		time.Sleep(5 * time.Millisecond)
	}

	c := client(t, false)
	if r := post(t, c, base+"/v1/chat/completions", streamChat); r.status != 401 {
		t.Errorf("without the key: %d", r.status)
	}
	// (The cassette holds /v1/chat/completions, so a synthesised stream
	// is asked for elsewhere.)
	r := post(t, c, base+"/v1/responses", withStream(responsesBody, `"stream":true,`), "Authorization", "Bearer sk-k")
	if n := bytes.Count(r.body, []byte("event: response.output_text.delta\n")); r.status != 200 || n != 2 {
		t.Errorf("with the key: %d, %d chunks", r.status, n)
	}
	if r := post(t, c, base+"/v1/embeddings", "not json", "Authorization", "Bearer sk-k"); string(r.body) != "raw-body" {
		t.Errorf("cassette not served: %s", r.body)
	}
	c.CloseIdleConnections()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if log := stderr.String(); !strings.Contains(log, "path=/v1/embeddings") || strings.Contains(log, "sk-k") {
		t.Errorf("verbose log should name paths and never keys:\n%s", log)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
