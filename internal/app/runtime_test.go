package app

import (
	"log/slog"
	"math"
	"runtime/debug"
	"testing"

	"github.com/sluicegw/sluice/policies"
)

// TestApplyRuntime: the config's runtime settings reach the runtime,
// except where the environment sets its own, which wins.
func TestApplyRuntime(t *testing.T) {
	gogc := debug.SetGCPercent(100)
	limit := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() {
		debug.SetGCPercent(gogc)
		debug.SetMemoryLimit(limit)
	})
	log := slog.New(slog.DiscardHandler)
	env := func(set ...string) Env {
		return func(name string) (string, bool) {
			for _, s := range set {
				if s == name {
					return "1", true
				}
			}
			return "", false
		}
	}

	if applyRuntime(policies.Runtime{}, env(), log) {
		t.Error("no settings: reported GOGC set")
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("no settings: GC percent %d, want untouched 100", got)
	}

	if !applyRuntime(policies.Runtime{GOGC: 250, MemoryLimitBytes: 96 << 20}, env(), log) {
		t.Error("runtime.gogc applied, but not reported")
	}
	if got := debug.SetGCPercent(100); got != 250 {
		t.Errorf("GC percent %d, want runtime.gogc's 250", got)
	}
	if got := debug.SetMemoryLimit(math.MaxInt64); got != 96<<20 {
		t.Errorf("memory limit %d, want runtime.memory_limit_bytes' %d", got, 96<<20)
	}

	if applyRuntime(policies.Runtime{GOGC: 250, MemoryLimitBytes: 96 << 20}, env("GOGC", "GOMEMLIMIT"), log) {
		t.Error("the environment sets GOGC, yet runtime.gogc reported applied")
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("the environment sets GOGC: GC percent %d, want 100 as it was", got)
	}
	if got := debug.SetMemoryLimit(math.MaxInt64); got != math.MaxInt64 {
		t.Errorf("the environment sets GOMEMLIMIT: memory limit %d, want none", got)
	}
}
