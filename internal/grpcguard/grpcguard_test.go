package grpcguard

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicegw/sluice/internal/logbuf"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// panicky is a health service whose handlers panic for service "boom".
type panicky struct {
	healthpb.UnimplementedHealthServer
}

func (panicky) Check(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	Identify(ctx, slog.String("request_id", "rid-unary"))
	if r.GetService() == "boom" {
		var m map[string]int
		m["x"]++ // a nil map write: a real runtime panic
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (panicky) Watch(r *healthpb.HealthCheckRequest, s grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	Identify(s.Context(), slog.String("request_id", "rid-stream"), slog.String("path", "/v1/chat/completions"))
	if err := s.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil {
		return err
	}
	if r.GetService() == "boom" {
		panic("counter cannot decrease in value")
	}
	return nil
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer = logbuf.Buffer

func serve(t *testing.T) (healthpb.HealthClient, *prometheus.Registry, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	reg := prometheus.NewRegistry()
	g := New(slog.New(slog.NewJSONHandler(logs, nil)), reg)
	srv := grpc.NewServer(g.ServerOptions()...)
	healthpb.RegisterHealthServer(srv, panicky{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return healthpb.NewHealthClient(conn), reg, logs
}

func panics(t *testing.T, reg *prometheus.Registry, service string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_panics_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelOf(m, "service") == service {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

const healthService = "grpc.health.v1.Health"

func TestUnaryPanicFailsTheCallOnly(t *testing.T) {
	c, reg, logs := serve(t)
	ctx := t.Context()
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "boom"})
	if status.Code(err) != codes.Internal {
		t.Fatalf("panicking call: %v, want Internal", err)
	}
	if n := panics(t, reg, healthService); n != 1 {
		t.Errorf("sluice_panics_total{service=%q} = %v, want 1", healthService, n)
	}
	if r, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("the next call: %v %v, want SERVING", r, err)
	}
	l := logs.String()
	for _, want := range []string{`"level":"ERROR"`, `"method":"/grpc.health.v1.Health/Check"`, `"peer":"127.0.0.1:`, `"request_id":"rid-unary"`, `assignment to entry in nil map`} {
		if !strings.Contains(l, want) {
			t.Errorf("log %s lacks %s", l, want)
		}
	}
}

func TestStreamPanicFailsTheStreamOnly(t *testing.T) {
	c, reg, logs := serve(t)
	ctx := t.Context()
	recvAll := func(service string) error {
		s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			return err
		}
		for {
			if _, err := s.Recv(); err != nil {
				return err
			}
		}
	}
	if err := recvAll("boom"); status.Code(err) != codes.Internal {
		t.Fatalf("panicking stream ended with %v, want Internal", err)
	}
	if n := panics(t, reg, healthService); n != 1 {
		t.Errorf("sluice_panics_total = %v, want 1", n)
	}
	if err := recvAll(""); !errors.Is(err, io.EOF) {
		t.Fatalf("the next stream ended with %v, want a clean end", err)
	}
	l := logs.String()
	for _, want := range []string{`"method":"/grpc.health.v1.Health/Watch"`, `"request_id":"rid-stream"`, `"path":"/v1/chat/completions"`, `counter cannot decrease`} {
		if !strings.Contains(l, want) {
			t.Errorf("log %s lacks %s", l, want)
		}
	}
}

func TestIdentifyOutsideAGuardedCall(t *testing.T) {
	Identify(context.Background(), slog.String("k", "v")) // no panic, no effect
	id := &identity{}
	ctx := context.WithValue(context.Background(), identityKey{}, id)
	Identify(ctx, slog.String("a", "1"), slog.String("b", "2"))
	Identify(ctx, slog.String("a", "3"))
	if got := id.attrs(); len(got) != 2 || got[0].Value.String() != "3" {
		t.Errorf("attrs %v, want a replaced, b kept", got)
	}
}

func TestServiceOf(t *testing.T) {
	for in, want := range map[string]string{
		"/envoy.service.auth.v3.Authorization/Check": "envoy.service.auth.v3.Authorization",
		"/x/y":    "x",
		"":        "unknown",
		"/":       "unknown",
		"noslash": "noslash",
	} {
		if got := serviceOf(in); got != want {
			t.Errorf("serviceOf(%q) = %q, want %q", in, got, want)
		}
	}
}
