package xds

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	aggregatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/aggregate/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
)

// typeOrder is the make-before-break order: clusters, endpoints,
// listeners, routes.
var typeOrder = []string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType}

// ShortType names an xDS type URL for logs and metrics ("cds", "lds"…).
func ShortType(typeURL string) string {
	switch typeURL {
	case resourcev3.ClusterType:
		return "cds"
	case resourcev3.EndpointType:
		return "eds"
	case resourcev3.ListenerType:
		return "lds"
	case resourcev3.RouteType:
		return "rds"
	}
	return typeURL
}

// Snapshot validates r and makes the cache snapshot that serves it. Each
// type's version is a hash of its resources' deterministic encoding, so an
// unchanged type keeps its version (and is not pushed again), and equal
// configs give equal versions on every replica. The returned version
// covers all types.
//
// Validation is everything Sluice can check without Envoy: the cache's
// Consistent(), deep proto validation of every resource, with Envoy's
// load-time rules for every resource (Validate) and across them
// (ValidateSet) when the resources are for Envoy (only ValidateAPI for a
// proxyless gRPC client), and cross-references (checkRefs). An error means
// the snapshot must not be served.
func Snapshot(r *Resources) (*cachev3.Snapshot, string, error) {
	byType := map[string][]types.Resource{}
	for _, c := range r.Clusters {
		byType[resourcev3.ClusterType] = append(byType[resourcev3.ClusterType], c)
	}
	for _, e := range r.Endpoints {
		byType[resourcev3.EndpointType] = append(byType[resourcev3.EndpointType], e)
	}
	for _, l := range r.Listeners {
		byType[resourcev3.ListenerType] = append(byType[resourcev3.ListenerType], l)
	}
	for _, rc := range r.Routes {
		byType[resourcev3.RouteType] = append(byType[resourcev3.RouteType], rc)
	}
	var errs []error
	validate := Validate
	if r.ListenerFor == FlavourGRPC {
		validate = ValidateAPI // not Envoy: PGV only
	}
	for _, typ := range typeOrder {
		for _, res := range byType[typ] {
			if err := validate(res); err != nil {
				errs = append(errs, fmt.Errorf("%s %q: %w", ShortType(typ), cachev3.GetResourceName(res), err))
			}
		}
	}
	if r.ListenerFor == FlavourEnvoy {
		if err := ValidateSet(r); err != nil {
			errs = append(errs, err)
		}
	}
	if err := checkRefs(r); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, "", errors.Join(errs...)
	}
	snap := &cachev3.Snapshot{}
	all := sha256.New()
	for _, typ := range typeOrder {
		items := byType[typ]
		v, err := typeVersion(items)
		if err != nil {
			return nil, "", err
		}
		all.Write([]byte(typ + "=" + v + "\n"))
		snap.Resources[cachev3.GetResponseType(typ)] = cachev3.NewResources(v, items)
	}
	if err := snap.Consistent(); err != nil {
		return nil, "", fmt.Errorf("inconsistent snapshot: %w", err)
	}
	// Built now, once: the cache would build it lazily on first delta
	// use, from several streams at once.
	if err := snap.ConstructVersionMap(); err != nil {
		return nil, "", fmt.Errorf("version map: %w", err)
	}
	return snap, hex.EncodeToString(all.Sum(nil))[:16], nil
}

