package devcmd

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestVersion: sluice-dev has the version command, and --version and
// -version run it.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		var stdout, stderr bytes.Buffer
		if err := Run(context.Background(), args, &stdout, &stderr); err != nil || !strings.HasPrefix(stdout.String(), "sluice-dev ") || stderr.Len() > 0 {
			t.Errorf("%v: %q %q %v", args, stdout.String(), stderr.String(), err)
		}
	}
}
