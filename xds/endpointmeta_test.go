package xds

import (
	"strings"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/sluicegw/sluice/internal/chain"
)

// TestEndpointsNameTheirProvider: every endpoint of a provider's clusters
// — LOGICAL_DNS load assignments (a fallback member's included) and EDS
// assignments, which a provider's cluster and its fallback member share —
// carries the provider's name in its metadata, where a fallback attempt's
// upstream ext_proc reads it (chain.UpstreamHostProviderAttribute), and
// the upstream filter asks for exactly that attribute.
func TestEndpointsNameTheirProvider(t *testing.T) {
	r, err := Build(compile(t, testPolicy), Groups(compile(t, testPolicy))[0], FlavourEnvoy)
	if err != nil {
		t.Fatal(err)
	}
	provider := func(cluster string) string { return strings.TrimSuffix(cluster, FallbackSuffix) }
	check := func(where, want string, la *endpointv3.ClusterLoadAssignment) {
		n := 0
		for _, lle := range la.GetEndpoints() {
			for _, lb := range lle.GetLbEndpoints() {
				n++
				got := lb.GetMetadata().GetFilterMetadata()[chain.EndpointMetadataNamespace].GetFields()[chain.EndpointProviderKey].GetStringValue()
				if got != want {
					t.Errorf("%s: endpoint %v names provider %q, want %q", where, lb.GetEndpoint().GetAddress(), got, want)
				}
			}
		}
		if n == 0 {
			t.Errorf("%s: no endpoints", where)
		}
	}
	seen := map[string]bool{}
	for _, c := range r.Clusters {
		if la := c.GetLoadAssignment(); la != nil && c.GetName() != SluiceCluster {
			check("cluster "+c.GetName(), provider(c.GetName()), la)
			seen[c.GetName()] = true
		}
	}
	for _, la := range r.Endpoints {
		check("assignment "+la.GetClusterName(), la.GetClusterName(), la)
		seen[la.GetClusterName()] = true
	}
	for _, name := range []string{"openai", "openai.fallback", "azure.fallback", "local", "pool"} {
		if !seen[name] {
			t.Errorf("no load assignment checked for %s", name)
		}
	}
	if got := chain.UpstreamExtProc(chain.Options{Cluster: SluiceCluster}).GetRequestAttributes(); len(got) != 1 || got[0] != chain.UpstreamHostProviderAttribute {
		t.Errorf("upstream ext_proc request_attributes %v", got)
	}
}
