package policies

import (
	"net/url"
	"time"
)

// Admission says where request-rate, token and budget counters live.
type Admission struct {
	// Redis, when set, is the Redis every replica counts in, so that a
	// limit holds across the fleet; unset, each replica counts in its
	// own memory (the default, and right for one replica).
	Redis Redis `yaml:"redis"`
	// FailureMode is what a request meets when Redis does not answer
	// within Redis.Timeout: "closed" (the default: 503
	// admission_unavailable with retry-after) or "open" (admitted against
	// this replica's own counters, logged and counted). A key's, team's
	// or org's limits may declare their own (limits.failure_mode): the
	// key's wins, then its team's, then its org's, then this.
	FailureMode string `yaml:"failure_mode"`
}

// Failure modes (admission.failure_mode, limits.failure_mode).
const (
	FailClosed = "closed"
	FailOpen   = "open"
)

// Redis is admission.redis: a URL alone, or a mapping.
type Redis struct {
	// URL is redis://[user:password@]host:port[/db], or rediss:// for
	// TLS; with Cluster, further nodes as addr parameters
	// (redis://host1:6379?addr=host2:6379&addr=host3:6379).
	URL Secret `yaml:"url"`
	// Cluster: the URL names a Redis Cluster's nodes.
	Cluster bool `yaml:"cluster"`
	// Timeout bounds each call to Redis, well under Envoy's ext_authz and
	// ext_proc timeouts; past it the request follows its failure mode.
	// Default 50ms.
	Timeout time.Duration `yaml:"timeout"`
	// TLS verifies the server against CAFile (else the system's roots)
	// and presents a client certificate; it needs a rediss:// URL.
	TLS RedisTLS `yaml:"tls"`
}

// RedisTLS is TLS to Redis. A relative path is resolved against the
// directory of the config file.
type RedisTLS struct {
	CAFile   string `yaml:"ca_file"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// DefaultRedisTimeout is admission.redis.timeout when unset.
const DefaultRedisTimeout = 50 * time.Millisecond

func (r Redis) set() bool { return r.URL != "" }

// validate checks a at admission; it never shows the URL, which may hold
// a password.
func (a Admission) validate(v *validator) {
	switch a.FailureMode {
	case "", FailClosed, FailOpen:
	default:
		v.add("admission.failure_mode", "must be closed or open, got %q", a.FailureMode)
	}
	r := a.Redis
	if !r.set() {
		if r.Cluster || r.Timeout != 0 || r.TLS != (RedisTLS{}) {
			v.add("admission.redis", "url is required with its other settings")
		}
		return
	}
	u, err := url.Parse(r.URL.Reveal())
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
		v.add("admission.redis.url", "want a Redis URL, redis://user:password@host:6379/0 (rediss:// for TLS), its password percent-encoded (the value is not shown: it may hold a password)")
	} else if r.TLS != (RedisTLS{}) && u.Scheme != "rediss" {
		v.add("admission.redis.tls", "needs a rediss:// URL: with redis:// the connection is not encrypted")
	}
	if r.Timeout < 0 || (r.Timeout > 0 && r.Timeout < time.Millisecond) || r.Timeout > 10*time.Second {
		v.add("admission.redis.timeout", "must be between 1ms and 10s (0: %v), got %v", DefaultRedisTimeout, r.Timeout)
	}
	if (r.TLS.CertFile == "") != (r.TLS.KeyFile == "") {
		v.add("admission.redis.tls", "cert_file and key_file go together (the client certificate and its key)")
	}
}
