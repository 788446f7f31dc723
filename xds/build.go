package xds

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	fileaccesslogv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	aggregatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/aggregate/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	previouspriov3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/policies"
)

// Names of the resources Sluice serves. Provider names match
// [a-z0-9_-]+, so none of these can collide with a provider's cluster.
const (
	// SluiceCluster is the cluster of Sluice's own gRPC service, which
	// ext_authz and ext_proc call.
	SluiceCluster = "sluice.extension"
	// RouteName is the one RouteConfiguration.
	RouteName = "sluice"
	// ListenerName is the Envoy listener.
	ListenerName = "sluice"
	// FallbackSuffix ends the name of a provider's fallback member cluster.
	FallbackSuffix = ".fallback"
)

// Flavour is the kind of xDS client a node is: Envoy, or a proxyless gRPC
// client, which needs an api_listener and no Sluice filters.
type Flavour int

// Flavours.
const (
	FlavourEnvoy Flavour = iota
	FlavourGRPC
)

func (f Flavour) String() string {
	if f == FlavourGRPC {
		return "grpc"
	}
	return "envoy"
}

// Group is what differs between node groups: where Envoy listens, which
// Sluice replicas its filters call, and the CA bundle its https provider
// clusters verify with (unless a provider names its own).
type Group struct {
	Name            string // "" for the default group
	Envoy           string // listener address, host:port
	SluiceAddresses []string
	UpstreamCAFile  string // a path on the group's Envoys
}

// Groups returns the default group followed by the configured node groups,
// with unset fields taken from the top-level configuration.
func Groups(snap *policies.Snapshot) []Group {
	x := snap.XDS()
	out := []Group{{Envoy: snap.Listen().Envoy, SluiceAddresses: x.SluiceAddresses, UpstreamCAFile: x.UpstreamCAFile}}
	for _, g := range x.NodeGroups {
		grp := Group{Name: g.Name, Envoy: g.Envoy, SluiceAddresses: g.SluiceAddresses, UpstreamCAFile: x.UpstreamCAFile}
		if g.UpstreamCAFile != nil {
			grp.UpstreamCAFile = *g.UpstreamCAFile
		}
		if grp.Envoy == "" {
			grp.Envoy = snap.Listen().Envoy
		}
		if len(grp.SluiceAddresses) == 0 {
			grp.SluiceAddresses = x.SluiceAddresses
		}
		out = append(out, grp)
	}
	return out
}

// Resources is one complete set of xDS resources, by kind.
type Resources struct {
	Clusters    []*clusterv3.Cluster
	Endpoints   []*endpointv3.ClusterLoadAssignment
	Routes      []*routev3.RouteConfiguration
	Listeners   []*listenerv3.Listener
	ListenerFor Flavour
}

// Build turns a policy snapshot into the resources for one node group and
// flavour, with every feature (BuildFor). It is a pure function of its
// arguments. Proxyless gRPC clients run neither ext_authz nor ext_proc, so
// unless xds.proxyless is routing_only they get no provider route or
// cluster (buildWithheld).
func Build(snap *policies.Snapshot, g Group, f Flavour) (*Resources, error) {
	return BuildFor(snap, g, f, AllFeatures)
}

// BuildFor is Build for an Envoy that runs only the features fs
// (FeaturesOf its release): without FeatureFallback no fallback member or
// aggregate cluster and no fallback route, and ext_proc told to send a
// fallback model to its first provider (chain.Options.NoFallback); without
// FeatureStatusOnError no status_on_error, and the local reply mappers set
// ext_proc's failure statuses (chain.PinExtProcStatus). Features mean
// nothing to a proxyless gRPC client, which never gets fallback resources.
func BuildFor(snap *policies.Snapshot, g Group, f Flavour, fs Features) (*Resources, error) {
	opts := chain.Options{Cluster: SluiceCluster, NoStatusOnError: !fs.Has(FeatureStatusOnError), NoFallback: !fs.Has(FeatureFallback)}
	b := &builder{snap: snap, group: g, flavour: f, features: fs, opts: opts}
	return b.build()
}

type builder struct {
	snap     *policies.Snapshot
	group    Group
	flavour  Flavour
	features Features
	opts     chain.Options
	out      Resources
}

