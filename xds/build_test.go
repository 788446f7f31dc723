package xds

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	fileaccesslogv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	aggregatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/aggregate/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/testtls"
	"github.com/sluicegw/sluice/policies"
)

// testPolicy is a config with every kind of provider cluster: https by
// DNS name (TLS), plain http to an IP (EDS), listed endpoints (EDS), and a
// fallback model over two providers.
const testPolicy = `
listen: {grpc: "127.0.0.1:9001", envoy: "127.0.0.1:10000"}
providers:
  - {name: openai, kind: openai, base_url: "https://api.openai.com/v1", api_key: sk-x, retries: {max: 2, on: [connect-failure, 5xx, 429]}}
  - {name: azure, kind: azure-openai, base_url: "https://contoso.openai.azure.com", api_key: az, api_version: "2024-10-21", http2: true, timeout: 10m}
  - {name: local, kind: openai-compatible, base_url: "http://127.0.0.1:8081", retries: {max: 0}}
  - {name: pool, kind: openai-compatible, base_url: "http://vllm.internal:8000/v1", endpoints: ["10.0.0.1:8000", "10.0.0.2:8000"],
     circuit_breaker: {max_requests: 64}, outlier_detection: {consecutive_5xx: -1}}
models:
  - {name: gpt-4o, provider: openai}
  - name: gpt-4o-ha
    upstream: gpt-4o
    providers: [{name: openai}, {name: azure, upstream: gpt4o-prod}]
  - {name: llama, provider: pool}
  - {name: mock, provider: local}
xds:
  node_groups:
    - {name: eu, cluster: "eu-*", envoy: "127.0.0.1:10443", sluice_addresses: ["sluice-eu.internal:9001"]}
`

func compile(t testing.TB, yaml string) *policies.Snapshot {
	t.Helper()
	cfg, err := policies.Parse([]byte(yaml), "test.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := policies.Compile(cfg, "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func names[T interface{ GetName() string }](items []T) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.GetName())
	}
	return out
}

