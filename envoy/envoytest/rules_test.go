package envoytest

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// tlsProvider is a cluster speaking TLS to an https provider with the
// validation context v.
func tlsProvider(t testing.TB, v *tlsv3.CertificateValidationContext) *clusterv3.Cluster {
	c := testCluster(t, "provider", "127.0.0.1:1", false)
	c.TransportSocket = &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{
		TypedConfig: mustAny(t, &tlsv3.UpstreamTlsContext{Sni: "api.provider.example", CommonTlsContext: &tlsv3.CommonTlsContext{
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: v},
		}}),
	}}
	return c
}

func sanFor(host string) []*tlsv3.SubjectAltNameMatcher {
	return []*tlsv3.SubjectAltNameMatcher{{SanType: tlsv3.SubjectAltNameMatcher_DNS,
		Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: host}}}}
}

// A bootstrap that a real Envoy refuses at load is refused by New, with
// Envoy's message and the field's path; its near miss loads.
func TestRulesRefuseBootstrap(t *testing.T) {
	const tlsPath = "static_resources.clusters[0].transport_socket.typed_config(envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext).common_tls_context.validation_context"
	authz := func(v corev3.ApiVersion) *bootstrapv3.Bootstrap {
		return testBootstrap(t, routeAll("upstream"), []*clusterv3.Cluster{
			testCluster(t, "upstream", "127.0.0.1:1", false), testCluster(t, "authz", "127.0.0.1:1", true),
		}, filterOf(t, "authz", &extauthzv3.ExtAuthz{Services: &extauthzv3.ExtAuthz_GrpcService{GrpcService: grpcCluster("authz", -1)}, TransportApiVersion: v}))
	}
	for _, tc := range []struct {
		name     string
		bad      *bootstrapv3.Bootstrap
		want     []string               // substrings of New's error
		nearMiss *bootstrapv3.Bootstrap // nil: none here
	}{
		{
			// The TLS cluster that broke every https provider on a real
			// Envoy. Its near miss, with trusted_ca, needs a CA bundle the
			// emulator can read and speak TLS with: envoyrules' tests have
			// it.
			name: "SAN matcher without trusted_ca",
			bad: testBootstrap(t, routeAll("provider"), []*clusterv3.Cluster{tlsProvider(t, &tlsv3.CertificateValidationContext{
				SystemRootCerts: &tlsv3.CertificateValidationContext_SystemRootCerts{}, MatchTypedSubjectAltNames: sanFor("api.provider.example")})}),
			want: []string{tlsPath + ": SAN-based verification of peer certificates without trusted CA is insecure and not allowed [refused by Envoy: tls.san-without-trusted-ca]"},
		},
		{
			name:     "ext_authz without transport_api_version V3",
			bad:      authz(corev3.ApiVersion_AUTO),
			want:     []string{".typed_config(envoy.extensions.filters.http.ext_authz.v3.ExtAuthz).transport_api_version: V2 (and AUTO) xDS transport protocol versions are deprecated"},
			nearMiss: authz(corev3.ApiVersion_V3),
		},
		{
			// An inline route configuration validates its clusters: Envoy
			// refuses it, naming the cluster (the emulator refuses it too,
			// in its own words; both are reported).
			name: "inline route to a cluster that does not exist",
			bad:  testBootstrap(t, routeAll("missing"), []*clusterv3.Cluster{testCluster(t, "upstream", "127.0.0.1:1", false)}),
			want: []string{
				`listener "ingress": filter_chains[0].filters[0].typed_config(envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager).route_config.virtual_hosts[0].routes[0].route.cluster: ` +
					"route: unknown cluster 'missing' [refused by Envoy: set.route-clusters-exist]",
				`route_config "local" names cluster "missing", which is not defined`,
			},
			nearMiss: func() *bootstrapv3.Bootstrap {
				rc := routeAll("missing")
				rc.ValidateClusters = wrapperspb.Bool(false)
				return testBootstrap(t, rc, []*clusterv3.Cluster{testCluster(t, "upstream", "127.0.0.1:1", false), testCluster(t, "missing", "127.0.0.1:1", false)})
			}(),
		},
		{
			// A rule's refusal and the emulator's own are both reported.
			name: "ext_proc with both services",
			bad: func() *bootstrapv3.Bootstrap {
				ep := &extprocv3.ExternalProcessor{GrpcService: grpcCluster("proc", -1), HttpService: &extprocv3.ExtProcHttpService{}}
				return testBootstrap(t, routeAll("upstream"), []*clusterv3.Cluster{
					testCluster(t, "upstream", "127.0.0.1:1", false), testCluster(t, "proc", "127.0.0.1:1", true),
				}, filterOf(t, "proc", ep))
			}(),
			want: []string{
				"One and only one of grpc_service or http_service must be configured [refused by Envoy: extproc.one-service]",
				"http_service is not supported by the emulator",
			},
			nearMiss: testBootstrap(t, routeAll("upstream"), []*clusterv3.Cluster{
				testCluster(t, "upstream", "127.0.0.1:1", false), testCluster(t, "proc", "127.0.0.1:1", true),
			}, filterOf(t, "proc", &extprocv3.ExternalProcessor{GrpcService: grpcCluster("proc", -1)})),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.bad, Options{})
			if err == nil {
				t.Fatal("New = nil error, want the bootstrap refused")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\nwant it to contain\n%s", err, w)
				}
			}
			if tc.nearMiss == nil {
				return
			}
			e, err := New(tc.nearMiss, Options{})
			if err != nil {
				t.Fatalf("near miss refused: %v", err)
			}
			e.conns.close()
			closeClusters(e.cfg.Load())
		})
	}
}