// fallback reports whether model m gets its fallback cluster and route:
// it has several providers in priority order, and the node is an Envoy
// that runs fallback (proxyless gRPC clients never do: see build).
func (b *builder) fallback(m *policies.ModelRoute) bool {
	return m.Fallback() && b.flavour == FlavourEnvoy && b.features.Has(FeatureFallback)
}

func (b *builder) build() (*Resources, error) {
	b.out.ListenerFor = b.flavour
	if b.withheld() {
		return b.buildWithheld()
	}
	// Fallback needs Envoy's upstream ext_proc to rewrite each attempt:
	// proxyless gRPC clients get no fallback resources (grpc-go would
	// also refuse the aggregate's CLUSTER_PROVIDED lb_policy), nor do
	// Envoys too old to run it (b.fallback).
	fallback := b.fallback
	members := map[string]bool{} // providers that are fallback members
	for _, m := range b.snap.Models() {
		if fallback(m) {
			for _, t := range m.Targets {
				members[t.Provider.Name] = true
			}
		}
	}
	for _, p := range b.snap.Providers() {
		up, err := parseUpstream(p)
		if err != nil {
			return nil, err
		}
		b.out.Clusters = append(b.out.Clusters, b.providerCluster(p, up, p.Name, false))
		if up.eds {
			b.out.Endpoints = append(b.out.Endpoints, up.assignment(p.Name))
		}
		if members[p.Name] {
			b.out.Clusters = append(b.out.Clusters, b.providerCluster(p, up, p.Name+FallbackSuffix, true))
		}
	}
	for _, m := range b.snap.Models() {
		if fallback(m) {
			b.out.Clusters = append(b.out.Clusters, b.aggregateCluster(m))
		}
	}
	if b.flavour == FlavourEnvoy {
		c, err := b.sluiceCluster()
		if err != nil {
			return nil, err
		}
		b.out.Clusters = append(b.out.Clusters, c)
	}
	b.out.Routes = []*routev3.RouteConfiguration{b.routeConfig()}
	l, err := b.listener()
	if err != nil {
		return nil, err
	}
	b.out.Listeners = []*listenerv3.Listener{l}
	return &b.out, nil
}

// withheld reports whether the resources are for proxyless gRPC clients
// that xds.proxyless keeps from the providers.
func (b *builder) withheld() bool {
	return b.flavour == FlavourGRPC && withholdsProxyless(b.snap)
}

// withholdsProxyless reports whether p serves proxyless gRPC clients no
// provider route or cluster: xds.proxyless is anything but routing_only,
// so an unset or unknown value withholds too.
func withholdsProxyless(p *policies.Snapshot) bool {
	return p.XDS().Proxyless != policies.ProxylessRoutingOnly
}

// buildWithheld is what a withheld proxyless gRPC client is served: its
// api_listener and a route configuration whose one virtual host has no
// route; no cluster, no endpoint. grpc-go accepts a virtual host without
// routes (xdsresource.generateRDSUpdateFromRouteConfiguration) and fails
// every RPC at once with UNAVAILABLE "no matched route was found"
// (internal/xds/resolver/serviceconfig.go, configSelector.SelectConfig,
// v1.85.0). Serving nothing instead would leave each RPC waiting for the
// 15 s resource-not-found timer.
func (b *builder) buildWithheld() (*Resources, error) {
	b.out.Routes = []*routev3.RouteConfiguration{{Name: RouteName, VirtualHosts: []*routev3.VirtualHost{{Name: "sluice", Domains: []string{"*"}}}}}
	l, err := b.listener()
	if err != nil {
		return nil, err
	}
	b.out.Listeners = []*listenerv3.Listener{l}
	return &b.out, nil
}

// upstream is a provider's parsed base URL and endpoints.
type upstream struct {
	provider string // the provider's name, in every endpoint's metadata
	host     string // base_url host, for SNI, Host and endpoint hostnames
	tls      bool
	eds      bool
	addrs    []*corev3.Address
}

