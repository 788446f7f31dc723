package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/xds"
)

// faultyLedger is a WithLedgerFault function: every write of records is
// delayed by delay, and fails with ENOSPC (a full disk) while full is set.
type faultyLedger struct {
	delay time.Duration
	full  atomic.Bool
}

func (f *faultyLedger) fault(op string) error {
	if op != "grow" { // a slow disk: its writes are slow, its growth once a MiB is not what is measured
		time.Sleep(f.delay)
	}
	if f.full.Load() {
		return syscall.ENOSPC
	}
	return nil
}

// startFaultySluice serves limitsPolicy (a budget that does not bind)
// with f injected into the ledger's writes, and returns it with a key and
// the bootstrap of an Envoy configured over its xDS.
func startFaultySluice(t *testing.T, f *faultyLedger, node string) (*sluiceProcess, string, *mockllm.Server, func(*testing.T, func(*testing.T, proxy))) {
	t.Helper()
	mock, mockAddr := mockProvider(t, mockllm.Options{Words: 20})
	s := startSluiceCtx(t, app.WithLedgerFault(context.Background(), f.fault), fmt.Sprintf(limitsPolicy, mockAddr, 1_000_000_000))
	_, key := s.createKey(t, "t")
	b, err := xds.Bootstrap(xds.BootstrapOptions{NodeID: node, XDSAddress: s.xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	return s, key, mock, func(t *testing.T, fn func(*testing.T, proxy)) { eachProxy(t, b, fn) }
}

func chatCall(stream bool) call {
	return call{path: "/v1/chat/completions", body: fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)}
}

// answered checks a served chat response: 200 and, streamed, its end.
func answered(t *testing.T, what string, stream bool, st int, body string) {
	t.Helper()
	if st != 200 {
		t.Fatalf("%s: status %d, want 200: %s", what, st, body)
	}
	if stream && !strings.Contains(body, "data: [DONE]") {
		t.Fatalf("%s: stream cut short:\n%s", what, body)
	}
	if !stream && !strings.Contains(body, `"usage"`) {
		t.Fatalf("%s: body cut short: %s", what, body)
	}
}

// TestSlowLedgerEndToEnd: every write of the ledger takes 700 ms, past
// ext_proc's 500 ms message timeout. Sluice asks Envoy for more time
// (override_message_timeout, within max_message_timeout), so every
// request, streamed or not, completes with 200 — none 504, none cut —
// and is recorded.
func TestSlowLedgerEndToEnd(t *testing.T) {
	f := &faultyLedger{delay: 700 * time.Millisecond}
	s, key, _, each := startFaultySluice(t, f, "e2e-slow-ledger")
	each(t, func(t *testing.T, p proxy) {
		const n = 8
		var wg sync.WaitGroup
		type res struct {
			st     int
			rid    string
			body   string
			stream bool
		}
		out := make([]res, n)
		for i := range n {
			wg.Go(func() {
				stream := i%2 == 0
				st, h, body := chatCall(stream).do(t, p.url, key)
				out[i] = res{st, h.Get("x-sluice-request-id"), body, stream}
			})
		}
		wg.Wait()
		for i, r := range out {
			answered(t, fmt.Sprintf("request %d", i), r.stream, r.st, r.body)
			if rec := s.awaitRecord(t, r.rid); rec.Status != 200 || rec.Outcome == "cancelled" {
				t.Errorf("request %d: record %+v, want a complete 200", i, rec)
			}
		}
	})
	page := s.metrics(t)
	if v := metricValue(page, "sluice_extproc_timeout_overrides_total"); v < 1 {
		t.Errorf("sluice_extproc_timeout_overrides_total = %v, want at least 1", v)
	}
	if v := metricValue(page, "sluice_ledger_held_records"); v != 0 {
		t.Errorf("sluice_ledger_held_records = %v, want 0 (a slow ledger is not an unavailable one)", v)
	}
}

// TestDiskFullEndToEnd: the ledger's writes fail with ENOSPC. A request
// admitted before is answered (its record held in memory); new requests
// are refused with 503 ledger_unavailable, /readyz says why,
// sluice_ledger_unavailable is 1. Once the disk has room, the held record
// is written, Sluice is ready again and serves, and nothing acknowledged
// is lost.
func TestDiskFullEndToEnd(t *testing.T) {
	f := &faultyLedger{}
	s, key, _, each := startFaultySluice(t, f, "e2e-disk-full")
	each(t, func(t *testing.T, p proxy) {
		st, h, body := chatCall(true).do(t, p.url, key)
		answered(t, "before", true, st, body)
		s.awaitRecord(t, h.Get("x-sluice-request-id"))

		f.full.Store(true)
		// Answered while the disk is full: the client gets it whole.
		st, h, body = chatCall(true).do(t, p.url, key)
		answered(t, "disk full", true, st, body)
		held := h.Get("x-sluice-request-id")

		st, _, body = chatCall(false).do(t, p.url, key)
		if st != 503 || !strings.Contains(body, "ledger_unavailable") {
			t.Fatalf("a new request while the disk is full: %d %s, want 503 ledger_unavailable", st, body)
		}
		if st, body := readyz(t, s); st != 503 || !strings.Contains(body, "spend ledger unavailable") {
			t.Fatalf("/readyz while the disk is full: %d %q", st, body)
		}
		if v := metricValue(s.metrics(t), "sluice_ledger_unavailable"); v != 1 {
			t.Fatalf("sluice_ledger_unavailable = %v, want 1", v)
		}
		// gRPC health follows: Envoy's health check takes the replica out.
		awaitGRPCHealth(t, s, healthpb.HealthCheckResponse_NOT_SERVING)

		f.full.Store(false)
		for deadline := time.Now().Add(15 * time.Second); ; {
			if st, _ := readyz(t, s); st == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("not ready again after the disk had room")
			}
			time.Sleep(20 * time.Millisecond)
		}
		awaitGRPCHealth(t, s, healthpb.HealthCheckResponse_SERVING)
		if rec := s.awaitRecord(t, held); rec.Status != 200 || rec.Outcome == "cancelled" {
			t.Errorf("the held record: %+v", rec)
		}
		st, h, body = chatCall(false).do(t, p.url, key)
		answered(t, "after", false, st, body)
		s.awaitRecord(t, h.Get("x-sluice-request-id"))
	})
	page := s.metrics(t)
	if v := metricValue(page, "sluice_ledger_lost_records_total"); v != 0 {
		t.Errorf("sluice_ledger_lost_records_total = %v", v)
	}
	if strings.Contains(s.log.String(), "spend record lost") || strings.Contains(s.log.String(), "spend record not written") {
		t.Errorf("a record was lost:\n%s", s.log.String())
	}
}

// awaitGRPCHealth polls the replica's gRPC health (the server's overall
// status, which Envoy's health check asks) until it is want.
func awaitGRPCHealth(t *testing.T, s *sluiceProcess, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := healthpb.NewHealthClient(conn)
	var got healthpb.HealthCheckResponse_ServingStatus
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		resp, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if got = resp.GetStatus(); got == want {
			return
		}
	}
	t.Fatalf("gRPC health %v, want %v", got, want)
}

func readyz(t *testing.T, s *sluiceProcess) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.adminAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
