package xds

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	securityv1beta1 "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
)

// istioSecurityFile is the manifest that decides who may reach Sluice in
// the mesh: its PeerAuthentication, AuthorizationPolicy and the gateway's
// DestinationRule for Sluice's Service.
const istioSecurityFile = "sluice-security.yaml"

// istioGatewayPrincipal is the identity of the ingress gateway's pods, the
// only one the AuthorizationPolicy admits: the service account istioctl's
// default profile gives the gateway, under the default trust domain.
const istioGatewayPrincipal = "cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account"

// istioKind returns the apiVersion the manifests use for an Istio kind and
// a new message of its spec; nil for a kind they must not hold. The v1
// APIs share the older versions' protos (istio.io/api/networking/v1 and
// security/v1 are aliases), so the spec messages are v1alpha3's and
// v1beta1's.
func istioKind(kind string) (apiVersion string, spec proto.Message) {
	switch kind {
	case "EnvoyFilter": // exists only as v1alpha3
		return "networking.istio.io/v1alpha3", &networkingv1alpha3.EnvoyFilter{}
	case "ServiceEntry":
		return "networking.istio.io/v1", &networkingv1alpha3.ServiceEntry{}
	case "DestinationRule":
		return "networking.istio.io/v1", &networkingv1alpha3.DestinationRule{}
	case "VirtualService":
		return "networking.istio.io/v1", &networkingv1alpha3.VirtualService{}
	case "PeerAuthentication":
		return "security.istio.io/v1", &securityv1beta1.PeerAuthentication{}
	case "AuthorizationPolicy":
		return "security.istio.io/v1", &securityv1beta1.AuthorizationPolicy{}
	}
	return "", nil
}

// istioSpec checks m's kind, apiVersion and metadata and decodes its spec
// as the kind's istio.io/api message, YAML → JSON → protojson, refusing
// unknown fields and enum values: a misspelled field fails here rather
// than being pruned on its way to istiod.
func istioSpec(m istioManifest) (proto.Message, error) {
	apiVersion, spec := istioKind(m.Kind)
	if spec == nil {
		return nil, fmt.Errorf("unexpected kind %q", m.Kind)
	}
	if m.APIVersion != apiVersion {
		return nil, fmt.Errorf("apiVersion %q, want %q", m.APIVersion, apiVersion)
	}
	if m.Metadata.Name == "" || m.Metadata.Namespace == "" {
		return nil, fmt.Errorf("metadata.name %q, metadata.namespace %q: both are required", m.Metadata.Name, m.Metadata.Namespace)
	}
	if m.Spec.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("no spec")
	}
	var v any
	if err := m.Spec.Decode(&v); err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	js, err := json.Marshal(jsonValue(v))
	if err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(js, spec); err != nil {
		return nil, fmt.Errorf("spec as %s: %w", spec.ProtoReflect().Descriptor().FullName(), err)
	}
	return spec, nil
}

// jsonValue makes a decoded YAML value encodable as JSON: a mapping with
// keys that are not all strings (portLevelMtls: {9090: …}) decodes as
// map[any]any, whose keys JSON writes as strings.
func jsonValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = jsonValue(e)
		}
		return v
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[fmt.Sprint(k)] = jsonValue(e)
		}
		return out
	case []any:
		for i, e := range v {
			v[i] = jsonValue(e)
		}
		return v
	}
	return v
}

func istioWhere(m istioManifest) string {
	return m.file + ": " + m.Kind + " " + m.Metadata.Namespace + "/" + m.Metadata.Name
}

// Every document of envoy/istio is an Istio resource whose spec decodes
// strictly as its istio.io/api message.
func TestIstioManifestsStrict(t *testing.T) {
	files := map[string]int{}
	for _, m := range readIstioManifests(t) {
		files[m.file]++
		if _, err := istioSpec(m); err != nil {
			t.Errorf("%s: %v", istioWhere(m), err)
		}
	}
	if files[istioSecurityFile] == 0 {
		t.Errorf("no documents in %s", istioSecurityFile)
	}
}

// The strict decoding is what catches a typo: each mutation of the
// security manifest must fail. The API server prunes an unknown field with
// at most a warning unless kubectl validates strictly, and a pruned mtlss:
// leaves Sluice on the mesh's default mode.
func TestIstioManifestsStrictRejectsTypos(t *testing.T) {
	orig, err := os.ReadFile(filepath.Join("..", "envoy", "istio", istioSecurityFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, old, new, wantErr string
	}{
		{"spec field", "  mtls:\n", "  mtlss:\n", `unknown field "mtlss"`},
		{"nested spec field", "principals:", "principal:", `unknown field "principal"`},
		{"enum value", "mode: STRICT", "mode: STRICTER", "STRICTER"},
		{"metadata field", "  namespace: sluice-system\n", "  namespce: sluice-system\n", "namespce"},
		{"top-level field", "\nspec:\n", "\nspecs:\n", "specs"},
		{"kind", "kind: PeerAuthentication", "kind: PeerAuthentications", "unexpected kind"},
		{"apiVersion", "apiVersion: security.istio.io/v1\n", "apiVersion: security.istio.io/v2\n", "apiVersion"},
		{"port as a number", `ports: ["9001"]`, `ports: [9001]`, "ports"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := strings.Replace(string(orig), tc.old, tc.new, 1)
			if data == string(orig) {
				t.Fatalf("%q is not in %s; the case tests nothing", tc.old, istioSecurityFile)
			}
			ms, err := decodeIstioManifests(istioSecurityFile, []byte(data))
			var errs []string
			if err != nil {
				errs = append(errs, err.Error())
			}
			for _, m := range ms {
				if _, err := istioSpec(m); err != nil {
					errs = append(errs, err.Error())
				}
			}
			if len(errs) == 0 {
				t.Fatalf("%q → %q was accepted", tc.old, tc.new)
			}
			if !strings.Contains(strings.Join(errs, "\n"), tc.wantErr) {
				t.Errorf("errors %q do not mention %q", errs, tc.wantErr)
			}
		})
	}
}

