package app

import (
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestKeepalivePINGsAccepted: an idle HTTP/2 connection whose client
// PINGs it as Envoy's connection_keepalive does — no stream open, one
// PING each interval — is kept by Sluice's gRPC servers, where grpc-go's
// default policy closes it with GOAWAY too_many_pings (the control case,
// which shows the test can tell the two apart). The policy's minimum is
// scaled down so that the test runs in a fraction of a second.
func TestKeepalivePINGsAccepted(t *testing.T) {
	defer func(d time.Duration) { keepaliveMinTime = d }(keepaliveMinTime)
	keepaliveMinTime = 20 * time.Millisecond
	const every = 40 * time.Millisecond // the client's interval, above the minimum

	for _, tc := range []struct {
		name     string
		opts     []grpc.ServerOption
		wantAway bool
	}{
		{"Sluice's policy", keepaliveOptions(), false},
		{"grpc-go's default", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			gs := grpc.NewServer(tc.opts...)
			healthpb.RegisterHealthServer(gs, health.NewServer())
			go gs.Serve(ln)
			defer gs.Stop()

			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
				t.Fatal(err)
			}
			fr := http2.NewFramer(conn, conn)
			var wmu sync.Mutex // the reader acks settings while the test pings
			if err := fr.WriteSettings(); err != nil {
				t.Fatal(err)
			}
			goaway := make(chan *http2.GoAwayFrame, 1)
			go func() {
				for {
					f, err := fr.ReadFrame()
					if err != nil {
						close(goaway)
						return
					}
					switch f := f.(type) {
					case *http2.SettingsFrame:
						if !f.IsAck() {
							wmu.Lock()
							fr.WriteSettingsAck()
							wmu.Unlock()
						}
					case *http2.GoAwayFrame:
						goaway <- f
						return
					}
				}
			}()
			var got *http2.GoAwayFrame
			tick := time.NewTicker(every)
			defer tick.Stop()
		pings:
			for i := range 8 {
				wmu.Lock()
				err := fr.WritePing(false, [8]byte{byte(i)})
				wmu.Unlock()
				if err != nil {
					break
				}
				select {
				case f, ok := <-goaway:
					if ok {
						got = f
					}
					break pings
				case <-tick.C:
				}
			}
			if tc.wantAway && (got == nil || got.ErrCode != http2.ErrCodeEnhanceYourCalm) {
				t.Errorf("GOAWAY %v: the control case should have been closed for too many pings", got)
			}
			if !tc.wantAway && got != nil {
				t.Errorf("GOAWAY %v (%q) for PINGs %v apart", got.ErrCode, got.DebugData(), every)
			}
		})
	}
}
