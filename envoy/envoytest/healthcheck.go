package envoytest

// Active gRPC health checking of a cluster's hosts, as Envoy does it:
// source/extensions/health_checkers/common/health_checker_base_impl.cc
// (HealthCheckerImplBase: intervals, thresholds, the host's
// FAILED_ACTIVE_HC flag) and source/extensions/health_checkers/grpc/
// health_checker_impl.cc (GrpcHealthCheckerImpl: the grpc.health.v1.Health
// Check call and how its answer is judged); the cluster's start-up wait
// for the first check of every host is ClusterImplBase::onPreInitComplete
// (source/common/upstream/upstream_impl.cc).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
)

// healthCheck is one HealthCheck of a cluster: the fields Envoy reads
// (HealthCheckerImplBase's constructor, with its defaults) for a
// grpc_health_check.
type healthCheck struct {
	timeout, interval                  time.Duration
	noTraffic, noTrafficHealthy        time.Duration
	unhealthyInterval, unhealthyEdge   time.Duration
	healthyEdge                        time.Duration
	initialJitter, intervalJitter      time.Duration
	jitterPercent                      uint32
	unhealthyThreshold, healthyThreshd uint32
	reuseConnection                    bool
	service                            *string // service_name; nil: the field is absent
	authority                          string
}

// newHealthCheck reads a cluster's health_checks, refusing what the
// emulator does not implement: any checker but grpc_health_check, more
// than one check, and the fields that change the check's connection or
// report it elsewhere.
func newHealthCheck(hcs []*corev3.HealthCheck) (*healthCheck, error) {
	if len(hcs) == 0 {
		return nil, nil
	}
	if len(hcs) > 1 {
		return nil, errors.New("health_checks: the emulator runs one health check per cluster")
	}
	c := hcs[0]
	g := c.GetGrpcHealthCheck()
	switch {
	case g == nil:
		return nil, errors.New("health_checks: only grpc_health_check is supported by the emulator")
	case len(g.GetInitialMetadata()) > 0:
		return nil, errors.New("health_checks.grpc_health_check.initial_metadata is not supported by the emulator")
	case c.GetTlsOptions() != nil || c.GetTransportSocketMatchCriteria() != nil:
		return nil, errors.New("health_checks: tls_options and transport_socket_match_criteria are not supported by the emulator")
	case c.GetEventLogPath() != "" || len(c.GetEventLogger()) > 0: //nolint:staticcheck // still accepted by Envoy
		return nil, errors.New("health_checks: event logs are not supported by the emulator")
	case c.GetHealthyThreshold() == nil || c.GetUnhealthyThreshold() == nil:
		// PROTOBUF_GET_WRAPPED_REQUIRED (and the proto's validation).
		return nil, errors.New("health_checks: healthy_threshold and unhealthy_threshold are required")
	case c.GetTimeout().AsDuration() <= 0 || c.GetInterval().AsDuration() <= 0:
		// PGV: timeout and interval are required and greater than 0.
		return nil, errors.New("health_checks: timeout and interval are required and must be positive")
	}
	h := &healthCheck{
		timeout:            c.GetTimeout().AsDuration(),
		interval:           c.GetInterval().AsDuration(),
		noTraffic:          durationOr(c.GetNoTrafficInterval(), 60*time.Second),
		initialJitter:      durationOr(c.GetInitialJitter(), 0),
		intervalJitter:     durationOr(c.GetIntervalJitter(), 0),
		jitterPercent:      c.GetIntervalJitterPercent(),
		unhealthyThreshold: c.GetUnhealthyThreshold().GetValue(),
		healthyThreshd:     c.GetHealthyThreshold().GetValue(),
		reuseConnection:    c.GetReuseConnection() == nil || c.GetReuseConnection().GetValue(),
		authority:          g.GetAuthority(),
	}
	h.noTrafficHealthy = durationOr(c.GetNoTrafficHealthyInterval(), h.noTraffic)
	h.unhealthyInterval = durationOr(c.GetUnhealthyInterval(), h.interval)
	h.unhealthyEdge = durationOr(c.GetUnhealthyEdgeInterval(), h.unhealthyInterval)
	h.healthyEdge = durationOr(c.GetHealthyEdgeInterval(), h.interval)
	if s := g.GetServiceName(); s != "" {
		h.service = &s
	}
	return h, nil
}

// hcFailure is envoy.data.core.v3.HealthCheckFailureType.
type hcFailure int

const (
	hcActive         hcFailure = iota // the server answered, and not SERVING
	hcNetwork                         // no connection, or the stream was reset
	hcNetworkTimeout                  // no answer within the timeout
)

