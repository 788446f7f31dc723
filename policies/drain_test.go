package policies

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestDrainTimeout: gateway.drain_timeout defaults to ten minutes, takes
// 0 (cancel open streams at once), and refuses a negative value as no
// duration.
func TestDrainTimeout(t *testing.T) {
	for yaml, want := range map[string]time.Duration{"": 10 * time.Minute, "gateway: {drain_timeout: 0s}\n": 0, "gateway: {drain_timeout: 30m}\n": 30 * time.Minute} {
		cfg, err := Parse([]byte(base+yaml), "f.yaml", func(string) (string, bool) { return "", false })
		if err != nil || cfg.Gateway.DrainTimeout != want {
			t.Errorf("%q: drain_timeout %v, %v; want %v", yaml, cfg.Gateway.DrainTimeout, err, want)
		}
	}
	_, err := Parse([]byte(base+"gateway: {drain_timeout: -1s}\n"), "f.yaml", func(string) (string, bool) { return "", false })
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != 1 || !strings.Contains(ps[0].String(), "gateway.drain_timeout: must be a duration") {
		t.Errorf("a negative drain_timeout: %v; want it refused", err)
	}
}
