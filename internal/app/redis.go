package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicegw/sluice/internal/admission"
	admredis "github.com/sluicegw/sluice/internal/admission/redis"
	"github.com/sluicegw/sluice/internal/ledger"
	ledgerpg "github.com/sluicegw/sluice/internal/ledger/postgres"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/policies"
)

// redisClient is a client of admission.redis: one server or a cluster,
// every call bounded by its context's deadline (the failure mode's
// timeout), never retried (a retry would outlast it).
func redisClient(r policies.Redis) (goredis.UniversalClient, error) {
	tlsConfig := func(base *tls.Config) (*tls.Config, error) {
		if base == nil {
			if r.TLS != (policies.RedisTLS{}) {
				return nil, errors.New("admission.redis.tls needs a rediss:// URL")
			}
			return nil, nil
		}
		if r.TLS.CAFile != "" {
			pem, err := os.ReadFile(r.TLS.CAFile)
			if err != nil {
				return nil, fmt.Errorf("admission.redis.tls.ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("admission.redis.tls.ca_file %s: no PEM certificate in it", r.TLS.CAFile)
			}
			base.RootCAs = pool
		}
		if r.TLS.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(r.TLS.CertFile, r.TLS.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("admission.redis.tls: the client certificate: %w", err)
			}
			base.Certificates = []tls.Certificate{cert}
		}
		base.MinVersion = tls.VersionTLS12
		return base, nil
	}
	if r.Cluster {
		o, err := goredis.ParseClusterURL(r.URL.Reveal())
		if err != nil {
			return nil, errors.New("admission.redis.url: not a Redis Cluster URL") // it may hold a password: not shown
		}
		if o.TLSConfig, err = tlsConfig(o.TLSConfig); err != nil {
			return nil, err
		}
		o.ContextTimeoutEnabled, o.MaxRetries, o.DialTimeout = true, -1, time.Second
		return goredis.NewClusterClient(o), nil
	}
	o, err := goredis.ParseURL(r.URL.Reveal())
	if err != nil {
		return nil, errors.New("admission.redis.url: not a Redis URL") // it may hold a password: not shown
	}
	if o.TLSConfig, err = tlsConfig(o.TLSConfig); err != nil {
		return nil, err
	}
	o.ContextTimeoutEnabled, o.MaxRetries, o.DialTimeout = true, -1, time.Second
	return goredis.NewClient(o), nil
}

// sharedAdmission is admission over Redis: a Failover of the Redis
// backend, falling back on local as each request's failure mode says.
// Budget periods Redis lacks start from what the ledger recorded.
func sharedAdmission(ctx context.Context, snap *policies.Snapshot, led ledgerBackend, local *admission.Local, tz *time.Location,
	record func(kind, id, model string, at time.Time, cost int64), reg prometheus.Registerer, log *slog.Logger) (*admission.Failover, func() error, error) {
	r := snap.AdmissionRedis()
	// The client's own complaints (a failed dial) go to the log, at debug:
	// what matters of them is counted and logged by the failover.
	goredis.SetLogger(redisLog{log})
	client, err := redisClient(r)
	if err != nil {
		return nil, nil, err
	}
	rtt := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_admission_redis_seconds",
		Help:    "Round trips to Redis by phase (count, admit, settle, budgets, reconcile, ping).",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25}}, []string{"phase"})
	rerrs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_admission_redis_errors_total",
		Help: "Calls to Redis that failed or outlasted admission.redis.timeout, by phase."}, []string{"phase"})
	backend := admredis.New(client, admredis.Options{
		TimeZone: tz,
		Timeout:  r.Timeout,
		Spent: func(ctx context.Context, kind, id, model string, since time.Time) (money.Sum, error) {
			return ledgerSpent(ctx, led, kind, id, model, since)
		},
		SpentBuckets: func(ctx context.Context, kind, id, model string, since time.Time) ([]admredis.SpentBucket, error) {
			return ledgerSpentBuckets(ctx, led, kind, id, model, since)
		},
		Record: record,
		Logger: log,
		Observe: func(phase string, d time.Duration, err error) {
			rtt.WithLabelValues(phase).Observe(d.Seconds())
			if err != nil {
				rerrs.WithLabelValues(phase).Inc()
			}
		},
	})
	f := admission.NewFailover(backend, local, admission.FailoverOptions{Timeout: r.Timeout, Mode: snap.FailureMode(), Logger: log})
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := backend.Load(lctx); err != nil {
		// Not fatal: requests follow their failure mode until Redis
		// answers, and the script is loaded with the first call.
		log.Error("admission: Redis does not answer at start-up; requests follow their failure mode until it does", "err", err)
	}
	reg.MustRegister(rtt, rerrs,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_admission_fallback_total",
			Help: "Requests admitted against this replica's own counters because Redis did not answer (failure_mode open)."},
			func() float64 { return float64(f.FallbackCount(admission.PhaseAdmit)) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_admission_unavailable_total",
			Help: "Requests refused with 503 admission_unavailable because Redis did not answer (failure_mode closed)."},
			func() float64 { return float64(f.FallbackCount(admission.PhaseRefuse)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_admission_redis_down",
			Help: "1 while Redis does not answer (requests follow their failure mode), else 0."},
			func() float64 {
				if f.Down() {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_admission_reconcile_pending",
			Help: "Settles kept for Redis while it did not answer, to reconcile once it does."},
			func() float64 { w, _ := f.Pending(); return float64(w) }),
	)
	return f, client.Close, nil
}