func (f hcFailure) String() string {
	return [...]string{"ACTIVE", "NETWORK", "NETWORK_TIMEOUT"}[f]
}

// hostHC is a host's active health: its FAILED_ACTIVE_HC flag, which the
// load balancer reads, and the session's counters.
type hostHC struct {
	addr, hostname string
	failed         atomic.Bool
	checked        chan struct{} // closed after the first check
	checkedOnce    sync.Once

	// The session's own state (ActiveHealthCheckSession), touched only by
	// its goroutine.
	numHealthy, numUnhealthy uint32
	firstCheck               bool
}

// clusterHC is one cluster's health checker. The emulator keeps it across
// configurations for as long as the cluster's definition is unchanged, as
// Envoy keeps a cluster a CDS update leaves the same
// (ClusterManagerImpl::addOrUpdateCluster), with its hosts' health.
type clusterHC struct {
	key     string
	name    string
	cfg     *healthCheck
	hosts   map[string]*hostHC
	client  *http.Client
	tr      *http.Transport
	log     *slog.Logger
	traffic atomic.Bool // the cluster has had upstream traffic
	stop    chan struct{}
	wg      sync.WaitGroup
	stopped sync.Once
}

// healthRegistry holds the running health checkers by cluster definition.
type healthRegistry struct {
	mu       sync.Mutex
	checkers map[string]*clusterHC
}

// clusterKey identifies a cluster's definition: its name and the hash of
// its deterministic encoding.
func clusterKey(c *clusterv3.Cluster) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		return c.GetName() + "\x00" + fmt.Sprint(time.Now().UnixNano()) // never shared
	}
	sum := sha256.Sum256(b)
	return c.GetName() + "\x00" + string(sum[:])
}

// healthFor returns the running checker of cluster c's definition,
// starting one — and its hosts' sessions — if none runs. fresh reports a
// new one, whose first checks the configuration must wait for.
func (e *Emulator) healthFor(c *clusterv3.Cluster, cl *cluster, cfg *healthCheck) (chc *clusterHC, fresh bool) {
	r := &e.health
	key := clusterKey(c)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.checkers == nil {
		r.checkers = map[string]*clusterHC{}
	}
	if chc := r.checkers[key]; chc != nil {
		return chc, false
	}
	tr := cl.newTransport(true)
	chc = &clusterHC{key: key, name: cl.name, cfg: cfg, hosts: map[string]*hostHC{}, tr: tr,
		client: &http.Client{Transport: tr}, log: e.log.With("cluster", cl.name), stop: make(chan struct{})}
	for _, hs := range cl.priorities {
		for _, h := range hs {
			if chc.hosts[h.addr] != nil {
				continue
			}
			// A host starts out failed (FAILED_ACTIVE_HC), as Envoy marks
			// the hosts of a cluster with a health checker until their
			// first check.
			hh := &hostHC{addr: h.addr, hostname: h.hostname, checked: make(chan struct{}), firstCheck: true}
			hh.failed.Store(true)
			chc.hosts[h.addr] = hh
		}
	}
	for _, hh := range chc.hosts {
		chc.wg.Add(1)
		go chc.session(hh)
	}
	r.checkers[key] = chc
	return chc, true
}

// retain stops every checker that cfg does not use (nil: all of them).
func (r *healthRegistry) retain(cfg *config) {
	keep := map[string]bool{}
	if cfg != nil {
		for _, cl := range cfg.clusters {
			if cl.hc != nil {
				keep[cl.hc.key] = true
			}
		}
	}
	r.mu.Lock()
	var stop []*clusterHC
	for k, c := range r.checkers {
		if !keep[k] {
			stop = append(stop, c)
			delete(r.checkers, k)
		}
	}
	r.mu.Unlock()
	for _, c := range stop {
		c.close()
	}
}

func (c *clusterHC) close() {
	c.stopped.Do(func() { close(c.stop) })
	c.wg.Wait()
	c.tr.CloseIdleConnections()
}

