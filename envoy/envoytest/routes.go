package envoytest

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// Envoy's default route timeout.
const defaultRouteTimeout = 15 * time.Second

// routeTable is a compiled RouteConfiguration. Supported: virtual hosts by
// domain (exact, "*", "*.suffix", "prefix*"); route matches on prefix or
// path (case-sensitive) plus header matchers (exact, present, prefix,
// invert); actions cluster, cluster_header and weighted_clusters with a
// timeout, or direct_response. Everything else is refused at load.
type routeTable struct {
	name   string
	vhosts []vhost
}

type vhost struct {
	name      string
	domains   []string
	routes    []*routev3.Route
	actions   []*routeAction // compiled RouteAction extras, parallel to routes
	perFilter map[string]*anypb.Any
}

// routeAction is what the router needs from a RouteAction (and its
// virtual host), compiled once at load.
type routeAction struct {
	retry *retryPolicy // route's retry_policy, else the virtual host's
	// host_rewrite_literal, or auto_host_rewrite (per attempt, the
	// selected host's hostname), and append_x_forwarded_host.
	hostRewrite     string
	autoHostRewrite bool
	appendXFH       bool
	// idle_timeout: idleSet when the route sets one (0 disables).
	idleTimeout time.Duration
	idleSet     bool
	// The virtual host's include_request_attempt_count and
	// include_attempt_count_in_response.
	attemptCountRequest, attemptCountResponse bool
	clusterNotFoundCode                       int
	// removeHeaders are request_headers_to_remove of the route, its
	// virtual host and the route configuration, lower-case: the router
	// removes them from the request when it forwards it.
	removeHeaders []string
}

// matchedRoute is the outcome of matching a request.
type matchedRoute struct {
	vhost   string
	name    string
	cluster string // "" for a direct response
	direct  *routev3.DirectResponseAction
	timeout time.Duration
	// clusterMissing is set for cluster_header routes whose header is
	// absent (Envoy answers 503 "cluster not found" / NC).
	clusterMissing bool
	// perFilter is the route's typed_per_filter_config, merged over the
	// virtual host's (route wins).
	perFilter map[string]*anypb.Any
	action    *routeAction // nil for a direct response
}

func newRouteTable(rc *routev3.RouteConfiguration) (*routeTable, error) {
	t := &routeTable{name: rc.GetName()}
	rcRemove, err := headersToRemove(rc.GetRequestHeadersToRemove())
	if err != nil {
		return nil, fmt.Errorf("route_config %q request_headers_to_remove: %w", rc.GetName(), err)
	}
	for _, vh := range rc.GetVirtualHosts() {
		if err := checkVirtualHost(vh); err != nil {
			return nil, fmt.Errorf("route_config %q virtual_host %q: %w", rc.GetName(), vh.GetName(), err)
		}
		vhRemove, err := headersToRemove(vh.GetRequestHeadersToRemove())
		if err != nil {
			return nil, fmt.Errorf("route_config %q virtual_host %q request_headers_to_remove: %w", rc.GetName(), vh.GetName(), err)
		}
		var vhRetry *retryPolicy
		if rp := vh.GetRetryPolicy(); rp != nil {
			var err error
			if vhRetry, err = newRetryPolicy(rp); err != nil {
				return nil, fmt.Errorf("route_config %q virtual_host %q: %w", rc.GetName(), vh.GetName(), err)
			}
		}
		v := vhost{name: vh.GetName(), domains: vh.GetDomains(), routes: vh.GetRoutes(), perFilter: vh.GetTypedPerFilterConfig()}
		for i, r := range vh.GetRoutes() {
			if err := checkRoute(r); err != nil {
				return nil, fmt.Errorf("route_config %q virtual_host %q routes[%d]: %w", rc.GetName(), vh.GetName(), i, err)
			}
			a, err := newRouteAction(r.GetRoute(), vh, vhRetry)
			if err != nil {
				return nil, fmt.Errorf("route_config %q virtual_host %q routes[%d]: %w", rc.GetName(), vh.GetName(), i, err)
			}
			rRemove, err := headersToRemove(r.GetRequestHeadersToRemove())
			if err != nil {
				return nil, fmt.Errorf("route_config %q virtual_host %q routes[%d] request_headers_to_remove: %w", rc.GetName(), vh.GetName(), i, err)
			}
			if a != nil {
				a.removeHeaders = slices.Concat(rRemove, vhRemove, rcRemove)
			}
			v.actions = append(v.actions, a)
		}
		t.vhosts = append(t.vhosts, v)
	}
	return t, nil
}

