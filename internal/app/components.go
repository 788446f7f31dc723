package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/sluicegw/sluice/authz"
	"github.com/sluicegw/sluice/extproc"
	"github.com/sluicegw/sluice/internal/admin"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/gcpace"
	"github.com/sluicegw/sluice/internal/grpcguard"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/ledger/hold"
	ledgerpg "github.com/sluicegw/sluice/internal/ledger/postgres"
	"github.com/sluicegw/sluice/internal/ledger/spool"
	ledgersqlite "github.com/sluicegw/sluice/internal/ledger/sqlite"
	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/principal"
	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/internal/store/postgres"
	"github.com/sluicegw/sluice/internal/store/sqlite"
	"github.com/sluicegw/sluice/internal/tlsserve"
	"github.com/sluicegw/sluice/policies"
	"github.com/sluicegw/sluice/xds"
)

// ledgerBackend is what serve needs of a spend ledger backend: appending
// records (ext_proc), reading totals (admin) and aggregates (rebuilding
// budgets at start-up), and its committer, run until the gRPC server has
// stopped.
type ledgerBackend interface {
	ledger.Ledger
	ledger.Reader
	Buckets(ctx context.Context, since time.Time) ([]ledger.Aggregate, error)
	Lifetime(ctx context.Context) ([]ledger.Aggregate, error)
	Run(ctx context.Context) error
	Close() error
}

var (
	_ ledgerBackend = (*ledgersqlite.Ledger)(nil)
	_ ledgerBackend = (*ledgerpg.Ledger)(nil)
)

// admissionBackend is what serve needs of an admission backend: counting
// request rates (ext_authz), admitting and settling requests (ext_proc),
// reporting what budgets have left (admin), and expiring reservations
// that were never settled — admission.Backend, which every backend is.
type admissionBackend interface {
	admission.Backend
	extproc.Admitter
	admin.Budgets
}

var (
	_ admissionBackend = (*admission.Local)(nil)
	_ admissionBackend = (*admission.Failover)(nil)
)

// serveMetrics are the process-level series the app owns.
type serveMetrics struct {
	reloads    *prometheus.CounterVec
	storeSyncs prometheus.Counter
}

// components are the parts of a running `sluice serve`. build makes them
// in dependency order — metrics, config, listeners, then the control
// plane beside keys, ledger and admission, then servers — so every step
// only uses what an earlier one made; run starts them; close releases
// what was opened.
type components struct {
	flags serveFlags
	log   *slog.Logger
	// gogcSet: the environment sets GOGC, which gcpace leaves alone.
	gogcSet bool
	// startedUp puts the GC percentage back once start-up is over
	// (gcpace.StartUp).
	startedUp func()
	// started: gRPC health has been reported once (reportHealth).
	started bool
	// draining: told to stop; not ready while open streams finish.
	draining atomic.Bool

	reg     *prometheus.Registry
	metrics serveMetrics

	watcher *policies.Watcher
	snap    *policies.Snapshot // the config loaded at start-up
	bound   policies.Listen    // its listen addresses, which a reload cannot change
	// grpcRecv is the gRPC server's receive limit, set from the body
	// limit at start-up; a reload cannot change it.
	grpcRecv int

	ring   *keyring.Ring
	store  store.Store
	ledger ledgerBackend
	// hold keeps the records the ledger cannot take, and says when it
	// cannot (internal/ledger/hold); ext_proc appends through it.
	hold     *hold.Ledger
	counters *limits.Counters
	admitter admissionBackend

	grpcLn, adminLn, xdsLn net.Listener

	tlsReloaders []*tlsserve.Reloader // security.tls's files, polled by run
	principals   *principalSource

	control *xds.Server
	xdsGRPC *grpc.Server // ADS
	grpc    *grpc.Server // ext_authz, ext_proc, gRPC health
	health  *health.Server
	admin   *admin.Server

	closers []func() error // in the order opened; close runs them in reverse
}