func parseUpstream(p *policies.Provider) (upstream, error) {
	u, err := url.Parse(p.BaseURL)
	if err != nil {
		return upstream{}, fmt.Errorf("providers %s: base_url: %w", p.Name, err)
	}
	up := upstream{provider: p.Name, host: u.Hostname(), tls: u.Scheme == "https"}
	port := u.Port()
	if port == "" {
		port = "80"
		if up.tls {
			port = "443"
		}
	}
	hostports := p.Endpoints
	if len(hostports) == 0 {
		hostports = []string{net.JoinHostPort(up.host, port)}
	}
	for _, hp := range hostports {
		a, err := socketAddress(hp)
		if err != nil {
			return upstream{}, fmt.Errorf("providers %s: %w", p.Name, err)
		}
		up.addrs = append(up.addrs, a)
	}
	// Listed endpoints, or an IP literal in base_url: EDS (which proxyless
	// gRPC clients understand, unlike STATIC). A DNS name: LOGICAL_DNS.
	up.eds = len(p.Endpoints) > 0 || net.ParseIP(up.host) != nil
	return up, nil
}

func socketAddress(hostport string) (*corev3.Address, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, fmt.Errorf("address %q: %w", hostport, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("address %q: bad port", hostport)
	}
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(n)},
	}}}, nil
}

// assignment is the ClusterLoadAssignment of a provider's cluster (EDS, or
// a LOGICAL_DNS cluster's load_assignment): one locality with weight 1
// (gRPC clients need a locality weight), each endpoint named by the base
// URL's host for auto_host_rewrite and carrying the provider's name in its
// metadata (chain.EndpointMetadataNamespace / chain.EndpointProviderKey).
// A fallback attempt's upstream filter reads it from the host it goes to
// (chain.UpstreamHostProviderAttribute): behind an aggregate cluster that
// skips members without healthy hosts, the host, not the attempt's
// number, names the provider whose credential the attempt may carry.
func (up upstream) assignment(name string) *endpointv3.ClusterLoadAssignment {
	// An empty Locality, not none: grpc-go NACKs a locality without one
	// ("EDS response contains a locality without ID").
	la := &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{}, LoadBalancingWeight: wrapperspb.UInt32(1)}
	for _, a := range up.addrs {
		la.LbEndpoints = append(la.LbEndpoints, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: a, Hostname: up.host}},
			Metadata:       providerMetadata(up.provider),
		})
	}
	return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{la}}
}

// providerMetadata is an endpoint's metadata naming its provider.
func providerMetadata(provider string) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		chain.EndpointMetadataNamespace: {Fields: map[string]*structpb.Value{chain.EndpointProviderKey: structpb.NewStringValue(provider)}},
	}}
}

func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
}

// providerCluster is the cluster for provider p under the given name. A
// fallback member has no outlier detection: the fallback itself is the
// failure handling. (An attempt's provider is read from its host's
// metadata, see assignment, so a member without healthy hosts, which the
// aggregate skips, never gets another provider's credential.)
func (b *builder) providerCluster(p *policies.Provider, up upstream, name string, member bool) *clusterv3.Cluster {
	c := &clusterv3.Cluster{
		Name:           name,
		ConnectTimeout: durationpb.New(p.ConnectTimeout),
		LbPolicy:       clusterv3.Cluster_ROUND_ROBIN,
	}
	if up.eds {
		c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}
		c.EdsClusterConfig = &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource(), ServiceName: p.Name}
	} else {
		c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_LOGICAL_DNS}
		c.DnsLookupFamily = clusterv3.Cluster_V4_PREFERRED
		c.LoadAssignment = up.assignment(name)
	}
	opts := &upstreamhttpv3.HttpProtocolOptions{}
	if p.HTTP2 {
		opts.UpstreamProtocolOptions = &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
		}}
	} else {
		opts.UpstreamProtocolOptions = &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &corev3.Http1ProtocolOptions{}},
		}}
	}
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpProtocolOptionsName: mustAny(opts)}
	if up.tls {
		c.TransportSocket = b.transportSocket(p, up.host)
	}
	cb := p.CircuitBreaker
	if cb != (policies.CircuitBreaker{}) {
		th := &clusterv3.CircuitBreakers_Thresholds{}
		if cb.MaxConnections > 0 {
			th.MaxConnections = wrapperspb.UInt32(clampU32(cb.MaxConnections))
		}
		if cb.MaxPendingRequests > 0 {
			th.MaxPendingRequests = wrapperspb.UInt32(clampU32(cb.MaxPendingRequests))
		}
		if cb.MaxRequests > 0 {
			th.MaxRequests = wrapperspb.UInt32(clampU32(cb.MaxRequests))
		}
		c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{th}}
	}
	if od := p.OutlierDetection; od.Consecutive5xx > 0 && !member {
		c.OutlierDetection = &clusterv3.OutlierDetection{
			Consecutive_5Xx:  wrapperspb.UInt32(clampU32(od.Consecutive5xx)),
			BaseEjectionTime: durationpb.New(od.BaseEjectionTime),
		}
	}
	return c
}

