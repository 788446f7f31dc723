package envoytest

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The local replies of other filters run through ext_proc's encode path
// (FilterManager::sendLocalReplyViaFilterChain, filter_manager.cc, encodes
// them from the first encoder filter; ext_proc.cc's encodeHeaders merges
// the route config "in case the decodeHeaders() is not called when
// processing local reply"), and a second local reply sent while the first
// is in the encoder filters goes straight to the client
// (sendDirectLocalReply).

// lrChain is ext_authz → ext_proc → router, each with its own server.
type lrChain struct {
	e    *Emulator
	base string
	proc *procServer
	up   *echoUpstream
}

type lrOpts struct {
	authz    func(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error)
	ep       *extprocv3.ExternalProcessor
	procDown bool // nothing listens where ext_proc's cluster points
	hcm      func(*hcmv3.HttpConnectionManager)
	limit    uint32
	script   func(c *procConn) error
}

func startLRChain(t *testing.T, o lrOpts) *lrChain {
	t.Helper()
	c := &lrChain{proc: &procServer{}, up: &echoUpstream{}}
	c.proc.setScript(o.script)
	authz := o.authz
	if authz == nil {
		authz = func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) { return okResp(nil), nil }
	}
	azAddr := startGRPC(t, func(s *grpc.Server) { authv3.RegisterAuthorizationServer(s, &scriptedAuthz{check: authz}) })
	var procAddr string
	if o.procDown {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		procAddr = ln.Addr().String()
		ln.Close()
	} else {
		procAddr = startGRPC(t, func(s *grpc.Server) { extprocsvc.RegisterExternalProcessorServer(s, c.proc) })
	}
	ep := o.ep
	ep.GrpcService = grpcCluster("proc", -1)
	az := &extauthzv3.ExtAuthz{
		Services:            &extauthzv3.ExtAuthz_GrpcService{GrpcService: grpcCluster("authz", -1)},
		StatusOnError:       &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable},
		TransportApiVersion: corev3.ApiVersion_V3,
	}
	b := testBootstrap(t, routeAll("up"), []*clusterv3.Cluster{
		testCluster(t, "up", startHTTP(t, c.up), false),
		testCluster(t, "authz", azAddr, true),
		testCluster(t, "proc", procAddr, true),
	}, filterOf(t, "envoy.filters.http.ext_authz", az), filterOf(t, epFilterName, ep))
	if o.hcm != nil || o.limit > 0 {
		fn := o.hcm
		if fn == nil {
			fn = func(*hcmv3.HttpConnectionManager) {}
		}
		b = withHCM(t, b, o.limit, fn)
	}
	c.e, c.base = startEmulator(t, b, Options{})
	return c
}

// post sends an HTTP/1.1 POST and returns the response with its body read.
func (c *lrChain) post(t *testing.T, body string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", c.base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, string(b)
}

// deny401 denies with a JSON body, as Sluice's ext_authz does.
const denyBody = `{"error":{"message":"bad key","code":"unknown_key"}}`

func deny401(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied)},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode_Unauthorized},
			Headers: []*corev3.HeaderValueOption{hv("content-type", "application/json", no)},
			Body:    denyBody,
		}},
	}, nil
}

func authzFails(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return nil, status.Error(codes.Unavailable, "down")
}

func respModes(body extprocv3.ProcessingMode_BodySendMode) *extprocv3.ExternalProcessor {
	return epc(mode(&pmode{ResponseHeaderMode: headerSend, ResponseBodyMode: body}))
}

