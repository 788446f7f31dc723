package authz

import (
	"context"
	"log/slog"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the authz server's Prometheus series.
type Metrics struct {
	checks   *prometheus.CounterVec
	duration prometheus.Histogram
}

// NewMetrics registers the series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_authz_checks_total",
			Help: "ext_authz checks by decision (allow|deny) and reason (a stable error code, or ok).",
		}, []string{"decision", "reason"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_authz_check_duration_seconds",
			Help:    "Time to decide one ext_authz check, excluding gRPC transport.",
			Buckets: []float64{5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3, 2.5e-2},
		}),
	}
	reg.MustRegister(m.checks, m.duration)
	return m
}

// Server is the envoy.service.auth.v3.Authorization gRPC service.
type Server struct {
	authv3.UnimplementedAuthorizationServer
	checker *Checker
	metrics *Metrics
	log     *slog.Logger
}

var _ authv3.AuthorizationServer = (*Server)(nil)

// NewServer returns the gRPC adapter around checker.
func NewServer(checker *Checker, metrics *Metrics, log *slog.Logger) *Server {
	return &Server{checker: checker, metrics: metrics, log: log.With("component", "authz")}
}

// Check implements authv3.AuthorizationServer. Every decision, allow or
// deny, is a successful RPC: a gRPC error would make Envoy apply its
// failure mode instead of Sluice's answer.
func (s *Server) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	start := time.Now()
	d := s.checker.Check(ctx, req)
	resp := Response(&d)
	s.metrics.duration.Observe(time.Since(start).Seconds())
	decision := "allow"
	if !d.Allowed() {
		decision = "deny"
	}
	s.metrics.checks.WithLabelValues(decision, d.Reason()).Inc()
	if !d.Allowed() && s.log.Enabled(ctx, slog.LevelDebug) {
		attrs := []any{"status", d.Err.Status, "reason", d.Err.Code, "path", req.GetAttributes().GetRequest().GetHttp().GetPath()}
		if d.Principal != nil {
			attrs = append(attrs, "key_id", d.Principal.KeyID, "key_prefix", d.Principal.KeyPrefix)
		}
		s.log.DebugContext(ctx, "check denied", attrs...)
	}
	return resp, nil
}
