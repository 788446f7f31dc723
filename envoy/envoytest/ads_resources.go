package envoytest

// What the ADS client does with the resources it receives: decode and
// check them, keep the state of the world, warm clusters and listeners,
// and put a configuration in force once it is complete.

import (
	"fmt"
	"maps"
	"slices"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
)

// xdsResources is the state of the world the emulator accepted.
type xdsResources struct {
	listeners []*listenerv3.Listener                       // LDS, in response order, api_listeners left out
	clusters  []*clusterv3.Cluster                         // CDS, in response order, static names left out
	routes    map[string]*routev3.RouteConfiguration       // RDS, by name
	endpoints map[string]*endpointv3.ClusterLoadAssignment // EDS, by cluster_name
	// active holds the CDS clusters in force: each one warm, or, while
	// its new version warms, the previous one (Envoy's active_clusters_).
	active map[string]*clusterv3.Cluster
}

func newXDSResources() *xdsResources {
	return &xdsResources{
		routes:    map[string]*routev3.RouteConfiguration{},
		endpoints: map[string]*endpointv3.ClusterLoadAssignment{},
		active:    map[string]*clusterv3.Cluster{},
	}
}

func (r *xdsResources) clone() *xdsResources {
	return &xdsResources{
		listeners: r.listeners,
		clusters:  r.clusters,
		routes:    maps.Clone(r.routes),
		endpoints: maps.Clone(r.endpoints),
		active:    maps.Clone(r.active),
	}
}

// xdsInputs are the resources the configuration in force was built from.
type xdsInputs struct {
	listener  *listenerv3.Listener
	routes    *routev3.RouteConfiguration // nil for an inline route_config
	clusters  map[string]*clusterv3.Cluster
	endpoints map[string]*endpointv3.ClusterLoadAssignment // of the EDS clusters among them
}

func (a *xdsInputs) equal(b *xdsInputs) bool {
	return proto.Equal(a.listener, b.listener) && proto.Equal(a.routes, b.routes) &&
		maps.EqualFunc(a.clusters, b.clusters, func(x, y *clusterv3.Cluster) bool { return proto.Equal(x, y) }) &&
		maps.EqualFunc(a.endpoints, b.endpoints, func(x, y *endpointv3.ClusterLoadAssignment) bool { return proto.Equal(x, y) })
}

// accept applies a response: it returns an error, and changes nothing,
// if the emulator cannot use it.
func (c *adsClient) accept(t *xdsType, r *discoveryv3.DiscoveryResponse) error {
	next, err := c.apply(t, r)
	if err != nil {
		return err
	}
	if err := c.checkRules(t, next); err != nil {
		return err
	}
	if err := c.check(t.url, next); err != nil {
		return err
	}
	cfg, in, fallback, complete, err := c.assemble(next)
	if err != nil {
		c.e.health.retain(c.e.cfg.Load()) // the health checkers a refused cluster started
		return err
	}
	initialized := c.cmReady
	c.res = next
	t.version = r.GetVersionInfo()
	first := false
	if cfg != nil {
		first = c.activate(cfg, in)
	}
	if l := c.pickListener(c.res.listeners); l != nil {
		c.served = l.GetName()
	}
	c.publish(func(s *XDSStatus) {
		setVersion(&s.Accepted, t.url, t.version)
		if complete {
			lv := s.Active.Listeners
			s.Active = s.Accepted
			if fallback {
				s.Active.Listeners = lv
			}
		}
	})
	if first {
		close(c.ready) // after publish: Listen's callers see the status
	}
	c.updateSubscriptions()
	if t.url == typeURLCluster {
		c.cdsDone = true
		if initialized && c.warming() && !c.holding {
			// After initialization, CDS stays paused while a cluster warms,
			// so that its ACK tells the server the clusters are ready
			// (ClusterManagerImpl::updateClusterCounts).
			c.holdCDS()
		}
	}
	if c.holding && !c.warming() {
		c.releaseCDS()
	}
	c.maybeInitialized()
	return nil
}

