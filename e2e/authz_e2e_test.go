package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicegw/sluice/authz"
	"github.com/sluicegw/sluice/bench/mockllm"
)

const providerKey = "sk-upstream-provider-credential"

const sluiceConfig = `
providers: [{name: mock, kind: openai-compatible, base_url: "http://127.0.0.1:1"}]
models: [{name: gpt-4o-mini, provider: mock}]
teams: [{name: demo, limits: {requests: {per_minute: 100}}}]
`

// injectingProcessor is a scripted ext_proc server standing in for
// Sluice's own (which lands with the ext_proc issue): on request headers
// it swaps the caller's credential for the provider's and copies the key
// id it received from ext_authz (forwarding_namespaces) into a header.
type injectingProcessor struct {
	extprocsvc.UnimplementedExternalProcessorServer
}

func (injectingProcessor) Process(srv extprocsvc.ExternalProcessor_ProcessServer) error {
	for {
		req, err := srv.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		resp := &extprocsvc.ProcessingResponse{}
		switch req.GetRequest().(type) {
		case *extprocsvc.ProcessingRequest_RequestHeaders:
			keyID := req.GetMetadataContext().GetFilterMetadata()[authz.MetadataNamespace].GetFields()["key_id"].GetStringValue()
			resp.Response = &extprocsvc.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocsvc.HeadersResponse{Response: &extprocsvc.CommonResponse{
				HeaderMutation: &extprocsvc.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
					{Header: &corev3.HeaderValue{Key: "authorization", RawValue: []byte("Bearer " + providerKey)}},
					{Header: &corev3.HeaderValue{Key: "x-sluice-key-id", RawValue: []byte(keyID)}},
				}},
			}}}
		case *extprocsvc.ProcessingRequest_ResponseHeaders:
			resp.Response = &extprocsvc.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocsvc.HeadersResponse{}}
		default:
			return nil // nothing else is configured to arrive
		}
		if err := srv.Send(resp); err != nil {
			return err
		}
	}
}

// TestAuthzThroughEnvoy drives a chat completion with curl's shape of
// request through Envoy (ext_authz = Sluice's real service, ext_proc = a
// scripted processor) to the mock provider.
func TestAuthzThroughEnvoy(t *testing.T) {
	provider, providerAddr := mockProvider(t, mockllm.Options{APIKey: providerKey})
	sl := startSluice(t, sluiceConfig)
	authzAddr := sl.grpcAddr
	procAddr := serveGRPC(t, func(s *grpc.Server) { extprocsvc.RegisterExternalProcessorServer(s, injectingProcessor{}) })
	_, key := sl.createKey(t, "demo")

	b := bootstrap(t,
		[]*clusterv3.Cluster{staticCluster(t, "provider", providerAddr, false), staticCluster(t, "sluice", authzAddr, true), staticCluster(t, "processor", procAddr, true)},
		filter(t, "envoy.filters.http.ext_authz", &extauthzv3.ExtAuthz{
			Services: &extauthzv3.ExtAuthz_GrpcService{GrpcService: &corev3.GrpcService{
				TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: "sluice"}},
				Timeout:         durationpb.New(200e6),
			}},
			TransportApiVersion: corev3.ApiVersion_V3,
		}),
		filter(t, "envoy.filters.http.ext_proc", &extprocv3.ExternalProcessor{
			GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: "processor"}}},
			ProcessingMode: &extprocv3.ProcessingMode{
				RequestHeaderMode: extprocv3.ProcessingMode_SEND, ResponseHeaderMode: extprocv3.ProcessingMode_SEND,
				RequestBodyMode: extprocv3.ProcessingMode_NONE, ResponseBodyMode: extprocv3.ProcessingMode_NONE,
			},
			MetadataOptions: &extprocv3.MetadataOptions{ForwardingNamespaces: &extprocv3.MetadataOptions_MetadataNamespaces{Untyped: []string{authz.MetadataNamespace}}},
		}),
	)
	eachProxy(t, b, func(t *testing.T, p proxy) {
		provider.Reset()
		chat := func(auth string) (int, string) {
			req, _ := http.NewRequest("POST", p.url+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello!"}]}`))
			req.Header.Set("content-type", "application/json")
			if auth != "" {
				req.Header.Set("authorization", auth)
			}
			status, _, body := do(t, req)
			return status, body
		}

		status, body := chat("Bearer " + key)
		if status != 200 {
			t.Fatalf("valid key: %d %s", status, body)
		}
		var completion struct {
			Model string `json:"model"`
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(body), &completion); err != nil || completion.Model != "gpt-4o-mini" {
			t.Fatalf("completion %q: %v", body, err)
		}
		got := provider.Received()
		if len(got) != 1 {
			t.Fatalf("provider saw %d requests", len(got))
		}
		if a := got[0].Header.Get("Authorization"); a != "Bearer "+providerKey {
			t.Errorf("provider got authorization %q; want the provider credential, never the caller's", a)
		}
		if got[0].Header.Get("X-Sluice-Key-Id") == "" {
			t.Error("the key id did not travel from ext_authz to ext_proc through forwarding_namespaces")
		}

		status, body = chat("Bearer sk-sluice-" + strings.Repeat("Z", 43))
		if status != 401 || !strings.Contains(body, `"code":"invalid_api_key"`) || !strings.Contains(body, "Incorrect API key provided: sk-sluic") {
			t.Errorf("unknown key: %d %s", status, body)
		}
		status, body = chat("")
		if status != 401 || !strings.Contains(body, `"code":null`) || !strings.Contains(body, "You didn't provide an API key.") {
			t.Errorf("no key: %d %s", status, body)
		}
		if n := provider.Requests(); n != 1 {
			t.Errorf("provider reached %d times; refused requests must not reach it", n)
		}
		if p.emu != nil {
			// A denial is a local reply, encoded through every encoder
			// filter: ext_proc sees its response headers, never the
			// request's (sendLocalReplyViaFilterChain).
			xs := waitExchanges(t, p.emu, 3)
			if len(xs) != 3 || len(xs[0].Authz) != 1 || len(xs[0].ExtProc) == 0 {
				t.Fatalf("recorded exchanges: %d", len(xs))
			}
			for _, ev := range xs[1].ExtProc {
				if ev.Sent != nil && ev.Sent.GetRequestHeaders() != nil {
					t.Errorf("ext_proc saw the denied request's headers")
				}
			}
		}
	})
}
