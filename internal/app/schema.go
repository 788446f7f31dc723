package app

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/sluicegw/sluice/internal/pgmigrate"
	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/internal/store/postgres"
)

// schemaPoll is how often serve, waiting for `sluice migrate`, looks at
// the database schema again.
const schemaPoll = time.Second

// openStore opens the key store for serve, once its schema is the one
// this build needs (waitForSchema).
func (c *components) openStore(ctx context.Context) (store.Store, error) {
	var st store.Store
	err := c.waitForSchema(ctx, "store", c.snap.StorePostgres(), postgres.Migrate, func() error {
		var err error
		st, err = openStoreBackend(ctx, c.snap, c.log)
		return err
	})
	return st, err
}

// waitForSchema opens a component with open, once its PostgreSQL schema
// at url is the one this build needs (without url, at once: SQLite files
// are upgraded when opened). With --migrate, it migrates first (under the
// migration lock, so that replicas started together migrate once). A
// schema newer than this build knows refuses the start. A schema older
// than it needs keeps serve waiting, not ready, until `sluice migrate`
// has run — a rollout's migration job may finish after the new replicas
// start: meanwhile the admin listener answers /healthz, and /readyz with
// why, and open, which fails with a *pgmigrate.VersionError while the
// schema is not the one needed, is tried again every schemaPoll.
func (c *components) waitForSchema(ctx context.Context, component, url string, migrate func(context.Context, string, *slog.Logger) (int, int, error), open func() error) error {
	if url == "" {
		return open()
	}
	if c.flags.migrate {
		from, to, err := migrate(ctx, url, c.log)
		if err != nil {
			return err
		}
		if from != to {
			c.log.Info(component+" schema migrated", "from_version", from, "to_version", to)
		}
	}
	err := open()
	if !errors.Is(err, pgmigrate.ErrTooOld) {
		return err
	}
	c.log.Warn("not ready: waiting for the database schema", "component", component, "err", err)
	waiting := &notReady{}
	waiting.set(err)
	stop := serveNotReady(c.adminLn, waiting)
	defer stop()
	t := time.NewTicker(schemaPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		switch err = open(); {
		case err == nil:
			c.log.Info("the database schema is the one this sluice needs; starting", "component", component)
			return nil
		case !errors.Is(err, pgmigrate.ErrTooOld):
			return err
		}
		waiting.set(err)
	}
}

// notReady is why serve is not ready yet.
type notReady struct {
	mu  sync.Mutex
	err error
}

func (n *notReady) set(err error) { n.mu.Lock(); n.err = err; n.mu.Unlock() }
func (n *notReady) get() error    { n.mu.Lock(); defer n.mu.Unlock(); return n.err }

// serveNotReady answers on ln, until stop, /healthz with 200 (the
// process is alive: an orchestrator must not restart it for waiting) and
// everything else, /readyz included, with 503 and why. stop returns once
// nothing serves ln any more, leaving ln open for the admin server.
func serveNotReady(ln net.Listener, why *notReady) (stop func()) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not ready: "+why.get().Error(), http.StatusServiceUnavailable)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	pl := &pausable{Listener: ln}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(pl) }()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx) // closes pl: Serve's Accept returns
		<-done
		pl.resume()
	}
}

// pausable is a listener whose Close only wakes its Accept (through the
// TCP listener's deadline) and leaves the socket open, for the server
// that takes it over.
type pausable struct {
	net.Listener
	closed bool
	mu     sync.Mutex
}

var errPaused = errors.New("listener handed over")

func (p *pausable) Accept() (net.Conn, error) {
	c, err := p.Listener.Accept()
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		if c != nil {
			c.Close()
		}
		return nil, errPaused
	}
	return c, err
}

func (p *pausable) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	if d, ok := p.Listener.(interface{ SetDeadline(time.Time) error }); ok {
		return d.SetDeadline(time.Unix(1, 0))
	}
	return nil
}

// resume clears the deadline Close set.
func (p *pausable) resume() {
	if d, ok := p.Listener.(interface{ SetDeadline(time.Time) error }); ok {
		_ = d.SetDeadline(time.Time{})
	}
}
