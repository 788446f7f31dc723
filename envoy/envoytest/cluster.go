package envoytest

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	aggregatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/aggregate/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

const (
	typeAggregate       = "envoy.extensions.clusters.aggregate.v3.ClusterConfig"
	nameAggregate       = "envoy.clusters.aggregate"
	typeUpstreamTLS     = "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
	defaultOverprovison = 140 // ClusterLoadAssignment.policy.overprovisioning_factor
	panicThreshold      = 50  // runtime upstream.healthy_panic_threshold
)

// cluster is an upstream cluster: its hosts by priority and how to talk to
// them, or, for an aggregate cluster, its member clusters in priority
// order.
type cluster struct {
	name string
	// statName is Envoy's observabilityName(): alt_stat_name, else the
	// name (%UPSTREAM_CLUSTER% in access logs).
	statName string

	// members is set for an aggregate cluster (envoy.clusters.aggregate),
	// in priority order; memberNames until they are linked.
	memberNames []string
	members     []*cluster

	// priorities holds the hosts of each priority (index = priority).
	priorities [][]*host
	overprov   uint32

	http2          bool
	connectTimeout time.Duration
	client         *http.Client
	tls            *upstreamTLS // the UpstreamTlsContext; nil: plaintext

	// upstreamFilters is the upstream HTTP filter chain (without the
	// upstream codec, which is always last); nil runs the codec only.
	upstreamFilters []httpFilter
	httpOpts        *upstreamhttpv3.HttpProtocolOptions

	breakers thresholds
	requests resource // upstream requests in flight
	pending  resource // requests waiting for a connection
	retries  resource // retries in flight (the route cluster's)

	outlier *outlierDetector
	// hc is the active health checker, shared with the other
	// configurations that define the cluster the same; hcFresh says this
	// configuration started it, and waits for its first checks.
	hc      *clusterHC
	hcFresh bool
	// keepalive is the HTTP/2 connection_keepalive of the cluster's
	// connections (emulated on gRPC services' connections only).
	keepalive *corev3.KeepaliveSettings

	mu sync.Mutex
	rr map[int]uint32 // round-robin position per priority
}

// host is one endpoint of a cluster.
type host struct {
	cluster  *cluster
	addr     string // host:port
	hostname string // for auto_host_rewrite: endpoint.hostname, or the DNS name of a DNS cluster
	priority int
	health   corev3.HealthStatus
	od       *hostOutlier
	hc       *hostHC          // active health; nil without a health checker
	metadata *corev3.Metadata // the LbEndpoint's (xds.upstream_host_metadata)
}

// Envoy's connect_timeout default.
const defaultConnectTimeout = 5 * time.Second

