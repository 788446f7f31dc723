package grpcguard

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Guard is the recovering interceptors' shared state: where a panic is
// logged and counted.
type Guard struct {
	log    *slog.Logger
	panics *prometheus.CounterVec
}

// New returns a Guard logging to log and counting in
// sluice_panics_total{service}, registered on reg.
func New(log *slog.Logger, reg prometheus.Registerer) *Guard {
	g := &Guard{
		log: log,
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_panics_total",
			Help: "Panics recovered in a gRPC call or stream handler (that call failed with Internal; the process kept serving), by gRPC service."}, []string{"service"}),
	}
	reg.MustRegister(g.panics)
	return g
}

// ServerOptions are the interceptors, to pass to grpc.NewServer. Put them
// first so that they also cover any interceptor added after them.
func (g *Guard) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(g.Unary), grpc.ChainStreamInterceptor(g.Stream)}
}

// Unary is a grpc.UnaryServerInterceptor that recovers a panic in handler.
func (g *Guard) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	id := &identity{}
	ctx = context.WithValue(ctx, identityKey{}, id)
	defer func() {
		if r := recover(); r != nil {
			resp, err = nil, g.recovered(ctx, info.FullMethod, id, r)
		}
	}()
	return handler(ctx, req)
}

// Stream is a grpc.StreamServerInterceptor that recovers a panic in
// handler.
func (g *Guard) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	id := &identity{}
	ctx := context.WithValue(ss.Context(), identityKey{}, id)
	defer func() {
		if r := recover(); r != nil {
			err = g.recovered(ctx, info.FullMethod, id, r)
		}
	}()
	return handler(srv, &stream{ServerStream: ss, ctx: ctx})
}

// recovered logs and counts panic value r of a call to method, and returns
// the error the call fails with.
func (g *Guard) recovered(ctx context.Context, method string, id *identity, r any) error {
	service := serviceOf(method)
	g.panics.WithLabelValues(service).Inc()
	attrs := []slog.Attr{slog.String("method", method)}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		attrs = append(attrs, slog.String("peer", p.Addr.String()))
	}
	attrs = append(attrs, id.attrs()...)
	attrs = append(attrs, slog.String("panic", fmt.Sprint(r)), slog.String("stack", string(debug.Stack())))
	g.log.LogAttrs(context.WithoutCancel(ctx), slog.LevelError, "recovered a panic in a gRPC handler; the call failed", attrs...)
	return status.Error(codes.Internal, "internal error in "+service)
}

// serviceOf is the gRPC service of a full method name
// ("/envoy.service.auth.v3.Authorization/Check").
func serviceOf(method string) string {
	s := strings.TrimPrefix(method, "/")
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		s = s[:i]
	}
	if s == "" {
		return "unknown"
	}
	return s
}

// stream is a grpc.ServerStream whose context carries the identity.
type stream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *stream) Context() context.Context { return s.ctx }

type identityKey struct{}

// identity is what a handler said about the call it serves.
type identity struct {
	mu sync.Mutex
	kv []slog.Attr
}

func (id *identity) attrs() []slog.Attr {
	id.mu.Lock()
	defer id.mu.Unlock()
	return append([]slog.Attr(nil), id.kv...)
}

// Identify attaches attributes that identify the call ctx belongs to (a
// request id, a path; never a credential or a body) to the log line of a
// panic recovered in it. An attribute given again replaces the earlier
// one. It does nothing outside a guarded call.
func Identify(ctx context.Context, attrs ...slog.Attr) {
	id, ok := ctx.Value(identityKey{}).(*identity)
	if !ok {
		return
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	for _, a := range attrs {
		replaced := false
		for i := range id.kv {
			if id.kv[i].Key == a.Key {
				id.kv[i], replaced = a, true
			}
		}
		if !replaced {
			id.kv = append(id.kv, a)
		}
	}
}