func TestBuild(t *testing.T) {
	p := compile(t, testPolicy)
	groups := Groups(p)
	if len(groups) != 2 || groups[1].Envoy != "127.0.0.1:10443" || groups[0].SluiceAddresses[0] != "127.0.0.1:9001" {
		t.Fatalf("Groups = %+v", groups)
	}
	r, err := Build(p, groups[0], FlavourEnvoy)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Snapshot(r); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	wantClusters := []string{"openai", "openai.fallback", "azure", "azure.fallback", "local", "pool", "sluice.fallback.gpt-4o-ha", SluiceCluster}
	if diff := cmp.Diff(wantClusters, names(r.Clusters)); diff != "" {
		t.Errorf("clusters (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"local", "pool"}, func() (out []string) {
		for _, e := range r.Endpoints {
			out = append(out, e.GetClusterName())
		}
		return
	}()); diff != "" {
		t.Errorf("endpoint assignments (-want +got):\n%s", diff)
	}
	cl := map[string]*clusterv3.Cluster{}
	for _, c := range r.Clusters {
		cl[c.GetName()] = c
	}

	openai := cl["openai"]
	if openai.GetType() != clusterv3.Cluster_LOGICAL_DNS || openai.GetTransportSocket() == nil {
		t.Errorf("openai: type %v, TLS %v; want LOGICAL_DNS with TLS", openai.GetType(), openai.GetTransportSocket() != nil)
	}
	if got := openai.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress(); got.GetAddress() != "api.openai.com" || got.GetPortValue() != 443 {
		t.Errorf("openai address = %v", got)
	}
	if cl["local"].GetType() != clusterv3.Cluster_EDS || cl["local"].GetTransportSocket() != nil {
		t.Errorf("local (IP, http): type %v; want EDS without TLS", cl["local"].GetType())
	}
	if cl["pool"].GetOutlierDetection() != nil || cl["pool"].GetCircuitBreakers().GetThresholds()[0].GetMaxRequests().GetValue() != 64 {
		t.Errorf("pool: outlier %v, breakers %v", cl["pool"].GetOutlierDetection(), cl["pool"].GetCircuitBreakers())
	}

	// The aggregate carries the upstream filter chain (Envoy builds it from
	// the route's cluster); its members and plain clusters carry none, and
	// members are never ejected (an attempt's number names its provider).
	upstreamFilters := func(c *clusterv3.Cluster) []*hcmv3.HttpFilter {
		o := &upstreamhttpv3.HttpProtocolOptions{}
		if err := c.GetTypedExtensionProtocolOptions()[httpProtocolOptionsName].UnmarshalTo(o); err != nil {
			t.Fatal(err)
		}
		return o.GetHttpFilters()
	}
	for _, name := range []string{"openai", "openai.fallback", "azure.fallback"} {
		if n := len(upstreamFilters(cl[name])); n != 0 {
			t.Errorf("%s has %d upstream filters, want none", name, n)
		}
	}
	if diff := cmp.Diff(chain.UpstreamHTTPFilters(chain.Options{Cluster: SluiceCluster}), upstreamFilters(cl["sluice.fallback.gpt-4o-ha"]), protocmp.Transform()); diff != "" {
		t.Errorf("aggregate upstream filters (-want +got):\n%s", diff)
	}
	if openai.GetOutlierDetection() == nil || cl["openai.fallback"].GetOutlierDetection() != nil {
		t.Errorf("outlier detection: openai %v, openai.fallback %v; want it on the plain cluster only", openai.GetOutlierDetection(), cl["openai.fallback"].GetOutlierDetection())
	}
	if vh := r.Routes[0].GetVirtualHosts()[0]; vh.GetIncludeRequestAttemptCount() || vh.GetIncludeAttemptCountInResponse() {
		t.Error("the virtual host numbers attempts: x-envoy-attempt-count would reach every provider (Envoy has no per-route switch)")
	}
	agg := &aggregatev3.ClusterConfig{}
	if err := cl["sluice.fallback.gpt-4o-ha"].GetClusterType().GetTypedConfig().UnmarshalTo(agg); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"openai.fallback", "azure.fallback"}, agg.GetClusters()); diff != "" {
		t.Errorf("aggregate members (-want +got):\n%s", diff)
	}

	// Routes: one per provider, one per fallback model, then the catch-all.
	routes := r.Routes[0].GetVirtualHosts()[0].GetRoutes()
	if diff := cmp.Diff([]string{"openai", "azure", "local", "pool", "sluice.fallback.gpt-4o-ha", "no-provider"}, names(routes)); diff != "" {
		t.Errorf("routes (-want +got):\n%s", diff)
	}
	byName := map[string]*routev3.Route{}
	for _, rt := range routes {
		byName[rt.GetName()] = rt
	}
	if rp := byName["openai"].GetRoute().GetRetryPolicy(); rp.GetRetryOn() != "connect-failure,5xx,retriable-status-codes" || rp.GetNumRetries().GetValue() != 2 || rp.GetRetriableStatusCodes()[0] != 429 {
		t.Errorf("openai retry policy = %v", rp)
	}
	if rp := byName["local"].GetRoute().GetRetryPolicy(); rp != nil {
		t.Errorf("retries.max 0 still has a retry policy: %v", rp)
	}
	if ra := byName["openai"].GetRoute(); ra.GetTimeout().AsDuration() != 0 || ra.GetIdleTimeout().AsDuration() != policies.DefaultIdleTimeout {
		t.Errorf("openai timeouts: total %v, idle %v; want none and the default idle", ra.GetTimeout().AsDuration(), ra.GetIdleTimeout().AsDuration())
	}
	fb := byName["sluice.fallback.gpt-4o-ha"].GetRoute()
	if fb.GetRetryPolicy().GetNumRetries().GetValue() != 1 || fb.GetRetryPolicy().GetRetryPriority().GetName() != "envoy.retry_priorities.previous_priorities" {
		t.Errorf("fallback retry policy = %v", fb.GetRetryPolicy())
	}
	if fb.GetTimeout().AsDuration() != 0 {
		t.Errorf("fallback timeout %v: a member without a timeout makes it unbounded", fb.GetTimeout().AsDuration())
	}
	// Every route that matches on the routing header removes it before
	// the request goes upstream: no provider sees Sluice's internal header.
	for _, rt := range routes[:len(routes)-1] {
		if diff := cmp.Diff([]string{chain.RoutingHeader}, rt.GetRequestHeadersToRemove()); diff != "" {
			t.Errorf("route %s request_headers_to_remove (-want +got):\n%s", rt.GetName(), diff)
		}
	}
	if dr := byName["no-provider"].GetDirectResponse(); dr.GetStatus() != 404 || !strings.Contains(dr.GetBody().GetInlineString(), "no_route") {
		t.Errorf("catch-all = %v", dr)
	}

	// The listener runs the single definition of Sluice's filters.
	hcm := &hcmv3.HttpConnectionManager{}
	if err := r.Listeners[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(append(chain.HTTPFilters(chain.Options{Cluster: SluiceCluster}), routerFilter()), hcm.GetHttpFilters(), protocmp.Transform()); diff != "" {
		t.Errorf("listener filters (-want +got):\n%s", diff)
	}
	// The edge listener replaces a client's x-request-id with Envoy's own:
	// use_remote_address makes every request from a client an edge request,
	// and the external id is not preserved.
	if !hcm.GetUseRemoteAddress().GetValue() || hcm.GetPreserveExternalRequestId() || hcm.GetInternalAddressConfig() != nil || hcm.GetAlwaysSetRequestIdInResponse() {
		t.Errorf("use_remote_address %v, preserve_external_request_id %v, internal_address_config %v, always_set_request_id_in_response %v; want true, false, unset, false (the provider's x-request-id reaches the client)",
			hcm.GetUseRemoteAddress(), hcm.GetPreserveExternalRequestId(), hcm.GetInternalAddressConfig(), hcm.GetAlwaysSetRequestIdInResponse())
	}
	// Envoy's own local replies are rewritten into JSON errors that state
	// the configured body limit.
	if diff := cmp.Diff(chain.LocalReply(p.Gateway().MaxRequestBodyBytes), hcm.GetLocalReplyConfig(), protocmp.Transform()); diff != "" {
		t.Errorf("local_reply_config (-want +got):\n%s", diff)
	}
	// One path for every filter and the provider: normalized, slashes
	// merged, an escaped slash or backslash refused (build.go).
	if diff := cmp.Diff(wantPathNormalization(), pathNormalization(hcm), protocmp.Transform()); diff != "" {
		t.Errorf("path normalization (-want +got):\n%s", diff)
	}
	if r.Listeners[0].GetAddress().GetSocketAddress().GetPortValue() != 10000 || len(hcm.GetAccessLog()) != 1 {
		t.Fatalf("listener address %v, access logs %d", r.Listeners[0].GetAddress(), len(hcm.GetAccessLog()))
	}
	// The access log carries Sluice's usage metadata.
	fal := &fileaccesslogv3.FileAccessLog{}
	if err := hcm.GetAccessLog()[0].GetTypedConfig().UnmarshalTo(fal); err != nil {
		t.Fatal(err)
	}
	format := fal.GetLogFormat().GetJsonFormat().GetFields()
	for field, want := range map[string]string{
		"cost_micros": "%DYNAMIC_METADATA(sluice:cost_micros)%", "input_tokens": "%DYNAMIC_METADATA(sluice:input_tokens)%",
		"output_tokens": "%DYNAMIC_METADATA(sluice:output_tokens)%", "model": "%DYNAMIC_METADATA(sluice:model)%",
		"provider": "%DYNAMIC_METADATA(sluice:provider)%", "key_id": "%DYNAMIC_METADATA(sluice:key_id)%",
	} {
		if got := format[field].GetStringValue(); got != want {
			t.Errorf("access log field %s = %q, want %q", field, got, want)
		}
	}
	if fal.GetPath() != "/dev/stdout" {
		t.Errorf("access log path %q", fal.GetPath())
	}

	// The eu group: its own listener port and Sluice addresses (a DNS
	// name, so STRICT_DNS).
	eu, err := Build(p, groups[1], FlavourEnvoy)
	if err != nil {
		t.Fatal(err)
	}
	if eu.Listeners[0].GetAddress().GetSocketAddress().GetPortValue() != 10443 {
		t.Errorf("eu listener = %v", eu.Listeners[0].GetAddress())
	}
	if c := eu.Clusters[len(eu.Clusters)-1]; c.GetType() != clusterv3.Cluster_STRICT_DNS {
		t.Errorf("eu sluice cluster type %v", c.GetType())
	}
}

