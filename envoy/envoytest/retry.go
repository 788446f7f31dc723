package envoytest

// Route retry policies, as Envoy's RetryPolicyImpl (config) and
// RetryStateImpl (per request) in source/common/router/retry_state_impl.cc,
// and the retry priority envoy.retry_priorities.previous_priorities
// (source/extensions/retry/priority/previous_priorities).

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previousprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
)

// The retry_on conditions the emulator implements (RetryPolicy::RETRY_ON_*).
const (
	retryOn5xx uint32 = 1 << iota
	retryOnGatewayError
	retryOnConnectFailure
	retryOnReset
	retryOnRefusedStream
	retryOnRetriableStatusCodes
)

var retryOnNames = map[string]uint32{
	"5xx":                    retryOn5xx,
	"gateway-error":          retryOnGatewayError,
	"connect-failure":        retryOnConnectFailure,
	"reset":                  retryOnReset,
	"refused-stream":         retryOnRefusedStream,
	"retriable-status-codes": retryOnRetriableStatusCodes,
}

const (
	typePreviousPriorities   = "envoy.extensions.retry.priority.previous_priorities.v3.PreviousPrioritiesConfig"
	namePreviousPriorities   = "envoy.retry_priorities.previous_priorities"
	defaultRetryBaseInterval = 25 * time.Millisecond // runtime upstream.base_retry_backoff_ms
)

// Envoy's stream reset reasons (Http::Utility::resetReasonToString).
const (
	resetRemoteConnectionFailure = "remote connection failure"
	resetConnectionTimeout       = "connection timeout"
	resetConnectionTermination   = "connection termination"
	resetRemoteReset             = "remote reset"
	resetRemoteRefusedStream     = "remote refused stream reset"
	resetLocalReset              = "local reset"
	resetOverflow                = "overflow"
)

// retryPolicy is a compiled route (or virtual host) retry_policy.
type retryPolicy struct {
	on          uint32
	numRetries  uint32
	statusCodes []uint32
	perTry      time.Duration
	base, max   time.Duration
	// updateFrequency is previous_priorities' update_frequency; 0 when the
	// policy has no retry priority.
	updateFrequency int
}

// newRetryPolicy compiles a RetryPolicy, refusing by name what the
// emulator does not implement.
func newRetryPolicy(rp *routev3.RetryPolicy) (*retryPolicy, error) {
	p := &retryPolicy{numRetries: 1, base: defaultRetryBaseInterval}
	for _, v := range strings.Split(rp.GetRetryOn(), ",") {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		bit, ok := retryOnNames[v]
		if !ok {
			return nil, fmt.Errorf("retry_policy.retry_on %q is not supported by the emulator (5xx, gateway-error, connect-failure, reset, refused-stream, retriable-status-codes)", v)
		}
		p.on |= bit
	}
	if n := rp.GetNumRetries(); n != nil {
		p.numRetries = n.GetValue()
	}
	p.statusCodes = rp.GetRetriableStatusCodes()
	p.perTry = durationOr(rp.GetPerTryTimeout(), 0)
	switch {
	case rp.GetPerTryIdleTimeout() != nil:
		return nil, errors.New("retry_policy.per_try_idle_timeout is not supported by the emulator")
	case len(rp.GetRetryHostPredicate()) > 0:
		return nil, errors.New("retry_policy.retry_host_predicate is not supported by the emulator")
	case len(rp.GetRetryOptionsPredicates()) > 0:
		return nil, errors.New("retry_policy.retry_options_predicates is not supported by the emulator")
	case rp.GetRateLimitedRetryBackOff() != nil:
		return nil, errors.New("retry_policy.rate_limited_retry_back_off is not supported by the emulator")
	case len(rp.GetRetriableHeaders()) > 0:
		return nil, errors.New("retry_policy.retriable_headers is not supported by the emulator")
	case len(rp.GetRetriableRequestHeaders()) > 0:
		return nil, errors.New("retry_policy.retriable_request_headers is not supported by the emulator")
	}
	if bo := rp.GetRetryBackOff(); bo != nil {
		p.base = roundUpMillis(bo.GetBaseInterval().AsDuration())
		if bo.GetMaxInterval() != nil {
			p.max = roundUpMillis(bo.GetMaxInterval().AsDuration())
			if p.max < p.base {
				return nil, errors.New("retry_policy.retry_back_off: max_interval must be greater than or equal to the base_interval")
			}
		}
	}
	if p.max == 0 {
		p.max = 10 * p.base
	}
	if pr := rp.GetRetryPriority(); pr != nil {
		if pr.GetName() != namePreviousPriorities && pr.GetTypedConfig().MessageName() != typePreviousPriorities {
			return nil, fmt.Errorf("retry_policy.retry_priority %q is not supported by the emulator (only %s)", pr.GetName(), namePreviousPriorities)
		}
		c := &previousprioritiesv3.PreviousPrioritiesConfig{}
		if err := anyTo(pr.GetTypedConfig(), typePreviousPriorities, c); err != nil {
			return nil, fmt.Errorf("retry_policy.retry_priority: %w", err)
		}
		if err := c.ValidateAll(); err != nil {
			return nil, fmt.Errorf("retry_policy.retry_priority: %w", err)
		}
		p.updateFrequency = int(c.GetUpdateFrequency())
	}
	return p, nil
}

func roundUpMillis(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return time.Millisecond
	}
	return d.Truncate(time.Millisecond)
}