const httpProtocolOptionsName = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

func clampU32(n int64) uint32 {
	if n > 1<<32-1 {
		return 1<<32 - 1
	}
	return uint32(n)
}

// aggregateCluster is a fallback model's cluster: its members' fallback
// clusters as priorities, in order. It carries the upstream filter chain
// (chain.UpstreamHTTPFilters): Envoy builds an attempt's upstream filters
// from the route's cluster, never from the member the host belongs to
// (envoyproxy/envoy#29318).
func (b *builder) aggregateCluster(m *policies.ModelRoute) *clusterv3.Cluster {
	cfg := &aggregatev3.ClusterConfig{}
	var connect time.Duration
	for _, t := range m.Targets {
		cfg.Clusters = append(cfg.Clusters, t.Provider.Name+FallbackSuffix)
		connect = max(connect, t.Provider.ConnectTimeout)
	}
	// The protocol Envoy speaks is each member's; the aggregate's own
	// options hold the filters (and the protocol field the API requires).
	opts := &upstreamhttpv3.HttpProtocolOptions{
		HttpFilters: chain.UpstreamHTTPFilters(b.opts),
		UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &corev3.Http1ProtocolOptions{}},
		}},
	}
	return &clusterv3.Cluster{
		Name:                          policies.FallbackClusterPrefix + m.Name,
		ConnectTimeout:                durationpb.New(connect),
		LbPolicy:                      clusterv3.Cluster_CLUSTER_PROVIDED,
		TypedExtensionProtocolOptions: map[string]*anypb.Any{httpProtocolOptionsName: mustAny(opts)},
		ClusterDiscoveryType: &clusterv3.Cluster_ClusterType{ClusterType: &clusterv3.Cluster_CustomClusterType{
			Name: "envoy.clusters.aggregate", TypedConfig: mustAny(cfg),
		}},
	}
}

// routeConfig routes on the routing header: one route per provider, one
// per fallback model, and a catch-all that answers with a clear error.
func (b *builder) routeConfig() *routev3.RouteConfiguration {
	// No include_request_attempt_count: Envoy has it on the virtual host
	// only (route_components.proto; the router copies it to every route
	// entry, RouteEntryImplBase::includeAttemptCountInRequest), so it would
	// number every provider's requests, and a plain provider's retries
	// would carry x-envoy-attempt-count (the router sets it again in
	// doRetry, after request_headers_to_remove ran). Nothing needs the
	// number: a fallback attempt's provider comes from its upstream host
	// (chain.UpstreamHostProviderAttribute), never from its number, which
	// an aggregate cluster skipping unhealthy members makes unreliable
	// (envoy-protocol.md §6). The fallback upstream processor still
	// removes the header should one arrive (attemptHeaders).
	vh := &routev3.VirtualHost{Name: "sluice", Domains: []string{"*"}}
	for _, p := range b.snap.Providers() {
		vh.Routes = append(vh.Routes, headerRoute(p.Name, p.Name, p.Timeout, p.IdleTimeout, retryPolicy(p)))
	}
	for _, m := range b.snap.Models() {
		if !b.fallback(m) {
			continue
		}
		name := policies.FallbackClusterPrefix + m.Name
		var timeout, idle time.Duration
		var on []string
		unbounded := false
		for _, t := range m.Targets {
			unbounded = unbounded || t.Provider.Timeout == 0
			timeout += t.Provider.Timeout
			idle = max(idle, t.Provider.IdleTimeout)
			for _, c := range t.Provider.Retries.On {
				if !slices.Contains(on, c) {
					on = append(on, c)
				}
			}
		}
		if unbounded {
			timeout = 0
		}
		rp := retryOn(on, uint32(len(m.Targets)-1))
		rp.RetryPriority = &routev3.RetryPolicy_RetryPriority{
			Name:       "envoy.retry_priorities.previous_priorities",
			ConfigType: &routev3.RetryPolicy_RetryPriority_TypedConfig{TypedConfig: mustAny(&previouspriov3.PreviousPrioritiesConfig{UpdateFrequency: 1})},
		}
		vh.Routes = append(vh.Routes, headerRoute(name, name, timeout, idle, rp))
	}
	vh.Routes = append(vh.Routes, &routev3.Route{
		Name:  "no-provider",
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{
			Status: 404,
			Body:   &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: string(apierr.Body(llmapi.OpenAI, chain.NoRoute))}},
		}},
	})
	return &routev3.RouteConfiguration{Name: RouteName, VirtualHosts: []*routev3.VirtualHost{vh}}
}