// TestBuildGRPCFlavour: a proxyless gRPC client gets its api_listener
// either way, and the providers' routes and clusters only with
// xds.proxyless: routing_only; otherwise one virtual host without routes
// and nothing else.
func TestBuildGRPCFlavour(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		clusters   []string // none: no cluster at all
		routes     []string
	}{
		{"default (off)", testPolicy, nil, nil},
		{"off", strings.Replace(testPolicy, "xds:\n", "xds:\n  proxyless: \"off\"\n", 1), nil, nil},
		{"routing_only", strings.Replace(testPolicy, "xds:\n", "xds:\n  proxyless: routing_only\n", 1),
			[]string{"openai", "azure", "local", "pool"}, []string{"openai", "azure", "local", "pool", "no-provider"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := compile(t, tc.yaml)
			r, err := Build(p, Groups(p)[0], FlavourGRPC)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := Snapshot(r); err != nil {
				t.Fatalf("Snapshot: %v", err)
			}
			l := r.Listeners[0]
			if l.GetName() != "sluice-grpc" || l.GetApiListener() == nil || l.GetAddress() != nil {
				t.Errorf("grpc listener = %v", l)
			}
			if diff := cmp.Diff(tc.clusters, names(r.Clusters)); diff != "" {
				t.Errorf("clusters (-want +got):\n%s", diff)
			}
			if tc.clusters == nil && len(r.Endpoints) != 0 {
				t.Errorf("%d endpoint assignments, want none", len(r.Endpoints))
			}
			if len(r.Routes) != 1 || r.Routes[0].GetName() != RouteName || len(r.Routes[0].GetVirtualHosts()) != 1 {
				t.Fatalf("routes = %v, want one configuration %q with one virtual host", r.Routes, RouteName)
			}
			vh := r.Routes[0].GetVirtualHosts()[0]
			if diff := cmp.Diff(tc.routes, names(vh.GetRoutes())); diff != "" || !slices.Equal(vh.GetDomains(), []string{"*"}) {
				t.Errorf("virtual host domains %v, routes (-want +got):\n%s", vh.GetDomains(), diff)
			}
		})
	}
}

