package ledgertest

import (
	"testing"

	"github.com/sluicegw/sluice/ledger"
)

// TestMemory runs the suite against Memory: the suite's expectations hold
// for a backend written without SQL, and Memory is a faithful fake.
func TestMemory(t *testing.T) {
	Run(t, func(t *testing.T) (ledger.Ledger, ledger.Reader) {
		m := &Memory{}
		return m, m
	})
}
