//go:build race

package ssefilter

// raceEnabled: under the race detector sync.Pool drops items at random,
// so encoding/json's pooled scanner (json.Valid) allocates now and then.
const raceEnabled = true