// tlsPolicy has an https provider on the default CA bundle, one behind a
// private CA, an HTTP/2 one, and a node group whose Envoys keep the system
// bundle where RHEL does.
const tlsPolicy = `
listen: {grpc: "127.0.0.1:9001", envoy: "127.0.0.1:10000"}
providers:
  - {name: public, kind: openai-compatible, base_url: "https://api.example.com/v1"}
  - {name: corp, kind: openai-compatible, base_url: "https://LLM.corp.example:8443", endpoints: ["10.0.0.7:8443"], ca_file: /etc/sluice/corp-ca.pem}
  - {name: h2, kind: openai-compatible, base_url: "https://h2.example.com", http2: true}
  - {name: plain, kind: openai-compatible, base_url: "http://10.0.0.8:8000"}
models:
  - {name: m, provider: public}
xds:
  proxyless: routing_only
  node_groups:
    - {name: rhel, cluster: "rhel-*", upstream_ca_file: /etc/pki/tls/certs/ca-bundle.crt}
`

// upstreamTLS returns the UpstreamTlsContext of each cluster that has one.
func upstreamTLS(t *testing.T, r *Resources) map[string]*tlsv3.UpstreamTlsContext {
	t.Helper()
	out := map[string]*tlsv3.UpstreamTlsContext{}
	for _, c := range r.Clusters {
		ts := c.GetTransportSocket()
		if ts == nil {
			continue
		}
		if ts.GetName() != "envoy.transport_sockets.tls" {
			t.Errorf("cluster %s: transport socket %q", c.GetName(), ts.GetName())
		}
		tc := &tlsv3.UpstreamTlsContext{}
		if err := ts.GetTypedConfig().UnmarshalTo(tc); err != nil {
			t.Fatal(err)
		}
		out[c.GetName()] = tc
	}
	return out
}

