//go:build race

package extproc

// raceEnabled: the race detector is on, and its instrumentation makes
// every stack frame larger (see TestHandlingFitsTheFirstStack).
const raceEnabled = true