// retryStatus is RetryStatus.
type retryStatus int

const (
	retryNo retryStatus = iota
	retryYes
	retryNoLimitExceeded // retries exhausted: URX
	retryNoOverflow      // the cluster's max_retries is reached: UO
)

// retryState is RetryStateImpl for one request, with its retry priority.
type retryState struct {
	p         *retryPolicy
	cl        *cluster // the route's cluster: its max_retries bounds retries
	remaining uint32
	next      time.Duration // the next back-off interval
	armed     bool          // a retry holds the cluster's retries resource

	// previous_priorities: the priority levels of the hosts attempted since
	// the last reset, the levels excluded, and the load last computed.
	attempted []int
	excluded  []bool
	load      *priorityLoad
}

// newRetryState returns nil when the policy cannot retry (retry_on empty),
// as RetryStateImpl::create.
func newRetryState(p *retryPolicy, cl *cluster) *retryState {
	if p == nil || p.on == 0 {
		return nil
	}
	return &retryState{p: p, cl: cl, remaining: p.numRetries, next: p.base}
}

// wouldRetryHeaders is wouldRetryFromHeaders for the codes the emulator
// implements.
func (r *retryState) wouldRetryHeaders(h *Headers) bool {
	if _, ok := h.Get("x-envoy-ratelimited"); ok {
		return false // only retry_on envoy-ratelimited retries these
	}
	code, _ := strconv.Atoi(h.Value(":status"))
	if r.p.on&retryOn5xx != 0 && code >= 500 && code < 600 {
		return true
	}
	if r.p.on&retryOnGatewayError != 0 && code >= 502 && code <= 504 {
		return true
	}
	if r.p.on&retryOnRetriableStatusCodes != 0 {
		for _, c := range r.p.statusCodes {
			if int(c) == code {
				return true
			}
		}
	}
	return false
}

// wouldRetryReset is wouldRetryFromReset.
func (r *retryState) wouldRetryReset(reason string) bool {
	switch reason {
	case resetOverflow:
		return false
	case resetRemoteConnectionFailure, resetConnectionTimeout:
		if r.p.on&retryOnConnectFailure != 0 {
			return true
		}
	}
	if r.p.on&(retryOnReset|retryOn5xx|retryOnGatewayError) != 0 {
		return true
	}
	return r.p.on&retryOnRefusedStream != 0 && reason == resetRemoteRefusedStream
}

// shouldRetry is RetryStateImpl::shouldRetry: the retry budget of the
// policy, then the route cluster's max_retries circuit breaker.
func (r *retryState) shouldRetry(would bool) retryStatus {
	r.release()
	if !would {
		return retryNo
	}
	if r.remaining == 0 {
		return retryNoLimitExceeded
	}
	r.remaining--
	if !r.cl.retries.tryAcquire(r.cl.breakers.maxRetries) {
		return retryNoOverflow
	}
	r.armed = true
	return retryYes
}

// release is resetRetry: the retries resource is held from a retry
// decision until the next decision or the end of the request.
func (r *retryState) release() {
	if r != nil && r.armed {
		r.armed = false
		r.cl.retries.release()
	}
}

// backoff is JitteredExponentialBackOffStrategy::nextBackOffMs: uniform
// in [0, interval) ms, the interval doubling from the base up to the max.
func (r *retryState) backoff() time.Duration {
	b := r.next
	if r.next < r.p.max/2 {
		r.next *= 2
	} else {
		r.next = r.p.max
	}
	ms := uint64(b / time.Millisecond)
	if ms == 0 {
		return 0
	}
	return time.Duration(random(ms)) * time.Millisecond
}

// onHostAttempted is RetryPriority::onHostAttempted.
func (r *retryState) onHostAttempted(level int) {
	if r != nil && r.p.updateFrequency > 0 {
		r.attempted = append(r.attempted, level)
	}
}

// priorityLoadForRetry is PreviousPrioritiesRetryPriority::
// determinePriorityLoad: once update_frequency hosts have been attempted
// (and on every multiple of it), the levels attempted get no load; when
// that leaves none available, the attempted levels are forgotten and the
// original load applies.
func (r *retryState) priorityLoadForRetry(avail []levelAvailability, original *priorityLoad) *priorityLoad {
	if r == nil || r.p.updateFrequency == 0 {
		return original
	}
	f := r.p.updateFrequency
	switch {
	case len(r.attempted) < f:
		return original
	case len(r.attempted)%f == 0:
		if len(r.excluded) < len(avail) {
			r.excluded = append(r.excluded, make([]bool, len(avail)-len(r.excluded))...)
		}
		for _, l := range r.attempted {
			if l >= 0 && l < len(r.excluded) {
				r.excluded[l] = true
			}
		}
		adjusted := make([]levelAvailability, len(avail))
		total := uint32(0)
		sum := func() {
			total = 0
			for i, a := range avail {
				adjusted[i] = levelAvailability{}
				if i < len(r.excluded) && r.excluded[i] {
					continue
				}
				adjusted[i] = a
				total += a.healthy + a.degraded
			}
		}
		sum()
		if total == 0 {
			for i := range r.excluded {
				r.excluded[i] = false
			}
			r.attempted = nil
			sum()
		}
		if total == 0 {
			return original
		}
		r.load = distributeLoad(adjusted, min(total, 100))
	}
	if r.load == nil {
		return original
	}
	return r.load
}
