package tlsserve

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the TLS series. One Metrics serves every Reloader of the
// process (the "grpc" and "xds" servers): each labels its series with its
// Options.Server.
type Metrics struct {
	refused *prometheus.CounterVec
	reloads *prometheus.CounterVec
	expiry  *prometheus.GaugeVec
}

// NewMetrics creates the series and registers them on reg (none when reg
// is nil). Call it once per registry.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_tls_refused_total",
			Help: "TLS clients refused by mTLS verification, by server (grpc|xds) and reason (no_certificate|untrusted|identity_not_allowed)."},
			[]string{"server", "reason"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_tls_reloads_total",
			Help: "Reloads of changed TLS files, by server and result (ok|failed: the previous certificate kept serving)."},
			[]string{"server", "result"}),
		expiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_tls_certificate_expiry_timestamp_seconds",
			Help: "NotAfter of the certificate a server presents, in Unix seconds."},
			[]string{"server"}),
	}
	if reg != nil {
		reg.MustRegister(m.refused, m.reloads, m.expiry)
	}
	return m
}

// The values of the reason label of sluice_tls_refused_total.
const (
	reasonNoCertificate      = "no_certificate"
	reasonUntrusted          = "untrusted"
	reasonIdentityNotAllowed = "identity_not_allowed"
)

// The values of the result label of sluice_tls_reloads_total.
const (
	resultOK     = "ok"
	resultFailed = "failed"
)

// zero makes server's series exist at zero, so that rates and alerts see
// them before the first event.
func (m *Metrics) zero(server string, mtls bool) {
	m.reloads.WithLabelValues(server, resultOK)
	m.reloads.WithLabelValues(server, resultFailed)
	if mtls {
		for _, r := range []string{reasonNoCertificate, reasonUntrusted, reasonIdentityNotAllowed} {
			m.refused.WithLabelValues(server, r)
		}
	}
}