// envoyTLSContext is what a real Envoy accepts and verifies with: the CA
// bundle as trusted_ca (never system_root_certs, which Envoy does not
// implement), SNI and an exact DNS SAN of the host, the cluster's ALPN.
func envoyTLSContext(host, ca, alpn string) *tlsv3.UpstreamTlsContext {
	return &tlsv3.UpstreamTlsContext{Sni: host, CommonTlsContext: &tlsv3.CommonTlsContext{
		AlpnProtocols: []string{alpn},
		ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa:                 &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: ca}},
			MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{SanType: tlsv3.SubjectAltNameMatcher_DNS, Matcher: exactMatcher(host)}},
		}},
	}}
}

func TestProviderTLS(t *testing.T) {
	p := compile(t, tlsPolicy)
	groups := Groups(p)
	const system, rhel, corp = "/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/sluice/corp-ca.pem"
	for _, tc := range []struct {
		group int
		want  map[string]*tlsv3.UpstreamTlsContext
	}{
		{0, map[string]*tlsv3.UpstreamTlsContext{
			"public": envoyTLSContext("api.example.com", system, "http/1.1"),
			"corp":   envoyTLSContext("llm.corp.example", corp, "http/1.1"),
			"h2":     envoyTLSContext("h2.example.com", system, "h2"),
		}},
		// The group's bundle replaces the default; a provider's own CA
		// still wins.
		{1, map[string]*tlsv3.UpstreamTlsContext{
			"public": envoyTLSContext("api.example.com", rhel, "http/1.1"),
			"corp":   envoyTLSContext("llm.corp.example", corp, "http/1.1"),
			"h2":     envoyTLSContext("h2.example.com", rhel, "h2"),
		}},
	} {
		g := groups[tc.group]
		r, err := Build(p, g, FlavourEnvoy)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := Snapshot(r); err != nil {
			t.Fatalf("group %q: Snapshot: %v", g.Name, err)
		}
		if diff := cmp.Diff(tc.want, upstreamTLS(t, r), protocmp.Transform()); diff != "" {
			t.Errorf("group %q: UpstreamTlsContexts (-want +got):\n%s", g.Name, diff)
		}
		for name, want := range map[string]string{"public": tc.want["public"].GetCommonTlsContext().GetValidationContext().GetTrustedCa().GetFilename(), "corp": corp, "plain": ""} {
			pr, _ := p.Provider(name)
			if got := CAFile(pr, g); got != want {
				t.Errorf("group %q: CAFile(%s) = %q, want %q", g.Name, name, got, want)
			}
		}
	}

	// Proxyless gRPC clients: the forms grpc-go reads (it ignores
	// trusted_ca): system roots, or the bootstrap's certificate provider
	// instance for a provider with its own CA; SANs in the field grpc-go
	// reads.
	r, err := Build(p, groups[1], FlavourGRPC)
	if err != nil {
		t.Fatal(err)
	}
	grpcContext := func(host string, roots func(*tlsv3.CertificateValidationContext)) *tlsv3.UpstreamTlsContext {
		vc := &tlsv3.CertificateValidationContext{MatchSubjectAltNames: []*matcherv3.StringMatcher{exactMatcher(host)}}
		roots(vc)
		return &tlsv3.UpstreamTlsContext{Sni: host, CommonTlsContext: &tlsv3.CommonTlsContext{
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc},
		}}
	}
	systemRoots := func(vc *tlsv3.CertificateValidationContext) {
		vc.SystemRootCerts = &tlsv3.CertificateValidationContext_SystemRootCerts{}
	}
	want := map[string]*tlsv3.UpstreamTlsContext{
		"public": grpcContext("api.example.com", systemRoots),
		"corp": grpcContext("llm.corp.example", func(vc *tlsv3.CertificateValidationContext) {
			vc.CaCertificateProviderInstance = &tlsv3.CertificateProviderPluginInstance{InstanceName: "sluice.corp"}
		}),
		"h2": grpcContext("h2.example.com", systemRoots),
	}
	if diff := cmp.Diff(want, upstreamTLS(t, r), protocmp.Transform()); diff != "" {
		t.Errorf("gRPC flavour UpstreamTlsContexts (-want +got):\n%s", diff)
	}
}

