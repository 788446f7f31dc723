package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicegw/sluice/internal/cli"
	"github.com/sluicegw/sluice/internal/gcpace"
	ledgerpg "github.com/sluicegw/sluice/internal/ledger/postgres"
	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/policies"
)

// Intervals of the background loops. The store poll bounds how long a key
// revoked by another process keeps working (<= 1 s promised).
const (
	configPoll   = 250 * time.Millisecond
	storePoll    = 250 * time.Millisecond
	counterSweep = time.Minute
	// holdFlush bounds the last attempt, at shutdown, to write the records
	// held while the ledger could not take them (internal/ledger/hold).
	holdFlush = 5 * time.Second
	// healthPoll is how often gRPC health is brought in line with
	// readiness.
	healthPoll = 250 * time.Millisecond
)

// GC headrooms (internal/gcpace). startHeadroom: start-up keeps
// nearly all it allocates, so nothing is collected until the heap is
// this large. gcHeadroom: under load the heap grows this far past what
// the last collection found live before the next, whatever the live
// heap's size, so a small heap is not collected every few MiB and a large
// one (many keys, many open streams) does not double.
const (
	startHeadroom = 32 << 20
	gcHeadroom    = 16 << 20
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
	// migrate: bring the PostgreSQL schema up to date before serving.
	migrate bool
	// drain is how long, once told to stop, Sluice goes on serving while
	// reporting NOT_SERVING; negative: the health check's interval plus
	// its timeout (drainFor).
	drain time.Duration
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer, env Env) error {
	fs := newFlags("serve", "", "Run the ext_authz and ext_proc gRPC services (with gRPC health), the xDS\ncontrol plane (ADS) and the admin HTTP server (/healthz, /readyz, /metrics,\nthe admin API under /v1/ when admin.token is set, and /debug/pprof/\nwith admin.pprof).\nThe config file is reloaded when it changes; Envoy gets the new resources\nover xDS.", stderr)
	var f serveFlags
	fs.StringVar(&f.config, "config", "sluice.yaml", "config `file`")
	fs.BoolVar(&f.demoKey, "demo-key", false, "if the store has no keys yet, create one for the first team and print it once (quickstart)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.grpcAddr, "grpc-addr", "", "override listen.grpc (host:port; port 0 picks a free one)")
	fs.StringVar(&f.adminAddr, "admin-addr", "", "override listen.admin (host:port; port 0 picks a free one)")
	fs.StringVar(&f.xdsAddr, "xds-addr", "", "override listen.xds (host:port; port 0 picks a free one)")
	fs.StringVar(&f.readyFile, "ready-file", "", "once serving, write {\"grpc\": ADDR, \"admin\": ADDR, \"xds\": ADDR} as JSON to this `file` (for scripts and tests)")
	fs.BoolVar(&f.migrate, "migrate", false, "with a PostgreSQL store, apply its pending schema migrations before serving, as `sluice migrate` does (safe when replicas start together: one migrates, the others wait for it)")
	fs.DurationVar(&f.drain, "shutdown-drain", -1, "once told to stop, go on serving this long while gRPC health says NOT_SERVING, so that every Envoy's health check takes this replica out before it stops taking requests (default: xds.extension_health_check's interval plus its timeout; 0: stop at once)")
	if err := fs.Parse(args); err != nil {
		return cli.FlagErr(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	log, err := cli.NewLogger(stderr, f.logLevel, f.logFormat)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return errUsage
	}
	return serve(ctx, f, stdout, log, env)
}

// serve runs `sluice serve`: it builds the components in dependency order
// (see components), runs them until ctx ends or one fails, and closes
// whatever was opened, in reverse, on every path out.
func serve(ctx context.Context, f serveFlags, stdout io.Writer, log *slog.Logger, env Env) (err error) {
	c := &components{flags: f, log: log}
	defer func() { err = errors.Join(err, c.close()) }()
	if err := c.build(ctx, stdout, env); err != nil {
		return err
	}
	return c.run(ctx)
}

// run serves every component under one errgroup until ctx ends or one of
// them fails, then shuts down gracefully.
//
// Shutdown order: health stops reporting SERVING and /readyz says the
// replica is draining, and the gRPC server goes on answering for the
// drain (drainFor), so that each Envoy's next health check takes this
// replica out before it refuses a connection; then the xDS server stops,
// and the gRPC server sends GOAWAY and lets its open ext_authz and
// ext_proc streams finish, up to gateway.drain_timeout, past which it
// cancels them and waits for their handlers (each settles what it
// delivered); only then are the admin server and the ledger's committer
// stopped, so every stream that settled has its spend record committed
// before run returns. The ledger and the admin server therefore run on
// contexts of their own, which those last steps cancel, not on the
// group's.
func (c *components) run(ctx context.Context) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	g, gctx := errgroup.WithContext(ctx)
	ledgerCtx, stopLedger := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLedger()

	g.Go(func() error {
		if err := c.ledger.Run(ledgerCtx); err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		return nil
	})
	if pg, ok := c.ledger.(*ledgerpg.Ledger); ok {
		// The last report follows Run's end: what the spool keeps then.
		g.Go(func() error { return pg.ReportSpool(ledgerCtx, spoolName(c.snap.LedgerSpool())) })
	}
	g.Go(func() error {
		if err := c.grpc.Serve(c.grpcLn); err != nil {
			return fmt.Errorf("grpc: %w", err)
		}
		return nil
	})
	c.control.Register(gctx, c.xdsGRPC)
	g.Go(func() error {
		if err := c.xdsGRPC.Serve(c.xdsLn); err != nil {
			return fmt.Errorf("xds: %w", err)
		}
		return nil
	})
	g.Go(func() error { return c.hold.Run(gctx) })
	// The admin server answers until the gRPC streams are drained:
	// /readyz says the replica is draining.
	adminCtx, stopAdmin := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAdmin()
	g.Go(func() error { return c.admin.Serve(adminCtx, c.adminLn) })
	g.Go(func() error { return c.watcher.Run(gctx) })
	for _, r := range c.tlsReloaders {
		g.Go(func() error { return r.Run(gctx) })
	}
	g.Go(func() error {
		return c.ring.Follow(gctx, c.store, storePoll, func(error) { c.metrics.storeSyncs.Inc() })
	})
	if pg, ok := c.store.(*pgStore); ok {
		g.Go(func() error { return pg.listener.Run(gctx) })
	}
	if pg, ok := c.ledger.(*ledgerpg.Ledger); ok {
		g.Go(func() error { return pg.DB().Upkeep(gctx, c.snap.LedgerRetention(), time.Now) })
	}
	g.Go(func() error { return c.counters.Run(gctx, counterSweep) })
	c.startedUp()
	if !c.gogcSet {
		// Collect once per gcHeadroom allocated, whatever the live heap:
		// GOGC's proportion would collect a small heap every few MiB and
		// let a large one double.
		g.Go(func() error { return gcpace.Pacer{Headroom: gcHeadroom, Interval: time.Second}.Run(gctx) })
	}
	g.Go(func() error { return c.admitter.Run(gctx, c.snap.Gateway().ReservationTTL, time.Now) })
	g.Go(func() error {
		<-gctx.Done()
		c.draining.Store(true)
		c.health.Shutdown()
		if d := c.drainFor(); d > 0 {
			c.log.Info("draining: gRPC health says NOT_SERVING; still serving", "for", d)
			time.Sleep(d)
		}
		// xDS streams end with gctx; only the Envoys' reconnects remain.
		stopGRPC(c.xdsGRPC, time.Second)
		// GOAWAY: no new stream; the open ones finish, up to the drain
		// timeout, past which they are cancelled, and each settles what
		// it delivered (the server waits for its handlers).
		drain := c.snap.Gateway().DrainTimeout
		c.log.Info("draining: no new streams; open ones may finish", "within", drain)
		stopGRPC(c.grpc, drain)
		stopAdmin()
		// No stream is left to settle: the records held while the ledger
		// could not take them get a last chance (the rest are logged as
		// lost, by id), then the ledger may commit what is queued and
		// stop.
		fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), holdFlush)
		c.hold.Flush(fctx)
		fcancel()
		stopLedger()
		return nil
	})

	serving := c.reportHealth(false)
	g.Go(func() error {
		// gRPC health follows readiness, as /readyz does: a replica whose
		// ledger cannot take records answers NOT_SERVING, and each
		// Envoy's health check sends its requests to the other replicas.
		t := time.NewTicker(healthPoll)
		defer t.Stop()
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-t.C:
				serving = c.reportHealth(serving)
			}
		}
	})
	var readyErr error
	if c.flags.readyFile != "" {
		addrs := map[string]string{"grpc": c.grpcLn.Addr().String(), "admin": c.adminLn.Addr().String(), "xds": c.xdsLn.Addr().String()}
		if readyErr = writeReadyFile(c.flags.readyFile, addrs); readyErr != nil {
			stop()
		}
	}
	if readyErr == nil {
		// Start-up's garbage (the parsed config file, the key store's
		// rows, the first snapshot's scratch) is handed back to the OS
		// now, not by the scavenger over minutes: with many declared keys
		// it is hundreds of MiB. This runs after ready, off the way to it.
		go debug.FreeOSMemory()
		c.log.Info("sluice serving",
			"grpc", c.grpcLn.Addr().String(), "admin", c.adminLn.Addr().String(), "xds", c.xdsLn.Addr().String(), "xds_version", c.control.Version(),
			"config", c.flags.config, "config_version", c.snap.Version(), "keys", c.ring.Len(), "version", Version(),
			"store", backendName(c.snap.StorePostgres(), c.snap.SQLitePath()), "ledger", backendName(c.snap.LedgerPostgres(), c.snap.LedgerPath()), "admission", admissionName(c.snap))
	}
	err := errors.Join(readyErr, g.Wait())
	c.log.Info("sluice stopped")
	return err
}

