package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicegw/sluice/policies"
)

// Deps are what the admin server reads and writes through. Every field is
// required.
type Deps struct {
	// Gatherer is what /metrics serves.
	Gatherer prometheus.Gatherer
	// Ready is nil when the process is ready (/readyz 200), else why not
	// (503 with the error's text).
	Ready func() error
	Log   *slog.Logger

	// Policy returns the current policy snapshot: the admin token
	// (admin.token, read on every request, so a reload applies at once),
	// the declared keys, teams and orgs, and the models limits are
	// checked against.
	Policy func() *policies.Snapshot
	// Keys and Groups are the key store (store.Store satisfies both).
	Keys   KeyStore
	Groups GroupStore
	// Principals resolves keys, teams and orgs as the running server sees
	// them (*keyring.Ring).
	Principals Principals
	// Budgets reports what covering budgets have left (*admission.Local).
	Budgets Budgets
	// Spend sums the spend ledger (ledger.Reader).
	Spend Spend
	// Now is the clock: creation and revocation times, key states,
	// budget periods.
	Now func() time.Time
}

// Server is the admin HTTP server.
type Server struct {
	handler  http.Handler
	log      *slog.Logger
	deps     Deps
	patterns []string       // every route served, "METHOD /path", for the OpenAPI test
	api      *http.ServeMux // the /v1/ routes, behind guard
	pprof    *http.ServeMux // the /debug/pprof/ routes, behind pprofGate
	// closing is closed when Serve's context ends, so that a profile
	// being recorded stops and shutdown is not held up.
	closing   chan struct{}
	closeOnce sync.Once
}

// New returns the admin server: /healthz, /readyz and /metrics, open to
// anyone who can reach the listener, the token-protected API under /v1/
// (docs/admin-api.openapi.yaml), and Go's profiles under /debug/pprof/
// while admin.pprof is set, behind the same token. It starts nothing.
func New(d Deps) (*Server, error) {
	var missing []error
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"Gatherer", d.Gatherer != nil}, {"Ready", d.Ready != nil}, {"Log", d.Log != nil},
		{"Policy", d.Policy != nil}, {"Keys", d.Keys != nil}, {"Groups", d.Groups != nil},
		{"Principals", d.Principals != nil}, {"Budgets", d.Budgets != nil}, {"Spend", d.Spend != nil}, {"Now", d.Now != nil},
	} {
		if !f.set {
			missing = append(missing, fmt.Errorf("admin: Deps.%s is required", f.name))
		}
	}
	if err := errors.Join(missing...); err != nil {
		return nil, err
	}
	s := &Server{log: d.Log.With("component", "admin"), deps: d, closing: make(chan struct{})}
	mux := http.NewServeMux()
	handle := func(pattern string, h http.Handler) {
		mux.Handle(pattern, h)
		s.patterns = append(s.patterns, pattern)
	}
	handle("GET /healthz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("content-type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	}))
	handle("GET /readyz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("content-type", "text/plain; charset=utf-8")
		if err := d.Ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		io.WriteString(w, "ready\n")
	}))
	handle("GET /metrics", promhttp.HandlerFor(d.Gatherer, promhttp.HandlerOpts{ErrorLog: slogAdapter{s.log}}))

	api := http.NewServeMux()
	for _, rt := range s.routes() {
		api.HandleFunc(rt.pattern, rt.handler)
		s.patterns = append(s.patterns, rt.pattern)
	}
	s.api = api
	mux.Handle("/v1/", s.guard(api))

	prof := http.NewServeMux()
	for _, rt := range s.pprofRoutes() {
		prof.HandleFunc(rt.pattern, rt.handler)
		s.patterns = append(s.patterns, rt.pattern)
	}
	s.pprof = prof
	mux.Handle("/debug/pprof/", s.pprofGate(prof))
	s.handler = mux
	return s, nil
}

// Handler returns the server's routes, for tests.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves on ln until ctx ends, then shuts down within 5 s.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("admin: %w", err)
	case <-ctx.Done():
	}
	s.closeOnce.Do(func() { close(s.closing) })
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("admin: shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("admin: %w", err)
	}
	return nil
}

type slogAdapter struct{ log *slog.Logger }

func (a slogAdapter) Println(v ...any) { a.log.Error(fmt.Sprint(v...)) }