// waitFirst waits until every host has had its first check: a cluster
// with a health checker finishes initializing only then
// (ClusterImplBase::onPreInitComplete, pending_initialize_health_checks_).
func (c *clusterHC) waitFirst(ctx context.Context) error {
	for _, h := range c.hosts {
		select {
		case <-h.checked:
		case <-c.stop:
			return fmt.Errorf("cluster %q: health checking stopped", c.name)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// session is ActiveHealthCheckSession: a check on the initial interval
// (initial_jitter), then one each interval after the previous result.
func (c *clusterHC) session(h *hostHC) {
	defer c.wg.Done()
	if c.cfg.initialJitter > 0 && !c.sleep(c.withJitter(0, c.cfg.initialJitter)) {
		return
	}
	for {
		ok, failure, detail := c.check(h)
		var next time.Duration
		if ok {
			next = c.handleSuccess(h)
		} else {
			next = c.handleFailure(h, failure, detail)
		}
		h.checkedOnce.Do(func() { close(h.checked) })
		if !c.sleep(next) {
			return
		}
	}
}

func (c *clusterHC) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.stop:
		return false
	}
}

// handleSuccess: a failed host becomes healthy on its first check, or
// after healthy_threshold successes in a row.
func (c *clusterHC) handleSuccess(h *hostHC) time.Duration {
	h.numUnhealthy = 0
	pending := false
	if h.failed.Load() {
		h.numHealthy++
		if h.firstCheck || h.numHealthy == c.cfg.healthyThreshd {
			h.failed.Store(false)
			c.log.Debug("health check: host healthy", "host", h.addr)
		} else {
			pending = true
		}
	}
	h.firstCheck = false
	return c.nextInterval(true, pending)
}

// handleFailure is setUnhealthy: an answer that is not SERVING fails a
// healthy host at once (a gRPC check's failures are never retriable); a
// network failure or timeout only after unhealthy_threshold in a row.
func (c *clusterHC) handleFailure(h *hostHC, f hcFailure, detail string) time.Duration {
	h.numHealthy = 0
	pending := false
	if !h.failed.Load() {
		h.numUnhealthy++
		if f == hcActive || h.numUnhealthy == c.cfg.unhealthyThreshold {
			h.failed.Store(true)
			c.log.Info("health check: host unhealthy", "host", h.addr, "failure", f.String(), "detail", detail)
		} else {
			pending = true
		}
	}
	h.firstCheck = false
	return c.nextInterval(false, pending)
}

// nextInterval is HealthCheckerImplBase::interval: the edge intervals
// while a change is pending, the no-traffic intervals until the cluster
// has carried traffic, then jitter.
func (c *clusterHC) nextInterval(healthy, pending bool) time.Duration {
	var base time.Duration
	switch {
	case !c.traffic.Load():
		base = c.cfg.noTraffic
		if healthy && !pending {
			base = c.cfg.noTrafficHealthy
		}
	case !healthy && pending:
		base = c.cfg.unhealthyEdge
	case !healthy:
		base = c.cfg.unhealthyInterval
	case pending:
		base = c.cfg.healthyEdge
	default:
		base = c.cfg.interval
	}
	return c.withJitter(base, c.cfg.intervalJitter)
}

// withJitter is intervalWithJitter (at least 1 ms, no runtime bounds).
func (c *clusterHC) withJitter(base, jitter time.Duration) time.Duration {
	ms := uint64(base.Milliseconds())
	if mod := uint64(c.cfg.jitterPercent) * ms / 100; mod > 0 {
		ms += random(mod)
	}
	if j := uint64(jitter.Milliseconds()); j > 0 {
		ms += random(j)
	}
	return time.Duration(max(ms, 1)) * time.Millisecond
}

// check runs one grpc.health.v1.Health/Check on the host's health-check
// connection (its own, not the traffic pool's: createHealthCheckConnection)
// and judges the answer as GrpcActiveHealthCheckSession does: success only
// for grpc-status 0 with a SERVING response; a failed connection or a
// reset stream is a NETWORK failure, no answer within the timeout a
// NETWORK_TIMEOUT, any other answer an ACTIVE one.
func (c *clusterHC) check(h *hostHC) (ok bool, f hcFailure, detail string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.timeout)
	defer cancel()
	go func() {
		select {
		case <-c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	defer func() {
		if !c.cfg.reuseConnection {
			c.tr.CloseIdleConnections()
		}
	}()
	req := &healthpb.HealthCheckRequest{}
	if c.cfg.service != nil {
		req.Service = *c.cfg.service
	}
	msg, _ := proto.Marshal(req)
	body := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:5], uint32(len(msg)))
	copy(body[5:], msg)
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+h.addr+"/grpc.health.v1.Health/Check", bytes.NewReader(body))
	if err != nil {
		return false, hcNetwork, err.Error()
	}
	// :authority is the health check's authority, else the host's
	// hostname, else the cluster's name (HealthCheckerFactory::getHostname).
	r.Host = or(c.cfg.authority, or(h.hostname, c.name))
	r.Header.Set("content-type", "application/grpc")
	r.Header.Set("te", "trailers")
	r.Header.Set("user-agent", "Envoy/HC")
	r.Header.Set("grpc-timeout", strconv.FormatInt(c.cfg.timeout.Milliseconds(), 10)+"m")
	resp, err := c.client.Do(r)
	if err != nil {
		return false, c.networkFailure(ctx), err.Error()
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return false, c.networkFailure(ctx), err.Error()
	}
	headersOnly := len(data) == 0 && len(resp.Trailer) == 0
	if resp.StatusCode != http.StatusOK {
		// decodeHeaders: a grpc-status on a headers-only answer wins, else
		// the HTTP status's gRPC mapping; a failure either way.
		if s := resp.Header.Get("grpc-status"); headersOnly && s != "" {
			return false, hcActive, "grpc-status " + s
		}
		return false, hcActive, fmt.Sprintf("non-200 HTTP response %d", resp.StatusCode)
	}
	if !strings.HasPrefix(resp.Header.Get("content-type"), "application/grpc") {
		return false, hcActive, "not a gRPC request"
	}
	if headersOnly {
		// A trailers-only answer: grpc-go's way of saying the service is
		// unknown (Unimplemented, NotFound).
		if s := resp.Header.Get("grpc-status"); s != "" {
			return false, hcActive, "grpc-status " + s
		}
		return false, hcActive, "gRPC protocol violation: unexpected stream end"
	}
	var hr *healthpb.HealthCheckResponse
	for len(data) > 0 {
		if len(data) < 5 {
			return false, hcActive, "gRPC wire protocol decode error"
		}
		flags, n := data[0], binary.BigEndian.Uint32(data[1:5])
		if uint64(n) > uint64(len(data)-5) {
			return false, hcActive, "gRPC wire protocol decode error"
		}
		frame := data[5 : 5+n]
		data = data[5+n:]
		if n == 0 {
			continue
		}
		if hr != nil {
			return false, hcActive, "unexpected streaming"
		}
		hr = &healthpb.HealthCheckResponse{}
		if flags != 0 || proto.Unmarshal(frame, hr) != nil {
			return false, hcActive, "invalid grpc.health.v1 RPC payload"
		}
	}
	st := resp.Trailer.Get("grpc-status")
	if st == "" {
		return false, hcActive, "invalid gRPC status"
	}
	if st != "0" {
		return false, hcActive, "grpc-status " + st + " " + resp.Trailer.Get("grpc-message")
	}
	if hr == nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return false, hcActive, "status " + hr.GetStatus().String()
	}
	return true, 0, ""
}