// typeVersion hashes resources of one type in name order.
func typeVersion(items []types.Resource) (string, error) {
	sorted := slices.Clone(items)
	slices.SortFunc(sorted, func(a, b types.Resource) int {
		return strings.Compare(cachev3.GetResourceName(a), cachev3.GetResourceName(b))
	})
	h := sha256.New()
	opts := proto.MarshalOptions{Deterministic: true}
	for _, res := range sorted {
		b, err := opts.Marshal(res)
		if err != nil {
			return "", fmt.Errorf("encode %q: %w", cachev3.GetResourceName(res), err)
		}
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// checkRefs checks what proto validation cannot: that every name a
// resource refers to exists. Routes name clusters, aggregate clusters name
// their members, EDS clusters need their assignment, listeners name their
// route configuration, and every gRPC service in Sluice's filters names
// the Sluice cluster.
func checkRefs(r *Resources) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range r.Clusters {
		clusters[c.GetName()] = c
	}
	cla := map[string]bool{}
	for _, e := range r.Endpoints {
		cla[e.GetClusterName()] = true
	}
	routes := map[string]bool{}
	for _, rc := range r.Routes {
		routes[rc.GetName()] = true
		for _, vh := range rc.GetVirtualHosts() {
			for _, rt := range vh.GetRoutes() {
				name := rt.GetRoute().GetCluster()
				if rt.GetRoute() != nil && !hasCluster(clusters, name) {
					bad("route %q: virtual host %q: route %q names cluster %q, which does not exist", rc.GetName(), vh.GetName(), rt.GetName(), name)
				}
			}
		}
	}
	grpcService := func(where string, g *corev3.GrpcService) {
		name := g.GetEnvoyGrpc().GetClusterName()
		if name != SluiceCluster {
			bad("%s: gRPC service names cluster %q, want %q", where, name, SluiceCluster)
		}
		if r.ListenerFor == FlavourEnvoy && !hasCluster(clusters, name) {
			bad("%s: gRPC service names cluster %q, which does not exist", where, name)
		}
	}
	for _, c := range r.Clusters {
		if c.GetType() == clusterv3.Cluster_EDS {
			svc := c.GetEdsClusterConfig().GetServiceName()
			if svc == "" {
				svc = c.GetName()
			}
			if !cla[svc] {
				bad("cluster %q: EDS service %q has no ClusterLoadAssignment", c.GetName(), svc)
			}
		}
		if ct := c.GetClusterType(); ct != nil {
			agg := &aggregatev3.ClusterConfig{}
			if err := ct.GetTypedConfig().UnmarshalTo(agg); err != nil {
				bad("cluster %q: %v", c.GetName(), err)
				continue
			}
			for _, m := range agg.GetClusters() {
				if !hasCluster(clusters, m) {
					bad("cluster %q: aggregate member %q does not exist", c.GetName(), m)
				}
			}
		}
		if a, ok := c.GetTypedExtensionProtocolOptions()[httpProtocolOptionsName]; ok {
			opts := &upstreamhttpv3.HttpProtocolOptions{}
			if err := a.UnmarshalTo(opts); err != nil {
				bad("cluster %q: %v", c.GetName(), err)
				continue
			}
			for _, f := range opts.GetHttpFilters() {
				checkFilter(fmt.Sprintf("cluster %q: upstream filter %q", c.GetName(), f.GetName()), f, grpcService, bad)
			}
		}
	}
	for _, l := range r.Listeners {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm := &hcmv3.HttpConnectionManager{}
				if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
					bad("listener %q: filter %q: %v", l.GetName(), f.GetName(), err)
					continue
				}
				if name := hcm.GetRds().GetRouteConfigName(); !routes[name] {
					bad("listener %q: RDS names route configuration %q, which does not exist", l.GetName(), name)
				}
				if fs := hcm.GetHttpFilters(); len(fs) == 0 || fs[len(fs)-1].GetName() != "envoy.filters.http.router" {
					bad("listener %q: the last HTTP filter must be the router (envoy.filters.http.router)", l.GetName())
				}
				for _, hf := range hcm.GetHttpFilters() {
					checkFilter(fmt.Sprintf("listener %q: filter %q", l.GetName(), hf.GetName()), hf, grpcService, bad)
				}
			}
		}
	}
	return errors.Join(errs...)
}

func hasCluster(m map[string]*clusterv3.Cluster, name string) bool {
	_, ok := m[name]
	return ok
}

// checkFilter checks the gRPC service of an ext_authz or ext_proc filter.
func checkFilter(where string, f *hcmv3.HttpFilter, grpcService func(string, *corev3.GrpcService), bad func(string, ...any)) {
	a := f.GetTypedConfig()
	switch {
	case a.MessageIs(&extauthzv3.ExtAuthz{}):
		cfg := &extauthzv3.ExtAuthz{}
		if err := a.UnmarshalTo(cfg); err != nil {
			bad("%s: %v", where, err)
			return
		}
		grpcService(where, cfg.GetGrpcService())
	case a.MessageIs(&extprocv3.ExternalProcessor{}):
		cfg := &extprocv3.ExternalProcessor{}
		if err := a.UnmarshalTo(cfg); err != nil {
			bad("%s: %v", where, err)
			return
		}
		grpcService(where, cfg.GetGrpcService())
	}
}
