package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicegw/sluice/authz"
	"github.com/sluicegw/sluice/extproc"
	"github.com/sluicegw/sluice/internal/admin"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/keyring"
	ledgersqlite "github.com/sluicegw/sluice/internal/ledger/sqlite"
	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/internal/store/sqlite"
	"github.com/sluicegw/sluice/policies"
	"github.com/sluicegw/sluice/xds"
)

// Intervals of the background loops. The store poll bounds how long a key
// revoked by another process keeps working (<= 1 s promised).
const (
	configPoll    = 250 * time.Millisecond
	storePoll     = 250 * time.Millisecond
	counterSweep  = time.Minute
	shutdownGrace = 10 * time.Second
)

type serveFlags struct {
	config    string
	demoKey   bool
	logLevel  string
	logFormat string
	grpcAddr  string
	adminAddr string
	xdsAddr   string
	readyFile string
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer, env Env) error {
	fs := newFlags("serve", "", "Run the ext_authz and ext_proc gRPC services (with gRPC health), the xDS\ncontrol plane (ADS) and the admin HTTP server (/healthz, /readyz, /metrics,\nand the admin API under /v1/ when admin.token is set).\nThe config file is reloaded when it changes; Envoy gets the new resources\nover xDS.", stderr)
	var f serveFlags
	fs.StringVar(&f.config, "config", "sluice.yaml", "config `file`")
	fs.BoolVar(&f.demoKey, "demo-key", false, "if the store has no keys yet, create one for the first team and print it once (quickstart)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.grpcAddr, "grpc-addr", "", "override listen.grpc (host:port; port 0 picks a free one)")
	fs.StringVar(&f.adminAddr, "admin-addr", "", "override listen.admin (host:port; port 0 picks a free one)")
	fs.StringVar(&f.xdsAddr, "xds-addr", "", "override listen.xds (host:port; port 0 picks a free one)")
	fs.StringVar(&f.readyFile, "ready-file", "", "once serving, write {\"grpc\": ADDR, \"admin\": ADDR, \"xds\": ADDR} as JSON to this `file` (for scripts and tests)")
	if err := fs.Parse(args); err != nil {
		return flagErr(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	log, err := newLogger(stderr, f.logLevel, f.logFormat)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return errUsage
	}
	return serve(ctx, f, stdout, log, env)
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: want debug, info, warn or error, got %q", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: want text or json, got %q", format)
}

// serveMetrics are the process-level series the app owns.
type serveMetrics struct {
	reloads    *prometheus.CounterVec
	storeSyncs prometheus.Counter
}

func serve(ctx context.Context, f serveFlags, stdout io.Writer, log *slog.Logger, env Env) error {
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

	ring := keyring.New(log)
	var bound policies.Listen // the addresses listened on; set before Run starts the watcher
	var control *xds.Server   // set before Run starts the watcher
	watcher := policies.NewWatcher(f.config, policies.WatcherOptions{
		Interval: configPoll,
		Env:      env,
		Logger:   log,
		OnReload: func(s *policies.Snapshot, err error) {
			if err != nil {
				m.reloads.WithLabelValues("failed").Inc()
				return
			}
			m.reloads.WithLabelValues("ok").Inc()
			if s.Listen() != bound {
				log.Warn("listen addresses changed in the config; restart sluice to apply them")
			}
			ring.SetPolicy(s)
			// An invalid xDS result is logged and counted by Update, and
			// Envoy keeps the previous resources.
			_, _ = control.Update(s)
		},
	})
	snap, err := watcher.Load()
	if err != nil {
		var ps policies.Problems
		if errors.As(err, &ps) {
			var b strings.Builder
			for _, p := range ps {
				b.WriteString("\n  " + p.String())
			}
			return fmt.Errorf("%s has %d problem(s):%s", f.config, len(ps), b.String())
		}
		return err
	}
	bound = snap.Listen()
	ring.SetPolicy(snap)

	st, err := sqlite.Open(ctx, snap.SQLitePath())
	if err != nil {
		return err
	}
	defer st.Close()
	if f.demoKey {
		if err := createDemoKey(ctx, st, snap, stdout); err != nil {
			return err
		}
	}
	if err := ring.Sync(ctx, st); err != nil {
		return err
	}

	led, err := ledgersqlite.Open(ctx, snap.LedgerPath(), ledgersqlite.Options{})
	if err != nil {
		return err
	}
	defer led.Close()

	counters := limits.New(limits.Options{})
	tz, err := time.LoadLocation(snap.Gateway().BudgetTimeZone)
	if err != nil {
		return fmt.Errorf("gateway.budget_time_zone: %w", err)
	}
	// Budgets start from what the ledger holds for their current periods,
	// so a restart forgets nothing that was charged.
	buckets, err := led.Buckets(ctx, admission.EarliestPeriodStart(time.Now(), tz))
	if err != nil {
		return fmt.Errorf("rebuild budgets from the ledger: %w", err)
	}
	lifetime, err := led.Lifetime(ctx)
	if err != nil {
		return fmt.Errorf("rebuild budgets from the ledger: %w", err)
	}
	spent := admission.NewSpendIndex(buckets, lifetime)
	admitter := admission.NewLocal(counters, admission.LocalOptions{TimeZone: tz, Spent: spent.Spent, Record: spent.Add})
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_keys_cached", Help: "API keys in the in-memory replica (config-declared and stored, revoked included)."},
			func() float64 { return float64(ring.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_rate_counters", Help: "Live request-rate counters."},
			func() float64 { return float64(counters.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_reservations_held", Help: "Admitted requests whose reservation is not settled yet."},
			func() float64 { return float64(admitter.Held()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_reservations_expired_total", Help: "Reservations released unsettled after gateway.reservation_ttl."},
			func() float64 { return float64(admitter.Expired()) }),
	)
	checker := authz.NewChecker(ring, counters, nil)
	authzServer := authz.NewServer(checker, authz.NewMetrics(reg), log)
	extprocServer := extproc.NewServer(&extproc.Deps{
		Policy:   watcher.Current,
		Ring:     ring,
		Auth:     checker,
		Admitter: admitter,
		Ledger:   led,
		Metrics:  extproc.NewMetrics(reg),
		Log:      log.With("component", "extproc"),
		Now:      time.Now,
	})

	listen := snap.Listen()
	grpcAddr, adminAddr := or(f.grpcAddr, listen.GRPC), or(f.adminAddr, listen.Admin)
	var lc net.ListenConfig
	grpcLn, err := lc.Listen(ctx, "tcp", grpcAddr)
	if err != nil {
		return fmt.Errorf("listen.grpc: %w", err)
	}
	adminLn, err := lc.Listen(ctx, "tcp", adminAddr)
	if err != nil {
		grpcLn.Close()
		return fmt.Errorf("listen.admin: %w", err)
	}
	xdsLn, err := lc.Listen(ctx, "tcp", or(f.xdsAddr, listen.XDS))
	if err != nil {
		grpcLn.Close()
		adminLn.Close()
		return fmt.Errorf("listen.xds: %w", err)
	}
	// Envoy's filters call the gRPC address actually bound, unless the
	// config names Sluice's addresses itself.
	control = xds.New(xds.Options{
		Log: log, Metrics: xds.NewMetrics(reg),
		SluiceAddresses: []string{policies.Dialable(grpcLn.Addr().String())},
	})
	if _, err := control.Update(snap); err != nil {
		grpcLn.Close()
		adminLn.Close()
		xdsLn.Close()
		return err
	}
	xgs := grpc.NewServer()

	gs := grpc.NewServer()
	authv3.RegisterAuthorizationServer(gs, authzServer)
	extprocsvc.RegisterExternalProcessorServer(gs, extprocServer)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	ready := func() error {
		if watcher.Current() == nil {
			return errors.New("config not loaded")
		}
		if !ring.Synced() {
			return errors.New("key store not loaded")
		}
		return nil
	}
	adminServer, err := admin.New(admin.Deps{
		Gatherer: reg, Ready: ready, Log: log,
		Policy: watcher.Current, Keys: st, Groups: st, Principals: ring,
		Budgets: admitter, Spend: led, Now: time.Now,
	})
	if err != nil {
		grpcLn.Close()
		adminLn.Close()
		xdsLn.Close()
		return err
	}

	ctx, stop := context.WithCancel(ctx)
	defer stop()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := gs.Serve(grpcLn); err != nil {
			return fmt.Errorf("grpc: %w", err)
		}
		return nil
	})
	control.Register(gctx, xgs)
	g.Go(func() error {
		if err := xgs.Serve(xdsLn); err != nil {
			return fmt.Errorf("xds: %w", err)
		}
		return nil
	})
	g.Go(func() error { return adminServer.Serve(gctx, adminLn) })
	g.Go(func() error { return watcher.Run(gctx) })
	g.Go(func() error {
		return ring.Follow(gctx, st, storePoll, func(error) { m.storeSyncs.Inc() })
	})
	g.Go(func() error { return counters.Run(gctx, counterSweep) })
	g.Go(func() error { return admitter.Run(gctx, snap.Gateway().ReservationTTL, time.Now) })
	// The ledger's committer outlives the gRPC server: it stops after
	// in-flight streams have settled (see below), so no spend is lost.
	ledgerCtx, stopLedger := context.WithCancel(context.WithoutCancel(ctx))
	ledgerDone := make(chan error, 1)
	go func() { ledgerDone <- led.Run(ledgerCtx) }()
	g.Go(func() error {
		<-gctx.Done()
		hs.Shutdown()
		// xDS streams end with gctx; only the Envoys' reconnects remain.
		stopGRPC(xgs, time.Second)
		stopGRPC(gs, shutdownGrace)
		return nil
	})
	if ready() == nil {
		hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		hs.SetServingStatus(authv3.Authorization_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
		hs.SetServingStatus(extprocsvc.ExternalProcessor_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	}
	var readyErr error
	if f.readyFile != "" {
		addrs := map[string]string{"grpc": grpcLn.Addr().String(), "admin": adminLn.Addr().String(), "xds": xdsLn.Addr().String()}
		if readyErr = writeReadyFile(f.readyFile, addrs); readyErr != nil {
			stop()
		}
	}
	if readyErr == nil {
		log.Info("sluice serving",
			"grpc", grpcLn.Addr().String(), "admin", adminLn.Addr().String(), "xds", xdsLn.Addr().String(), "xds_version", control.Version(),
			"config", f.config, "config_version", snap.Version(), "keys", ring.Len(), "version", Version())
	}
	err = errors.Join(readyErr, g.Wait())
	stopLedger()
	if lerr := <-ledgerDone; lerr != nil && err == nil {
		err = fmt.Errorf("ledger: %w", lerr)
	}
	log.Info("sluice stopped")
	return err
}

// writeReadyFile writes the bound addresses atomically (write, then
// rename), so a reader never sees a partial file.
func writeReadyFile(path string, addrs map[string]string) error {
	b, _ := json.Marshal(addrs)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("--ready-file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("--ready-file: %w", err)
	}
	return nil
}

// stopGRPC stops gs gracefully, forcing it after grace.
func stopGRPC(gs *grpc.Server, grace time.Duration) {
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		gs.Stop()
		<-done
	}
}

// createDemoKey creates a key for the config's first team when the store
// has none, and prints it once.
func createDemoKey(ctx context.Context, st store.Store, snap *policies.Snapshot, stdout io.Writer) error {
	keys, err := st.ListKeys(ctx)
	if err != nil {
		return err
	}
	if len(keys) > 0 {
		fmt.Fprintf(stdout, "The store already has %d key(s); no demo key created (list them with `sluice keys list`).\n", len(keys))
		return nil
	}
	teams := snap.Teams()
	if len(teams) == 0 {
		return errors.New("--demo-key: the config declares no team to create the demo key for")
	}
	k, secret, err := mintKey(teams[0].Name, "demo", time.Now().UTC())
	if err != nil {
		return err
	}
	if err := st.CreateKey(ctx, k); err != nil {
		return fmt.Errorf("create demo key: %w", err)
	}
	fmt.Fprintf(stdout, "Demo API key %s for team %q (shown once; only its SHA-256 is stored):\n\n    %s\n\n", k.ID, k.Team, secret.Reveal())
	return nil
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