// build makes every component, one step after another, or returns the
// first error; either way close releases what it opened.
func (c *components) build(ctx context.Context, stdout io.Writer, env Env) error {
	c.reg, c.metrics = newServeMetrics()
	if env != nil {
		_, c.gogcSet = env("GOGC")
	}
	c.startedUp = func() {}
	if !c.gogcSet {
		// Start-up keeps nearly all it allocates (the config, the keys):
		// no collection until the heap is startHeadroom.
		c.startedUp = gcpace.StartUp(startHeadroom)
	}
	if err := c.loadConfig(env); err != nil {
		return err
	}
	if applyRuntime(c.snap.Config().Runtime, env, c.log) && !c.gogcSet {
		c.startedUp()
		c.startedUp = func() {}
		c.gogcSet = true
	}
	if err := c.listen(ctx); err != nil {
		return err
	}
	// The control plane's first snapshot is CPU (building, validating and
	// marshalling the resources, and protobuf's first use of each of
	// their types); the stores' opening is mostly waiting on the disk. So
	// the snapshot is built meanwhile, from the config and the gRPC
	// address alone, and start-up waits for it before the servers.
	cp := make(chan error, 1)
	go func() { cp <- c.buildControlPlane() }()
	err := c.openStores(ctx, stdout)
	if cpErr := <-cp; err == nil {
		err = cpErr
	}
	if err != nil {
		return err
	}
	return c.servers()
}

// openStores opens the key store and the key ring, the ledger, and the
// admission that is rebuilt from it.
func (c *components) openStores(ctx context.Context, stdout io.Writer) error {
	if err := c.openKeys(ctx, stdout); err != nil {
		return err
	}
	if err := c.openLedger(ctx); err != nil {
		return err
	}
	var err error
	c.counters, c.admitter, err = newAdmission(ctx, c.snap, c.ledger, c.reg, c.log, c.onClose)
	if pg, ok := c.ledger.(*ledgerpg.Ledger); ok && err == nil {
		// Other replicas' spools may hold records the budgets miss until
		// those replicas drain them (a stopped one: until it restarts).
		if states, berr := pg.DB().Behind(ctx); berr == nil {
			if msg := ledgerpg.Staleness(states, time.Now()); msg != "" {
				c.log.Warn("budgets rebuilt from the ledger may be short: "+msg, "component", "ledger")
			}
		}
	}
	return err
}

// close releases, in reverse order, everything build opened, and returns
// their errors joined.
func (c *components) close() error {
	var errs []error
	for i := len(c.closers) - 1; i >= 0; i-- {
		errs = append(errs, c.closers[i]())
	}
	c.closers = nil
	return errors.Join(errs...)
}

func (c *components) onClose(f func() error) { c.closers = append(c.closers, f) }

func newServeMetrics() (*prometheus.Registry, serveMetrics) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := serveMetrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_config_reloads_total",
			Help: "Config reload attempts by result (ok|failed). A failed reload keeps the last good config.",
		}, []string{"result"}),
		storeSyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_store_sync_errors_total",
			Help: "Failed polls of the key store's change feed. The last good key replica stays in force.",
		}),
	}
	reg.MustRegister(m.reloads, m.storeSyncs)
	return reg, m
}

// loadConfig loads the config file, and makes the watcher that keeps it
// current. The watcher reports reloads to c.reloaded, which uses the key
// ring and the control plane: it does so only from watcher.Run, which
// run starts after build has made both.
func (c *components) loadConfig(env Env) error {
	c.watcher = policies.NewWatcher(c.flags.config, policies.WatcherOptions{Interval: configPoll, Env: env, Logger: c.log, OnReload: c.reloaded})
	snap, err := c.watcher.Load()
	if err != nil {
		var ps policies.Problems
		if errors.As(err, &ps) {
			var b strings.Builder
			for _, p := range ps {
				b.WriteString("\n  " + p.String())
			}
			return fmt.Errorf("%s has %d problem(s):%s", c.flags.config, len(ps), b.String())
		}
		return err
	}
	c.snap, c.bound = snap, snap.Listen()
	c.grpcRecv = grpcRecvBytes(snap.Gateway())
	return nil
}

// grpcRecvBytes is the gRPC server's receive limit for gateway g
// (policies.Gateway.GRPCRecvBytes), as grpc-go takes it.
func grpcRecvBytes(g policies.Gateway) int {
	return int(min(g.GRPCRecvBytes(), math.MaxInt32))
}