// ledgerSpent is what the ledger recorded for a scope since a time: where
// a budget period Redis lacks starts from. The PostgreSQL ledger, which
// a fleet shares, answers from its aggregates at once (what replicas'
// spools hold and it lacks is the bound docs/architecture.md states);
// another answers from its records once its spool reached them.
func ledgerSpent(ctx context.Context, led ledger.Reader, kind, id, model string, since time.Time) (money.Sum, error) {
	if pg, ok := led.(*ledgerpg.Ledger); ok {
		return pg.DB().Spent(ctx, kind, id, model, since)
	}
	f := ledger.Filter{Since: since, Model: model}
	switch kind {
	case "key":
		f.KeyID = id
	case "team":
		f.Team = id
	case "org":
		f.Org = id
	default:
		return money.Sum{}, fmt.Errorf("a budget scope %q", kind)
	}
	ts, err := led.Totals(ctx, f, ledger.ByNone)
	if err != nil {
		return money.Sum{}, err
	}
	var s money.Sum
	for _, t := range ts {
		s = s.Add(t.Cost)
	}
	return s, nil
}

// redisLog hands go-redis's messages to the log, at debug.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "redis")
}

// ledgerSpentBuckets is what the ledger recorded for a scope per bucket
// since a time: where a rolling budget's window Redis lacks starts from.
func ledgerSpentBuckets(ctx context.Context, led ledgerBackend, kind, id, model string, since time.Time) ([]admredis.SpentBucket, error) {
	var as []ledger.Aggregate
	var err error
	if pg, ok := led.(*ledgerpg.Ledger); ok {
		as, err = pg.DB().SpentBuckets(ctx, kind, id, model, since)
	} else if as, err = led.Buckets(ctx, since); err == nil {
		// Every scope's buckets: this one's, summed over models.
		sums := map[time.Time]money.Sum{}
		for _, a := range as {
			if string(a.Scope) == kind && a.ID == id && (model == "" || a.Model == model) {
				sums[a.Bucket] = sums[a.Bucket].Add(a.Cost)
			}
		}
		as = as[:0]
		for at, c := range sums {
			as = append(as, ledger.Aggregate{Bucket: at, Cost: c})
		}
	}
	if err != nil {
		return nil, err
	}
	out := make([]admredis.SpentBucket, len(as))
	for i, a := range as {
		out[i] = admredis.SpentBucket{Start: a.Bucket, Cost: a.Cost}
	}
	return out, nil
}