// applyRuntime applies the config's runtime settings where the
// environment does not set its own (GOGC, GOMEMLIMIT, which the runtime
// has already read), and reports whether it set the collector's
// percentage, which serve then leaves alone (no gcpace).
func applyRuntime(r policies.Runtime, env Env, log *slog.Logger) (setGOGC bool) {
	set := func(name string) bool {
		if env == nil {
			return false
		}
		_, ok := env(name)
		return ok
	}
	if r.GOGC > 0 {
		if set("GOGC") {
			log.Info("runtime.gogc left unapplied: the environment sets GOGC", "gogc", r.GOGC)
		} else {
			debug.SetGCPercent(r.GOGC)
			log.Info("the collector paces at runtime.gogc", "gogc", r.GOGC)
			setGOGC = true
		}
	}
	if r.MemoryLimitBytes > 0 {
		if set("GOMEMLIMIT") {
			log.Info("runtime.memory_limit_bytes left unapplied: the environment sets GOMEMLIMIT", "memory_limit_bytes", r.MemoryLimitBytes)
		} else {
			debug.SetMemoryLimit(r.MemoryLimitBytes)
			log.Info("soft memory limit from runtime.memory_limit_bytes", "memory_limit_bytes", r.MemoryLimitBytes)
		}
	}
	return setGOGC
}

