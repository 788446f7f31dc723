//go:build race

package sqlite

// raceEnabled: the race detector slows SQLite (pure Go here) down tenfold
// and more, so bulk tests write fewer records under it.
const raceEnabled = true
