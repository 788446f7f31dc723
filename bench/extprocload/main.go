// Command extprocload drives a running Sluice (or the built-in floor
// server) over gRPC exactly as Envoy does for Sluice's filter chain; see
// package load.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicegw/sluice/bench/extprocload/load"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := load.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if err != load.ErrUsage {
			fmt.Fprintln(os.Stderr, "extprocload:", err)
		}
		os.Exit(1)
	}
}
