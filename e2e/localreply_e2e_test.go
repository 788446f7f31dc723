package e2e

import (
	"testing"
	"time"

	"github.com/sluicegw/sluice/envoy/envoytest"
)

// waitExchanges waits until e has recorded at least n exchanges: the
// emulator records one once every filter of the stream is done, which may
// be after the client has the whole response (an ext_proc stream is
// closed after the reply went out).
func waitExchanges(t *testing.T, e *envoytest.Emulator, n int) []*envoytest.Exchange {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if xs := e.Exchanges(); len(xs) >= n {
			return xs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d exchanges recorded, want %d", len(e.Exchanges()), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
