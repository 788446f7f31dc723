// Package testenv is test support: what a test needs to know of how it
// was built (Race: the race detector is on) and the quiet logger tests
// hand to the components they start, in one place rather than a copy
// per package.
//
// It must not be imported by product code.
package testenv