// reloaded applies a config reload reported by the watcher: the key ring
// takes the new policy and the control plane its resources. A failed
// reload changes nothing (the watcher has logged it).
func (c *components) reloaded(s *policies.Snapshot, err error) {
	if err != nil {
		c.metrics.reloads.WithLabelValues("failed").Inc()
		return
	}
	c.metrics.reloads.WithLabelValues("ok").Inc()
	if s.Listen() != c.bound {
		c.log.Warn("listen addresses changed in the config; restart sluice to apply them")
	}
	if s.Config().Runtime != c.snap.Config().Runtime {
		c.log.Warn("runtime settings changed in the config; restart sluice to apply them")
	}
	// grpc-go fixes a server's receive limit when the server is made: a
	// raised body limit reaches Envoy's listener now, but bodies the
	// running gRPC server cannot receive fail until a restart.
	if g := s.Gateway(); grpcRecvBytes(g) > c.grpcRecv {
		c.log.Warn("gateway.max_request_body_bytes was raised above what the running gRPC server can receive; restart sluice to apply it",
			"max_request_body_bytes", g.MaxRequestBodyBytes, "grpc_max_recv_bytes", c.grpcRecv)
	}
	c.ring.SetPolicy(s)
	c.principals.reloaded(s)
	// Update has counted the failure; Envoy keeps the previous resources.
	if _, err := c.control.Update(s); err != nil {
		c.log.Warn("reloaded config applies to keys and limits, but not to Envoy: its xDS resources are invalid",
			"config_version", s.Version(), "err", err)
	}
}

// openKeys opens the key store, creates the demo key if asked, and loads
// the key ring from the config and the store.
func (c *components) openKeys(ctx context.Context, stdout io.Writer) error {
	c.ring = keyring.New(c.log)
	c.ring.SetPolicy(c.snap)
	c.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_keys_cached", Help: "API keys in the in-memory replica (config-declared and stored, revoked included)."},
		func() float64 { return float64(c.ring.Len()) }))
	st, err := c.openStore(ctx)
	if err != nil {
		return err
	}
	c.store = st
	c.onClose(st.Close)
	if c.flags.demoKey {
		if err := createDemoKey(ctx, st, c.snap, c.flags.config, stdout); err != nil {
			return err
		}
	}
	return c.ring.Sync(ctx, st)
}

// openLedger opens the spend ledger. Its committer is started by run.
func (c *components) openLedger(ctx context.Context) error {
	asyncErrors := prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_async_errors_total",
		Help: "Errors the spend ledger reported after acknowledging records: a record the database refused (dropped), an ingestion that failed (retried), a spool that failed (direct commits from then on)."})
	c.reg.MustRegister(asyncErrors)
	log := c.log.With("component", "ledger")
	var upgradeStart time.Time
	var led ledgerBackend
	err := c.waitForSchema(ctx, "ledger", c.snap.LedgerPostgres(), ledgerpg.Migrate, func() error {
		var err error
		led, err = openLedgerBackend(ctx, c.snap, log, false, func(err error) {
			asyncErrors.Inc()
			log.Error("spend ledger", "err", err)
		}, func(from, to int) {
			upgradeStart = time.Now()
			log.Info("upgrading the spend ledger's schema; on a large ledger this takes minutes, and serving starts after it",
				"path", c.snap.LedgerPath(), "from_version", from, "to_version", to)
		})
		return err
	})
	if err != nil {
		return err
	}
	if !upgradeStart.IsZero() {
		log.Info("spend ledger upgraded", "took", time.Since(upgradeStart).Round(time.Millisecond))
	}
	if b, ok := led.(interface{ Backlog() int64 }); ok {
		c.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_ledger_spool_backlog",
			Help: "Spend records durable in the spool and not yet in the database."}, func() float64 { return float64(b.Backlog()) }))
	}
	if o, ok := led.(interface {
		OldestSpooled() time.Duration
		Ingested() int64
	}); ok {
		c.reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_ledger_spool_oldest_seconds",
				Help: "How long the oldest record durable in the spool and not yet in the database has waited there (0: the database holds them all)."},
				func() float64 { return o.OldestSpooled().Seconds() }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_ledger_ingested_total",
				Help: "Spooled records moved into the database (or refused by it); its rate is the ingester's pace."},
				func() float64 { return float64(o.Ingested()) }))
	}
	if pg, ok := led.(*ledgerpg.Ledger); ok {
		c.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_ledger_late_dropped_total",
			Help: "Spend records skipped because retention had dropped their month before they reached PostgreSQL (a spool replayed after longer than ledger.retention): their spend is in no total."},
			func() float64 { return float64(pg.DB().LateDropped()) }))
	}
	if d, ok := led.(interface{ DamagedFrames() int64 }); ok {
		c.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_ledger_spool_damaged_frames_total",
			Help: "Damaged stretches of the spool (each at least one frame) that the replay at start-up skipped; the spool was kept aside as <spool>-damaged-<unix time>, and the error log says where."},
			func() float64 { return float64(d.DamagedFrames()) }))
	}
	c.ledger = led
	c.hold = hold.New(led, hold.Options{Log: log})
	registerHold(c.reg, c.hold)
	c.onClose(led.Close)
	return nil
}

