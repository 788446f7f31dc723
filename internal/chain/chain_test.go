package chain

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	upstreamcodecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	"google.golang.org/protobuf/proto"
)

func TestConfigsValidate(t *testing.T) {
	o := Options{Cluster: "sluice"}
	if err := Authz(o).ValidateAll(); err != nil {
		t.Errorf("ext_authz: %v", err)
	}
	if err := ExtProc(o).ValidateAll(); err != nil {
		t.Errorf("ext_proc: %v", err)
	}
	fs := HTTPFilters(o)
	if len(fs) != 2 || fs[0].GetName() != AuthzFilterName || fs[1].GetName() != ExtProcFilterName {
		t.Fatalf("filters %v", fs)
	}
	for _, f := range fs {
		if err := f.ValidateAll(); err != nil {
			t.Errorf("%s: %v", f.GetName(), err)
		}
	}
	pm := ExtProc(o).GetProcessingMode()
	want := &extprocv3.ProcessingMode{
		RequestHeaderMode: extprocv3.ProcessingMode_SEND, RequestBodyMode: extprocv3.ProcessingMode_BUFFERED, RequestTrailerMode: extprocv3.ProcessingMode_SKIP,
		// Response trailers SEND: a response that ends in trailers has no
		// body chunk with end_of_stream; the trailers message ends it.
		ResponseHeaderMode: extprocv3.ProcessingMode_SEND, ResponseBodyMode: extprocv3.ProcessingMode_STREAMED, ResponseTrailerMode: extprocv3.ProcessingMode_SEND,
	}
	if !proto.Equal(pm, want) {
		t.Errorf("modes %v, want %v", pm, want)
	}
	if Authz(Options{Cluster: "x", FailOpen: true}).GetFailureModeAllow() != true {
		t.Error("FailOpen")
	}
	// Unreachable, both fail closed with the same retryable status: the
	// client gets ext_proc's, since ext_authz's failure reply runs through
	// ext_proc, whose stream fails too (Envoy's default would be 500).
	if a, e := Authz(o).GetStatusOnError().GetCode(), ExtProc(o).GetStatusOnError().GetCode(); a != 503 || e != 503 {
		t.Errorf("status_on_error: ext_authz %v, ext_proc %v; want 503 both", a, e)
	}
}

func TestUpstreamConfigsValidate(t *testing.T) {
	o := Options{Cluster: "sluice.extension", FailOpen: true}
	ep := UpstreamExtProc(o)
	if err := ep.ValidateAll(); err != nil {
		t.Fatalf("upstream ext_proc: %v", err)
	}
	md := ep.GetGrpcService().GetInitialMetadata()
	if len(md) != 1 || md[0].GetKey() != UpstreamMetadataKey || md[0].GetValue() != UpstreamMetadataValue {
		t.Errorf("initial metadata %v", md)
	}
	if c := ep.GetGrpcService().GetEnvoyGrpc().GetClusterName(); c != o.Cluster {
		t.Errorf("cluster %q", c)
	}
	if ep.GetFailureModeAllow() || ep.GetStatusOnError().GetCode() != 503 {
		t.Errorf("upstream ext_proc must fail closed with 503: allow %v, status %v", ep.GetFailureModeAllow(), ep.GetStatusOnError())
	}
	if ep.GetMessageTimeout().AsDuration() != ExtProcTimeout {
		t.Errorf("timeout %v", ep.GetMessageTimeout())
	}
	if mo := ep.GetMetadataOptions(); len(mo.GetForwardingNamespaces().GetUntyped()) != 1 || mo.GetForwardingNamespaces().GetUntyped()[0] != UsageNamespace || mo.GetReceivingNamespaces() != nil {
		t.Errorf("metadata options %v: want the usage namespace forwarded (the client's path), nothing received", mo)
	}
	pm := ep.GetProcessingMode()
	want := &extprocv3.ProcessingMode{
		RequestHeaderMode: extprocv3.ProcessingMode_SEND, RequestBodyMode: extprocv3.ProcessingMode_BUFFERED, RequestTrailerMode: extprocv3.ProcessingMode_SKIP,
		ResponseHeaderMode: extprocv3.ProcessingMode_SEND, ResponseBodyMode: extprocv3.ProcessingMode_NONE, ResponseTrailerMode: extprocv3.ProcessingMode_SKIP,
	}
	if !proto.Equal(pm, want) {
		t.Errorf("modes %v, want %v", pm, want)
	}

	fs := UpstreamHTTPFilters(o)
	if len(fs) != 2 || fs[0].GetName() != ExtProcFilterName || fs[1].GetName() != UpstreamCodecFilterName {
		t.Fatalf("filters %v", fs)
	}
	for _, f := range fs {
		if err := f.ValidateAll(); err != nil {
			t.Errorf("%s: %v", f.GetName(), err)
		}
	}
	var codec upstreamcodecv3.UpstreamCodec
	if err := fs[1].GetTypedConfig().UnmarshalTo(&codec); err != nil {
		t.Errorf("upstream_codec typed config: %v", err)
	}
	var got extprocv3.ExternalProcessor
	if err := fs[0].GetTypedConfig().UnmarshalTo(&got); err != nil || !proto.Equal(&got, ep) {
		t.Errorf("ext_proc typed config %v (%v)", &got, err)
	}
}

// Authority reaches every gRPC service the chain emits, and is left to
// Envoy's default (the cluster name) when unset.
func TestAuthority(t *testing.T) {
	for _, authority := range []string{"", "sluice.sluice-system.svc.cluster.local"} {
		o := Options{Cluster: "outbound|9001||sluice.sluice-system.svc.cluster.local", Authority: authority}
		for name, g := range map[string]interface {
			GetEnvoyGrpc() *corev3.GrpcService_EnvoyGrpc
		}{
			"ext_authz":         Authz(o).GetGrpcService(),
			"ext_proc":          ExtProc(o).GetGrpcService(),
			"upstream ext_proc": UpstreamExtProc(o).GetGrpcService(),
		} {
			if got := g.GetEnvoyGrpc(); got.GetClusterName() != o.Cluster || got.GetAuthority() != authority {
				t.Errorf("%s with Authority %q: envoy_grpc %v", name, authority, got)
			}
		}
		if err := Authz(o).ValidateAll(); err != nil {
			t.Errorf("ext_authz with Authority %q: %v", authority, err)
		}
	}
}