// newCluster builds one cluster; aggregate members and upstream filters
// are linked afterwards (linkClusters), once every cluster exists.
func (e *Emulator) newCluster(c *clusterv3.Cluster, eds map[string]*endpointv3.ClusterLoadAssignment) (*cluster, error) {
	cl := &cluster{name: c.GetName(), statName: or(c.GetAltStatName(), c.GetName()), overprov: defaultOverprovison, rr: map[int]uint32{}}
	fail := func(format string, a ...any) error {
		return fmt.Errorf("cluster %q: %s", c.GetName(), fmt.Sprintf(format, a...))
	}
	if err := checkClusterFields(c); err != nil {
		return nil, fail("%v", err)
	}
	var la *endpointv3.ClusterLoadAssignment
	dns := false
	switch ct := c.GetClusterDiscoveryType().(type) {
	case *clusterv3.Cluster_ClusterType:
		if ct.ClusterType.GetName() != nameAggregate && ct.ClusterType.GetTypedConfig().MessageName() != typeAggregate {
			return nil, fail("cluster_type %q is not supported by the emulator (only %s)", ct.ClusterType.GetName(), nameAggregate)
		}
		ac := &aggregatev3.ClusterConfig{}
		if err := anyTo(ct.ClusterType.GetTypedConfig(), typeAggregate, ac); err != nil {
			return nil, fail("cluster_type: %v", err)
		}
		if len(ac.GetClusters()) == 0 {
			return nil, fail("cluster_type %s: clusters must not be empty", nameAggregate)
		}
		cl.memberNames = ac.GetClusters()
		if c.GetLoadAssignment() != nil {
			return nil, fail("an aggregate cluster has no load_assignment")
		}
	default:
		switch t := c.GetType(); t {
		case clusterv3.Cluster_STATIC:
			la = c.GetLoadAssignment()
		case clusterv3.Cluster_STRICT_DNS, clusterv3.Cluster_LOGICAL_DNS:
			la, dns = c.GetLoadAssignment(), true
		case clusterv3.Cluster_EDS:
			name := c.GetEdsClusterConfig().GetServiceName()
			if name == "" {
				name = c.GetName()
			}
			la = eds[name]
			if la == nil && eds == nil {
				return nil, fail("type EDS needs endpoints from an xDS server; the static emulator has none")
			}
		default:
			return nil, fail("type %s is not supported by the emulator (STATIC, STRICT_DNS, LOGICAL_DNS, EDS, or cluster_type %s)", t, nameAggregate)
		}
	}
	if f := la.GetPolicy().GetOverprovisioningFactor(); f != nil {
		cl.overprov = f.GetValue()
	}
	for _, lle := range la.GetEndpoints() {
		p := int(lle.GetPriority())
		for len(cl.priorities) <= p {
			cl.priorities = append(cl.priorities, nil)
		}
		for _, lb := range lle.GetLbEndpoints() {
			ep := lb.GetEndpoint()
			addr, err := socketAddr(ep.GetAddress())
			if err != nil {
				return nil, fail("%v", err)
			}
			h := &host{cluster: cl, addr: addr, priority: p, health: lb.GetHealthStatus(), hostname: ep.GetHostname(), metadata: lb.GetMetadata()}
			if h.hostname == "" && dns {
				h.hostname = ep.GetAddress().GetSocketAddress().GetAddress()
			}
			cl.priorities[p] = append(cl.priorities[p], h)
		}
	}
	if o := c.GetTypedExtensionProtocolOptions()[typeHTTPProtoOpt]; o != nil {
		opts := &upstreamhttpv3.HttpProtocolOptions{}
		if err := o.UnmarshalTo(opts); err != nil {
			return nil, fail("typed_extension_protocol_options: %v", err)
		}
		if err := checkHTTPProtocolOptions(opts); err != nil {
			return nil, fail("typed_extension_protocol_options %s: %v", typeHTTPProtoOpt, err)
		}
		cl.httpOpts = opts
		cl.http2 = opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil
		cl.keepalive = opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions().GetConnectionKeepalive()
	}
	if c.GetHttp2ProtocolOptions() != nil { //nolint:staticcheck // the deprecated form is still accepted by Envoy
		cl.http2 = true
	}
	if ts := c.GetTransportSocket(); ts != nil {
		if ts.GetTypedConfig().MessageName() != typeUpstreamTLS {
			return nil, fail("transport_socket %q is not supported by the emulator (only envoy.transport_sockets.tls, an UpstreamTlsContext)", ts.GetName())
		}
		t, err := e.tls.load(c, cl.http2)
		if err != nil {
			return nil, fail("transport_socket UpstreamTlsContext: %v", err)
		}
		cl.tls = t
	}
	var err error
	if cl.breakers, err = newThresholds(c.GetCircuitBreakers()); err != nil {
		return nil, fail("circuit_breakers: %v", err)
	}
	if c.GetOutlierDetection() != nil {
		if cl.outlier, err = newOutlierDetector(c.GetOutlierDetection(), cl); err != nil {
			return nil, fail("outlier_detection: %v", err)
		}
	}
	cl.connectTimeout = durationOr(c.GetConnectTimeout(), defaultConnectTimeout)
	tr := cl.newTransport(cl.http2)
	cl.client = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	hcCfg, err := newHealthCheck(c.GetHealthChecks())
	if err != nil {
		return nil, fail("%v", err)
	}
	if hcCfg != nil {
		if cl.members != nil || len(cl.memberNames) > 0 {
			return nil, fail("health_checks on an aggregate cluster are not supported by the emulator")
		}
		cl.hc, cl.hcFresh = e.healthFor(c, cl, hcCfg)
		for _, hs := range cl.priorities {
			for _, h := range hs {
				h.hc = cl.hc.hosts[h.addr]
			}
		}
	}
	return cl, nil
}

// checkClusterFields refuses the Cluster fields that change what Envoy does
// and that the emulator does not implement.
func checkClusterFields(c *clusterv3.Cluster) error {
	switch {
	case len(c.GetTransportSocketMatches()) > 0:
		return errors.New("transport_socket_matches is not supported by the emulator")
	case c.GetLbSubsetConfig() != nil:
		return errors.New("lb_subset_config is not supported by the emulator")
	case c.GetLoadBalancingPolicy() != nil:
		return errors.New("load_balancing_policy is not supported by the emulator (round robin only)")
	}
	switch c.GetLbPolicy() {
	case clusterv3.Cluster_ROUND_ROBIN, clusterv3.Cluster_CLUSTER_PROVIDED:
	default:
		return fmt.Errorf("lb_policy %s is not supported by the emulator (ROUND_ROBIN; CLUSTER_PROVIDED for an aggregate cluster)", c.GetLbPolicy())
	}
	return nil
}