// openStoreBackend opens the key store the config names, for serve and the
// keys commands alike; the caller closes it: the embedded SQLite file, or
// PostgreSQL (a *pgStore), whose schema must be the one this build needs
// (a *pgmigrate.VersionError otherwise).
func openStoreBackend(ctx context.Context, snap *policies.Snapshot, log *slog.Logger) (store.Store, error) {
	if url := snap.StorePostgres(); url != "" {
		st, err := postgres.Open(ctx, url, postgres.Options{Log: log})
		if err != nil {
			return nil, err
		}
		return &pgStore{Store: st, listener: st.Listener()}, nil
	}
	st, err := sqlite.Open(ctx, snap.SQLitePath())
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return st, nil
}

// pgStore is the PostgreSQL store with the listener that tells its
// follower (keyring.Follow, a keyring.Notifier) of each change another
// replica commits; serve runs the listener.
type pgStore struct {
	*postgres.Store
	listener *postgres.Listener
}

func (s *pgStore) Changed() <-chan struct{} { return s.listener.C() }

// grpcStreamWorkers is the data-path server's pool of stream goroutines.
const grpcStreamWorkers = 64

// The data-path server's HTTP/2 flow-control windows, fixed. Setting them
// turns off grpc-go's bandwidth-delay estimator, which otherwise answers
// data with a connection WINDOW_UPDATE and a PING whenever its last PING
// was acknowledged (grpc-go internal/transport http2_server.go,
// handleData): about once a round trip, so on a paced ext_proc stream
// nearly once a message, each a frame to write and an ACK to read. Envoy
// needs no window growth: a stream's window is as large as Sluice buffers
// of it anyway, and a buffered body larger than the window still arrives
// whole (grpc-go widens a stream's window to the message being read).
// Measured in bench-service's open-200rps, three runs each: 12 rather
// than 13–16 reads and 7 rather than 8–9 writes of the server per request.
const (
	grpcStreamWindow = 1 << 20
	grpcConnWindow   = 16 << 20
)