// networkFailure tells a timeout from a connection failure or reset.
func (c *clusterHC) networkFailure(ctx context.Context) hcFailure {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return hcNetworkTimeout
	}
	return hcNetwork
}

// newTransport is the HTTP transport to the cluster's hosts: HTTP/1.1, or
// HTTP/2 with prior knowledge (h2 forces it: gRPC health checks always
// speak HTTP/2), over the cluster's TLS when it has one.
func (c *cluster) newTransport(h2 bool) *http.Transport {
	dialer := &net.Dialer{Timeout: c.connectTimeout}
	tr := &http.Transport{
		DialContext:         dialer.DialContext,
		MaxIdleConnsPerHost: 64,
		DisableCompression:  true, // bytes pass through exactly as the upstream sent them
	}
	if c.tls != nil {
		// The dialer hands the transport a TLS connection it treats as
		// plain: HTTP/1.1, or HTTP/2 with prior knowledge, as configured.
		tr.DialContext = c.tls.dial(dialer, c.connectTimeout)
	}
	if h2 {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
	} else {
		// HTTP/1.1: one request per connection; max_connections bounds
		// them (per host here, per cluster in Envoy) and further requests
		// wait, pending, for one to free up.
		tr.MaxConnsPerHost = int(c.breakers.maxConnections)
	}
	return tr
}

// grpcToHTTP is Grpc::Utility::grpcToHttpStatus
// (source/common/grpc/status.cc), with which the router reports a gRPC
// answer's status to outlier detection.
func grpcToHTTP(c codes.Code) int {
	switch c {
	case codes.OK:
		return 200
	case codes.Canceled:
		return 499
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return 400
	case codes.DeadlineExceeded:
		return 504
	case codes.NotFound:
		return 404
	case codes.AlreadyExists, codes.Aborted:
		return 409
	case codes.PermissionDenied:
		return 403
	case codes.ResourceExhausted:
		return 429
	case codes.Unimplemented:
		return 501
	case codes.Unavailable:
		return 503
	case codes.Unauthenticated:
		return 401
	}
	return 500
}
