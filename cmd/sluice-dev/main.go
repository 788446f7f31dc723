// Command sluice-dev runs Sluice's development and test tools as
// processes: the Envoy emulator and the mock LLM provider (`make run`
// starts both around `sluice serve`). It is never part of a production
// deployment; the sluice binary contains neither.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicegw/sluice/internal/devcmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := devcmd.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice-dev:", err)
		os.Exit(devcmd.ExitCode(err))
	}
}
