//go:build race

package usage

// raceEnabled: the race detector slows the exhaustive split tests about
// tenfold, so they stride (see splitOffsets).
const raceEnabled = true
