package xds

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/policies"
)

// Where the Istio manifests assume Sluice runs (envoy/istio/README.md):
// the Service sluice in namespace sluice-system, gRPC on port 9001, pods
// labelled app: sluice.
const (
	istioSluiceNamespace = "sluice-system"
	istioSluiceHost      = "sluice." + istioSluiceNamespace + ".svc.cluster.local"
	istioSluiceGRPCPort  = "9001"
	istioSluiceLabel     = "app"
	istioSluiceApp       = "sluice"
)

// istioCluster is the cluster the Istio manifests' filters call: istiod's
// own outbound cluster for Sluice's Service, which has Istio mTLS.
const istioCluster = "outbound|" + istioSluiceGRPCPort + "||" + istioSluiceHost

// istioReferencedServices is the EnvoyFilter annotation that keeps a
// service's clusters on a gateway whose istiod filters them
// (PILOT_FILTER_GATEWAY_CLUSTER_CONFIG), Istio 1.26+.
const istioReferencedServices = "envoyfilter.istio.io/referenced-services"

// istioManifest is one YAML document of envoy/istio: an Istio resource.
type istioManifest struct {
	file       string
	APIVersion string        `yaml:"apiVersion"`
	Kind       string        `yaml:"kind"`
	Metadata   istioMetadata `yaml:"metadata"`
	Spec       yaml.Node     `yaml:"spec"`
}

// istioMetadata is the part of Kubernetes' ObjectMeta a manifest may set;
// any other field is refused.
type istioMetadata struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// istioEnvoyFilterSpec is the part of an EnvoyFilter the tests check.
type istioEnvoyFilterSpec struct {
	WorkloadSelector struct {
		Labels map[string]string `yaml:"labels"`
	} `yaml:"workloadSelector"`
	ConfigPatches []struct {
		ApplyTo string `yaml:"applyTo"`
		Match   struct {
			Context  string `yaml:"context"`
			Listener *struct {
				FilterChain struct {
					Filter struct {
						Name      string `yaml:"name"`
						SubFilter struct {
							Name string `yaml:"name"`
						} `yaml:"subFilter"`
					} `yaml:"filter"`
				} `yaml:"filterChain"`
			} `yaml:"listener"`
		} `yaml:"match"`
		Patch struct {
			Operation string `yaml:"operation"`
			Value     any    `yaml:"value"`
		} `yaml:"patch"`
	} `yaml:"configPatches"`
}

// readIstioManifests reads every document of ../envoy/istio/*.yaml.
func readIstioManifests(t *testing.T) []istioManifest {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "envoy", "istio", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no manifests in ../envoy/istio")
	}
	var out []istioManifest
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ms, err := decodeIstioManifests(filepath.Base(f), data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ms...)
	}
	return out
}

// decodeIstioManifests decodes the YAML documents of one file, refusing
// unknown top-level and metadata fields.
func decodeIstioManifests(file string, data []byte) ([]istioManifest, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var out []istioManifest
	for i := 0; ; i++ {
		var m istioManifest
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i, err)
		}
		m.file = file
		out = append(out, m)
	}
}

// parsePatchValue parses an EnvoyFilter patch value the way Istio does, as
// Envoy's proto JSON (YAML → JSON → protojson), refusing unknown fields and
// types that are not linked in, then validates it deeply.
func parsePatchValue(t *testing.T, v any, into proto.Message) {
	t.Helper()
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(js, into); err != nil {
		t.Fatalf("patch.value as %T: %v", into, err)
	}
	if err := Validate(into); err != nil {
		t.Errorf("patch.value as %T: %v", into, err)
	}
}

