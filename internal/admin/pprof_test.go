package admin_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicegw/sluice/internal/admin"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/internal/testenv"
	"github.com/sluicegw/sluice/policies"
)

var withPProf = config("admin: {token: " + token + ", pprof: true}\n")

// TestPProfOff: without admin.pprof every /debug/pprof/ path is 404, with
// the right token too, and serves no index.
func TestPProfOff(t *testing.T) {
	h := start(t, withToken)
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap?debug=1", "/debug/pprof/profile?seconds=1", "/debug/pprof/cmdline"} {
		r := h.do("GET", path, nil)
		if r.status != http.StatusNotFound || bytes.Contains(r.body, []byte("heap")) {
			t.Errorf("GET %s with pprof off = %d %q; want 404", path, r.status, r.body)
		}
	}
}

// TestPProfToken: with admin.pprof on, the profiles need the admin token,
// refused as the admin API refuses it.
func TestPProfToken(t *testing.T) {
	h := start(t, withPProf)
	for _, tt := range []struct{ name, authorization, message string }{
		{"no token", "", "missing admin token"},
		{"wrong token", "Bearer " + token + "x", "wrong admin token"},
		{"another scheme", "Basic " + token, "missing admin token"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap?debug=1", "/debug/pprof/profile?seconds=1"} {
				r := h.doAuth("GET", path, tt.authorization, nil)
				if r.status != http.StatusUnauthorized {
					t.Fatalf("GET %s = %d %q; want 401", path, r.status, r.body)
				}
				if e := r.apiError(t); e.Error.Code != "unauthorized" || !strings.Contains(e.Error.Message, tt.message) {
					t.Errorf("GET %s: error %+v; want unauthorized, %q", path, e.Error, tt.message)
				}
				if got := r.header.Get("www-authenticate"); got != `Bearer realm="sluice-admin"` {
					t.Errorf("GET %s: www-authenticate %q", path, got)
				}
			}
		})
	}
}

// TestPProfServes: with admin.pprof on and the token, the index, the
// named profiles, the command line, the symbolizer and a CPU profile are
// served; a seconds parameter out of bounds is 400.
func TestPProfServes(t *testing.T) {
	h := start(t, withPProf)

	r := h.do("GET", "/debug/pprof/", nil)
	r.want(t, http.StatusOK, nil)
	for _, name := range []string{"allocs", "block", "goroutine", "heap", "mutex", "threadcreate", "cmdline", "profile", "symbol", "trace"} {
		if !bytes.Contains(r.body, []byte(`href="`+name)) {
			t.Errorf("the index does not link %s:\n%s", name, r.body)
		}
	}

	r = h.do("GET", "/debug/pprof/heap?debug=1", nil)
	r.want(t, http.StatusOK, nil)
	if !bytes.HasPrefix(r.body, []byte("heap profile: ")) || !strings.HasPrefix(r.header.Get("content-type"), "text/plain") {
		t.Errorf("heap?debug=1: %s %.80q; want the heap profile as text", r.header.Get("content-type"), r.body)
	}
	r = h.do("GET", "/debug/pprof/goroutine?debug=2", nil)
	r.want(t, http.StatusOK, nil)
	if !bytes.Contains(r.body, []byte("goroutine ")) {
		t.Errorf("goroutine?debug=2: %.200q", r.body)
	}
	r = h.do("GET", "/debug/pprof/allocs", nil)
	r.want(t, http.StatusOK, nil)
	if !bytes.HasPrefix(r.body, []byte{0x1f, 0x8b}) {
		t.Errorf("allocs: %.20q; want a gzipped protocol buffer", r.body)
	}

	r = h.do("GET", "/debug/pprof/profile?seconds=1", nil)
	r.want(t, http.StatusOK, nil)
	if !bytes.HasPrefix(r.body, []byte{0x1f, 0x8b}) || len(r.body) < 20 {
		t.Errorf("profile?seconds=1: %d bytes %.20q; want a gzipped protocol buffer", len(r.body), r.body)
	}

	r = h.do("GET", "/debug/pprof/cmdline", nil)
	r.want(t, http.StatusOK, nil)
	if !bytes.Contains(r.body, []byte("admin.test")) {
		t.Errorf("cmdline: %q", r.body)
	}
	r = h.do("GET", "/debug/pprof/symbol", nil)
	r.want(t, http.StatusOK, nil)
	if string(r.body) != "num_symbols: 1\n" {
		t.Errorf("GET symbol: %q", r.body)
	}

	for _, tt := range []struct{ path, param string }{
		{"/debug/pprof/profile?seconds=61", "query.seconds"},
		{"/debug/pprof/profile?seconds=0", "query.seconds"},
		{"/debug/pprof/profile?seconds=1.5", "query.seconds"},
		{"/debug/pprof/trace?seconds=61", "query.seconds"},
		{"/debug/pprof/heap?debug=3", "query.debug"},
		{"/debug/pprof/goroutine?gc=1", "query.gc"},
	} {
		r := h.do("GET", tt.path, nil)
		if r.status != http.StatusBadRequest {
			t.Errorf("GET %s = %d %q; want 400", tt.path, r.status, r.body)
			continue
		}
		if e := r.apiError(t); e.Error.Code != "invalid_request" || len(e.Error.Problems) != 1 || e.Error.Problems[0].Path != tt.param {
			t.Errorf("GET %s: %+v; want invalid_request at %s", tt.path, e.Error, tt.param)
		}
	}
	if e := h.do("GET", "/debug/pprof/profile?seconds=61", nil).apiError(t); !strings.Contains(e.Error.Message, "from 1 to 60") {
		t.Errorf("seconds=61: %q does not give the bound", e.Error.Message)
	}

	r = h.do("GET", "/debug/pprof/nothing", nil)
	if r.status != http.StatusNotFound || r.apiError(t).Error.Code != "not_found" {
		t.Errorf("an unknown profile = %d %q; want 404 not_found", r.status, r.body)
	}
}