// reportHealth sets the gRPC health of the server and of its services
// from readiness, logging a change from was; it returns the new state.
// After health.Shutdown (the shutdown's first step) it changes nothing.
func (c *components) reportHealth(was bool) bool {
	err := c.ready()
	now := err == nil
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if now {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, svc := range []string{"", authv3.Authorization_ServiceDesc.ServiceName, extprocsvc.ExternalProcessor_ServiceDesc.ServiceName} {
		c.health.SetServingStatus(svc, st)
	}
	switch {
	case was && !now:
		c.log.Warn("not ready: gRPC health says NOT_SERVING, and Envoy's health checks take this replica out", "reason", err)
	case !was && now && c.started:
		c.log.Info("ready again: gRPC health says SERVING")
	}
	c.started = true
	return now
}

// drainFor is --shutdown-drain, by default the time within which every
// Envoy's health check has asked once more: Envoy takes a replica out at
// the first answer that is not SERVING (an ACTIVE failure is never
// retried: health_checker_base_impl.cc, setUnhealthy).
func (c *components) drainFor() time.Duration {
	if c.flags.drain >= 0 {
		return c.flags.drain
	}
	hc := c.watcher.Current().XDS().ExtensionHealthCheck
	return hc.Interval + hc.Timeout
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
// has none, and prints it once, to stdout only, as a shell line to copy
// (export KEY=…): the README's curl and SDK snippets read $KEY. config is
// --config as given, so that the hint for a store that has keys is a
// command that works as printed.
func createDemoKey(ctx context.Context, st store.Store, snap *policies.Snapshot, config string, stdout io.Writer) error {
	keys, err := st.ListKeys(ctx)
	if err != nil {
		return err
	}
	if len(keys) > 0 {
		fmt.Fprintf(stdout, "The store already has %d key(s); no demo key created (list them with `sluice keys list --config %s`).\n", len(keys), shellQuote(config))
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
	fmt.Fprintf(stdout, "Demo API key %s for team %q (shown once; only its SHA-256 is stored). Run this in the shell you send requests from:\n\n    export KEY=%s\n\n", k.ID, k.Team, secret.Reveal())
	return nil
}

// shellQuote returns s as one shell word: as is when it holds only
// characters no shell treats specially, else in single quotes.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:=@%+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
