package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestExitCode(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{ErrUsage, 2},
		{fmt.Errorf("serve: %w", ErrUsage), 2},
		{errors.New("listen: address in use"), 1},
	} {
		if got := ExitCode(tt.err); got != tt.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

func TestFlags(t *testing.T) {
	var stderr bytes.Buffer
	fs := NewFlags("sluice", "keys list", "", "List API keys.", &stderr)
	fs.String("config", "sluice.yaml", "config `file`")
	if err := FlagErr(fs.Parse([]string{"--help"})); err != nil {
		t.Errorf("--help: %v, want success", err)
	}
	if !strings.HasPrefix(stderr.String(), "Usage: sluice keys list [flags] \n\nList API keys.\n\nFlags:\n") {
		t.Errorf("usage:\n%s", stderr.String())
	}
	stderr.Reset()
	if err := FlagErr(fs.Parse([]string{"--nope"})); !errors.Is(err, ErrUsage) {
		t.Errorf("--nope: %v, want ErrUsage", err)
	}
	if !strings.Contains(stderr.String(), "flag provided but not defined: -nope") {
		t.Errorf("stderr: %s", stderr.String())
	}

	stderr.Reset()
	bare := NewFlags("sluice", "version", "", "Print the version.", &stderr)
	bare.Usage()
	if strings.Contains(stderr.String(), "Flags:") {
		t.Errorf("a command without flags lists none:\n%s", stderr.String())
	}
	if FlagErr(flag.ErrHelp) != nil {
		t.Error("ErrHelp is success")
	}
}

func TestSplitList(t *testing.T) {
	for in, want := range map[string][]string{
		"":            nil,
		" , ,":        nil,
		"a":           {"a"},
		" a , b ,, c": {"a", "b", "c"},
	} {
		if got := SplitList(in); !slices.Equal(got, want) {
			t.Errorf("SplitList(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNewLogger(t *testing.T) {
	var out bytes.Buffer
	log, err := NewLogger(&out, "warn", "json")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("dropped")
	log.Warn("kept")
	if s := out.String(); strings.Contains(s, "dropped") || !strings.Contains(s, `"msg":"kept"`) {
		t.Errorf("json logger at warn wrote %q", s)
	}
	for _, tt := range []struct{ level, format, want string }{
		{"loud", "text", "--log-level: want debug, info, warn or error"},
		{"info", "xml", "--log-format: want text or json"},
	} {
		if _, err := NewLogger(&out, tt.level, tt.format); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewLogger(%q, %q) = %v, want %q", tt.level, tt.format, err, tt.want)
		}
	}
}
