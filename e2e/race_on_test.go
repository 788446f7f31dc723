//go:build race

package e2e

// raceEnabled: the race detector slows Sluice's body parser about
// thirtyfold, so a multi-megabyte body outlasts ext_proc's 500 ms message
// timeout (see skipUnderRace).
const raceEnabled = true
