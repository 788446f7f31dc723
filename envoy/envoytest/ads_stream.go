package envoytest

// The ADS protocol as Envoy's GrpcMuxImpl speaks it
// (source/extensions/config_subscription/grpc/grpc_mux_impl.cc): one
// request state per type URL holding the subscribed names, the version
// last accepted and the nonce last received; an ACK or NACK is that state
// sent again; a paused type queues its request until it is resumed.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// Type URLs of the resources the emulator subscribes to.
const (
	typeURLCluster  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	typeURLEndpoint = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	typeURLListener = "type.googleapis.com/envoy.config.listener.v3.Listener"
	typeURLRoute    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	typeURLResource = "type.googleapis.com/envoy.service.discovery.v3.Resource"
)

// nackCode is the error_detail code of a NACK. Envoy sets INTERNAL
// (GrpcMuxImpl::onDiscoveryResponse: WellKnownGrpcStatus::Internal) for
// every rejected update, whatever the reason.
const nackCode = codes.Internal

// xdsType is Envoy's per-type ApiState: the request that is sent again as
// ACK, NACK or subscription change.
type xdsType struct {
	url        string
	subscribed bool
	wildcard   bool     // LDS and CDS: no resource names
	names      []string // RDS and EDS: the subscribed names, sorted
	version    string   // version_info of the last accepted response
	nonce      string   // nonce of the last response on this stream
	errDetail  *statuspb.Status
	paused     int  // pauses in force (Envoy's pause()): requests wait
	pending    bool // a request is due when the type resumes
}

func (t *xdsType) has(name string) bool {
	_, ok := slices.BinarySearch(t.names, name)
	return ok
}

// adsStream is the part of the gRPC stream the client sends on.
type adsStream interface {
	Send(*discoveryv3.DiscoveryRequest) error
}

func (c *adsClient) run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("envoytest: Run is already running")
	}
	defer c.running.Store(false)
	// A connection that fails — the server down, or the TLS handshake
	// refused either way — fails the stream, which is retried with the
	// backoff below, as GrpcMuxImpl retries it.
	conn, err := grpc.NewClient(c.target, c.sec.dialOption())
	if err != nil {
		return fmt.Errorf("ads: dial %s: %w", c.target, err)
	}
	defer conn.Close()
	client := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	if !c.started {
		c.started = true
		// The cluster manager subscribes to CDS first; LDS follows once
		// every cluster is initialized (RunHelper: cm.setInitializedCb).
		if c.initTimeout > 0 {
			c.initDeadline = time.Now().Add(c.initTimeout)
		}
		c.subscribe(typeURLCluster, nil)
	}
	c.log.Info("subscribing over ADS", "server", c.target, "node", c.node.GetId())
	bo := backoff{next: adsRetryBase}
	for {
		received, err := c.runStream(ctx, client)
		if ctx.Err() != nil {
			return nil
		}
		if received {
			bo = backoff{next: adsRetryBase}
		}
		d := bo.delay()
		c.log.Warn("ADS stream closed; reconnecting", "error", err, "backoff", d)
		if !c.sleep(ctx, d) {
			return nil
		}
	}
}

// runStream runs one ADS stream until it breaks or ctx ends. It reports
// whether any response arrived (which resets the backoff, as in Envoy).
func (c *adsClient) runStream(ctx context.Context, client discoveryv3.AggregatedDiscoveryServiceClient) (received bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(c.md) > 0 {
		sctx = metadata.NewOutgoingContext(sctx, c.md)
	}
	st, err := client.StreamAggregatedResources(sctx)
	if err != nil {
		return false, err
	}
	responses := make(chan *discoveryv3.DiscoveryResponse)
	recvErr := make(chan error, 1)
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		for {
			r, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case responses <- r:
			case <-sctx.Done():
				return
			}
		}
	}()
	defer func() {
		cancel()
		<-recvDone
		c.stream = nil
	}()

	// A new stream: every subscription again, in the order it was made,
	// with the version last accepted and no nonce (onStreamEstablished).
	c.stream, c.nodeSent = st, false
	for _, u := range c.order {
		t := c.types[u]
		t.nonce, t.errDetail = "", nil
		c.queue(t)
	}
	for {
		timer, stop := c.timer()
		select {
		case r := <-responses:
			stop()
			received = true
			c.handle(r)
		case err := <-recvErr:
			stop()
			return received, err
		case <-timer:
			c.onDeadline(time.Now())
		case <-ctx.Done():
			stop()
			return received, ctx.Err()
		}
	}
}

// sleep waits d between streams, still running the timers; it reports
// false if ctx ended.
func (c *adsClient) sleep(ctx context.Context, d time.Duration) bool {
	wake := time.NewTimer(d)
	defer wake.Stop()
	for {
		timer, stop := c.timer()
		select {
		case <-wake.C:
			stop()
			return true
		case <-timer:
			c.onDeadline(time.Now())
		case <-ctx.Done():
			stop()
			return false
		}
	}
}

