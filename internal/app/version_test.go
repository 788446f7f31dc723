package app

import (
	"strings"
	"testing"
)

// TestVersionFlags: --version and -version are the version command, as
// most tools take them; help's usage lists the same commands as before.
func TestVersionFlags(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		out, stderr, err := run(t, args...)
		if err != nil || out != Version()+"\n" || stderr != "" {
			t.Errorf("%v: %q %q %v, want %q", args, out, stderr, err, Version())
		}
	}
	out, _, err := run(t, "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"serve", "check-config", "keys", "spend", "pricing", "envoy", "version"} {
		if !strings.Contains(out, "\n  "+c+" ") {
			t.Errorf("usage lacks %s:\n%s", c, out)
		}
	}
	if strings.Contains(out, "dev-envoy") {
		t.Errorf("usage lists a command that only says where it went:\n%s", out)
	}
}