// TestPProfReload: admin.pprof is read on every request, so a reload
// turns it on and off.
func TestPProfReload(t *testing.T) {
	h := start(t, withToken)
	if r := h.do("GET", "/debug/pprof/", nil); r.status != http.StatusNotFound {
		t.Fatalf("off: %d", r.status)
	}
	h.policy.Store(compile(t, withPProf))
	h.do("GET", "/debug/pprof/", nil).want(t, http.StatusOK, nil)
	h.policy.Store(compile(t, withToken))
	if r := h.do("GET", "/debug/pprof/", nil); r.status != http.StatusNotFound {
		t.Errorf("off again: %d", r.status)
	}
}

// TestPProfLeavesDefaultMux: nothing is registered on
// http.DefaultServeMux (net/http/pprof's init would).
func TestPProfLeavesDefaultMux(t *testing.T) {
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/profile"} {
		if _, pattern := http.DefaultServeMux.Handler(httptest.NewRequest("GET", path, nil)); pattern != "" {
			t.Errorf("http.DefaultServeMux serves %s (pattern %q)", path, pattern)
		}
	}
}

// TestPProfShutdown: a CPU profile being recorded does not hold up the
// server's shutdown; it ends and sends what it recorded.
func TestPProfShutdown(t *testing.T) {
	snap := compile(t, withPProf)
	srv, err := admin.New(admin.Deps{
		Gatherer:   prometheus.NewRegistry(),
		Ready:      func() error { return nil },
		Log:        testenv.Quiet(),
		Policy:     func() *policies.Snapshot { return snap },
		Keys:       struct{ store.Store }{},
		Groups:     struct{ store.Store }{},
		Principals: (*keyring.Ring)(nil),
		Budgets:    (*admission.Local)(nil),
		Spend:      struct{ ledger.Reader }{},
		Now:        time.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	type result struct {
		status int
		n      int
		err    error
	}
	got := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/debug/pprof/profile?seconds=60", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			got <- result{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		got <- result{resp.StatusCode, len(body), err}
	}()
	// Wait until the handler is recording.
	for !recording() {
		select {
		case r := <-got:
			t.Fatalf("the profile request ended before shutdown: %+v", r)
		case <-time.After(5 * time.Millisecond):
		}
	}
	stop()
	if err := <-served; err != nil {
		t.Errorf("Serve: %v; want a clean shutdown", err)
	}
	if r := <-got; r.err != nil || r.status != http.StatusOK || r.n == 0 {
		t.Errorf("the profile cut short by shutdown: %+v; want 200 with what was recorded", r)
	}
}

// recording reports whether a goroutine is in the admin server's wait
// for a profile.
func recording() bool {
	var b bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&b, 1)
	return strings.Contains(b.String(), "admin.(*Server).record")
}