// The security manifest admits exactly the ingress gateway, over Istio
// mTLS, to Sluice's gRPC port, on the workloads and Service the other
// manifests assume.
func TestIstioSecurity(t *testing.T) {
	var (
		pas        []*securityv1beta1.PeerAuthentication
		aps        []*securityv1beta1.AuthorizationPolicy
		drs        []*networkingv1alpha3.DestinationRule
		gatewayNSs []string
	)
	for _, m := range readIstioManifests(t) {
		if m.Kind == "EnvoyFilter" {
			gatewayNSs = append(gatewayNSs, m.Metadata.Namespace)
		}
		if m.file != istioSecurityFile {
			continue
		}
		where := istioWhere(m)
		if m.Metadata.Namespace != istioSluiceNamespace {
			t.Errorf("%s: namespace %q, want Sluice's, %q", where, m.Metadata.Namespace, istioSluiceNamespace)
		}
		spec, err := istioSpec(m)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		switch s := spec.(type) {
		case *securityv1beta1.PeerAuthentication:
			pas = append(pas, s)
		case *securityv1beta1.AuthorizationPolicy:
			aps = append(aps, s)
		case *networkingv1alpha3.DestinationRule:
			drs = append(drs, s)
		default:
			t.Errorf("%s: unexpected kind in %s", where, istioSecurityFile)
		}
	}
	if len(pas) != 1 || len(aps) != 1 || len(drs) != 1 {
		t.Fatalf("%s: %d PeerAuthentication, %d AuthorizationPolicy, %d DestinationRule; want one each", istioSecurityFile, len(pas), len(aps), len(drs))
	}

	// Both policies select Sluice's pods, and only them.
	sluicePods := &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{istioSluiceLabel: istioSluiceApp}}

	// STRICT for every port, none loosened by portLevelMtls.
	wantPA := &securityv1beta1.PeerAuthentication{
		Selector: sluicePods,
		Mtls:     &securityv1beta1.PeerAuthentication_MutualTLS{Mode: securityv1beta1.PeerAuthentication_MutualTLS_STRICT},
	}
	if diff := cmp.Diff(wantPA, pas[0], protocmp.Transform()); diff != "" {
		t.Errorf("PeerAuthentication (-want +got):\n%s", diff)
	}

	// One rule: the gateway's identity, to the gRPC port. Not the xDS
	// port (istiod is the gateway's control plane) and not the admin port
	// (probes and merged metrics do not pass the sidecar).
	wantAP := &securityv1beta1.AuthorizationPolicy{
		Selector: sluicePods,
		Action:   securityv1beta1.AuthorizationPolicy_ALLOW,
		Rules: []*securityv1beta1.Rule{{
			From: []*securityv1beta1.Rule_From{{Source: &securityv1beta1.Source{Principals: []string{istioGatewayPrincipal}}}},
			To:   []*securityv1beta1.Rule_To{{Operation: &securityv1beta1.Operation{Ports: []string{istioSluiceGRPCPort}}}},
		}},
	}
	if diff := cmp.Diff(wantAP, aps[0], protocmp.Transform()); diff != "" {
		t.Errorf("AuthorizationPolicy (-want +got):\n%s", diff)
	}
	// The admitted identity is in the namespace of the gateway the
	// EnvoyFilter patches.
	ns, _, _ := strings.Cut(strings.TrimPrefix(istioGatewayPrincipal, "cluster.local/ns/"), "/sa/")
	for _, gw := range gatewayNSs {
		if gw != ns {
			t.Errorf("the EnvoyFilter patches a gateway in %q, the AuthorizationPolicy admits one from %q", gw, ns)
		}
	}
	if len(gatewayNSs) == 0 {
		t.Error("no EnvoyFilter: which gateway calls Sluice?")
	}

	// The gateway's cluster for Sluice's Service, the one the filters call
	// (istioCluster), is ISTIO_MUTUAL whatever auto mTLS detects; nothing
	// port-level or per subset overrides that.
	dr := drs[0]
	if dr.GetHost() != istioSluiceHost {
		t.Errorf("DestinationRule host %q, want %q (the host of %s)", dr.GetHost(), istioSluiceHost, istioCluster)
	}
	wantTLS := &networkingv1alpha3.ClientTLSSettings{Mode: networkingv1alpha3.ClientTLSSettings_ISTIO_MUTUAL}
	if diff := cmp.Diff(wantTLS, dr.GetTrafficPolicy().GetTls(), protocmp.Transform()); diff != "" {
		t.Errorf("DestinationRule tls (-want +got):\n%s", diff)
	}
	if len(dr.GetTrafficPolicy().GetPortLevelSettings()) != 0 || len(dr.GetSubsets()) != 0 || len(dr.GetExportTo()) != 0 {
		t.Error("DestinationRule: port-level settings, subsets or exportTo could take ISTIO_MUTUAL away from the gateway")
	}
	// Every request in flight holds an ext_proc stream: the request limits
	// are Istio's unlimited default (0: unset) or at least what the cluster
	// this replaced had.
	pool := dr.GetTrafficPolicy().GetConnectionPool().GetHttp()
	for name, n := range map[string]int32{"http2MaxRequests": pool.GetHttp2MaxRequests(), "http1MaxPendingRequests": pool.GetHttp1MaxPendingRequests()} {
		if n != 0 && n < 100000 {
			t.Errorf("DestinationRule connectionPool.http.%s %d: each request in flight holds a stream to Sluice; want unset or at least 100000", name, n)
		}
	}
}
