package envoyrules

import (
	"fmt"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

const (
	srcRouteMatcher = "source/common/router/config_impl.cc, RouteMatcher::RouteMatcher"
	srcRouteEntry   = "source/common/router/config_impl.cc, RouteEntryImplBase::RouteEntryImplBase"
	// defaultMaxDirectResponseBody is DEFAULT_MAX_DIRECT_RESPONSE_BODY_SIZE_BYTES
	// (config_impl.cc).
	defaultMaxDirectResponseBody = 4096
)

func routeRules() []*Rule {
	rc := nameOf(&routev3.RouteConfiguration{})
	route := nameOf(&routev3.Route{})
	return []*Rule{
		{
			Name: "route.unique-domains", Applies: rc, Source: srcRouteMatcher, Severity: Refused,
			Check: on(func(c *routev3.RouteConfiguration) []Finding {
				// Domains are compared lower-cased, each kind in its own map:
				// "*", "*suffix", "prefix*", exact.
				var out []Finding
				wildcard := false
				seen := map[string]bool{}
				for i, vh := range c.GetVirtualHosts() {
					for j, d := range vh.GetDomains() {
						path := fmt.Sprintf("virtual_hosts[%d].domains[%d]", i, j)
						d = strings.ToLower(d)
						var key string
						switch {
						case d == "*":
							if wildcard {
								out = append(out, Finding{Path: path, Msg: fmt.Sprintf("Only a single wildcard domain is permitted in route %s", c.GetName())})
							}
							wildcard = true
							continue
						case strings.HasPrefix(d, "*"):
							key = "suffix:" + d[1:]
						case strings.HasSuffix(d, "*"):
							key = "prefix:" + d[:len(d)-1]
						default:
							key = "exact:" + d
						}
						if seen[key] {
							out = append(out, Finding{Path: path, Msg: fmt.Sprintf(
								"Only unique values for domains are permitted. Duplicate entry of domain %s in route %s", d, c.GetName())})
						}
						seen[key] = true
					}
				}
				return out
			}),
		},
		{
			Name: "route.direct-response-body-size", Applies: rc,
			Source: srcRouteEntry + " (DataSourceProvider::create with max_direct_response_body_size_bytes; message from source/common/config/datasource.cc)", Severity: Refused,
			Check: on(func(c *routev3.RouteConfiguration) []Finding {
				limit := uint64(defaultMaxDirectResponseBody)
				if m := c.GetMaxDirectResponseBodySizeBytes(); m != nil {
					limit = uint64(m.GetValue())
				}
				var out []Finding
				for i, vh := range c.GetVirtualHosts() {
					for j, r := range vh.GetRoutes() {
						n := inlineSize(r.GetDirectResponse().GetBody())
						if n > limit {
							out = append(out, Finding{Path: fmt.Sprintf("virtual_hosts[%d].routes[%d].direct_response.body", i, j),
								Msg: fmt.Sprintf("response body size is %d bytes; maximum is %d", n, limit)})
						}
					}
				}
				return out
			}),
		},
		{
			Name: "route.one-path-rewrite", Applies: route, Source: srcRouteEntry, Severity: Refused,
			Check: on(func(r *routev3.Route) []Finding {
				a := r.GetRoute()
				n := 0
				for _, set := range []bool{a.GetPathRewritePolicy() != nil, a.GetPrefixRewrite() != "", a.GetRegexRewrite() != nil, a.GetPathRewrite() != ""} {
					if set {
						n++
					}
				}
				if n <= 1 {
					return nil
				}
				return find("route", "Specify only one of prefix_rewrite, regex_rewrite or path_rewrite_policy")
			}),
		},
		{
			Name: "route.upgrade-configs", Applies: route, Source: srcRouteEntry, Severity: Refused,
			Check: on(func(r *routev3.Route) []Finding {
				var out []Finding
				seen := map[string]bool{}
				for i, u := range r.GetRoute().GetUpgradeConfigs() {
					path := fmt.Sprintf("route.upgrade_configs[%d]", i)
					t := u.GetUpgradeType()
					if seen[strings.ToLower(t)] {
						out = append(out, Finding{Path: path, Msg: "Duplicate upgrade " + t})
						continue
					}
					seen[strings.ToLower(t)] = true
					if u.GetConnectConfig() != nil && !strings.EqualFold(t, "CONNECT") && !strings.EqualFold(t, "CONNECT-UDP") {
						out = append(out, Finding{Path: path + ".connect_config", Msg: "Non-CONNECT upgrade type " + t + " has ConnectConfig"})
					}
				}
				return out
			}),
		},
	}
}

// inlineSize is the size of an inline DataSource; a file's is not known
// here (Envoy reads it, and applies the same limit).
func inlineSize(ds *corev3.DataSource) uint64 {
	switch s := ds.GetSpecifier().(type) {
	case *corev3.DataSource_InlineString:
		return uint64(len(s.InlineString))
	case *corev3.DataSource_InlineBytes:
		return uint64(len(s.InlineBytes))
	}
	return 0
}