// The EnvoyFilter carries exactly Sluice's filters, as package chain
// defines them, calling Istio's own cluster for Sluice's Service.
func TestIstioEnvoyFilter(t *testing.T) {
	opts := chain.Options{Cluster: istioCluster, Authority: istioSluiceHost}
	wantFilters := chain.HTTPFilters(opts)
	var gotFilters []*hcmv3.HttpFilter
	var listeners []*listenerv3.Listener
	var hcms []*hcmv3.HttpConnectionManager

	for _, m := range readIstioManifests(t) {
		if m.Kind != "EnvoyFilter" {
			continue
		}
		where := m.file + ": EnvoyFilter " + m.Metadata.Name
		if m.APIVersion != "networking.istio.io/v1alpha3" {
			t.Errorf("%s: apiVersion %q", where, m.APIVersion)
		}
		var spec istioEnvoyFilterSpec
		if err := m.Spec.Decode(&spec); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if got := spec.WorkloadSelector.Labels; len(got) != 1 || got["istio"] != "ingressgateway" {
			t.Errorf("%s: workloadSelector.labels %v, want istio: ingressgateway", where, got)
		}
		if got, want := m.Metadata.Annotations[istioReferencedServices], istioSluiceNamespace+"/"+istioSluiceHost; got != want {
			t.Errorf("%s: annotation %s %q, want %q (the Service whose cluster the filters call)", where, istioReferencedServices, got, want)
		}
		for i, p := range spec.ConfigPatches {
			if p.Match.Context != "GATEWAY" {
				t.Errorf("%s: configPatches[%d]: match.context %q, want GATEWAY", where, i, p.Match.Context)
			}
			switch p.ApplyTo {
			case "CLUSTER":
				// A cluster an EnvoyFilter adds gets no mesh mTLS: the
				// filters call istiod's own cluster for Sluice's Service.
				t.Errorf("%s: configPatches[%d]: a CLUSTER patch; the filters must call %s, which has Istio mTLS", where, i, istioCluster)
			case "LISTENER":
				if p.Patch.Operation != "MERGE" {
					t.Errorf("%s: configPatches[%d]: LISTENER patch %s, want MERGE", where, i, p.Patch.Operation)
				}
				l := &listenerv3.Listener{}
				parsePatchValue(t, p.Patch.Value, l)
				listeners = append(listeners, l)
			case "NETWORK_FILTER":
				fc := p.Match.Listener
				if p.Patch.Operation != "MERGE" || fc == nil || fc.FilterChain.Filter.Name != "envoy.filters.network.http_connection_manager" {
					t.Errorf("%s: configPatches[%d]: want MERGE into the http_connection_manager", where, i)
				}
				// A MERGE value is partial (Istio merges it into the
				// gateway's connection manager), so only what it sets is
				// validated.
				js, err := json.Marshal(p.Patch.Value)
				if err != nil {
					t.Fatal(err)
				}
				f := &listenerv3.Filter{}
				if err := protojson.Unmarshal(js, f); err != nil {
					t.Fatalf("%s: configPatches[%d]: patch.value as a network filter: %v", where, i, err)
				}
				hcm := &hcmv3.HttpConnectionManager{}
				if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
					t.Fatalf("%s: configPatches[%d]: %v", where, i, err)
				}
				if err := Validate(hcm.GetLocalReplyConfig()); err != nil {
					t.Errorf("%s: configPatches[%d]: local_reply_config: %v", where, i, err)
				}
				hcms = append(hcms, hcm)
			case "HTTP_FILTER":
				fc := p.Match.Listener
				if p.Patch.Operation != "INSERT_BEFORE" || fc == nil ||
					fc.FilterChain.Filter.Name != "envoy.filters.network.http_connection_manager" ||
					fc.FilterChain.Filter.SubFilter.Name != "envoy.filters.http.router" {
					t.Errorf("%s: configPatches[%d]: want INSERT_BEFORE envoy.filters.http.router in the http_connection_manager", where, i)
				}
				f := &hcmv3.HttpFilter{}
				parsePatchValue(t, p.Patch.Value, f)
				gotFilters = append(gotFilters, f)
			default:
				t.Errorf("%s: configPatches[%d]: unexpected applyTo %q", where, i, p.ApplyTo)
			}
		}
	}

	// INSERT_BEFORE the router, in order: the result is the chain's order.
	if diff := cmp.Diff(wantFilters, gotFilters, protocmp.Transform()); diff != "" {
		t.Errorf("HTTP_FILTER patches differ from chain.HTTPFilters (-chain +manifest):\n%s", diff)
	}
	// The same, per filter config, for a clearer message on drift.
	for _, f := range gotFilters {
		var want proto.Message
		switch f.GetName() {
		case chain.AuthzFilterName:
			want = chain.Authz(opts)
		case chain.ExtProcFilterName:
			want = chain.ExtProc(opts)
		default:
			continue
		}
		got, err := f.GetTypedConfig().UnmarshalNew()
		if err != nil {
			t.Errorf("%s: %v", f.GetName(), err)
			continue
		}
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("%s typed_config differs from package chain (-chain +manifest):\n%s", f.GetName(), diff)
		}
	}

	// The buffer holds Sluice's default body limit plus the margin Sluice's
	// own listener has, so Sluice refuses a body a little over the limit
	// with its JSON 413 before Envoy's buffer does (xds/build.go).
	if len(listeners) != 1 {
		t.Fatalf("%d LISTENER patches, want 1 (the buffer limit)", len(listeners))
	}
	g := policies.Default().Gateway
	if g.MaxRequestBodyBytes != chain.MaxRequestBodySize {
		t.Fatalf("the default body limit %d is not chain.MaxRequestBodySize %d", g.MaxRequestBodyBytes, chain.MaxRequestBodySize)
	}
	if got, want := int64(listeners[0].GetPerConnectionBufferLimitBytes().GetValue()), g.BodyBufferBytes(); got != want {
		t.Errorf("per_connection_buffer_limit_bytes %d, want %d (policies.Gateway.BodyBufferBytes)", got, want)
	}
	// Envoy's own replies get the API's JSON error shape, as on Sluice's
	// own listener.
	if len(hcms) != 1 {
		t.Fatalf("%d NETWORK_FILTER patches, want 1 (the local_reply_config)", len(hcms))
	}
	if diff := cmp.Diff(chain.LocalReply(g.MaxRequestBodyBytes), hcms[0].GetLocalReplyConfig(), protocmp.Transform()); diff != "" {
		t.Errorf("local_reply_config differs from chain.LocalReply (-chain +manifest):\n%s", diff)
	}
	// The gateway normalizes paths as Sluice's own listener does, so the
	// path ext_proc classifies is the one the provider gets.
	if diff := cmp.Diff(wantPathNormalization(), pathNormalization(hcms[0]), protocmp.Transform()); diff != "" {
		t.Errorf("the connection manager's path normalization differs from Sluice's listener (-xds +manifest):\n%s", diff)
	}
}

