package envoytest

// The emulator as an xDS client: a bootstrap with dynamic_resources makes
// it subscribe to its configuration over one state-of-the-world ADS stream,
// as Envoy's GrpcMuxImpl does (source/extensions/config_subscription/grpc/
// grpc_mux_impl.cc). This file holds the bootstrap side and the public
// API; ads_stream.go the protocol, ads_resources.go what is done with the
// resources. README.md ("xDS") lists what is and is not emulated.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// XDSVersions are version_info values, one per resource type.
type XDSVersions struct {
	Clusters  string // CDS
	Endpoints string // EDS
	Listeners string // LDS
	Routes    string // RDS
}

// XDSStatus reports an emulator's ADS subscription. The zero value is the
// state before any response (and always, for a static bootstrap).
type XDSStatus struct {
	// Accepted holds, per type, the version_info of the last response the
	// emulator ACKed: what its requests carry as version_info.
	Accepted XDSVersions
	// Active is what Accepted was when the configuration in force was last
	// assembled and found current: a configuration that is still warming
	// (a listener waiting for its route configuration, a route waiting for
	// its cluster, a cluster waiting for its endpoints) leaves it behind
	// Accepted. While a new listener warms, the listener in force still
	// takes route and cluster updates; Active.Listeners then stays at the
	// version that listener came from. Empty until a configuration is in
	// force.
	Active XDSVersions
	// Rejected counts the NACKs sent; LastRejection is the error_detail
	// message of the last one.
	Rejected      int
	LastRejection string
}

// Run subscribes to the configuration over ADS, when the bootstrap has
// dynamic_resources, and blocks until ctx ends; it returns nil then. A
// broken stream is re-opened with Envoy's jittered exponential backoff
// (0.5 s doubling to 30 s), re-sending every subscription with the versions
// last accepted. For a static bootstrap there is nothing to subscribe to:
// Run just waits for ctx. Only one Run may be active at a time.
//
// Configurations that arrive while Serve runs are put in force atomically:
// streams already started keep the configuration they started with.
func (e *Emulator) Run(ctx context.Context) error {
	if e.xds == nil {
		<-ctx.Done()
		return nil
	}
	return e.xds.run(ctx)
}

// XDSStatus returns the state of the ADS subscription.
func (e *Emulator) XDSStatus() XDSStatus {
	if e.xds == nil {
		return XDSStatus{}
	}
	e.xds.mu.Lock()
	defer e.xds.mu.Unlock()
	return e.xds.status
}

// WaitXDS blocks until cond holds for the ADS status, or ctx ends; it
// returns the status that satisfied cond, or the last one and ctx's error.
// cond is called with no lock held, on every change.
func (e *Emulator) WaitXDS(ctx context.Context, cond func(XDSStatus) bool) (XDSStatus, error) {
	if e.xds == nil {
		if s := (XDSStatus{}); cond(s) {
			return s, nil
		}
		<-ctx.Done()
		return XDSStatus{}, ctx.Err()
	}
	for {
		e.xds.mu.Lock()
		s, changed := e.xds.status, e.xds.changed
		e.xds.mu.Unlock()
		if cond(s) {
			return s, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return s, ctx.Err()
		}
	}
}

// waitConfig blocks until a configuration is in force (at once for a
// static bootstrap) or ctx ends.
func (e *Emulator) waitConfig(ctx context.Context) error {
	if e.xds == nil {
		return nil
	}
	select {
	case <-e.xds.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for a configuration over ADS: %w", ctx.Err())
	}
}

// useConfig returns the configuration in force for a new stream and the
// func to call when the stream is over: a configuration that xDS replaced
// closes its upstream connections once its last stream ends.
func (e *Emulator) useConfig() (*config, func()) {
	if e.xds == nil {
		return e.cfg.Load(), noop
	}
	return e.xds.refs.acquire(&e.cfg)
}

func noop() {}

// Envoy's defaults: initial_fetch_timeout of a config source, and the
// backoff of GrpcMuxImpl (SubscriptionFactory::RetryInitialDelayMs,
// RetryMaxDelayMs).
const (
	defaultInitialFetchTimeout = 15 * time.Second
	adsRetryBase               = 500 * time.Millisecond
	adsRetryMax                = 30 * time.Second
)