// timer returns a channel that fires at the next deadline (nil if none)
// and the func that stops it.
func (c *adsClient) timer() (<-chan time.Time, func()) {
	var next time.Time
	for _, d := range []time.Time{c.initDeadline, c.holdDeadline} {
		if !d.IsZero() && (next.IsZero() || d.Before(next)) {
			next = d
		}
	}
	if next.IsZero() {
		return nil, noop
	}
	t := time.NewTimer(time.Until(next))
	return t.C, func() { t.Stop() }
}

// onDeadline runs the initial_fetch_timeout timers: the cluster manager
// stops waiting for CDS/EDS and LDS is subscribed; a CDS ACK held while
// clusters warm is sent.
func (c *adsClient) onDeadline(now time.Time) {
	if !c.initDeadline.IsZero() && !now.Before(c.initDeadline) {
		c.log.Warn("initial_fetch_timeout: clusters not initialized; subscribing to listeners anyway")
		c.initDeadline = time.Time{}
		c.clustersInitialized()
	}
	if !c.holdDeadline.IsZero() && !now.Before(c.holdDeadline) {
		c.log.Warn("initial_fetch_timeout: clusters still warming; sending the CDS ACK")
		c.releaseCDS()
	}
}

// subscribe starts or changes the subscription of a type; LDS and CDS
// are wildcard subscriptions (no names).
func (c *adsClient) subscribe(url string, names []string) {
	t := c.types[url]
	if t == nil {
		t = &xdsType{url: url, wildcard: url == typeURLListener || url == typeURLCluster}
		c.types[url] = t
	}
	if t.subscribed && slices.Equal(t.names, names) {
		return
	}
	if !t.subscribed {
		if !t.wildcard && len(names) == 0 {
			return
		}
		t.subscribed = true
		c.order = append(c.order, url)
	}
	t.names = names
	c.queue(t)
}

// queue sends a type's request now, or when it is resumed.
func (c *adsClient) queue(t *xdsType) {
	if t.paused > 0 {
		t.pending = true
		return
	}
	c.send(t)
}

func (c *adsClient) pause(t *xdsType) { t.paused++ }

func (c *adsClient) resume(t *xdsType) {
	t.paused--
	if t.paused == 0 && t.pending {
		c.send(t)
	}
}

// send sends a type's request on the current stream. Without a stream it
// does nothing: a new stream sends every subscription.
func (c *adsClient) send(t *xdsType) {
	t.pending = false
	if c.stream == nil {
		return
	}
	req := &discoveryv3.DiscoveryRequest{
		VersionInfo:   t.version,
		ResourceNames: t.names,
		TypeUrl:       t.url,
		ResponseNonce: t.nonce,
		ErrorDetail:   t.errDetail,
	}
	if !c.nodeFirstOnly || !c.nodeSent {
		req.Node = c.node
	}
	// A failed Send means the stream is gone; Recv reports why.
	if err := c.stream.Send(req); err != nil {
		c.log.Debug("ADS send failed", "type", t.url, "error", err)
		return
	}
	c.nodeSent = true
	t.errDetail = nil
}

// handle processes one response: accept it and ACK, or reject it and NACK
// with the version last accepted, keeping the previous configuration.
func (c *adsClient) handle(r *discoveryv3.DiscoveryResponse) {
	t := c.types[r.GetTypeUrl()]
	if t == nil || !t.subscribed {
		// GrpcMuxImpl: "Ignoring the message for type URL ... as it has no
		// current subscribers"; no ACK.
		c.log.Warn("ignoring a response for a type with no subscription", "type", r.GetTypeUrl())
		return
	}
	t.nonce = r.GetNonce()
	// While a response is processed, its type is paused: requests its
	// processing causes (EDS after CDS, RDS after LDS) go out before its
	// ACK, as in Envoy.
	c.pause(t)
	defer c.resume(t)
	if err := c.accept(t, r); err != nil {
		c.log.Warn("rejecting xDS update", "type", t.url, "version", r.GetVersionInfo(), "error", err)
		t.errDetail = &statuspb.Status{Code: int32(nackCode), Message: err.Error()}
		c.publish(func(s *XDSStatus) {
			s.Rejected++
			s.LastRejection = err.Error()
		})
		if t.url == typeURLCluster && !c.cdsDone {
			// A rejected first CDS update still ends CDS initialization.
			c.cdsDone = true
			c.maybeInitialized()
		}
		c.queue(t)
		return
	}
	c.queue(t)
}

// backoff is Envoy's JitteredExponentialBackOffStrategy: a uniformly
// random delay below an interval that doubles up to the maximum.
type backoff struct{ next time.Duration }

func (b *backoff) delay() time.Duration {
	d := b.next
	if b.next > adsRetryMax/2 {
		b.next = adsRetryMax
	} else {
		b.next *= 2
	}
	return min(time.Duration(rand.Int64N(int64(d))), adsRetryMax)
}
