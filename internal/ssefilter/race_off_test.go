//go:build !race

package ssefilter

const raceEnabled = false