// adsClient is the emulator's ADS client and the state of its
// subscriptions. Fields under "owned by run" are touched only by the
// goroutine running Run; the rest are safe for concurrent use.
type adsClient struct {
	e             *Emulator
	log           *slog.Logger
	node          *corev3.Node
	nodeFirstOnly bool        // ads_config.set_node_on_first_message_only
	target        string      // the xDS server, host:port
	sec           *grpcTLS    // the xDS cluster's TLS; nil: plaintext
	md            metadata.MD // grpc_service.initial_metadata
	initTimeout   time.Duration
	static        []*clusterv3.Cluster
	staticNames   map[string]bool
	carrier       *listenerv3.Listener // see validationListener

	running atomic.Bool
	refs    configRefs

	// Owned by run.
	started      bool
	types        map[string]*xdsType
	order        []string // type URLs in the order they were subscribed
	res          *xdsResources
	inForce      *xdsInputs
	served       string // the name of the listener the emulator serves
	cdsDone      bool   // the first CDS response was handled
	cmReady      bool   // Envoy's cluster manager initialized: LDS is subscribed
	holding      bool   // CDS paused while clusters warm
	initDeadline time.Time
	holdDeadline time.Time
	stream       adsStream // nil between streams
	nodeSent     bool

	mu      sync.Mutex
	status  XDSStatus
	changed chan struct{} // closed and replaced on every status change
	ready   chan struct{} // closed when the first configuration is in force
}

// newADSClient checks a bootstrap's dynamic_resources and node, and builds
// the static clusters once to check them too. It dials nothing.
func (e *Emulator) newADSClient(b *bootstrapv3.Bootstrap) (*adsClient, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	n := b.GetNode()
	if n.GetId() == "" || n.GetCluster() == "" {
		bad("node: id and cluster are required with ADS (Envoy exits: \"ads: node 'id' and 'cluster' are required\")")
	}
	dr := b.GetDynamicResources()
	ads := dr.GetAdsConfig()
	xdsCluster := ""
	if ads == nil {
		bad("dynamic_resources.ads_config: required: the emulator takes its configuration over ADS only")
	} else {
		if ads.GetApiType() != corev3.ApiConfigSource_GRPC {
			bad("dynamic_resources.ads_config.api_type: %s is not supported by the emulator (GRPC: state-of-the-world ADS)", ads.GetApiType())
		}
		if ads.GetTransportApiVersion() != corev3.ApiVersion_V3 {
			bad("dynamic_resources.ads_config.transport_api_version: must be V3 (Envoy refuses AUTO and V2)")
		}
		switch svcs := ads.GetGrpcServices(); {
		case len(svcs) != 1:
			bad("dynamic_resources.ads_config.grpc_services: want exactly one, got %d", len(svcs))
		case svcs[0].GetEnvoyGrpc() == nil:
			bad("dynamic_resources.ads_config.grpc_services[0]: only envoy_grpc, naming a static cluster, is supported by the emulator")
		default:
			xdsCluster = svcs[0].GetEnvoyGrpc().GetClusterName()
		}
	}
	for _, cs := range []struct {
		field string
		src   *corev3.ConfigSource
	}{{"lds_config", dr.GetLdsConfig()}, {"cds_config", dr.GetCdsConfig()}} {
		switch {
		case cs.src == nil:
			bad("dynamic_resources.%s: required (ads: {})", cs.field)
		case cs.src.GetAds() == nil:
			bad("dynamic_resources.%s: only ads: {} is supported by the emulator", cs.field)
		case cs.src.GetResourceApiVersion() == corev3.ApiVersion_V2:
			bad("dynamic_resources.%s.resource_api_version: V2 is not supported", cs.field)
		}
	}
	if dr.GetLdsResourcesLocator() != "" || dr.GetCdsResourcesLocator() != "" {
		bad("dynamic_resources: xdstp resource locators are not supported by the emulator")
	}
	if len(b.GetStaticResources().GetListeners()) > 0 {
		bad("static_resources.listeners: with dynamic_resources the emulator serves the listener LDS gives; static listeners are not supported")
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	c := &adsClient{
		e:             e,
		log:           e.log.With("xds", "ads"),
		nodeFirstOnly: ads.GetSetNodeOnFirstMessageOnly(),
		initTimeout:   durationOr(dr.GetCdsConfig().GetInitialFetchTimeout(), defaultInitialFetchTimeout),
		static:        b.GetStaticResources().GetClusters(),
		staticNames:   map[string]bool{},
		types:         map[string]*xdsType{},
		res:           newXDSResources(),
		changed:       make(chan struct{}),
		ready:         make(chan struct{}),
		refs:          configRefs{n: map[*config]int{}, retired: map[*config]bool{}},
	}
	for _, cl := range c.static {
		c.staticNames[cl.GetName()] = true
	}
	// Build the static clusters once, as Envoy does at start-up, to refuse
	// what the emulator cannot use and to find the xDS server.
	carrier, err := validationListener()
	if err != nil {
		return nil, err
	}
	c.carrier = carrier
	cfg, err := e.build(carrier, nil, c.static, nil)
	if err != nil {
		return nil, fmt.Errorf("static_resources: %w", err)
	}
	defer closeClusters(cfg)
	xc := cfg.clusters[xdsCluster]
	switch {
	case xc == nil:
		return nil, fmt.Errorf("dynamic_resources.ads_config: envoy_grpc.cluster_name %q: no such static cluster", xdsCluster)
	case !xc.http2:
		return nil, fmt.Errorf("dynamic_resources.ads_config: cluster %q must enable HTTP/2 (typed_extension_protocol_options %s explicit_http_config.http2_protocol_options)", xdsCluster, typeHTTPProtoOpt)
	}
	ep, ok := xc.firstEndpoint()
	if !ok {
		return nil, fmt.Errorf("dynamic_resources.ads_config: cluster %q has no endpoints", xdsCluster)
	}
	c.target = ep
	if xc.tls != nil {
		// ADS goes through the cluster's transport socket, as every
		// envoy_grpc service does (grpcconn.go). The cluster is static:
		// its files were read now, once, as Envoy reads them at start-up.
		c.sec = &grpcTLS{u: xc.tls, connectTimeout: xc.connectTimeout}
	}
	for _, h := range ads.GetGrpcServices()[0].GetInitialMetadata() {
		c.md = metadata.Join(c.md, metadata.Pairs(h.GetKey(), h.GetValue()))
	}
	// What Envoy puts in the node it sends (source/server/server.cc, as it
	// initializes): the bootstrap's node, with user_agent_name "envoy"
	// unless the bootstrap names one, and user_agent_build_version — the
	// emulated release's (Options.EnvoyVersion) unless the bootstrap
	// sets one with a version. A bootstrap's user_agent_version string is
	// replaced: it is the other half of the same oneof.
	c.node = proto.Clone(n).(*corev3.Node)
	if c.node.GetUserAgentName() == "" {
		c.node.UserAgentName = "envoy"
	}
	if c.node.GetUserAgentBuildVersion().GetVersion() == nil {
		c.node.UserAgentVersionType = &corev3.Node_UserAgentBuildVersion{UserAgentBuildVersion: e.version.buildVersion()}
	}
	return c, nil
}

// validationListener is a listener with an empty route table and only the
// router: build() with it checks clusters on their own.
func validationListener() (*listenerv3.Listener, error) {
	router, err := anypb.New(&routerv3.Router{})
	if err != nil {
		return nil, err
	}
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		StatPrefix:     "envoytest_validate",
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{Name: "envoytest_validate"}},
		HttpFilters:    []*hcmv3.HttpFilter{{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}}},
	})
	if err != nil {
		return nil, err
	}
	return &listenerv3.Listener{
		Name: "envoytest_validate",
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{},
		}}},
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm},
		}}}},
	}, nil
}