// checkHTTPProtocolOptions refuses the HttpProtocolOptions fields that
// change routing and that the emulator does not implement.
func checkHTTPProtocolOptions(o *upstreamhttpv3.HttpProtocolOptions) error {
	switch {
	case o.GetRetryPolicy() != nil:
		return errors.New("retry_policy (cluster-level) is not supported by the emulator; use the route's")
	case o.GetOutlierDetection() != nil:
		return errors.New("outlier_detection is not supported by the emulator")
	case len(o.GetRequestMirrorPolicies()) > 0:
		return errors.New("request_mirror_policies is not supported by the emulator")
	case o.GetExplicitHttpConfig().GetHttp3ProtocolOptions() != nil:
		return errors.New("explicit_http_config.http3_protocol_options is not supported by the emulator")
	}
	return nil
}

// linkClusters resolves aggregate members and builds the upstream HTTP
// filter chains, once every cluster of cfg exists.
func (e *Emulator) linkClusters(cfg *config) error {
	names := make([]string, 0, len(cfg.clusters))
	for n := range cfg.clusters {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		cl := cfg.clusters[n]
		for _, m := range cl.memberNames {
			mc := cfg.clusters[m]
			switch {
			case mc == nil:
				return fmt.Errorf("cluster %q: aggregate member %q is not defined", n, m)
			case mc == cl:
				return fmt.Errorf("cluster %q: an aggregate cluster cannot contain itself", n)
			case mc.memberNames != nil:
				return fmt.Errorf("cluster %q: aggregate member %q is itself an aggregate cluster, which the emulator does not support", n, m)
			}
			cl.members = append(cl.members, mc)
		}
		if err := e.buildUpstreamFilters(cl, cfg); err != nil {
			return fmt.Errorf("cluster %q: typed_extension_protocol_options %s: %w", n, typeHTTPProtoOpt, err)
		}
	}
	return nil
}

// level is one priority level of a cluster's priority set: for an
// aggregate cluster, the linearised [C0.P0, C0.P1, C1.P0, …] of its
// members' non-empty priorities.
type level struct {
	hosts []*host
}

// levels returns the cluster's priority set, in order.
func (c *cluster) levels() []level {
	if c.members == nil {
		out := make([]level, len(c.priorities))
		for i, hs := range c.priorities {
			out[i] = level{hosts: hs}
		}
		return out
	}
	var out []level
	for _, m := range c.members {
		for _, hs := range m.priorities {
			if len(hs) > 0 {
				out = append(out, level{hosts: hs})
			}
		}
	}
	return out
}

// levelAvailability is a level's health and degraded availability, in
// percent after the overprovisioning factor (LoadBalancerBase::
// recalculatePerPriorityState).
type levelAvailability struct {
	healthy, degraded uint32
	// counts, for panic mode
	nHealthy, nDegraded, n int
}

// priorityLoad is HealthyAndDegradedLoad: the share of requests, in
// percent, each level gets for its healthy and for its degraded hosts.
type priorityLoad struct {
	healthy, degraded []uint32
}

func (c *cluster) availability(ls []level) []levelAvailability {
	out := make([]levelAvailability, len(ls))
	for i, l := range ls {
		a := levelAvailability{n: len(l.hosts)}
		for _, h := range l.hosts {
			switch h.state() {
			case hostHealthy:
				a.nHealthy++
			case hostDegraded:
				a.nDegraded++
			}
		}
		if a.n > 0 {
			op := uint64(defaultOverprovison)
			if len(l.hosts) > 0 {
				op = uint64(l.hosts[0].cluster.overprov)
			}
			a.healthy = uint32(min(100, op*uint64(a.nHealthy)/uint64(a.n)))
			a.degraded = uint32(min(100, op*uint64(a.nDegraded)/uint64(a.n)))
		}
		out[i] = a
	}
	return out
}

