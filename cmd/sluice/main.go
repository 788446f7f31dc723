// Command sluice is the Sluice LLM gateway: the ext_authz and ext_proc
// services and the xDS control plane an Envoy fleet calls. See README.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicegw/sluice/internal/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := app.Run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(app.ExitCode(err))
	}
}
