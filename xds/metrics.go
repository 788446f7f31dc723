package xds

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the control plane's Prometheus metrics.
type Metrics struct {
	nacks          *prometheus.CounterVec
	snapshotErrors prometheus.Counter
	updates        prometheus.Counter
	nodes          prometheus.Gauge
	version        *prometheus.GaugeVec
	withheld       prometheus.Counter
	// featuresWithheld and nodesRefused: Envoy releases (envoyversion.go).
	featuresWithheld *prometheus.CounterVec
	nodesRefused     *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (none when
// reg is nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_xds_nacks_total", Help: "xDS responses rejected by a client (NACK), by type (cds, eds, lds, rds).",
		}, []string{"type"}),
		snapshotErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_xds_snapshot_errors_total", Help: "Configurations whose xDS resources failed validation and were not served.",
		}),
		updates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_xds_updates_total", Help: "New xDS snapshot versions served.",
		}),
		nodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_xds_connected_nodes", Help: "xDS clients (by node id) with an open stream.",
		}),
		version: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_xds_snapshot_info", Help: "The xDS snapshot version served (value 1).",
		}, []string{"version"}),
		withheld: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_xds_proxyless_withheld_total",
			Help: "Proxyless gRPC clients (by node, once each while connected) served no provider routes or clusters because xds.proxyless is not routing_only.",
		}),
		featuresWithheld: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_xds_features_withheld_total",
			Help: "Envoy nodes (by node, once each per feature while connected) served the config without a feature their release is too old for, by feature (status_on_error, fallback).",
		}, []string{"feature"}),
		nodesRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_xds_nodes_refused_total",
			Help: "xDS streams refused before anything was served, by reason (envoy_too_old: an Envoy older than the oldest release Sluice serves; no_node_id; node_id_too_long).",
		}, []string{"reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.nacks, m.snapshotErrors, m.updates, m.nodes, m.version, m.withheld, m.featuresWithheld, m.nodesRefused)
	}
	return m
}