// openLedgerBackend opens the spend ledger the config names, for serve and
// the spend command alike; the caller closes it: the embedded SQLite file,
// or PostgreSQL behind this replica's spool (ledger.spool). The spool is
// on: serve owns it, and a second serve of the same spool is refused (it
// would admit every budget a second time, and replay the same records);
// spend, a reader, takes no spool: beside a running server it reads the
// SQLite file after inserting what the spool holds, and PostgreSQL as it
// is (a record still in some replica's spool is not there yet). log is
// told the damage the spool's replay found, onError what the ledger
// cannot return to an Append, onMigrate that opening it upgrades the
// SQLite file's schema (see ledgersqlite.Options). A PostgreSQL schema
// other than the one this build needs is a *pgmigrate.VersionError.
func openLedgerBackend(ctx context.Context, snap *policies.Snapshot, log *slog.Logger, reader bool, onError func(error), onMigrate func(from, to int)) (ledgerBackend, error) {
	if url := snap.LedgerPostgres(); url != "" {
		so := spool.Options{Path: snap.LedgerSpool(), Logger: log, Linger: time.Millisecond, OnError: onError, MaxBytes: snap.SpoolMaxBytes(), Fault: ledgerFault(ctx)}
		if reader {
			so = spool.Options{}
		}
		led, err := ledgerpg.Open(ctx, url, ledgerpg.Options{Log: log, Spool: so})
		if inUse := (*spool.InUseError)(nil); errors.As(err, &inUse) {
			return nil, fmt.Errorf("ledger.spool %s is in use by %s; each replica needs a spool of its own (ledger.spool, on its own volume): %w",
				snap.LedgerSpool(), holder(inUse), err)
		}
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return led, nil
	}
	led, err := ledgersqlite.Open(ctx, snap.LedgerPath(), ledgersqlite.Options{Spool: true, Reader: reader, Logger: log, Linger: time.Millisecond, OnError: onError, OnMigrate: onMigrate, SpoolMaxBytes: snap.SpoolMaxBytes(),
		Fault: ledgerFault(ctx)})
	if inUse := (*ledgersqlite.InUseError)(nil); errors.As(err, &inUse) {
		return nil, fmt.Errorf("ledger.sqlite %s is in use by %s; each replica needs its own ledger file — and then has its own budgets; replicas sharing a ledger need ledger.postgres (docs/configuration.md): %w",
			snap.LedgerPath(), holder(inUse), err)
	}
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return led, nil
}

// backendName says, for serve's log, which backend a store or ledger is:
// "postgres" (never the URL, which may hold a password) or the SQLite
// file's path.
func backendName(postgresURL, sqlitePath string) string {
	if postgresURL != "" {
		return "postgres"
	}
	return "sqlite " + sqlitePath
}

// admissionName names where admission counts, never the Redis URL (it
// may hold a password).
func admissionName(snap *policies.Snapshot) string {
	r := snap.AdmissionRedis()
	switch {
	case r.URL == "":
		return "in-process"
	case r.Cluster:
		return "redis cluster, failure_mode " + snap.FailureMode()
	}
	return "redis, failure_mode " + snap.FailureMode()
}

// spoolName names this replica's spool in the PostgreSQL ledger's
// reports: the host and the spool's path.
func spoolName(path string) string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return host + ":" + path
}

// holder names the process holding a spool's lock.
func holder(e *spool.InUseError) string {
	if e.PID > 0 {
		return fmt.Sprintf("another sluice process (pid %d)", e.PID)
	}
	return "another sluice process"
}