// apply returns the state of the world with the response's resources.
func (c *adsClient) apply(t *xdsType, r *discoveryv3.DiscoveryResponse) (*xdsResources, error) {
	next := c.res.clone()
	switch t.url {
	case typeURLCluster:
		cs, err := decode(r, "cluster", func() *clusterv3.Cluster { return &clusterv3.Cluster{} }, (*clusterv3.Cluster).GetName)
		if err != nil {
			return nil, err
		}
		next.clusters = nil
		for _, cl := range cs {
			if c.staticNames[cl.GetName()] {
				// ClusterManagerImpl::addOrUpdateCluster blocks updates of a
				// static cluster; it is not an error.
				c.log.Warn("CDS cannot replace a static cluster; ignored", "cluster", cl.GetName())
				continue
			}
			next.clusters = append(next.clusters, cl)
		}
	case typeURLListener:
		ls, err := decode(r, "listener", func() *listenerv3.Listener { return &listenerv3.Listener{} }, (*listenerv3.Listener).GetName)
		if err != nil {
			return nil, err
		}
		next.listeners = nil
		for _, l := range ls {
			if l.GetApiListener() != nil {
				// ListenerManagerImpl::addOrUpdateListener: "listener ... can
				// not be added because currently only one ApiListener is
				// allowed, and it can only be added via bootstrap
				// configuration". A warning, not a rejection.
				c.log.Warn("an api_listener cannot be added over LDS (Envoy refuses it too); ignored", "listener", l.GetName())
				continue
			}
			next.listeners = append(next.listeners, l)
		}
	case typeURLRoute:
		rcs, err := decode(r, "route configuration", func() *routev3.RouteConfiguration { return &routev3.RouteConfiguration{} }, (*routev3.RouteConfiguration).GetName)
		if err != nil {
			return nil, err
		}
		for _, rc := range rcs {
			if t.has(rc.GetName()) {
				next.routes[rc.GetName()] = rc
			}
		}
	case typeURLEndpoint:
		las, err := decode(r, "cluster load assignment", func() *endpointv3.ClusterLoadAssignment { return &endpointv3.ClusterLoadAssignment{} }, (*endpointv3.ClusterLoadAssignment).GetClusterName)
		if err != nil {
			return nil, err
		}
		for _, la := range las {
			if t.has(la.GetClusterName()) {
				next.endpoints[la.GetClusterName()] = la
			}
		}
	}
	next.active = warmUp(next.clusters, next.endpoints, c.res.active)
	return next, nil
}

// decode unpacks and validates a response's resources, as Envoy does
// before any of them is used: a resource of another type, one that does
// not unpack or validate, or two with the same name reject the response.
func decode[M interface {
	proto.Message
	ValidateAll() error
}](r *discoveryv3.DiscoveryResponse, kind string, newM func() M, name func(M) string) ([]M, error) {
	var out []M
	seen := map[string]bool{}
	for i, a := range r.GetResources() {
		if a.GetTypeUrl() == typeURLResource {
			w := &discoveryv3.Resource{}
			if err := a.UnmarshalTo(w); err != nil {
				return nil, fmt.Errorf("resources[%d]: %w", i, err)
			}
			if w.GetResource() == nil {
				continue // a heartbeat
			}
			a = w.GetResource()
		}
		if a.GetTypeUrl() != r.GetTypeUrl() {
			return nil, fmt.Errorf("resources[%d]: type %s does not match the response's type URL %s", i, a.GetTypeUrl(), r.GetTypeUrl())
		}
		m := newM()
		if err := a.UnmarshalTo(m); err != nil {
			return nil, fmt.Errorf("resources[%d]: unpack %s: %w", i, kind, err)
		}
		n := name(m)
		if err := m.ValidateAll(); err != nil {
			return nil, fmt.Errorf("%s %q: %w", kind, n, err)
		}
		if seen[n] {
			return nil, fmt.Errorf("duplicate %s %q", kind, n)
		}
		seen[n] = true
		out = append(out, m)
	}
	return out, nil
}