// The routing examples are Istio resources of the expected kinds, and the
// VirtualService routes on Sluice's routing header.
func TestIstioRoutingExamples(t *testing.T) {
	kinds := map[string]int{}
	for _, m := range readIstioManifests(t) {
		where := m.file + ": " + m.Kind + " " + m.Metadata.Name
		if m.file == istioSecurityFile {
			continue // TestIstioSecurity
		}
		switch m.Kind {
		case "EnvoyFilter":
			continue
		case "ServiceEntry", "DestinationRule", "VirtualService":
		default:
			t.Errorf("%s: unexpected kind", where)
			continue
		}
		kinds[m.Kind]++
		if m.APIVersion != "networking.istio.io/v1" {
			t.Errorf("%s: apiVersion %q, want networking.istio.io/v1", where, m.APIVersion)
		}
		if m.Metadata.Name == "" || m.Spec.Kind != yaml.MappingNode {
			t.Errorf("%s: needs metadata.name and a spec", where)
		}
		if m.Kind != "VirtualService" {
			continue
		}
		var spec struct {
			HTTP []struct {
				Match []struct {
					Headers map[string]map[string]string `yaml:"headers"`
				} `yaml:"match"`
				Route          []any `yaml:"route"`
				DirectResponse any   `yaml:"directResponse"`
			} `yaml:"http"`
		}
		if err := m.Spec.Decode(&spec); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if len(spec.HTTP) < 2 {
			t.Fatalf("%s: want provider routes and a catch-all", where)
		}
		last := spec.HTTP[len(spec.HTTP)-1]
		if len(last.Match) != 0 {
			t.Errorf("%s: the last route must match everything (ext_authz is skipped when no route matches)", where)
		}
		for i, r := range spec.HTTP[:len(spec.HTTP)-1] {
			if len(r.Match) == 0 || !slices.ContainsFunc(r.Match, func(m struct {
				Headers map[string]map[string]string `yaml:"headers"`
			}) bool {
				return m.Headers[chain.RoutingHeader]["exact"] != ""
			}) {
				t.Errorf("%s: http[%d] does not match on %s", where, i, chain.RoutingHeader)
			}
		}
	}
	for _, k := range []string{"ServiceEntry", "DestinationRule", "VirtualService"} {
		if kinds[k] == 0 {
			t.Errorf("no %s example in envoy/istio", k)
		}
	}
}
