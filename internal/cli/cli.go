package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// ErrUsage marks a command-line mistake whose usage has been printed.
var ErrUsage = errors.New("usage error")

// ExitCode maps a command's error to a process exit status: 0 for none, 2
// for a command-line mistake, 1 for anything else.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrUsage):
		return 2
	}
	return 1
}

// NewFlags returns a FlagSet for `program name` that reports to stderr and
// never exits; its usage shows args (the positional arguments, may be
// empty), summary and the flags, if any.
func NewFlags(program, name, args, summary string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s %s [flags] %s\n\n%s\n", program, name, args, summary)
		var hasFlags bool
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(stderr, "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// FlagErr turns a FlagSet.Parse error into a command's result: --help
// (usage already printed) is success, anything else ErrUsage.
func FlagErr(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return ErrUsage
}

// SplitList splits a comma-separated flag value, dropping blanks.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// NewLogger returns a logger writing to w at level (debug, info, warn or
// error) in format (text or json), or an error naming the bad flag.
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
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