// headersToRemove checks a request_headers_to_remove list as Envoy's
// HeaderParser::configure does (":-prefixed or host headers may not be
// removed") and returns it lower-cased.
func headersToRemove(hs []string) ([]string, error) {
	out := make([]string, 0, len(hs))
	for _, h := range hs {
		if strings.HasPrefix(h, ":") || strings.EqualFold(h, "host") {
			return nil, fmt.Errorf("%q: :-prefixed or host headers may not be removed", h)
		}
		out = append(out, strings.ToLower(h))
	}
	return out, nil
}

// checkVirtualHost refuses the VirtualHost fields that change routing and
// that the emulator does not implement.
func checkVirtualHost(vh *routev3.VirtualHost) error {
	switch {
	case vh.GetRetryPolicyTypedConfig() != nil:
		return fmt.Errorf("retry_policy_typed_config is not supported by the emulator")
	case vh.GetHedgePolicy() != nil:
		return fmt.Errorf("hedge_policy is not supported by the emulator")
	case vh.GetIncludeIsTimeoutRetryHeader():
		return fmt.Errorf("include_is_timeout_retry_header is not supported by the emulator")
	case len(vh.GetRequestMirrorPolicies()) > 0:
		return fmt.Errorf("request_mirror_policies is not supported by the emulator")
	case vh.GetPerRequestBufferLimitBytes() != nil || vh.GetRequestBodyBufferLimit() != nil: //nolint:staticcheck // refused in both forms
		return fmt.Errorf("per_request_buffer_limit_bytes and request_body_buffer_limit are not supported by the emulator")
	case vh.GetMatcher() != nil:
		return fmt.Errorf("matcher is not supported by the emulator")
	}
	return nil
}

// newRouteAction compiles what the router needs from ra; nil for a route
// without a RouteAction.
func newRouteAction(ra *routev3.RouteAction, vh *routev3.VirtualHost, vhRetry *retryPolicy) (*routeAction, error) {
	if ra == nil {
		return nil, nil
	}
	a := &routeAction{
		retry:                vhRetry,
		hostRewrite:          ra.GetHostRewriteLiteral(),
		autoHostRewrite:      ra.GetAutoHostRewrite().GetValue(),
		appendXFH:            ra.GetAppendXForwardedHost(),
		attemptCountRequest:  vh.GetIncludeRequestAttemptCount(),
		attemptCountResponse: vh.GetIncludeAttemptCountInResponse(),
		clusterNotFoundCode:  503,
	}
	if rp := ra.GetRetryPolicy(); rp != nil {
		p, err := newRetryPolicy(rp)
		if err != nil {
			return nil, err
		}
		a.retry = p
	}
	if d := ra.GetIdleTimeout(); d != nil {
		a.idleTimeout, a.idleSet = d.AsDuration(), true
	}
	switch ra.GetClusterNotFoundResponseCode() {
	case routev3.RouteAction_NOT_FOUND:
		a.clusterNotFoundCode = 404
	case routev3.RouteAction_INTERNAL_SERVER_ERROR:
		a.clusterNotFoundCode = 500
	}
	return a, nil
}

