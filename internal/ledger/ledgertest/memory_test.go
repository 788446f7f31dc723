package ledgertest

import "testing"

// TestMemory runs the suite against Memory: the suite's expectations hold
// for a backend written without SQL, and Memory is a faithful fake.
func TestMemory(t *testing.T) {
	Run(t, func(t *testing.T) Backend { return &Memory{} })
}
