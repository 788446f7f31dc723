package envoytest

// Circuit breakers (source/common/upstream/resource_manager_impl.h, checked
// by the connection pools and the retry state) and passive outlier
// detection by consecutive errors (source/common/upstream/
// outlier_detection_impl.cc).

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// thresholds are a cluster's circuit-breaker limits for the DEFAULT
// routing priority.
type thresholds struct {
	maxConnections, maxPending, maxRequests, maxRetries int64
}

// Envoy's defaults (circuit_breaker.proto).
var defaultThresholds = thresholds{maxConnections: 1024, maxPending: 1024, maxRequests: 1024, maxRetries: 3}

func newThresholds(cb *clusterv3.CircuitBreakers) (thresholds, error) {
	t := defaultThresholds
	if len(cb.GetPerHostThresholds()) > 0 {
		return t, errors.New("per_host_thresholds is not supported by the emulator")
	}
	for _, th := range cb.GetThresholds() {
		if th.GetRetryBudget() != nil {
			return t, errors.New("thresholds.retry_budget is not supported by the emulator")
		}
		if th.GetMaxConnectionPools() != nil {
			return t, errors.New("thresholds.max_connection_pools is not supported by the emulator")
		}
		if th.GetPriority() != corev3.RoutingPriority_DEFAULT {
			continue // HIGH applies to routes with priority HIGH, which the emulator refuses
		}
		if v := th.GetMaxConnections(); v != nil {
			t.maxConnections = int64(v.GetValue())
		}
		if v := th.GetMaxPendingRequests(); v != nil {
			t.maxPending = int64(v.GetValue())
		}
		if v := th.GetMaxRequests(); v != nil {
			t.maxRequests = int64(v.GetValue())
		}
		if v := th.GetMaxRetries(); v != nil {
			t.maxRetries = int64(v.GetValue())
		}
	}
	return t, nil
}

// resource is one circuit-breaker counter (ResourceManagerImpl's
// ManagedResourceImpl).
type resource struct{ n atomic.Int64 }

// tryAcquire takes one unit if fewer than max are in use (canCreate, inc).
func (r *resource) tryAcquire(max int64) bool {
	for {
		cur := r.n.Load()
		if cur >= max {
			return false
		}
		if r.n.CompareAndSwap(cur, cur+1) {
			return true
		}
	}
}

func (r *resource) release() { r.n.Add(-1) }

// Envoy's outlier detection defaults (outlier_detection_impl.h).
const (
	defaultODInterval      = 10 * time.Second
	defaultODBaseEjection  = 30 * time.Second
	defaultODMaxEjection   = 300 * time.Second
	defaultODConsecutive   = 5
	defaultODMaxEjectPct   = 10
	defaultODEnforcing5xx  = 100
	defaultODEnforcingGw   = 0
	defaultODEnforcingRate = 100
)

// outlierDetector is one cluster's DetectorImpl, limited to the
// consecutive_5xx and consecutive_gateway_failure detectors. Ejected hosts
// are checked for un-ejection on the interval timer's ticks, computed
// lazily here whenever the cluster picks a host.
type outlierDetector struct {
	cl                        *cluster
	interval                  time.Duration
	base, max                 time.Duration
	consecutive5xx, consecGw  uint32
	enforcing5xx, enforcingGw uint32
	maxEjectPct               uint32
	alwaysEjectOne            bool
	start                     time.Time

	mu       sync.Mutex
	lastTick time.Time
	active   int // hosts ejected now
}

// hostOutlier is DetectorHostMonitorImpl.
type hostOutlier struct {
	mu        sync.Mutex
	consec5xx uint32
	consecGw  uint32
	ejected   bool
	ejectedAt time.Time
	backoff   uint32 // ejectTimeBackoff
	ejections int
}

