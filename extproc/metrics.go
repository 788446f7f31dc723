package extproc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/tokens"
)

// Metrics are the ext_proc server's Prometheus series. Labels are bounded:
// endpoints, outcomes, stable codes, and configured model names.
type Metrics struct {
	requests     *prometheus.CounterVec
	denials      *prometheus.CounterVec
	tokens       *prometheus.CounterVec
	cost         *prometheus.CounterVec
	unparsed     *prometheus.CounterVec
	unpriced     *prometheus.CounterVec
	ledgerErrors prometheus.Counter
	// commit times the settle's ledger Append; overrides counts the
	// override_message_timeout replies sent while one was slow.
	commit    prometheus.Histogram
	overrides prometheus.Counter
	streams   prometheus.Gauge
	// upstreamAttempts counts fallback attempts the upstream processor
	// rewrote, by provider.
	upstreamAttempts *prometheus.CounterVec
	// principalRefused counts streams refused for a principal or a
	// handoff that did not verify, by reason (principal.go).
	principalRefused *prometheus.CounterVec
	// localReplies counts responses to requests Sluice never admitted
	// (another filter's or Envoy's local reply), passed unchanged.
	localReplies *prometheus.CounterVec
	// usageChunks counts what became of the usage chunks Sluice forced
	// (usagechunk.go), by outcome.
	usageChunks *prometheus.CounterVec
}

// NewMetrics registers the series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_extproc_requests_total",
			Help: "Metered requests settled, by endpoint and outcome (ok, upstream_error, cancelled, unparsed); unmetered ones: passed (unknown path passed through), answered (models, model: answered by Sluice), forwarded (count_tokens sent to its provider)."}, []string{"endpoint", "outcome"}),
		denials: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_extproc_denials_total",
			Help: "Requests refused by ext_proc, by stable code."}, []string{"code"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_tokens_total",
			Help: "Tokens charged, by model and kind (input, cached_input, output, reasoning)."}, []string{"model", "kind"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_cost_micros_total",
			Help: "Cost charged in micro-dollars (fractions included: a request's cost is exact to the pico-dollar), by model."}, []string{"model"}),
		unparsed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_unparsed_responses_total",
			Help: "2xx responses whose body could not be metered (charged the input estimate), by endpoint."}, []string{"endpoint"}),
		unpriced: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_unpriced_requests_total",
			Help: "Requests for models without a price (recorded with cost 0), by model."}, []string{"model"}),
		ledgerErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_errors_total",
			Help: "Spend records that could not be written."}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_ledger_commit_seconds",
			Help:    "How long the final reply waited for the spend record's ledger Append (durable, or held: internal/ledger/hold).",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .2, .3, .5, 1, 2, 5}}),
		overrides: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_extproc_timeout_overrides_total",
			Help: "override_message_timeout replies sent because a final reply's ledger Append was slow."}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_extproc_streams",
			Help: "Open ext_proc streams (downstream and upstream)."}),
		upstreamAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_extproc_upstream_attempts_total",
			Help: "Attempts of fallback requests rewritten for a provider by the upstream processor, by provider."}, []string{"provider"}),
		principalRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_principal_refused_total",
			Help: "ext_proc streams refused, with no provider credential sent, because the principal ext_authz signed or the fallback handoff did not verify, by reason (missing, malformed, bad_signature, expired, future, no_keys)."}, []string{"reason"}),
		localReplies: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_extproc_local_replies_total",
			Help: "Responses to requests Sluice never admitted (an ext_authz denial, Envoy's 413, another filter's local reply, which Envoy sends through ext_proc) passed unchanged and unmetered, by status."}, []string{"status"}),
		usageChunks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_extproc_usage_chunks_total",
			Help: "The usage chunks of streams whose include_usage Sluice forced on, by outcome: removed (metered, then kept from the client), oversized (an event over the hold limit, passed unmodified), encoded (a response the provider compressed despite accept-encoding: identity, passed unfiltered), unterminated (the held start of an event that never ended, lost because the response ended in trailers)."}, []string{"outcome"}),
	}
	reg.MustRegister(m.requests, m.denials, m.tokens, m.cost, m.unparsed, m.unpriced, m.ledgerErrors, m.commit, m.overrides, m.streams, m.upstreamAttempts, m.principalRefused, m.localReplies, m.usageChunks)
	return m
}

func (m *Metrics) observe(r ledger.Record) {
	m.requests.WithLabelValues(r.Endpoint, r.Outcome).Inc()
	for k, n := range r.Tokens {
		if label := tokens.Kind(k).Names().Metric; label != "" {
			addCount(m.tokens.WithLabelValues(r.Model, label), n)
		}
	}
	if r.CostPico > 0 {
		m.cost.WithLabelValues(r.Model).Add(float64(r.CostPico) / money.PicoPerMicro)
	}
}

// addCount adds a token count to a counter. A Prometheus counter
// panics on a negative Add; the accounting is saturating and never
// negative (internal/sat), and this is the one place that makes sure of it
// for every series.
func addCount(c prometheus.Counter, v int64) {
	if v > 0 {
		c.Add(float64(v))
	}
}
