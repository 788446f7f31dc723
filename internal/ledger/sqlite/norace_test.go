//go:build !race

package sqlite

// raceEnabled: see race_test.go.
const raceEnabled = false
