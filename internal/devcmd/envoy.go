package devcmd

import (
	"context"
	"fmt"
	"io"
	"net"

	"github.com/sluicegw/sluice/envoy/envoytest"
	"github.com/sluicegw/sluice/internal/cli"
	"golang.org/x/sync/errgroup"
)

// runEnvoy is `sluice-dev envoy`: the emulator as a process.
func runEnvoy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("envoy", envoytest.Banner+`.

Runs the Envoy emulator (envoy/envoytest) from an Envoy bootstrap file — the
same file a real Envoy takes with -c: one listener whose http_connection_manager
runs ext_authz / ext_proc / router, and static clusters; or dynamic_resources
taking listeners, routes, clusters and endpoints over ADS from an xDS server
(it listens once a complete configuration has arrived). Prints one access log
line per request to stdout. For tests and demos only.`, stderr)
	config := fs.String("config", "", "Envoy bootstrap `file` (YAML or JSON)")
	addr := fs.String("addr", "", "override the listener address (host:port)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	meta := fs.String("log-metadata", "envoy.filters.http.ext_authz:key_id,envoy.filters.http.ext_authz:team,sluice:model,sluice:total_tokens,sluice:cost_micros", "comma-separated namespace:key dynamic metadata to print in access log lines")
	if err := fs.Parse(args); err != nil {
		return cli.FlagErr(err)
	}
	if *config == "" {
		fmt.Fprintln(stderr, "sluice-dev envoy needs --config FILE (an Envoy bootstrap)")
		return errUsage
	}
	log, err := cli.NewLogger(stderr, *logLevel, "text")
	if err != nil {
		fmt.Fprintln(stderr, err)
		return errUsage
	}
	b, err := envoytest.LoadBootstrap(*config)
	if err != nil {
		return err
	}
	e, err := envoytest.New(b, envoytest.Options{Logger: log, AccessLog: stdout, AccessLogMetadata: cli.SplitList(*meta)})
	if err != nil {
		return fmt.Errorf("%s: %w", *config, err)
	}
	// Run subscribes over ADS (with a static bootstrap it just waits);
	// Listen waits for the listener address LDS gives.
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return e.Run(ctx) })
	g.Go(func() error {
		var ln net.Listener
		var err error
		if *addr != "" {
			var lc net.ListenConfig
			ln, err = lc.Listen(ctx, "tcp", *addr)
		} else {
			ln, err = e.Listen(ctx)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped before a configuration arrived
			}
			return fmt.Errorf("envoy: %w", err)
		}
		fmt.Fprintf(stderr, "%s\nlistening on http://%s\n", envoytest.Banner, ln.Addr())
		return e.Serve(ctx, ln)
	})
	return g.Wait()
}