// distributeLoad is recalculatePriorityLoad: 100% spread over the levels
// by availability, healthy first, the rounding remainder on the first
// available level. With no availability at all, load follows host counts
// (recalculateLoadInTotalPanic).
func distributeLoad(avail []levelAvailability, normalized uint32) *priorityLoad {
	pl := &priorityLoad{healthy: make([]uint32, len(avail)), degraded: make([]uint32, len(avail))}
	if len(avail) == 0 {
		return pl
	}
	if normalized == 0 {
		total := 0
		for _, a := range avail {
			total += a.n
		}
		if total == 0 {
			pl.healthy[0] = 100
			return pl
		}
		left, first := uint32(100), -1
		for i, a := range avail {
			pl.healthy[i] = uint32(100 * a.n / total)
			left -= pl.healthy[i]
			if a.n > 0 && first < 0 {
				first = i
			}
		}
		pl.healthy[first] += left
		return pl
	}
	left := uint32(100)
	firstH, firstD := -1, -1
	for i, a := range avail {
		l := min(left, a.healthy*100/normalized)
		pl.healthy[i] = l
		left -= l
		if a.healthy > 0 && firstH < 0 {
			firstH = i
		}
	}
	for i, a := range avail {
		l := min(left, a.degraded*100/normalized)
		pl.degraded[i] = l
		left -= l
		if a.degraded > 0 && firstD < 0 {
			firstD = i
		}
	}
	if left > 0 {
		if firstH >= 0 {
			pl.healthy[firstH] += left
		} else if firstD >= 0 {
			pl.degraded[firstD] += left
		}
	}
	return pl
}

// pick is the cluster's load balancer: a priority level by the priority
// load (adjusted by the retry priority, if any), then round robin over the
// level's healthy (or degraded) hosts, or over all of them when the level
// is in panic. It returns the host and the level it came from.
func (c *cluster) pick(rs *retryState) (*host, int, bool) {
	now := time.Now()
	if c.members == nil && c.outlier != nil {
		c.outlier.tick(now)
	}
	for _, m := range c.members {
		if m.outlier != nil {
			m.outlier.tick(now)
		}
	}
	ls := c.levels()
	avail := c.availability(ls)
	var total uint32
	for _, a := range avail {
		total += a.healthy + a.degraded
	}
	load := distributeLoad(avail, min(total, 100))
	load = rs.priorityLoadForRetry(avail, load)
	n := uint32(random(100)) + 1
	var acc uint32
	lvl, degraded := -1, false
	for i, l := range load.healthy {
		if acc += l; n <= acc {
			lvl = i
			break
		}
	}
	if lvl < 0 {
		for i, l := range load.degraded {
			if acc += l; n <= acc {
				lvl, degraded = i, true
				break
			}
		}
	}
	if lvl < 0 || lvl >= len(ls) || len(ls[lvl].hosts) == 0 {
		return nil, 0, false
	}
	a := avail[lvl]
	var cand []*host
	if 100*(a.nHealthy+a.nDegraded) < panicThreshold*a.n {
		cand = ls[lvl].hosts // panic: every host
	} else {
		want := hostHealthy
		if degraded {
			want = hostDegraded
		}
		for _, h := range ls[lvl].hosts {
			if h.state() == want {
				cand = append(cand, h)
			}
		}
	}
	if len(cand) == 0 {
		return nil, 0, false
	}
	c.mu.Lock()
	i := c.rr[lvl]
	c.rr[lvl] = i + 1
	c.mu.Unlock()
	return cand[int(i)%len(cand)], lvl, true
}

// firstEndpoint returns the first host's address (gRPC services dial it).
func (c *cluster) firstEndpoint() (string, bool) {
	for _, hs := range c.priorities {
		if len(hs) > 0 {
			return hs[0].addr, true
		}
	}
	return "", false
}

// allHosts counts the cluster's hosts.
func (c *cluster) allHosts() int {
	n := 0
	for _, hs := range c.priorities {
		n += len(hs)
	}
	return n
}

func (c *cluster) close() {
	if c.client == nil {
		return
	}
	if tr, ok := c.client.Transport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
}

type hostState int

const (
	hostHealthy hostState = iota
	hostDegraded
	hostUnhealthy
)

// state is the host's health: EDS health_status, then outlier ejection.
func (h *host) state() hostState {
	if h.od != nil && h.od.isEjected() {
		return hostUnhealthy
	}
	if h.hc != nil && h.hc.failed.Load() {
		return hostUnhealthy
	}
	switch h.health {
	case corev3.HealthStatus_UNKNOWN, corev3.HealthStatus_HEALTHY:
		return hostHealthy
	case corev3.HealthStatus_DEGRADED:
		return hostDegraded
	}
	return hostUnhealthy
}

// random returns a uniformly random integer in [0, n).
func random(n uint64) uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) % n
}