func TestLocalReplyThroughEncoderFilters(t *testing.T) {
	// An ext_authz denial, sent before ext_proc ever saw the request: ext_proc
	// opens its stream on encodeHeaders, sends response_headers (the first
	// message: protocol_config, no request_headers ever) and, STREAMED, the
	// body; its mutation applies; content-length goes
	// (shouldRemoveContentLength) and the body arrives intact.
	t.Run("§4 an ext_authz denial passes ext_proc STREAMED", func(t *testing.T) {
		c := startLRChain(t, lrOpts{authz: deny401, ep: respModes(modeStreamed), script: func(pc *procConn) error {
			return pc.replyAll(func(req *preq) *presp {
				if req.GetResponseHeaders() != nil {
					return respHeadersReply(&cresp{HeaderMutation: mutation(setHdr("x-seen", "1"))})
				}
				return nil
			})
		}})
		resp, body := c.post(t, `{"model":"m"}`)
		if resp.StatusCode != 401 || body != denyBody || resp.Header.Get("x-seen") != "1" || resp.Header.Get("content-type") != "application/json" {
			t.Errorf("client got %d %q %v; want 401, the denial body, x-seen from ext_proc", resp.StatusCode, body, resp.Header)
		}
		if _, ok := resp.Header["Content-Length"]; ok || resp.ContentLength != -1 {
			t.Errorf("content-length %v (%d): ext_proc in STREAMED mode removes it", resp.Header["Content-Length"], resp.ContentLength)
		}
		x := waitExchanges(t, c.e, 1)[0]
		if x.Details != "ext_authz_denied" || x.Status != 401 {
			t.Errorf("details %q status %d, want ext_authz_denied 401", x.Details, x.Status)
		}
		sent := sentOf(x)
		if len(sent) != 2 || sent[0].GetResponseHeaders() == nil || sent[1].GetResponseBody() == nil {
			t.Fatalf("ext_proc sent %v; want response_headers then response_body", epTrace(x))
		}
		rh := sent[0].GetResponseHeaders()
		if st, _ := headerOf(rh.GetHeaders(), ":status"); st != "401" || rh.GetEndOfStream() {
			t.Errorf("response_headers :status %q end_of_stream %v", st, rh.GetEndOfStream())
		}
		if cl, _ := headerOf(rh.GetHeaders(), "content-length"); cl != strconv.Itoa(len(denyBody)) {
			t.Errorf("the server saw content-length %q, want the reply's %d", cl, len(denyBody))
		}
		if sent[0].GetProtocolConfig().GetResponseBodyMode() != modeStreamed {
			t.Errorf("the first message lacks protocol_config: %v", sent[0].GetProtocolConfig())
		}
		if rb := sent[1].GetResponseBody(); string(rb.GetBody()) != denyBody || !rb.GetEndOfStream() {
			t.Errorf("response_body %q end %v", rb.GetBody(), rb.GetEndOfStream())
		}
		if len(c.up.received()) != 0 {
			t.Error("the denied request reached the upstream")
		}
	})

	// BUFFERED with response headers SEND keeps content-length; the body
	// goes in one message.
	t.Run("§1.2 an ext_authz denial passes ext_proc BUFFERED", func(t *testing.T) {
		c := startLRChain(t, lrOpts{authz: deny401, ep: respModes(modeBuffered)})
		resp, body := c.post(t, `{}`)
		if resp.StatusCode != 401 || body != denyBody || resp.ContentLength != int64(len(denyBody)) {
			t.Errorf("client got %d %q content-length %d", resp.StatusCode, body, resp.ContentLength)
		}
		x := waitExchanges(t, c.e, 1)[0]
		if got := strings.Join(epTrace(x), " "); got != "open →response_headers ←response_headers →response_body ←response_body half-close cancel" {
			t.Errorf("trace %s", got)
		}
	})

	// local_reply_config rewrites a reply before any encoder filter sees
	// it (Utility::prepareLocalReply runs rewrite_ before encode_headers_).
	t.Run("§4 ext_proc sees the rewritten reply", func(t *testing.T) {
		const mapped = `{"error":"authz down"}`
		c := startLRChain(t, lrOpts{authz: authzFails, ep: respModes(modeStreamed), hcm: func(h *hcmv3.HttpConnectionManager) {
			h.LocalReplyConfig = &hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{
				{Filter: celFilter(t, "response.code_details == 'ext_authz_error'"), BodyFormatOverride: textBody(mapped, "application/json")},
			}}
		}})
		resp, body := c.post(t, `{}`)
		if resp.StatusCode != 503 || body != mapped || resp.Header.Get("content-type") != "application/json" {
			t.Errorf("client got %d %q %v", resp.StatusCode, body, resp.Header)
		}
		x := waitExchanges(t, c.e, 1)[0]
		sent := sentOf(x)
		if len(sent) == 0 || sent[0].GetResponseHeaders() == nil {
			t.Fatalf("trace %v", epTrace(x))
		}
		h := sent[0].GetResponseHeaders().GetHeaders()
		ct, _ := headerOf(h, "content-type")
		cl, _ := headerOf(h, "content-length")
		if ct != "application/json" || cl != strconv.Itoa(len(mapped)) {
			t.Errorf("ext_proc saw content-type %q content-length %q; want the rewritten reply's", ct, cl)
		}
		if x.Details != "ext_authz_error" {
			t.Errorf("details %q", x.Details)
		}
	})

	// An ImmediateResponse to a local reply's headers is a second local
	// reply while the first's headers are in the encoder filters: it goes
	// to the client directly.
	t.Run("§1.5 an ImmediateResponse to a local reply", func(t *testing.T) {
		c := startLRChain(t, lrOpts{authz: deny401, ep: respModes(modeStreamed), script: func(pc *procConn) error {
			if req, err := pc.Recv(); err != nil || req.GetResponseHeaders() == nil {
				return pc.drain()
			}
			pc.Send(immediate(&extprocsvc.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_Forbidden}, Body: []byte("nope"), Details: "no way"}))
			return pc.drain()
		}})
		resp, body := c.post(t, `{}`)
		if resp.StatusCode != 403 || body != "nope" {
			t.Errorf("client got %d %q, want the ImmediateResponse", resp.StatusCode, body)
		}
		if x := waitExchanges(t, c.e, 1)[0]; x.Details != "no_way" {
			t.Errorf("details %q", x.Details)
		}
	})

	// Sluice unreachable: ext_authz fails closed (its status_on_error),
	// and its reply's trip through ext_proc opens a stream that fails too:
	// onGrpcError answers ext_proc's status_on_error, a second local reply
	// sent directly, with ext_proc's details; local_reply_config rewrites
	// it.
	for _, tc := range []struct {
		name    string
		onError *typev3.HttpStatus
		want    int
	}{
		{"§1.8 ext_proc's stream fails on a local reply: status_on_error", &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable}, 503},
		{"§1.8 ext_proc's stream fails on a local reply: default 500", nil, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const mapped = `{"error":"gateway down"}`
			ep := respModes(modeStreamed)
			ep.StatusOnError = tc.onError
			c := startLRChain(t, lrOpts{authz: authzFails, ep: ep, procDown: true, hcm: func(h *hcmv3.HttpConnectionManager) {
				h.LocalReplyConfig = &hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{
					{Filter: celFilter(t, "response.code_details.startsWith('ext_proc_error_gRPC_error_')"), BodyFormatOverride: textBody(mapped, "application/json")},
				}}
			}})
			resp, body := c.post(t, `{}`)
			if resp.StatusCode != tc.want || body != mapped || resp.ContentLength != int64(len(mapped)) {
				t.Errorf("client got %d %q (content-length %d), want %d %q", resp.StatusCode, body, resp.ContentLength, tc.want, mapped)
			}
			x := waitExchanges(t, c.e, 1)[0]
			if !strings.HasPrefix(x.Details, "ext_proc_error_gRPC_error_14{") || x.Status != tc.want {
				t.Errorf("details %q status %d", x.Details, x.Status)
			}
		})
	}

	// The buffer limit's 413, sent while ext_proc processes the request,
	// reaches ext_proc's own encodeHeaders: its server gets response
	// headers on the stream it opened for the request.
	t.Run("§1.2 ext_proc's own 413 reaches its encode path", func(t *testing.T) {
		c := startLRChain(t, lrOpts{authz: nil, limit: 8, ep: epc(mode(&pmode{RequestBodyMode: modeBuffered, ResponseHeaderMode: headerSend}))})
		resp, body := c.post(t, "0123456789")
		if resp.StatusCode != 413 || body != "Payload Too Large" || resp.ContentLength != int64(len(body)) {
			t.Errorf("client got %d %q content-length %d", resp.StatusCode, body, resp.ContentLength)
		}
		x := waitExchanges(t, c.e, 1)[0]
		var st string
		for _, m := range sentOf(x) {
			if rh := m.GetResponseHeaders(); rh != nil {
				st, _ = headerOf(rh.GetHeaders(), ":status")
			}
		}
		if st != "413" || x.Details != "request_payload_too_large" {
			t.Errorf("trace %v: response_headers :status %q, details %q", epTrace(x), st, x.Details)
		}
	})
}
