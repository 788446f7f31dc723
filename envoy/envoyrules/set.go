package envoyrules

import (
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

const srcValidateClusters = "source/common/router/config_impl.cc, RouteEntryImplBase::validateClusters " +
	"(RouteCreator::createAndValidateRoute, when validate_clusters holds)"

// setRules are the references between resources that Envoy checks when it
// loads them. What Envoy does NOT check at load, and what it does instead,
// is in README.md ("Cross-references Envoy does not check at load").
func setRules() []*Rule {
	return []*Rule{
		{
			Name: "set.unique-cluster-names", Applies: nameOf(&clusterv3.Cluster{}),
			Source: "source/common/upstream/cds_api_helper.cc, CdsApiHelper::onConfigUpdate", Severity: Refused,
			CheckSet: func(s Set) []Finding {
				var out []Finding
				seen := map[string]bool{}
				for _, c := range s.Clusters {
					if seen[c.GetName()] {
						out = append(out, Finding{Resource: fmt.Sprintf("cluster %q", c.GetName()), Msg: fmt.Sprintf("duplicate cluster %s found", c.GetName())})
					}
					seen[c.GetName()] = true
				}
				return out
			},
		},
		{
			Name: "set.unique-listener-names", Applies: nameOf(&listenerv3.Listener{}),
			Source: "source/common/listener_manager/lds_api.cc, LdsApiImpl::onConfigUpdate", Severity: Refused,
			CheckSet: func(s Set) []Finding {
				var out []Finding
				seen := map[string]bool{}
				for _, l := range s.Listeners {
					if seen[l.GetName()] {
						out = append(out, Finding{Resource: fmt.Sprintf("listener %q", l.GetName()), Msg: fmt.Sprintf("duplicate listener %s found", l.GetName())})
					}
					seen[l.GetName()] = true
				}
				return out
			},
		},
		{
			// validate_clusters defaults to true for a route configuration
			// given inline in the connection manager (a static route config
			// provider) and to false for one served over RDS; only where it
			// holds must a route's clusters exist when the route
			// configuration loads. Elsewhere a missing cluster is a 503 at
			// request time (NC, cluster_not_found).
			Name: "set.route-clusters-exist", Applies: nameOf(&routev3.RouteConfiguration{}), Source: srcValidateClusters, Severity: Refused,
			CheckSet: func(s Set) []Finding {
				have := map[string]bool{}
				for _, c := range s.Clusters {
					have[c.GetName()] = true
				}
				var out []Finding
				for _, l := range s.Listeners {
					res := fmt.Sprintf("listener %q", l.GetName())
					check := func(path string, h *hcmv3.HttpConnectionManager) {
						rc := h.GetRouteConfig()
						if rc == nil || (rc.GetValidateClusters() != nil && !rc.GetValidateClusters().GetValue()) {
							return
						}
						out = append(out, unknownClusters(res, path+".route_config", rc, have)...)
					}
					eachHCM(l, check)
					if a := l.GetApiListener().GetApiListener(); a.MessageName() == nameOf(&hcmv3.HttpConnectionManager{}) {
						h := &hcmv3.HttpConnectionManager{}
						if a.UnmarshalTo(h) == nil {
							check(fmt.Sprintf("api_listener.api_listener(%s)", a.MessageName()), h)
						}
					}
				}
				for _, rc := range s.Routes {
					if rc.GetValidateClusters().GetValue() {
						out = append(out, unknownClusters(fmt.Sprintf("route %q", rc.GetName()), "", rc, have)...)
					}
				}
				return out
			},
		},
	}
}

// unknownClusters lists the clusters rc's routes name that are not in
// have: a route's cluster, its weighted clusters and its mirror clusters.
func unknownClusters(res, base string, rc *routev3.RouteConfiguration, have map[string]bool) []Finding {
	var out []Finding
	add := func(path, format, name string) {
		out = append(out, Finding{Resource: res, Path: joinPath(base, path), Msg: fmt.Sprintf(format, name)})
	}
	for i, vh := range rc.GetVirtualHosts() {
		for j, r := range vh.GetRoutes() {
			a := r.GetRoute()
			if a == nil {
				continue
			}
			path := fmt.Sprintf("virtual_hosts[%d].routes[%d].route", i, j)
			if c := a.GetCluster(); c != "" && !have[c] {
				add(path+".cluster", "route: unknown cluster '%s'", c)
			}
			for k, wc := range a.GetWeightedClusters().GetClusters() {
				if c := wc.GetName(); c != "" && !have[c] {
					add(fmt.Sprintf("%s.weighted_clusters.clusters[%d].name", path, k), "route: unknown weighted cluster '%s'", c)
				}
			}
			for k, m := range a.GetRequestMirrorPolicies() {
				if c := m.GetCluster(); c != "" && !have[c] {
					add(fmt.Sprintf("%s.request_mirror_policies[%d].cluster", path, k), "route: unknown shadow cluster '%s'", c)
				}
			}
		}
	}
	return out
}