// check refuses, in a CDS or EDS update, clusters the emulator cannot
// build, whether or not a listener uses them yet.
func (c *adsClient) check(url string, next *xdsResources) error {
	if url != typeURLCluster && url != typeURLEndpoint {
		return nil
	}
	for _, cl := range next.clusters {
		if cl.GetType() == clusterv3.Cluster_EDS && cl.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
			return fmt.Errorf("cluster %q: eds_cluster_config.eds_config: the emulator takes endpoints over ADS only (ads: {})", cl.GetName())
		}
	}
	cfg, err := c.e.build(c.carrier, nil, slices.Concat(c.static, next.clusters), next.endpoints)
	closeClusters(cfg)
	return err
}

// assemble builds the configuration next puts in force: the served
// listener with its route configuration and the clusters in force. While
// that listener warms, the listener in force takes the route and cluster
// updates instead (fallback). complete is false while something is
// warming; cfg is nil too when nothing changed. Whatever can be checked
// of an incomplete configuration is, with stand-ins for what is missing.
func (c *adsClient) assemble(next *xdsResources) (cfg *config, in *xdsInputs, fallback, complete bool, err error) {
	l := c.pickListener(next.listeners)
	if l != nil {
		cfg, in, complete, err = c.assembleFor(l, next)
		if err != nil || complete {
			return cfg, in, false, complete, err
		}
	}
	if c.inForce != nil && (l == nil || !proto.Equal(l, c.inForce.listener)) {
		cfg, in, complete, err = c.assembleFor(c.inForce.listener, next)
		if err != nil || complete {
			return cfg, in, true, complete, err
		}
	}
	return nil, nil, false, false, nil
}

func (c *adsClient) assembleFor(l *listenerv3.Listener, next *xdsResources) (*config, *xdsInputs, bool, error) {
	hcm, err := listenerHCM(l)
	if err != nil {
		return nil, nil, false, err
	}
	have := maps.Clone(c.staticNames)
	for n := range next.active {
		have[n] = true
	}
	inCDS := map[string]bool{}
	for _, cl := range next.clusters {
		inCDS[cl.GetName()] = true
	}
	complete := true
	table := hcm.GetRouteConfig()
	var rc *routev3.RouteConfiguration
	var rds map[string]*routev3.RouteConfiguration
	if r := hcm.GetRds(); r != nil {
		if r.GetConfigSource().GetAds() == nil {
			return nil, nil, false, fmt.Errorf("listener %q: rds.config_source: the emulator takes route configurations over ADS only (ads: {})", l.GetName())
		}
		name := r.GetRouteConfigName()
		rc = next.routes[name]
		table = rc
		if rc == nil {
			complete = false
			rds = map[string]*routev3.RouteConfiguration{name: {Name: name}}
		} else {
			rds = map[string]*routev3.RouteConfiguration{name: rc}
		}
	}
	// A route to a cluster that is not in force waits for it. Envoy checks
	// the clusters of an inline route table (validate_clusters defaults to
	// true there), so only a warming one waits; build refuses the others.
	var stubs []*clusterv3.Cluster
	for _, n := range routeClusterRefs(table) {
		if have[n] || (hcm.GetRds() == nil && !inCDS[n]) {
			continue
		}
		stubs = append(stubs, &clusterv3.Cluster{Name: n, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}})
		complete = false
	}
	for _, n := range filterClusterRefs(hcm) {
		if !have[n] {
			// A filter's gRPC service on a cluster not in force: nothing to
			// dial yet, so nothing more to check.
			return nil, nil, false, nil
		}
	}
	in := &xdsInputs{listener: l, routes: rc, clusters: next.active, endpoints: map[string]*endpointv3.ClusterLoadAssignment{}}
	for _, cl := range next.active {
		if cl.GetType() == clusterv3.Cluster_EDS {
			if la := next.endpoints[edsServiceName(cl)]; la != nil {
				in.endpoints[edsServiceName(cl)] = la
			}
		}
	}
	if complete && c.inForce != nil && in.equal(c.inForce) {
		return nil, in, true, nil
	}
	clusters := slices.Clone(c.static)
	for _, n := range slices.Sorted(maps.Keys(next.active)) {
		clusters = append(clusters, next.active[n])
	}
	cfg, err := c.e.build(l, rds, append(clusters, stubs...), next.endpoints)
	if err != nil {
		return nil, nil, false, err
	}
	if !complete {
		closeClusters(cfg)
		return nil, nil, false, nil
	}
	return cfg, in, true, nil
}