// newAdmission builds the admission backend ext_authz and ext_proc share
// — its budgets start from what the ledger holds for their current
// periods, so a restart forgets nothing that was charged — and the
// sliding-window counters it counts in, which serve sweeps: in process,
// or, with admission.redis, in Redis, the in-process backend then the
// fallback of failure_mode open (sharedAdmission). A backend that holds
// something to close (the Redis client) registers it with onClose.
func newAdmission(ctx context.Context, snap *policies.Snapshot, led ledgerBackend, reg prometheus.Registerer, log *slog.Logger, onClose func(func() error)) (*limits.Counters, admissionBackend, error) {
	counters := limits.New(limits.Options{})
	tz, err := time.LoadLocation(snap.Gateway().BudgetTimeZone)
	if err != nil {
		return nil, nil, fmt.Errorf("gateway.budget_time_zone: %w", err)
	}
	buckets, err := led.Buckets(ctx, admission.EarliestPeriodStart(time.Now(), tz))
	if err != nil {
		return nil, nil, fmt.Errorf("rebuild budgets from the ledger: %w", err)
	}

	lifetime, err := led.Lifetime(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("rebuild budgets from the ledger: %w", err)
	}
	spent := admission.NewSpendIndex(buckets, lifetime)
	local := admission.NewLocal(counters, admission.LocalOptions{TimeZone: tz, Spent: spent.Spent, Record: spent.Add})
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_rate_counters", Help: "Live request-rate counters."},
			func() float64 { return float64(counters.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_reservations_held", Help: "Admitted requests whose reservation is not settled yet."},
			func() float64 { return float64(local.Held()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_reservations_expired_total", Help: "Reservations released unsettled after gateway.reservation_ttl."},
			func() float64 { return float64(local.Expired()) }),
	)
	if snap.AdmissionRedis().URL == "" {
		return counters, local, nil
	}
	shared, closeClient, err := sharedAdmission(ctx, snap, led, local, tz, spent.Add, reg, log)
	if err != nil {
		return nil, nil, err
	}
	onClose(closeClient)
	return counters, shared, nil
}

// listen binds the gRPC, admin and xDS addresses (the flags override the
// config's). Each listener is closed by close; the servers close them
// first when they stop, so that second close finds them closed.
func (c *components) listen(ctx context.Context) error {
	l := c.snap.Listen()
	for _, b := range []struct {
		name, addr string
		ln         *net.Listener
	}{
		{"listen.grpc", or(c.flags.grpcAddr, l.GRPC), &c.grpcLn},
		{"listen.admin", or(c.flags.adminAddr, l.Admin), &c.adminLn},
		{"listen.xds", or(c.flags.xdsAddr, l.XDS), &c.xdsLn},
	} {
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", b.addr)
		if err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
		*b.ln = ln
		c.onClose(func() error {
			if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("%s: %w", b.name, err)
			}
			return nil
		})
	}
	return nil
}

// buildControlPlane makes the xDS server and gives it the config loaded
// at start-up; an invalid result fails the start. Envoy's filters call
// the gRPC address actually bound, unless the config names Sluice's
// addresses itself.
func (c *components) buildControlPlane() error {
	c.control = xds.New(xds.Options{
		Log: c.log, Metrics: xds.NewMetrics(c.reg),
		SluiceAddresses: []string{policies.Dialable(c.grpcLn.Addr().String())},
	})
	_, err := c.control.Update(c.snap)
	return err
}

// servers builds the ext_authz and ext_proc services on the gRPC server,
// with gRPC health, the ADS server, and the admin HTTP server.
func (c *components) servers() error {
	keys, err := c.principalKeys()
	if err != nil {
		return err
	}
	checker := authz.NewChecker(c.ring, c.admitter, keys, nil)
	extprocServer := extproc.NewServer(&extproc.Deps{
		Policy:     c.watcher.Current,
		Ring:       c.ring,
		Auth:       checker,
		Admitter:   gatedAdmitter{Admitter: c.admitter, ledger: c.hold},
		Ledger:     c.hold,
		Metrics:    extproc.NewMetrics(c.reg),
		Log:        c.log.With("component", "extproc"),
		Now:        time.Now,
		Principals: keys,
	})
	// One panicking request fails its own call or stream, never the
	// process (internal/grpcguard); both servers are guarded.
	guard := grpcguard.New(c.log.With("component", "grpc"), c.reg)
	// extproc.Codec decodes the forwarded metadata only where Sluice reads
	// it, and marshals replies with vtprotobuf where built with it. Stream
	// workers: a Check or a stream runs on a goroutine whose stack has
	// already grown, not on a new one that grows it again (grpc-go starts a
	// new goroutine when all are busy); bench-service measured 20-chunk
	// streams at a median 838 rather than 1,159 µs of CPU with them.
	grpcOpts, xdsOpts, err := c.serverTLS()
	if err != nil {
		return err
	}
	c.grpc = grpc.NewServer(append(append(append(guard.ServerOptions(), grpcOpts...), keepaliveOptions()...), grpc.MaxRecvMsgSize(c.grpcRecv),
		grpc.ForceServerCodecV2(extproc.Codec{}), grpc.NumStreamWorkers(grpcStreamWorkers),
		grpc.StaticStreamWindowSize(grpcStreamWindow), grpc.StaticConnWindowSize(grpcConnWindow),
		// Stop, at the drain timeout, returns once every handler did: each
		// cancelled stream has settled and handed its record to the
		// ledger before the ledger stops.
		grpc.WaitForHandlers(true))...)
	authv3.RegisterAuthorizationServer(c.grpc, authz.NewServer(checker, authz.NewMetrics(c.reg), c.log))
	extprocsvc.RegisterExternalProcessorServer(c.grpc, extprocServer)
	c.health = health.NewServer()
	// NOT_SERVING until run reports readiness: grpc-go's health server
	// starts with the whole server ("") SERVING.
	c.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(c.grpc, c.health)
	c.xdsGRPC = grpc.NewServer(append(append(guard.ServerOptions(), xdsOpts...), keepaliveOptions()...)...)

	c.admin, err = admin.New(admin.Deps{
		Gatherer: c.reg, Ready: c.ready, Log: c.log,
		Policy: c.watcher.Current, Keys: c.store, Groups: c.store, Principals: c.ring,
		Budgets: c.admitter, Spend: c.ledger, Now: time.Now,
	})
	return err
}

// keepaliveMinTime is the shortest interval between a client's HTTP/2
// PINGs the gRPC servers accept, below the PINGs of the sluice.extension
// cluster's connection_keepalive (xds.ExtensionKeepaliveInterval).
var keepaliveMinTime = xds.ExtensionKeepaliveInterval / 2

// keepaliveOptions let Envoy's keepalive PINGs through: grpc-go's default
// policy (one PING per 5 minutes, none without a stream) would answer
// them with GOAWAY too_many_pings and close every idle connection Envoy
// keeps to a replica.
func keepaliveOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true})}
}

