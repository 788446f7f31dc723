package e2e

import (
	"testing"

	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/sluicegw/sluice/envoy/envoytest"
	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/policies"
)

// TestQuickstartBootstrapMatchesChain keeps the hand-written quickstart
// bootstrap in step with package chain, the one place Sluice's filter
// configurations are defined.
func TestQuickstartBootstrapMatchesChain(t *testing.T) {
	b, err := envoytest.LoadBootstrap("../examples/envoy-quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	fs := hcm.GetHttpFilters()
	if len(fs) != 3 || fs[0].GetName() != chain.AuthzFilterName || fs[1].GetName() != chain.ExtProcFilterName {
		t.Fatalf("filters %v", fs)
	}
	az, ep := &extauthzv3.ExtAuthz{}, &extprocv3.ExternalProcessor{}
	if err := fs[0].GetTypedConfig().UnmarshalTo(az); err != nil {
		t.Fatal(err)
	}
	if err := fs[1].GetTypedConfig().UnmarshalTo(ep); err != nil {
		t.Fatal(err)
	}
	o := chain.Options{Cluster: "sluice"}
	if diff := cmp.Diff(chain.Authz(o), az, protocmp.Transform()); diff != "" {
		t.Errorf("ext_authz differs from chain.Authz (-chain +file):\n%s", diff)
	}
	if diff := cmp.Diff(chain.ExtProc(o), ep, protocmp.Transform()); diff != "" {
		t.Errorf("ext_proc differs from chain.ExtProc (-chain +file):\n%s", diff)
	}
	// The quickstart's gateway has the default body limit.
	g := policies.Default().Gateway
	if diff := cmp.Diff(chain.LocalReply(g.MaxRequestBodyBytes), hcm.GetLocalReplyConfig(), protocmp.Transform()); diff != "" {
		t.Errorf("local_reply_config differs from chain.LocalReply (-chain +file):\n%s", diff)
	}
	if got, want := int64(b.GetStaticResources().GetListeners()[0].GetPerConnectionBufferLimitBytes().GetValue()), g.BodyBufferBytes(); got != want {
		t.Errorf("per_connection_buffer_limit_bytes %d, want %d (policies.Gateway.BodyBufferBytes)", got, want)
	}
	// And the default edge timers (xds/build.go).
	if got := hcm.GetStreamIdleTimeout().AsDuration(); got != g.StreamIdleTimeout {
		t.Errorf("stream_idle_timeout %v, want %v (gateway.stream_idle_timeout)", got, g.StreamIdleTimeout)
	}
	if got := hcm.GetRequestTimeout().AsDuration(); got != g.RequestTimeout {
		t.Errorf("request_timeout %v, want %v (gateway.request_timeout)", got, g.RequestTimeout)
	}
}