// A field Envoy ignores is loaded, as Envoy loads it, and logged.
func TestRulesIgnoredFieldLoads(t *testing.T) {
	var logs bytes.Buffer
	b := testBootstrap(t, routeAll("upstream"), []*clusterv3.Cluster{testCluster(t, "upstream", "127.0.0.1:1", false)})
	f := b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0]
	hcm := &hcmv3.HttpConnectionManager{}
	if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	hcm.RepresentIpv4RemoteAddressAsIpv4MappedIpv6 = true
	f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, hcm)}
	e, err := New(b, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.conns.close()
	closeClusters(e.cfg.Load())
	for _, w := range []string{
		"Envoy ignores this field",
		"rule=hidden.HttpConnectionManager.represent_ipv4_remote_address_as_ipv4_mapped_ipv6",
		"field=static_resources.listeners[0].filter_chains[0].filters[0].typed_config(envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager).represent_ipv4_remote_address_as_ipv4_mapped_ipv6",
	} {
		if !strings.Contains(logs.String(), w) {
			t.Errorf("logs %q, want %q", logs.String(), w)
		}
	}
}

// An ADS response that a real Envoy refuses is NACKed with Envoy's
// message; the configuration in force stays.
func TestRulesNackADS(t *testing.T) {
	opts := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opts) })
	one := backend(t, "one")
	cp := startControlPlane(t)
	backendCluster := must[*clusterv3.Cluster](t)(EDSCluster("backend", false))
	good := snap{v: all("1"),
		clusters:  []types.Resource{backendCluster},
		endpoints: []types.Resource{must[*endpointv3.ClusterLoadAssignment](t)(Endpoints("backend", one))},
		listeners: []types.Resource{must[*listenerv3.Listener](t)(RDSListener("ingress", "routes"))},
		routes:    []types.Resource{routes("routes", "/", "backend")},
	}
	cp.set(t, good)
	e := startADS(t, cp)
	e.serve(t)
	e.wantGet(t, "/", "one")

	twoWildcards := routes("routes", "/", "backend")
	twoWildcards.VirtualHosts = append(twoWildcards.VirtualHosts, &routev3.VirtualHost{Name: "again", Domains: []string{"*"}})
	edsConfigOnStatic := testCluster(t, "static", one, false)
	edsConfigOnStatic.EdsClusterConfig = &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource()}
	for _, tc := range []struct {
		name string
		url  string
		bad  func(s *snap)
		want string
	}{
		{"RDS: two wildcard virtual hosts", resourcev3.RouteType, func(s *snap) {
			s.v.Routes = "2"
			s.routes = []types.Resource{twoWildcards}
		}, `route "routes": virtual_hosts[1].domains[0]: Only a single wildcard domain is permitted in route routes [refused by Envoy: route.unique-domains]`},
		{"CDS: eds_cluster_config on a STATIC cluster", resourcev3.ClusterType, func(s *snap) {
			s.v.Clusters = "2"
			s.clusters = []types.Resource{backendCluster, edsConfigOnStatic}
		}, `cluster "static": eds_cluster_config: eds_cluster_config set in a non-EDS cluster [refused by Envoy: cluster.eds-config-not-eds]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.XDSStatus().Rejected
			next := good
			tc.bad(&next)
			cp.set(t, next)
			// The SnapshotCache resends a rejected version at once
			// (envoy-protocol.md §5): wait for this push's NACK, skipping
			// any left from the one before, then roll back.
			var nack *discoveryv3.DiscoveryRequest
			timeout := time.After(10 * time.Second)
			for nack == nil {
				select {
				case n := <-cp.nacks:
					if n.GetTypeUrl() == tc.url {
						nack = n
					}
				case <-timeout:
					t.Fatal("no NACK")
				}
			}
			cp.set(t, good)
			if nack.GetVersionInfo() != "1" {
				t.Errorf("NACK version_info %q, want the last accepted, 1", nack.GetVersionInfo())
			}
			if d := nack.GetErrorDetail().GetMessage(); d != tc.want {
				t.Errorf("error_detail\n got %q\nwant %q", d, tc.want)
			}
			if s := e.XDSStatus(); s.Rejected <= before || s.Active != all("1") {
				t.Errorf("status %+v, want a rejection and version 1 in force", s)
			}
			e.wantGet(t, "/", "one")
		})
	}
}