func TestSnapshotVersions(t *testing.T) {
	p := compile(t, testPolicy)
	version := func(p *policies.Snapshot) (map[string]string, string) {
		r, err := Build(p, Groups(p)[0], FlavourEnvoy)
		if err != nil {
			t.Fatal(err)
		}
		s, v, err := Snapshot(r)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, typ := range typeOrder {
			out[ShortType(typ)] = s.GetVersion(typ)
		}
		return out, v
	}
	a, va := version(p)
	b, vb := version(compile(t, testPolicy))
	if va != vb || !cmp.Equal(a, b) {
		t.Errorf("the same config gave versions %v (%s) and %v (%s)", a, va, b, vb)
	}
	// A new idle timeout changes the routes only.
	c, vc := version(compile(t, strings.Replace(testPolicy, "timeout: 10m", "timeout: 10m, idle_timeout: 1m", 1)))
	if vc == va || c["rds"] == a["rds"] || c["cds"] != a["cds"] || c["lds"] != a["lds"] || c["eds"] != a["eds"] {
		t.Errorf("idle timeout change: %v → %v", a, c)
	}
	// Keys, teams and prices are not Envoy's business: same resources.
	_, vd := version(compile(t, testPolicy+"\npricing: {gpt-4o: {input: 1, output: 2}}\nteams: [{name: t}]\n"))
	if vd != va {
		t.Errorf("pricing and teams changed the xDS version")
	}
}