func checkRoute(r *routev3.Route) error {
	m := r.GetMatch()
	switch m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix, *routev3.RouteMatch_Path:
	default:
		return fmt.Errorf("match: only prefix and path are supported by the emulator")
	}
	if m.GetCaseSensitive() != nil && !m.GetCaseSensitive().GetValue() {
		return fmt.Errorf("match.case_sensitive=false is not supported by the emulator")
	}
	if len(m.GetQueryParameters()) > 0 || m.GetRuntimeFraction() != nil || m.GetGrpc() != nil {
		return fmt.Errorf("match: query_parameters, runtime_fraction and grpc are not supported by the emulator")
	}
	for _, h := range m.GetHeaders() {
		switch h.GetHeaderMatchSpecifier().(type) {
		case *routev3.HeaderMatcher_PresentMatch, *routev3.HeaderMatcher_ExactMatch, *routev3.HeaderMatcher_PrefixMatch:
		case *routev3.HeaderMatcher_StringMatch:
			switch h.GetStringMatch().GetMatchPattern().(type) {
			case *matcherv3.StringMatcher_Exact, *matcherv3.StringMatcher_Prefix:
			default:
				return fmt.Errorf("match.headers[%s]: only exact and prefix string_match are supported by the emulator", h.GetName())
			}
		default:
			return fmt.Errorf("match.headers[%s]: only exact, prefix and present matchers are supported by the emulator", h.GetName())
		}
	}
	if r.GetPerRequestBufferLimitBytes() != nil || r.GetRequestBodyBufferLimit() != nil { //nolint:staticcheck // refused in both forms
		return fmt.Errorf("per_request_buffer_limit_bytes and request_body_buffer_limit are not supported by the emulator")
	}
	switch a := r.GetAction().(type) {
	case *routev3.Route_Route:
		switch a.Route.GetClusterSpecifier().(type) {
		case *routev3.RouteAction_Cluster, *routev3.RouteAction_ClusterHeader, *routev3.RouteAction_WeightedClusters:
		default:
			return fmt.Errorf("route: only cluster, cluster_header and weighted_clusters are supported by the emulator")
		}
		if err := checkRouteAction(a.Route); err != nil {
			return fmt.Errorf("route.%w", err)
		}
	case *routev3.Route_DirectResponse:
	default:
		return fmt.Errorf("action: only route and direct_response are supported by the emulator")
	}
	return nil
}

// checkRouteAction refuses the RouteAction fields that change what the
// router does and that the emulator does not implement.
func checkRouteAction(ra *routev3.RouteAction) error {
	unsupported := func(field string) error {
		return fmt.Errorf("%s is not supported by the emulator", field)
	}
	switch {
	case ra.GetPrefixRewrite() != "":
		return unsupported("prefix_rewrite")
	case ra.GetRegexRewrite() != nil:
		return unsupported("regex_rewrite")
	case ra.GetPathRewritePolicy() != nil:
		return unsupported("path_rewrite_policy")
	case ra.GetPathRewrite() != "":
		return unsupported("path_rewrite")
	case ra.GetHostRewriteHeader() != "":
		return unsupported("host_rewrite_header")
	case ra.GetHostRewritePathRegex() != nil:
		return unsupported("host_rewrite_path_regex")
	case ra.GetHostRewrite() != "":
		return unsupported("host_rewrite")
	case ra.GetRetryPolicyTypedConfig() != nil:
		return unsupported("retry_policy_typed_config")
	case len(ra.GetRequestMirrorPolicies()) > 0:
		return unsupported("request_mirror_policies")
	case ra.GetHedgePolicy() != nil:
		return unsupported("hedge_policy")
	case ra.GetInternalRedirectPolicy() != nil || ra.GetInternalRedirectAction() != routev3.RouteAction_PASS_THROUGH_INTERNAL_REDIRECT: //nolint:staticcheck // refused in both forms
		return unsupported("internal_redirect_policy")
	case ra.GetMaxStreamDuration() != nil:
		return unsupported("max_stream_duration")
	case ra.GetFlushTimeout() != nil:
		return unsupported("flush_timeout")
	case ra.GetPriority() != corev3.RoutingPriority_DEFAULT:
		return unsupported("priority HIGH")
	case ra.GetMetadataMatch() != nil:
		return unsupported("metadata_match")
	}
	return nil
}