// activate puts a configuration in force; it reports whether it is the
// first.
func (c *adsClient) activate(cfg *config, in *xdsInputs) bool {
	old := c.refs.swap(&c.e.cfg, cfg)
	c.e.health.retain(cfg)
	c.inForce = in
	if old != nil && old.listenAddr != cfg.listenAddr {
		// Envoy binds the new address and drains the old listener; the
		// emulator serves the socket it was given.
		c.log.Warn("LDS changed the listener address; the emulator keeps serving on its socket", "listener", in.listener.GetName(), "was", old.listenAddr, "now", cfg.listenAddr)
	}
	c.log.Info("configuration in force", "listener", in.listener.GetName(), "address", cfg.listenAddr, "clusters", len(cfg.clusters))
	return old == nil
}

// pickListener returns the listener the emulator serves: the one it
// serves already, or the first with an http_connection_manager.
func (c *adsClient) pickListener(ls []*listenerv3.Listener) *listenerv3.Listener {
	var first *listenerv3.Listener
	for _, l := range ls {
		if !hasHCM(l) {
			continue
		}
		if l.GetName() == c.served {
			return l
		}
		if first == nil {
			first = l
		}
	}
	return first
}

func hasHCM(l *listenerv3.Listener) bool {
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			if f.GetTypedConfig().MessageName() == typeHCM {
				return true
			}
		}
	}
	return false
}

// updateSubscriptions subscribes to the endpoints of every EDS cluster and
// the route configuration of every listener, as Envoy's clusters and
// listeners do (those in force included), and forgets the others.
func (c *adsClient) updateSubscriptions() {
	eds := map[string]bool{}
	for _, cl := range slices.Concat(c.res.clusters, slices.Collect(maps.Values(c.res.active))) {
		if cl.GetType() == clusterv3.Cluster_EDS {
			eds[edsServiceName(cl)] = true
		}
	}
	maps.DeleteFunc(c.res.endpoints, func(n string, _ *endpointv3.ClusterLoadAssignment) bool { return !eds[n] })
	c.subscribe(typeURLEndpoint, slices.Sorted(maps.Keys(eds)))

	rds := map[string]bool{}
	for _, l := range c.res.listeners {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm := &hcmv3.HttpConnectionManager{}
				if f.GetTypedConfig().MessageName() == typeHCM && f.GetTypedConfig().UnmarshalTo(hcm) == nil && hcm.GetRds() != nil {
					rds[hcm.GetRds().GetRouteConfigName()] = true
				}
			}
		}
	}
	if c.inForce != nil && c.inForce.routes != nil {
		rds[c.inForce.routes.GetName()] = true
	}
	maps.DeleteFunc(c.res.routes, func(n string, _ *routev3.RouteConfiguration) bool { return !rds[n] })
	c.subscribe(typeURLRoute, slices.Sorted(maps.Keys(rds)))
}

// warming reports whether a CDS cluster waits for its endpoints.
func (c *adsClient) warming() bool {
	for _, cl := range c.res.clusters {
		if !warm(cl, c.res.endpoints) {
			return true
		}
	}
	return false
}

// maybeInitialized ends the cluster manager's initialization once the
// first CDS update is handled and no cluster warms.
func (c *adsClient) maybeInitialized() {
	if !c.cmReady && c.cdsDone && !c.warming() {
		c.clustersInitialized()
	}
}