// serverTLS makes the TLS of the gRPC and xDS servers from security.tls:
// the servers' options (none for plaintext), and the reloaders, which
// run keeps polling the files. A change of security.tls takes a restart.
func (c *components) serverTLS() (grpcOpts, xdsOpts []grpc.ServerOption, err error) {
	t := c.snap.ServerTLS()
	if t == nil {
		return nil, nil, nil
	}
	m := tlsserve.NewMetrics(c.reg)
	for _, server := range []string{"grpc", "xds"} {
		r, err := tlsserve.New(tlsserve.Options{
			CertFile: t.CertFile, KeyFile: t.KeyFile, ClientCAFile: t.ClientCAFile,
			AllowedURIs: t.AllowedClients.URIs, AllowedDNS: t.AllowedClients.DNS,
			Server: server, Log: c.log, Metrics: m,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("security.tls (%s server): %w", server, err)
		}
		c.tlsReloaders = append(c.tlsReloaders, r)
		if server == "grpc" {
			grpcOpts = append(grpcOpts, grpc.Creds(r.Credentials()))
		} else {
			xdsOpts = append(xdsOpts, grpc.Creds(r.Credentials()))
		}
	}
	return grpcOpts, xdsOpts, nil
}

// principalKeys makes the source of the keys that sign and verify
// principals and handoffs, and says what the config leaves unguarded.
func (c *components) principalKeys() (func() *principal.Keys, error) {
	src, err := newPrincipalSource(c.snap, c.log, time.Now)
	if err != nil {
		return nil, err
	}
	c.principals = src
	// The addresses as bound: the flags may override the config's.
	bound := c.snap.Listen()
	bound.GRPC, bound.XDS = c.grpcLn.Addr().String(), c.xdsLn.Addr().String()
	for _, w := range securityWarnings(c.snap, bound) {
		c.log.Warn(w)
	}
	return src.get, nil
}

// noPrincipalKeys is said, by serve at start and by check-config, of a
// config without security.principal_keys.
const noPrincipalKeys = "security.principal_keys is not set: this process signs the principal ext_authz hands ext_proc with a random key of its own, so only one replica works; more than one replica (ext_authz answered by one, ext_proc by another) needs the same security.principal_keys on every replica"

// ready is nil once the config is compiled and the key ring has loaded
// the store, and while the spend ledger takes records (/readyz, gRPC
// health).
func (c *components) ready() error {
	if c.draining.Load() {
		return errors.New("shutting down: open streams are draining")
	}
	if c.watcher.Current() == nil {
		return errors.New("config not loaded")
	}
	if !c.ring.Synced() {
		return errors.New("key store not loaded")
	}
	if c.hold != nil {
		return c.hold.Unavailable()
	}
	return nil
}