// The no-provider route answers chain.NoRoute in OpenAI's shape; the
// listener's local_reply_config gives it content-type application/json,
// and Anthropic's shape on Anthropic's paths.

// headerRoute routes requests whose routing header names name to cluster.
// The router removes the routing header once it has routed on it
// (request_headers_to_remove applies when the router forwards, after the
// route is chosen and before any upstream filter), so no provider sees
// Sluice's internal header.
func headerRoute(name, cluster string, timeout, idle time.Duration, rp *routev3.RetryPolicy) *routev3.Route {
	return &routev3.Route{
		Name:                   name,
		RequestHeadersToRemove: []string{chain.RoutingHeader},
		Match: &routev3.RouteMatch{
			PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"},
			Headers: []*routev3.HeaderMatcher{{
				Name: chain.RoutingHeader,
				HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
					MatchPattern: &matcherv3.StringMatcher_Exact{Exact: name},
				}},
			}},
		},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier:     &routev3.RouteAction_Cluster{Cluster: cluster},
			Timeout:              durationpb.New(timeout),
			IdleTimeout:          durationpb.New(idle),
			HostRewriteSpecifier: &routev3.RouteAction_AutoHostRewrite{AutoHostRewrite: wrapperspb.Bool(true)},
			RetryPolicy:          rp,
		}},
	}
}

// retryPolicy is a provider's retry policy, or nil when retries are off.
func retryPolicy(p *policies.Provider) *routev3.RetryPolicy {
	if p.Retries.Max == nil || *p.Retries.Max == 0 {
		return nil
	}
	return retryOn(p.Retries.On, uint32(*p.Retries.Max))
}

// retryOn maps Sluice's retry conditions to Envoy's retry_on.
func retryOn(on []string, n uint32) *routev3.RetryPolicy {
	rp := &routev3.RetryPolicy{NumRetries: wrapperspb.UInt32(n)}
	var conds []string
	for _, c := range on {
		switch c {
		case "429":
			conds = append(conds, "retriable-status-codes")
			rp.RetriableStatusCodes = []uint32{429}
		default:
			conds = append(conds, c)
		}
	}
	rp.RetryOn = strings.Join(conds, ",")
	return rp
}

