package testenv

import (
	"io"
	"log/slog"
)

// Quiet returns a logger for a component under test whose logs the test
// does not read. Its records, at Info and above, are formatted as a real
// handler formats them, so the logging code runs as it does in
// production (under the race detector too), and then discarded.
func Quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