// clusterRefs lists the clusters the routes name statically.
func (t *routeTable) clusterRefs() []string {
	seen := map[string]bool{}
	for _, vh := range t.vhosts {
		for _, r := range vh.routes {
			ra := r.GetRoute()
			if c := ra.GetCluster(); c != "" {
				seen[c] = true
			}
			for _, wc := range ra.GetWeightedClusters().GetClusters() {
				seen[wc.GetName()] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for c := range seen {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// match finds the route for request headers h, or nil (Envoy's NR: 404).
func (t *routeTable) match(h *Headers) *matchedRoute {
	if t == nil {
		return nil
	}
	vh := t.vhost(h.Value(":authority"))
	if vh == nil {
		return nil
	}
	path := h.Value(":path")
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	for i, r := range vh.routes {
		if !routeMatches(r.GetMatch(), path, h) {
			continue
		}
		m := &matchedRoute{vhost: vh.name, name: r.GetName(), perFilter: mergePerFilter(vh.perFilter, r.GetTypedPerFilterConfig()), action: vh.actions[i]}
		if d := r.GetDirectResponse(); d != nil {
			m.direct = d
			return m
		}
		ra := r.GetRoute()
		m.timeout = durationOr(ra.GetTimeout(), defaultRouteTimeout)
		switch cs := ra.GetClusterSpecifier().(type) {
		case *routev3.RouteAction_Cluster:
			m.cluster = cs.Cluster
		case *routev3.RouteAction_ClusterHeader:
			m.cluster = h.Value(strings.ToLower(cs.ClusterHeader))
			m.clusterMissing = m.cluster == ""
		case *routev3.RouteAction_WeightedClusters:
			m.cluster = pickWeighted(cs.WeightedClusters)
		}
		return m
	}
	return nil
}

func (t *routeTable) vhost(authority string) *vhost {
	host := authority
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		host = host[:i]
	}
	var wildcard *vhost
	for i := range t.vhosts {
		vh := &t.vhosts[i]
		for _, d := range vh.domains {
			switch {
			case d == "*":
				if wildcard == nil {
					wildcard = vh
				}
			case d == authority || d == host:
				return vh
			case strings.HasPrefix(d, "*") && strings.HasSuffix(host, d[1:]):
				return vh
			case strings.HasSuffix(d, "*") && strings.HasPrefix(host, d[:len(d)-1]):
				return vh
			}
		}
	}
	return wildcard
}

func routeMatches(m *routev3.RouteMatch, path string, h *Headers) bool {
	switch p := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		if !strings.HasPrefix(path, p.Prefix) {
			return false
		}
	case *routev3.RouteMatch_Path:
		if path != p.Path {
			return false
		}
	}
	for _, hm := range m.GetHeaders() {
		if headerMatches(hm, h) == hm.GetInvertMatch() {
			return false
		}
	}
	return true
}

func headerMatches(hm *routev3.HeaderMatcher, h *Headers) bool {
	v, ok := h.Joined(strings.ToLower(hm.GetName()))
	switch s := hm.GetHeaderMatchSpecifier().(type) {
	case *routev3.HeaderMatcher_PresentMatch:
		return ok == s.PresentMatch
	case *routev3.HeaderMatcher_ExactMatch:
		return ok && v == s.ExactMatch
	case *routev3.HeaderMatcher_PrefixMatch:
		return ok && strings.HasPrefix(v, s.PrefixMatch)
	case *routev3.HeaderMatcher_StringMatch:
		if !ok {
			return false
		}
		switch p := s.StringMatch.GetMatchPattern().(type) {
		case *matcherv3.StringMatcher_Exact:
			return v == p.Exact
		case *matcherv3.StringMatcher_Prefix:
			return strings.HasPrefix(v, p.Prefix)
		}
	case nil:
		return ok
	}
	return false
}

func mergePerFilter(vh, r map[string]*anypb.Any) map[string]*anypb.Any {
	if len(vh) == 0 {
		return r
	}
	out := make(map[string]*anypb.Any, len(vh)+len(r))
	for k, v := range vh {
		out[k] = v
	}
	for k, v := range r {
		out[k] = v
	}
	return out
}

func pickWeighted(w *routev3.WeightedCluster) string {
	var total uint64
	for _, c := range w.GetClusters() {
		total += uint64(c.GetWeight().GetValue())
	}
	if total == 0 {
		return ""
	}
	n := random(total)
	for _, c := range w.GetClusters() {
		if n < uint64(c.GetWeight().GetValue()) {
			return c.GetName()
		}
		n -= uint64(c.GetWeight().GetValue())
	}
	return ""
}

// contextExtensions returns the route's ExtAuthzPerRoute
// check_settings.context_extensions for the filter named name.
func (m *matchedRoute) contextExtensions(name string) map[string]string {
	if m.perFilter == nil {
		return nil
	}
	a := m.perFilter[name]
	if a == nil {
		return nil
	}
	pr := &extauthzv3.ExtAuthzPerRoute{}
	if a.UnmarshalTo(pr) != nil {
		return nil
	}
	return pr.GetCheckSettings().GetContextExtensions()
}