// listener is the Envoy listener (ext_authz → ext_proc → router) or, for
// gRPC clients, an api_listener with the router alone.
func (b *builder) listener() (*listenerv3.Listener, error) {
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: "sluice",
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource: adsSource(), RouteConfigName: RouteName,
		}},
	}
	if b.flavour == FlavourGRPC {
		hcm.HttpFilters = []*hcmv3.HttpFilter{routerFilter()}
		a := mustAny(hcm)
		// The HCM is also in a filter chain: Snapshot.Consistent finds RDS
		// references only there (envoy-protocol.md §5).
		return &listenerv3.Listener{
			Name:        b.snap.XDS().GRPCListener,
			ApiListener: &listenerv3.ApiListener{ApiListener: a},
			FilterChains: []*listenerv3.FilterChain{{Name: "api", Filters: []*listenerv3.Filter{{
				Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: a},
			}}}},
		}, nil
	}
	hcm.HttpFilters = append(chain.HTTPFilters(b.opts), routerFilter())
	// This listener is the edge: its peers are clients. With
	// use_remote_address Envoy trusts the connection's address rather than
	// a client's x-forwarded-for, and treats the request as an edge request
	// unless that address is internal (internal_address_config; since Envoy
	// 1.33 none is by default), so it replaces any x-request-id the client
	// sent with one of its own (source/common/http/conn_manager_utility.cc,
	// mutateRequestHeaders: force_set = !preserve_external_request_id &&
	// edge_request). Without it no request is an edge request and a
	// client's id is kept. Sluice never trusts that id for identity (the
	// spend record's id is its own) but logs and stores it for correlation;
	// preserve_external_request_id stays false so it is Envoy's. The
	// response's x-request-id is left alone (no
	// always_set_request_id_in_response, which would overwrite it): it is
	// the provider's, the id OpenAI's SDKs expose and the provider's
	// support asks for. The gateway's id reaches the client in its own
	// header, x-sluice-request-id, set by the downstream ext_proc
	// processor (chain.RequestIDHeader).
	hcm.UseRemoteAddress = wrapperspb.Bool(true)
	// One path for everyone: the connection manager rewrites :path before
	// routing and before any filter sees it, so ext_authz's CheckRequest,
	// ext_proc's request headers (where Sluice classifies the endpoint)
	// and the provider all get the same bytes
	// (ConnectionManagerUtility::maybeNormalizePath,
	// source/common/http/conn_manager_utility.cc, called by
	// ActiveStream::decodeHeaders before the filter chain exists). Each is
	// off by default: normalize_path unset takes the runtime key
	// http_connection_manager.normalize_path at 0%, and
	// IMPLEMENTATION_SPECIFIC_DEFAULT is KEEP_UNCHANGED
	// (getPathWithEscapedSlashesActionRuntimeOverride, the HCM's
	// config.cc), so without them Envoy routes and forwards
	// /v1/chat%2Fcompletions as it came, and a provider that decodes %2F
	// serves a path Sluice never classified.
	//   - normalize_path: PathUtil::canonicalPath (path_utility.cc) —
	//     Chromium's url::CanonicalizePath on the part before '?': dot
	//     segments removed (also %2e, and "..;x" since
	//     strip_dotdot_segments_with_parameters), escaped unreserved
	//     characters decoded (completion%73 → completions), '' → '/',
	//     other escapes kept as sent (%252F stays); a NUL fails with 400.
	//   - merge_slashes: PathUtil::mergeSlashes, after canonicalPath.
	//   - path_with_escaped_slashes_action REJECT_REQUEST:
	//     PathUtil::unescapeSlashes runs first; a %2F, %2f, %5C or %5c in
	//     the path (not the query) gets 400, details
	//     path_normalization_failed, which chain.LocalReply turns into
	//     the API's JSON error. No client of these APIs sends an escaped
	//     slash on purpose. UNESCAPE_AND_FORWARD would also give one path,
	//     but by changing the request's meaning (a %2F inside a segment
	//     becomes a boundary, and x%2F..%2F collapses segments), which
	//     the HCM proto warns against where an earlier hop (a load
	//     balancer, a WAF, Istio's authorization) decided on the escaped
	//     form; UNESCAPE_AND_REDIRECT answers 307, and 400 to gRPC.
	// Envoy never changes case (/V1 stays, per normalize_path's comment)
	// nor a ';' parameter outside a dot segment (/completions;x stays, ';'
	// passes CanonicalizePath), and keeps a trailing slash: Sluice's own
	// classification of the path (ext_proc) answers those.
	hcm.NormalizePath = wrapperspb.Bool(true)
	hcm.MergeSlashes = true
	hcm.PathWithEscapedSlashesAction = hcmv3.HttpConnectionManager_REJECT_REQUEST
	// Envoy's own local replies (a body past the listener's buffer, an
	// upstream timeout or connect failure) in the API's JSON error shape
	// instead of text/plain; Sluice's own replies pass through unchanged.
	hcm.LocalReplyConfig = chain.LocalReply(b.snap.Gateway().MaxRequestBodyBytes)
	// The edge timers Envoy recommends (best_practices/edge.rst): a
	// request that goes quiet before it is routed ends after
	// gateway.stream_idle_timeout (once routed, the provider route's
	// idle_timeout replaces it: ActiveStream::refreshIdleTimeout), and a
	// client gets gateway.request_timeout to send its whole request — the
	// timer stops once the router has it, or a response starts, so it
	// never cuts a long generation (the HCM proto's request_timeout).
	// Both answer 408 while the request is incomplete, 504 after
	// (ActiveStream::onIdleTimeout, onRequestTimeout), in the API's JSON
	// (chain.LocalReply). request_headers_timeout is left unset: the
	// request timeout bounds the headers too.
	hcm.StreamIdleTimeout = durationpb.New(b.snap.Gateway().StreamIdleTimeout)
	hcm.RequestTimeout = durationpb.New(b.snap.Gateway().RequestTimeout)
	if b.opts.NoStatusOnError {
		chain.PinExtProcStatus(hcm.LocalReplyConfig)
	}
	if path := b.snap.XDS().AccessLog; path != "off" {
		hcm.AccessLog = []*accesslogv3.AccessLog{accessLog(path)}
	}
	addr, err := socketAddress(b.group.Envoy)
	if err != nil {
		return nil, fmt.Errorf("listen.envoy: %w", err)
	}
	// ext_proc buffers the request body in Envoy: the connection buffer
	// must hold the largest body Sluice accepts.
	limit := b.snap.Gateway().BodyBufferBytes()
	return &listenerv3.Listener{
		Name:                          ListenerName,
		Address:                       addr,
		PerConnectionBufferLimitBytes: wrapperspb.UInt32(clampU32(limit)),
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(hcm)},
		}}}},
	}, nil
}

