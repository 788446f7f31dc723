package app

import (
	"context"
	"fmt"
	"io"
	"net"

	"github.com/sluicegw/sluice/envoy/envoytest"
)

func runDevEnvoy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("dev-envoy", "", envoytest.Banner+`.

Runs the Envoy emulator (envoy/envoytest) from an Envoy bootstrap file — the
same file a real Envoy takes with -c: one listener whose http_connection_manager
runs ext_authz / ext_proc / router, and static clusters. Prints one access log
line per request to stdout. For tests and demos only.`, stderr)
	config := fs.String("config", "", "Envoy bootstrap `file` (YAML or JSON)")
	addr := fs.String("addr", "", "override the listener address (host:port)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	meta := fs.String("log-metadata", "envoy.filters.http.ext_authz:key_id,envoy.filters.http.ext_authz:team,sluice:model,sluice:total_tokens,sluice:cost_micros", "comma-separated namespace:key dynamic metadata to print in access log lines")
	if err := fs.Parse(args); err != nil {
		return flagErr(err)
	}
	if *config == "" {
		fmt.Fprintln(stderr, "dev-envoy needs --config FILE (an Envoy bootstrap)")
		return errUsage
	}
	log, err := newLogger(stderr, *logLevel, "text")
	if err != nil {
		fmt.Fprintln(stderr, err)
		return errUsage
	}
	b, err := envoytest.LoadBootstrap(*config)
	if err != nil {
		return err
	}
	e, err := envoytest.New(b, envoytest.Options{Logger: log, AccessLog: stdout, AccessLogMetadata: splitList(*meta)})
	if err != nil {
		return fmt.Errorf("%s: %w", *config, err)
	}
	listenAddr := e.ListenAddr()
	if *addr != "" {
		listenAddr = *addr
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", listenAddr)
	if err != nil {
		return fmt.Errorf("dev-envoy: %w", err)
	}
	fmt.Fprintf(stderr, "%s\nlistening on http://%s\n", envoytest.Banner, ln.Addr())
	return e.Serve(ctx, ln)
}
