//go:build race

package testenv

// Race reports whether the race detector is on. Tests use it where the
// detector's cost or instrumentation changes what they can check: it
// slows parsing and SQLite tenfold and more, enlarges every stack frame,
// and empties sync.Pool at random (so pooled code allocates now and
// then).
const Race = true