func routerFilter() *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})}}
}

// accessLogFields is the JSON access-log line: the request and Sluice's
// usage metadata (namespace "sluice", set by ext_proc's final reply).
var accessLogFields = [][2]string{
	{"start_time", "%START_TIME%"},
	{"request_id", "%REQ(X-REQUEST-ID)%"},
	{"method", "%REQ(:METHOD)%"},
	{"path", "%REQ(:PATH)%"},
	{"status", "%RESPONSE_CODE%"},
	{"flags", "%RESPONSE_FLAGS%"},
	{"details", "%RESPONSE_CODE_DETAILS%"},
	{"upstream_cluster", "%UPSTREAM_CLUSTER%"},
	{"attempts", "%UPSTREAM_REQUEST_ATTEMPT_COUNT%"},
	{"duration_ms", "%DURATION%"},
	{"model", "%DYNAMIC_METADATA(" + chain.UsageNamespace + ":model)%"},
	{"provider", "%DYNAMIC_METADATA(" + chain.UsageNamespace + ":provider)%"},
	{"key_id", "%DYNAMIC_METADATA(" + chain.UsageNamespace + ":key_id)%"},
	{"team", "%DYNAMIC_METADATA(" + chain.UsageNamespace + ":team)%"},
	{"input_tokens", "%DYNAMIC_METADATA(" + chain.UsageNamespace + ":input_tokens)%"},
	{"output_tokens", "%DYNAMIC_METADATA(" + chain.UsageNamespace + ":output_tokens)%"},
	{"cost_micros", "%DYNAMIC_METADATA(" + chain.UsageNamespace + ":cost_micros)%"},
	{"estimated", "%DYNAMIC_METADATA(" + chain.UsageNamespace + ":estimated)%"},
	{"outcome", "%DYNAMIC_METADATA(" + chain.UsageNamespace + ":outcome)%"},
	// The caller ext_authz accepted, for every request it accepted —
	// passed and refused ones too, which write no usage: named fields
	// only, never its signature.
	{"caller_key_id", "%DYNAMIC_METADATA(" + chain.AuthzNamespace + ":key_id)%"},
	{"caller_team", "%DYNAMIC_METADATA(" + chain.AuthzNamespace + ":team)%"},
}

func accessLog(path string) *accesslogv3.AccessLog {
	fields := map[string]*structpb.Value{}
	for _, f := range accessLogFields {
		fields[f[0]] = structpb.NewStringValue(f[1])
	}
	fal := &fileaccesslogv3.FileAccessLog{
		Path: path,
		AccessLogFormat: &fileaccesslogv3.FileAccessLog_LogFormat{LogFormat: &corev3.SubstitutionFormatString{
			Format: &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: &structpb.Struct{Fields: fields}},
		}},
	}
	return &accesslogv3.AccessLog{Name: "envoy.access_loggers.file", ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: mustAny(fal)}}
}

// mustAny packs m deterministically (map fields in key order), so the same
// config always yields the same bytes and the same version. It fails only
// for a nil message, a programmer error.
func mustAny(m proto.Message) *anypb.Any {
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		panic(fmt.Sprintf("xds: pack %T: %v", m, err))
	}
	return a
}