// clustersInitialized subscribes to listeners: Envoy initializes LDS only
// once every cluster is (RunHelper, cm.setInitializedCb).
func (c *adsClient) clustersInitialized() {
	if c.cmReady {
		return
	}
	c.cmReady = true
	c.initDeadline = time.Time{}
	c.subscribe(typeURLListener, nil)
}

// holdCDS pauses CDS while clusters warm, until they are warm or the
// longest of their initial_fetch_timeouts passes.
func (c *adsClient) holdCDS() {
	c.holding = true
	c.pause(c.types[typeURLCluster])
	var longest time.Duration
	for _, cl := range c.res.clusters {
		if warm(cl, c.res.endpoints) {
			continue
		}
		d := durationOr(cl.GetEdsClusterConfig().GetEdsConfig().GetInitialFetchTimeout(), defaultInitialFetchTimeout)
		if d == 0 {
			return // no timeout: held until warm
		}
		longest = max(longest, d)
	}
	c.holdDeadline = time.Now().Add(longest)
}

func (c *adsClient) releaseCDS() {
	if !c.holding {
		return
	}
	c.holding = false
	c.holdDeadline = time.Time{}
	c.resume(c.types[typeURLCluster])
}

// warmUp returns the clusters in force: each CDS cluster that is warm, or
// else its previous version if that one is.
func warmUp(clusters []*clusterv3.Cluster, eds map[string]*endpointv3.ClusterLoadAssignment, prev map[string]*clusterv3.Cluster) map[string]*clusterv3.Cluster {
	out := map[string]*clusterv3.Cluster{}
	for _, cl := range clusters {
		if warm(cl, eds) {
			out[cl.GetName()] = cl
		} else if p := prev[cl.GetName()]; p != nil && warm(p, eds) {
			out[cl.GetName()] = p
		}
	}
	return out
}

// warm reports whether a cluster has what it needs to be used: an EDS
// cluster its ClusterLoadAssignment.
func warm(cl *clusterv3.Cluster, eds map[string]*endpointv3.ClusterLoadAssignment) bool {
	return cl.GetType() != clusterv3.Cluster_EDS || eds[edsServiceName(cl)] != nil
}

func edsServiceName(cl *clusterv3.Cluster) string {
	if n := cl.GetEdsClusterConfig().GetServiceName(); n != "" {
		return n
	}
	return cl.GetName()
}

// routeClusterRefs lists the clusters a route table names.
func routeClusterRefs(rc *routev3.RouteConfiguration) []string {
	seen := map[string]bool{}
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			if n := r.GetRoute().GetCluster(); n != "" {
				seen[n] = true
			}
			for _, wc := range r.GetRoute().GetWeightedClusters().GetClusters() {
				seen[wc.GetName()] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// filterClusterRefs lists the clusters of the HTTP filters' gRPC services.
func filterClusterRefs(hcm *hcmv3.HttpConnectionManager) []string {
	var out []string
	for _, f := range hcm.GetHttpFilters() {
		tc := f.GetTypedConfig()
		switch tc.MessageName() {
		case typeExtAuthz:
			m := &extauthzv3.ExtAuthz{}
			if tc.UnmarshalTo(m) == nil {
				out = append(out, m.GetGrpcService().GetEnvoyGrpc().GetClusterName())
			}
		case typeExtProc:
			m := &extprocv3.ExternalProcessor{}
			if tc.UnmarshalTo(m) == nil {
				out = append(out, m.GetGrpcService().GetEnvoyGrpc().GetClusterName())
			}
		}
	}
	return slices.DeleteFunc(out, func(n string) bool { return n == "" })
}

func setVersion(v *XDSVersions, url, version string) {
	switch url {
	case typeURLCluster:
		v.Clusters = version
	case typeURLEndpoint:
		v.Endpoints = version
	case typeURLListener:
		v.Listeners = version
	case typeURLRoute:
		v.Routes = version
	}
}
