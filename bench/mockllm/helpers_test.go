package mockllm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start serves a new mock on 127.0.0.1:0 until the test ends and returns
// it with its base URL. Cleanup checks that Serve returned nil.
func start(t testing.TB, opts Options) (*Server, string) {
	t.Helper()
	s := New(opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, "http://" + ln.Addr().String()
}

// client returns an HTTP client that shows bodies as sent (no transparent
// gzip) and speaks HTTP/1.1, or cleartext HTTP/2 when h2c is set. Its
// idle connections are closed when the test ends.
func client(t testing.TB, h2c bool) *http.Client {
	t.Helper()
	tr := &http.Transport{DisableCompression: true}
	if h2c {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// result is a finished exchange.
type result struct {
	status  int
	header  http.Header
	body    []byte
	readErr error // from reading the body
	proto   int
}

// post sends body to base+path with headers (name, value pairs) and
// reads the whole reply.
func post(t testing.TB, c *http.Client, url, body string, headers ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, readErr := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, header: resp.Header, body: b, readErr: readErr, proto: resp.ProtoMajor}
}

// sse is one parsed server-sent event.
type sse struct {
	name string
	data string
}

// parseSSE parses a complete event stream (LF or CRLF lines).
func parseSSE(t testing.TB, body []byte) []sse {
	t.Helper()
	text := strings.ReplaceAll(string(body), "\r\n", "\n")
	if !strings.HasSuffix(text, "\n\n") {
		t.Fatalf("stream does not end with a blank line: %q", tail(text))
	}
	var out []sse
	for block := range strings.SplitSeq(strings.TrimSuffix(text, "\n\n"), "\n\n") {
		var e sse
		for line := range strings.SplitSeq(block, "\n") {
			switch {
			case strings.HasPrefix(line, "event: "):
				e.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				e.data = strings.TrimPrefix(line, "data: ")
			default:
				t.Fatalf("unexpected SSE line %q", line)
			}
		}
		out = append(out, e)
	}
	return out
}

func tail(s string) string {
	if len(s) > 80 {
		return "…" + s[len(s)-80:]
	}
	return s
}

// obj decodes a JSON object, failing the test otherwise.
func obj(t testing.TB, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, data)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		t.Fatalf("trailing data after JSON object: %s", data)
	}
	return m
}

// dig walks a decoded JSON value by object keys and array indexes.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

var volatile = regexp.MustCompile(`"(id|created|created_at|item_id)":("[^"]*"|\d+)|"(msg|resp)_mock\d+"|(chatcmpl|cmpl)-mock\d+`)

// normalise blanks the parts of a synthesised body that differ between
// two identical requests (ids and timestamps).
func normalise(b []byte) string { return volatile.ReplaceAllString(string(b), "«v»") }
