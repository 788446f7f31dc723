package app

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// TestServePProf: `sluice serve` wires admin.pprof: off in the quickstart
// (404), on after a reload that sets it (with the token only), and
// nothing the binary links registers on http.DefaultServeMux.
func TestServePProf(t *testing.T) {
	const token = "pprof-test-token-0123456789"
	config := quickstart(t)
	orig, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	s := startServe(t, config)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	get := func(path, authorization string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("GET", "http://"+s.adminAddr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/debug/pprof/", ""); code != http.StatusNotFound {
		t.Fatalf("quickstart /debug/pprof/ = %d %q; want 404", code, body)
	}

	on := string(orig) + "\nadmin: {token: " + token + ", pprof: true}\n"
	if err := os.WriteFile(config, []byte(on), 0o600); err != nil {
		t.Fatal(err)
	}
	within(t, 2*time.Second, "pprof turned on by a reload", func() bool {
		code, _ := get("/debug/pprof/", "Bearer "+token)
		return code == http.StatusOK
	})
	if code, body := get("/debug/pprof/heap?debug=1", ""); code != http.StatusUnauthorized || !strings.Contains(body, `"unauthorized"`) {
		t.Errorf("heap without the token = %d %q; want 401 unauthorized", code, body)
	}
	if code, body := get("/debug/pprof/heap?debug=1", "Bearer "+token); code != http.StatusOK || !strings.HasPrefix(body, "heap profile: ") {
		t.Errorf("heap with the token = %d %.80q; want 200 and the heap profile", code, body)
	}

	for _, path := range []string{"/debug/pprof/", "/debug/pprof/profile"} {
		if _, pattern := http.DefaultServeMux.Handler(httptest.NewRequest("GET", path, nil)); pattern != "" {
			t.Errorf("http.DefaultServeMux serves %s (pattern %q)", path, pattern)
		}
	}
}