// publish applies fn to the status and wakes WaitXDS callers.
func (c *adsClient) publish(fn func(*XDSStatus)) {
	c.mu.Lock()
	fn(&c.status)
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// configRefs counts the streams using each configuration, so that one
// replaced over xDS closes its upstream connections when its last stream
// ends (streams keep the configuration they started with).
type configRefs struct {
	mu      sync.Mutex
	n       map[*config]int
	retired map[*config]bool
}

func (r *configRefs) acquire(p *atomic.Pointer[config]) (*config, func()) {
	r.mu.Lock()
	cfg := p.Load()
	r.n[cfg]++
	r.mu.Unlock()
	return cfg, func() { r.release(cfg) }
}

func (r *configRefs) release(cfg *config) {
	r.mu.Lock()
	r.n[cfg]--
	done := r.n[cfg] == 0 && r.retired[cfg]
	if r.n[cfg] == 0 {
		delete(r.n, cfg)
		delete(r.retired, cfg)
	}
	r.mu.Unlock()
	if done {
		closeClusters(cfg)
	}
}

// swap puts cfg in force and retires the configuration it replaces,
// which it returns.
func (r *configRefs) swap(p *atomic.Pointer[config], cfg *config) *config {
	r.mu.Lock()
	old := p.Swap(cfg)
	idle := old != nil && r.n[old] == 0
	if old != nil && !idle {
		r.retired[old] = true
	}
	r.mu.Unlock()
	if idle {
		closeClusters(old)
	}
	return old
}

// closeClusters closes the idle upstream connections of a configuration.
func closeClusters(cfg *config) {
	if cfg == nil {
		return
	}
	for _, cl := range cfg.clusters {
		cl.close()
	}
}