func newOutlierDetector(c *clusterv3.OutlierDetection, cl *cluster) (*outlierDetector, error) {
	d := &outlierDetector{
		cl:             cl,
		interval:       durationOr(c.GetInterval(), defaultODInterval),
		base:           durationOr(c.GetBaseEjectionTime(), defaultODBaseEjection),
		max:            durationOr(c.GetMaxEjectionTime(), defaultODMaxEjection),
		consecutive5xx: u32Or(c.GetConsecutive_5Xx(), defaultODConsecutive),
		consecGw:       u32Or(c.GetConsecutiveGatewayFailure(), defaultODConsecutive),
		enforcing5xx:   u32Or(c.GetEnforcingConsecutive_5Xx(), defaultODEnforcing5xx),
		enforcingGw:    u32Or(c.GetEnforcingConsecutiveGatewayFailure(), defaultODEnforcingGw),
		maxEjectPct:    u32Or(c.GetMaxEjectionPercent(), defaultODMaxEjectPct),
		alwaysEjectOne: c.GetAlwaysEjectOneHost().GetValue(),
		start:          time.Now(),
	}
	d.lastTick = d.start
	switch {
	case c.GetSplitExternalLocalOriginErrors():
		return nil, errors.New("split_external_local_origin_errors is not supported by the emulator")
	case c.GetDetectDegradedHosts().GetValue():
		return nil, errors.New("detect_degraded_hosts is not supported by the emulator")
	case d.max < d.base:
		return nil, errors.New("outlier detector's max_ejection_time cannot be smaller than base_ejection_time")
	case d.interval <= 0:
		return nil, errors.New("interval must be positive")
	}
	for _, hs := range cl.priorities {
		for _, h := range hs {
			h.od = &hostOutlier{}
		}
	}
	return d, nil
}

func u32Or(v *wrapperspb.UInt32Value, def uint32) uint32 {
	if v == nil {
		return def
	}
	return v.GetValue()
}

func (o *hostOutlier) isEjected() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ejected
}

// tick runs the interval timer's ticks that are due (onIntervalTimer ->
// checkHostForUneject), computed here rather than timed: at each tick an
// ejected host whose ejection time has passed is un-ejected, and a host not
// ejected has its ejection backoff decremented.
func (d *outlierDetector) tick(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tickLocked(now)
}

func (d *outlierDetector) tickLocked(now time.Time) {
	n := int64(now.Sub(d.lastTick) / d.interval)
	if n <= 0 {
		return
	}
	end := d.lastTick.Add(time.Duration(n) * d.interval)
	decrement := func(b uint32, by int64) uint32 {
		if int64(b) <= by {
			return 0
		}
		return b - uint32(by)
	}
	for _, hs := range d.cl.priorities {
		for _, h := range hs {
			o := h.od
			o.mu.Lock()
			if !o.ejected {
				o.backoff = decrement(o.backoff, n)
				o.mu.Unlock()
				continue
			}
			// The first tick at which the ejection has lasted long enough.
			due := o.ejectedAt.Add(min(d.base*time.Duration(o.backoff), d.max))
			k := int64(1)
			if wait := due.Sub(d.lastTick); wait > 0 {
				k = int64((wait + d.interval - 1) / d.interval)
			}
			if u := d.lastTick.Add(time.Duration(k) * d.interval); !u.After(end) {
				o.ejected = false
				o.consec5xx, o.consecGw = 0, 0
				d.active--
				o.backoff = decrement(o.backoff, int64(end.Sub(u)/d.interval))
			}
			o.mu.Unlock()
		}
	}
	d.lastTick = end
}

// putHTTPCode is putHttpResponseCode (also used, in Envoy's non-split
// mode, for local-origin results: a connect failure or reset counts as
// 503, a timeout as 504).
func (d *outlierDetector) putHTTPCode(h *host, code int) {
	if d == nil || h.od == nil {
		return
	}
	o := h.od
	var fire5xx, fireGw bool
	o.mu.Lock()
	if code >= 500 && code < 600 {
		if code >= 502 && code <= 504 {
			o.consecGw++
			fireGw = o.consecGw == d.consecGw
		} else {
			o.consecGw = 0
		}
		o.consec5xx++
		fire5xx = o.consec5xx == d.consecutive5xx
	} else {
		o.consec5xx, o.consecGw = 0, 0
	}
	o.mu.Unlock()
	if fireGw {
		d.onConsecutiveError(h, d.enforcingGw, func() { o.consecGw = 0 })
	}
	if fire5xx {
		d.onConsecutiveError(h, d.enforcing5xx, func() { o.consec5xx = 0 })
	}
}

// onConsecutiveError is onConsecutiveErrorWorker + ejectHost: eject within
// max_ejection_percent (or one host with always_eject_one_host), if the
// enforcing percentage says so, then reset that counter.
func (d *outlierDetector) onConsecutiveError(h *host, enforcing uint32, resetCounter func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tickLocked(time.Now()) // the ticks before this ejection
	o := h.od
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ejected {
		return
	}
	n := d.cl.allHosts()
	pct := 100.0 * float64(d.active) / float64(n)
	if pct < float64(min(d.maxEjectPct, 100)) || (d.alwaysEjectOne && d.active == 0) {
		if enforcing > 0 && uint32(random(100)) < enforcing {
			d.active++
			o.ejected = true
			o.ejections++
			o.ejectedAt = time.Now()
			if time.Duration(o.backoff)*d.base < d.max+d.base {
				o.backoff++
			}
		}
	}
	resetCounter()
}