func TestSnapshotRefusesBrokenReferences(t *testing.T) {
	p := compile(t, testPolicy)
	tests := []struct {
		name   string
		breakR func(r *Resources)
		want   string
	}{
		{"route to a missing cluster", func(r *Resources) {
			r.Routes[0].VirtualHosts[0].Routes[0].GetRoute().ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: "ghost"}
		}, `names cluster "ghost", which does not exist`},
		{"aggregate member missing", func(r *Resources) {
			r.Clusters = removeCluster(r.Clusters, "azure.fallback")
		}, `aggregate member "azure.fallback" does not exist`},
		{"EDS without assignment", func(r *Resources) { r.Endpoints = r.Endpoints[1:] }, `EDS service "local" has no ClusterLoadAssignment`},
		{"filter names another cluster", func(r *Resources) {
			hcm := &hcmv3.HttpConnectionManager{}
			f := r.Listeners[0].FilterChains[0].Filters[0]
			if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
				t.Fatal(err)
			}
			hcm.HttpFilters = chain.HTTPFilters(chain.Options{Cluster: "elsewhere"})
			f.GetTypedConfig().Value = mustAny(hcm).Value
		}, `gRPC service names cluster "elsewhere", want "sluice.extension"`},
		{"no router", func(r *Resources) {
			hcm := &hcmv3.HttpConnectionManager{}
			f := r.Listeners[0].FilterChains[0].Filters[0]
			if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
				t.Fatal(err)
			}
			hcm.HttpFilters = hcm.HttpFilters[:len(hcm.HttpFilters)-1]
			f.GetTypedConfig().Value = mustAny(hcm).Value
		}, "the last HTTP filter must be the router"},
		{"Sluice cluster missing", func(r *Resources) { r.Clusters = removeCluster(r.Clusters, SluiceCluster) }, `names cluster "sluice.extension", which does not exist`},
		{"listener names a missing route configuration", func(r *Resources) { r.Routes[0].Name = "other" }, `RDS names route configuration "sluice", which does not exist`},
		{"HCM without stat_prefix, inside an Any", func(r *Resources) {
			hcm := &hcmv3.HttpConnectionManager{}
			f := r.Listeners[0].FilterChains[0].Filters[0]
			if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
				t.Fatal(err)
			}
			hcm.StatPrefix = ""
			f.GetTypedConfig().Value = mustAny(hcm).Value
		}, "StatPrefix"},
		{"invalid cluster", func(r *Resources) { r.Clusters[0].ConnectTimeout.Seconds = -1 }, "ConnectTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Build(p, Groups(p)[0], FlavourEnvoy)
			if err != nil {
				t.Fatal(err)
			}
			tt.breakR(r)
			_, _, err = Snapshot(r)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Snapshot error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func removeCluster(cs []*clusterv3.Cluster, name string) []*clusterv3.Cluster {
	var out []*clusterv3.Cluster
	for _, c := range cs {
		if c.GetName() != name {
			out = append(out, c)
		}
	}
	return out
}

// BenchmarkBuildAndValidate is the work of one config change for one group
// and flavour: build the resources, validate them deeply, hash versions.
func BenchmarkBuildAndValidate(b *testing.B) {
	p := compile(b, testPolicy)
	g := Groups(p)[0]
	b.ReportAllocs()
	for b.Loop() {
		r, err := Build(p, g, FlavourEnvoy)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := Snapshot(r); err != nil {
			b.Fatal(err)
		}
	}
}

// TestGRPCClientPrivateCA: grpc-go, the judge of the gRPC flavour,
// accepts the cluster of a provider behind a private CA once its
// bootstrap defines the certificate provider instance the cluster names,
// and routes to it; a client whose bootstrap lacks the instance NACKs it
// (as it NACKs the system-roots form without
// GRPC_EXPERIMENTAL_XDS_SYSTEM_ROOT_CERTS, TestGRPCClient).
func TestGRPCClientPrivateCA(t *testing.T) {
	ts := startXDS(t)
	addrA, addrB := startBackend(t, "A"), startBackend(t, "B")
	policy := strings.Replace(grpcPolicy("https", addrA, addrB, "5s"), `connect_timeout: 5s}`, `connect_timeout: 5s, ca_file: /etc/sluice/a-ca.pem}`, 1)
	if !strings.Contains(policy, "ca_file") {
		t.Fatal("the policy has no ca_file")
	}
	ts.update(t, policy)
	v := ts.served(t, FlavourGRPC)
	caFile := testtls.NewCA(t, "a's CA").WriteFile(t)

	with := newGRPCClientBootstrap(t, ts.addr, fmt.Sprintf(`"certificate_providers": {"sluice.a": {"plugin_name": "file_watcher", "config": {"ca_certificate_file": %q}}}`, caFile))
	with.waitRoute("a", "A") // the first RPC makes the channel connect
	with.waitRoute("b", "B")
	ts.waitNode(t, with.node, "ACK all four types", func(n NodeStatus) bool { return ackedAll(n, v) })

	without := newGRPCClientBootstrap(t, ts.addr, "")
	// An RPC makes the channel connect; it cannot succeed (the route
	// configuration names a cluster grpc-go refused) and ends when the
	// channel closes.
	go func() { _, _ = without.call("b") }()
	n := ts.waitNode(t, without.node, "NACK the cluster", func(n NodeStatus) bool { return n.Nacked["cds"] == v[resourcev3.ClusterType] })
	if !strings.Contains(n.LastError, `root certificate provider instance name "sluice.a" missing in bootstrap configuration`) {
		t.Errorf("NACK error %q, want the missing instance sluice.a", n.LastError)
	}
}

// wantPathNormalization is the path handling of Sluice's listener: the
// three connection-manager fields, nothing else set.
func wantPathNormalization() *hcmv3.HttpConnectionManager {
	return &hcmv3.HttpConnectionManager{
		NormalizePath:                wrapperspb.Bool(true),
		MergeSlashes:                 true,
		PathWithEscapedSlashesAction: hcmv3.HttpConnectionManager_REJECT_REQUEST,
	}
}

// pathNormalization is h's path handling alone.
func pathNormalization(h *hcmv3.HttpConnectionManager) *hcmv3.HttpConnectionManager {
	return &hcmv3.HttpConnectionManager{
		NormalizePath:                h.GetNormalizePath(),
		MergeSlashes:                 h.GetMergeSlashes(),
		PathWithEscapedSlashesAction: h.GetPathWithEscapedSlashesAction(),
		PathNormalizationOptions:     h.GetPathNormalizationOptions(),
	}
}
