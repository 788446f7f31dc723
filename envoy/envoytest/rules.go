package envoytest

// Envoy's load-time rules beyond PGV (envoy/envoyrules), run where the
// emulator loads configuration: the bootstrap in New, and each ADS
// response in accept. A Refused violation refuses the bootstrap or NACKs
// the response, with Envoy's message; an Ignored one is loaded, as Envoy
// loads it, with a warning. For a bootstrap, the emulator's own refusals
// (what it does not implement) are reported after the rules', not instead
// of them; an ADS response the rules refuse is NACKed with theirs alone.

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sluicegw/sluice/envoy/envoyrules"
)

// withBootstrapRules runs the rules over a bootstrap — every message in it,
// and its static resources as one set — after buildConfig built cfg (or
// failed with err), and returns what New returns: a refusal carries the
// rules' errors first, then buildConfig's.
func (e *Emulator) withBootstrapRules(b *bootstrapv3.Bootstrap, cfg *config, err error) (*config, error) {
	sr := b.GetStaticResources()
	vs := envoyrules.Check(b)
	vs = append(vs, envoyrules.CheckSet(envoyrules.Set{Clusters: sr.GetClusters(), Listeners: sr.GetListeners()})...)
	rerr := e.refused("bootstrap", vs)
	if rerr == nil {
		return cfg, err
	}
	closeClusters(cfg)
	return nil, errors.Join(rerr, err)
}

// checkRules runs the rules over the resources of type t in next, the
// state of the world a response of that type gives: each resource alone,
// and, for the references between resources, the set with the clusters
// the emulator has (static, and from CDS). Only violations in resources
// of type t count: a route configuration validating its clusters is judged
// when it loads, not when a later CDS update changes the clusters.
func (c *adsClient) checkRules(t *xdsType, next *xdsResources) error {
	var vs []envoyrules.Violation
	add := func(kind, name string, m proto.Message) {
		for _, v := range envoyrules.Check(m) {
			v.Resource = fmt.Sprintf("%s %q", kind, name)
			vs = append(vs, v)
		}
	}
	routes := slices.Collect(maps.Values(next.routes))
	slices.SortFunc(routes, func(a, b *routev3.RouteConfiguration) int { return strings.Compare(a.GetName(), b.GetName()) })
	var kind string
	switch t.url {
	case typeURLCluster:
		kind = "cluster"
		for _, cl := range next.clusters {
			add(kind, cl.GetName(), cl)
		}
	case typeURLListener:
		kind = "listener"
		for _, l := range next.listeners {
			add(kind, l.GetName(), l)
		}
	case typeURLRoute:
		kind = "route"
		for _, rc := range routes {
			add(kind, rc.GetName(), rc)
		}
	default:
		return nil // no rule applies to endpoints
	}
	clusters := slices.Concat(c.static, next.clusters)
	for _, cl := range next.active {
		if !slices.ContainsFunc(clusters, func(x *clusterv3.Cluster) bool { return x.GetName() == cl.GetName() }) {
			clusters = append(clusters, cl)
		}
	}
	for _, v := range envoyrules.CheckSet(envoyrules.Set{Clusters: clusters, Listeners: next.listeners, Routes: routes}) {
		if strings.HasPrefix(v.Resource, kind+" ") {
			vs = append(vs, v)
		}
	}
	return c.e.refused(kind, vs)
}

// refused logs the Ignored violations and returns the Refused ones,
// joined, or nil.
func (e *Emulator) refused(where string, vs []envoyrules.Violation) error {
	var errs []error
	for _, v := range vs {
		if v.Rule.Severity == envoyrules.Refused {
			errs = append(errs, v)
			continue
		}
		e.log.Warn("Envoy ignores this field: it has no effect", "in", where, "resource", v.Resource, "field", v.Path, "rule", v.Rule.Name, "why", v.Msg)
	}
	return errors.Join(errs...)
}
