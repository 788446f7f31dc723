package envoytest

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Test harness for the ext_proc client: a scripted ExternalProcessor, two
// recording upstreams, an h2c client, and the emulator built from a
// bootstrap in Go.

const epFilterName = "envoy.filters.http.ext_proc"

// ---- scripted ext_proc server --------------------------------------------

// procServer is a hand-written ExternalProcessor whose behaviour is the
// script of the test case; with no script it answers every message with
// an empty reply of the matching type.
type procServer struct {
	extprocsvc.UnimplementedExternalProcessorServer
	mu     sync.Mutex
	script func(c *procConn) error
	conns  []*procConn
}

var _ extprocsvc.ExternalProcessorServer = (*procServer)(nil)

func (p *procServer) setScript(s func(c *procConn) error) {
	p.mu.Lock()
	p.script = s
	p.mu.Unlock()
}

func (p *procServer) Process(stream extprocsvc.ExternalProcessor_ProcessServer) error {
	c := &procConn{stream: stream, done: make(chan struct{})}
	p.mu.Lock()
	p.conns = append(p.conns, c)
	script := p.script
	p.mu.Unlock()
	defer close(c.done)
	if script == nil {
		return c.continueAll()
	}
	return script(c)
}

func (p *procServer) connections() []*procConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*procConn(nil), p.conns...)
}

// procConn is one Process stream as the server sees it.
type procConn struct {
	stream extprocsvc.ExternalProcessor_ProcessServer
	done   chan struct{} // the handler returned
	mu     sync.Mutex
	got    []*extprocsvc.ProcessingRequest
}

func (c *procConn) Recv() (*extprocsvc.ProcessingRequest, error) {
	req, err := c.stream.Recv()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	c.got = append(c.got, req)
	return req, nil
}

func (c *procConn) Send(r *extprocsvc.ProcessingResponse) error { return c.stream.Send(r) }

func (c *procConn) received() []*extprocsvc.ProcessingRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*extprocsvc.ProcessingRequest(nil), c.got...)
}

// drain reads until the stream ends (half-close or cancel).
func (c *procConn) drain() error {
	for {
		if _, err := c.Recv(); err != nil {
			return nil
		}
	}
}

// continueAll answers every message with an empty reply of its type.
func (c *procConn) continueAll() error {
	return c.replyAll(func(*extprocsvc.ProcessingRequest) *extprocsvc.ProcessingResponse { return nil })
}

// replyAll answers every message with fn's reply, or an empty reply of
// the matching type when fn returns nil.
func (c *procConn) replyAll(fn func(*extprocsvc.ProcessingRequest) *extprocsvc.ProcessingResponse) error {
	for {
		req, err := c.Recv()
		if err != nil {
			return nil
		}
		r := fn(req)
		if r == nil {
			r = continueFor(req)
		}
		if c.Send(r) != nil {
			return c.drain()
		}
	}
}

// next receives one message and checks its kind; nil at end of stream.
func (c *procConn) next(t *testing.T, kind string) *extprocsvc.ProcessingRequest {
	req, err := c.Recv()
	if err != nil {
		t.Errorf("server: want %s, stream ended: %v", kind, err)
		return nil
	}
	if got := reqKind(req); got != kind {
		t.Errorf("server: got %s, want %s", got, kind)
	}
	return req
}

// ---- messages -------------------------------------------------------------

func reqKind(m *extprocsvc.ProcessingRequest) string {
	switch m.GetRequest().(type) {
	case *extprocsvc.ProcessingRequest_RequestHeaders:
		return "request_headers"
	case *extprocsvc.ProcessingRequest_RequestBody:
		return "request_body"
	case *extprocsvc.ProcessingRequest_RequestTrailers:
		return "request_trailers"
	case *extprocsvc.ProcessingRequest_ResponseHeaders:
		return "response_headers"
	case *extprocsvc.ProcessingRequest_ResponseBody:
		return "response_body"
	case *extprocsvc.ProcessingRequest_ResponseTrailers:
		return "response_trailers"
	}
	return "empty"
}

func respKind(m *extprocsvc.ProcessingResponse) string {
	if m.GetOverrideMessageTimeout() != nil {
		return "override_message_timeout"
	}
	switch m.GetResponse().(type) {
	case *extprocsvc.ProcessingResponse_RequestHeaders:
		return "request_headers"
	case *extprocsvc.ProcessingResponse_RequestBody:
		return "request_body"
	case *extprocsvc.ProcessingResponse_RequestTrailers:
		return "request_trailers"
	case *extprocsvc.ProcessingResponse_ResponseHeaders:
		return "response_headers"
	case *extprocsvc.ProcessingResponse_ResponseBody:
		return "response_body"
	case *extprocsvc.ProcessingResponse_ResponseTrailers:
		return "response_trailers"
	case *extprocsvc.ProcessingResponse_ImmediateResponse:
		return "immediate_response"
	}
	return "empty"
}

// continueFor is an empty reply of the type that answers req.
func continueFor(req *extprocsvc.ProcessingRequest) *extprocsvc.ProcessingResponse {
	switch req.GetRequest().(type) {
	case *extprocsvc.ProcessingRequest_RequestHeaders:
		return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocsvc.HeadersResponse{}}}
	case *extprocsvc.ProcessingRequest_RequestBody:
		return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_RequestBody{RequestBody: &extprocsvc.BodyResponse{}}}
	case *extprocsvc.ProcessingRequest_RequestTrailers:
		return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocsvc.TrailersResponse{}}}
	case *extprocsvc.ProcessingRequest_ResponseHeaders:
		return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocsvc.HeadersResponse{}}}
	case *extprocsvc.ProcessingRequest_ResponseBody:
		return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_ResponseBody{ResponseBody: &extprocsvc.BodyResponse{}}}
	case *extprocsvc.ProcessingRequest_ResponseTrailers:
		return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocsvc.TrailersResponse{}}}
	}
	return &extprocsvc.ProcessingResponse{}
}

// hm builds a header map as Envoy sends it: key and raw_value only.
func hm(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

// stdReq is the request header map of the harness client's requests.
func stdReq(method string, extra ...string) *corev3.HeaderMap {
	return hm(append([]string{":method", method, ":scheme", "http", ":authority", "api.test", ":path", "/p",
		"user-agent", "test", "x-request-id", "req-1", "x-forwarded-proto", "http"}, extra...)...)
}

// okResp is the response header map of the default upstream answer.
func okRespHeaders(extra ...string) *corev3.HeaderMap {
	return hm(append([]string{":status", "200", "content-type", "text/plain"}, extra...)...)
}

func withMD(r *extprocsvc.ProcessingRequest) *extprocsvc.ProcessingRequest {
	r.MetadataContext = &corev3.Metadata{}
	return r
}

func reqHeadersMsg(h *corev3.HeaderMap, eos bool) *extprocsvc.ProcessingRequest {
	return withMD(&extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocsvc.HttpHeaders{Headers: h, EndOfStream: eos}}})
}

func respHeadersMsg(h *corev3.HeaderMap, eos bool) *extprocsvc.ProcessingRequest {
	return withMD(&extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocsvc.HttpHeaders{Headers: h, EndOfStream: eos}}})
}

func reqBodyMsg(body string, eos bool) *extprocsvc.ProcessingRequest {
	return withMD(&extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_RequestBody{RequestBody: &extprocsvc.HttpBody{Body: []byte(body), EndOfStream: eos}}})
}

func respBodyMsg(body string, eos bool) *extprocsvc.ProcessingRequest {
	return withMD(&extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_ResponseBody{ResponseBody: &extprocsvc.HttpBody{Body: []byte(body), EndOfStream: eos}}})
}

func reqTrailersMsg(h *corev3.HeaderMap) *extprocsvc.ProcessingRequest {
	return withMD(&extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocsvc.HttpTrailers{Trailers: h}}})
}

func respTrailersMsg(h *corev3.HeaderMap) *extprocsvc.ProcessingRequest {
	return withMD(&extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocsvc.HttpTrailers{Trailers: h}}})
}

// pc adds the protocol_config of the first message.
func pc(r *extprocsvc.ProcessingRequest, req, resp extprocv3.ProcessingMode_BodySendMode) *extprocsvc.ProcessingRequest {
	r.ProtocolConfig = &extprocsvc.ProtocolConfiguration{RequestBodyMode: req, ResponseBodyMode: resp}
	return r
}

// obs marks a message as sent in observability mode.
func obs(r *extprocsvc.ProcessingRequest) *extprocsvc.ProcessingRequest {
	r.ObservabilityMode = true
	return r
}

func setHdr(k, raw string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(raw)}}
}

func appendHdr(k, raw string, a bool) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(raw)}, Append: wrapperspb.Bool(a)}
}

func mutation(set ...*corev3.HeaderValueOption) *extprocsvc.HeaderMutation {
	return &extprocsvc.HeaderMutation{SetHeaders: set}
}

func reqHeadersReply(cr *extprocsvc.CommonResponse) *extprocsvc.ProcessingResponse {
	return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocsvc.HeadersResponse{Response: cr}}}
}

func respHeadersReply(cr *extprocsvc.CommonResponse) *extprocsvc.ProcessingResponse {
	return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocsvc.HeadersResponse{Response: cr}}}
}

func reqBodyReply(cr *extprocsvc.CommonResponse) *extprocsvc.ProcessingResponse {
	return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_RequestBody{RequestBody: &extprocsvc.BodyResponse{Response: cr}}}
}

func respBodyReply(cr *extprocsvc.CommonResponse) *extprocsvc.ProcessingResponse {
	return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_ResponseBody{ResponseBody: &extprocsvc.BodyResponse{Response: cr}}}
}

func immediate(ir *extprocsvc.ImmediateResponse) *extprocsvc.ProcessingResponse {
	return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_ImmediateResponse{ImmediateResponse: ir}}
}

func newBody(b string) *extprocsvc.BodyMutation {
	return &extprocsvc.BodyMutation{Mutation: &extprocsvc.BodyMutation_Body{Body: []byte(b)}}
}

func mustStruct(t testing.TB, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ---- upstream ---------------------------------------------------------------

// upstream records what reached it and answers with the case's handler
// (default: 200 text/plain "ok").
type upstream struct {
	url    string
	mu     sync.Mutex
	handle func(w http.ResponseWriter, r *http.Request)
	got    []upReq
}

type upReq struct {
	Method, Path  string
	Host          string
	Header        http.Header
	Body          string
	ContentLength int64
	Trailer       http.Header
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.got = append(u.got, upReq{Method: r.Method, Path: r.URL.RequestURI(), Host: r.Host, Header: r.Header.Clone(), Body: string(body), ContentLength: r.ContentLength, Trailer: r.Trailer.Clone()})
	handle := u.handle
	u.mu.Unlock()
	if handle == nil {
		writeText(w, "ok")
		return
	}
	handle(w, r)
}

func (u *upstream) setHandler(h func(w http.ResponseWriter, r *http.Request)) {
	u.mu.Lock()
	u.handle = h
	u.mu.Unlock()
}

func (u *upstream) requests() []upReq {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]upReq(nil), u.got...)
}

// writeText answers 200 text/plain with no Date header, so that the
// response headers Envoy sends to ext_proc are deterministic.
func writeText(w http.ResponseWriter, body string) {
	w.Header()["Date"] = nil
	w.Header().Set("Content-Type", "text/plain")
	io.WriteString(w, body)
}

// ---- the harness -------------------------------------------------------------

// epConfig is what a case may change in the configuration.
type epConfig struct {
	ep          *extprocv3.ExternalProcessor
	perRoute    *extprocv3.ExtProcPerRoute
	bufferLimit uint32
	procDown    bool // point the gRPC cluster at a closed port
}

type epHarness struct {
	t      *testing.T
	e      *Emulator
	base   string
	client *http.Client // h2c, for requests with a body
	// client1 speaks HTTP/1.1, for requests without a body: Go's HTTP/2
	// server never gives such a request http.NoBody, so the emulator
	// would not see end_of_stream on its headers (see the report).
	client1 *http.Client
	proc    *procServer
	up, upB *upstream
	filter  *extProcFilter

	// pr/pw is the body of streamed requests (see postStream); reqTrailer
	// their trailers, set before pw is closed.
	pr         *io.PipeReader
	pw         *io.PipeWriter
	reqTrailer http.Header

	mu   sync.Mutex
	sigs map[string]chan struct{}
}

func newEPHarness(t *testing.T, cfg *epConfig) *epHarness {
	t.Helper()
	h := &epHarness{t: t, proc: &procServer{}, up: &upstream{}, upB: &upstream{}, sigs: map[string]chan struct{}{}, reqTrailer: http.Header{}}
	h.pr, h.pw = io.Pipe()

	for _, u := range []*upstream{h.up, h.upB} {
		srv := httptest.NewServer(u)
		u.url = srv.URL
		t.Cleanup(srv.Close)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	procAddr := ln.Addr().String()
	if cfg.procDown {
		ln.Close() // nothing listens there any more
	} else {
		gs := grpc.NewServer(grpc.WaitForHandlers(true))
		extprocsvc.RegisterExternalProcessorServer(gs, h.proc)
		go gs.Serve(ln)
		t.Cleanup(gs.Stop)
	}

	// Routes: x-model: b goes to upstream-b, everything else to upstream.
	model := &routev3.HeaderMatcher{Name: "x-model", HeaderMatchSpecifier: &routev3.HeaderMatcher_ExactMatch{ExactMatch: "b"}}
	toCluster := func(c string) *routev3.Route_Route {
		return &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: c}}}
	}
	vh := &routev3.VirtualHost{Name: "all", Domains: []string{"*"}, Routes: []*routev3.Route{
		{Name: "model-b", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}, Headers: []*routev3.HeaderMatcher{model}}, Action: toCluster("upstream-b")},
		{Name: "default", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}, Action: toCluster("upstream")},
	}}
	if cfg.perRoute != nil {
		vh.TypedPerFilterConfig = map[string]*anypb.Any{epFilterName: mustAny(t, cfg.perRoute)}
	}
	rc := &routev3.RouteConfiguration{Name: "local", VirtualHosts: []*routev3.VirtualHost{vh}}
	clusters := []*clusterv3.Cluster{
		testCluster(t, "upstream", hostPort(t, h.up.url), false),
		testCluster(t, "upstream-b", hostPort(t, h.upB.url), false),
		testCluster(t, "extproc", procAddr, true),
	}
	ep := cfg.ep
	if ep == nil {
		ep = &extprocv3.ExternalProcessor{}
	}
	ep.GrpcService = grpcCluster("extproc", -1)
	b := testBootstrap(t, rc, clusters, filterOf(t, epFilterName, ep))
	if cfg.bufferLimit > 0 {
		b.GetStaticResources().GetListeners()[0].PerConnectionBufferLimitBytes = wrapperspb.UInt32(cfg.bufferLimit)
	}
	h.e, h.base = startEmulator(t, b, Options{})
	h.filter = h.e.cfg.Load().filters[0].(*extProcFilter)

	tr := &http.Transport{DisableCompression: true}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr.Protocols = &p
	h.client = &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	tr1 := &http.Transport{DisableCompression: true}
	h.client1 = &http.Client{Transport: tr1}
	t.Cleanup(tr1.CloseIdleConnections)
	return h
}

func hostPort(t testing.TB, url string) string {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req.URL.Host
}

// sig returns the named signal channel shared by script, upstream and
// client.
func (h *epHarness) sig(name string) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.sigs[name]
	if c == nil {
		c = make(chan struct{})
		h.sigs[name] = c
	}
	return c
}

// await waits for a signal or ctx; false on timeout or ctx end.
func (h *epHarness) await(ctx context.Context, name string) bool {
	select {
	case <-h.sig(name):
		return true
	case <-ctx.Done():
		return false
	case <-time.After(5 * time.Second):
		h.t.Errorf("timed out waiting for %q", name)
		return false
	}
}

func (h *epHarness) fire(name string) { close(h.sig(name)) }

// waitState polls the live filter instance until cond holds (for states
// with no external signal, e.g. "the whole body arrived before the
// headers reply").
func (h *epHarness) waitState(what string, cond func(x *epInstance) bool) bool {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, id := range h.filter.liveIDs() {
			if h.filter.inspect(id, cond) {
				return true
			}
		}
		time.Sleep(time.Millisecond)
	}
	h.t.Errorf("timed out waiting for filter state: %s", what)
	return false
}

// write sends one chunk of the streamed request body.
func (h *epHarness) write(s string) {
	if _, err := io.WriteString(h.pw, s); err != nil {
		h.t.Errorf("write request body: %v", err)
	}
}

// clientResult is what the client got.
type clientResult struct {
	status  int
	header  http.Header
	body    string
	trailer http.Header
	err     error // request or body read error (a reset)
}

func (h *epHarness) newRequest(method string, body io.Reader, kv ...string) *http.Request {
	req, err := http.NewRequest(method, h.base+"/p", body)
	if err != nil {
		h.t.Fatal(err)
	}
	req.Host = "api.test"
	req.Header.Set("User-Agent", "test")
	req.Header.Set("X-Request-Id", "req-1")
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Add(kv[i], kv[i+1])
	}
	return req
}

func (h *epHarness) do(req *http.Request) *clientResult {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := h.clientFor(req).Do(req.WithContext(ctx))
	if err != nil {
		return &clientResult{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return &clientResult{status: resp.StatusCode, header: resp.Header, body: string(b), trailer: resp.Trailer, err: err}
}

// clientFor picks HTTP/1.1 for bodiless requests, h2c otherwise.
func (h *epHarness) clientFor(req *http.Request) *http.Client {
	if req.Body == nil || req.Body == http.NoBody {
		return h.client1
	}
	return h.client
}

func (h *epHarness) get(kv ...string) *clientResult { return h.do(h.newRequest("GET", nil, kv...)) }

func (h *epHarness) post(body string, kv ...string) *clientResult {
	return h.do(h.newRequest("POST", bytes.NewReader([]byte(body)), kv...))
}

// postStream sends a POST whose body the script writes with h.write and
// ends with h.pw.Close() (trailers in h.reqTrailer, declared by names).
func (h *epHarness) postStream(trailers ...string) *clientResult {
	req := h.newRequest("POST", h.pr)
	if len(trailers) > 0 {
		req.Trailer = h.reqTrailer
		for _, k := range trailers {
			h.reqTrailer[http.CanonicalHeaderKey(k)] = nil
		}
	}
	return h.do(req)
}

// conn waits for the i-th Process stream to reach the server.
func (h *epHarness) conn(i int) *procConn {
	deadline := time.Now().Add(5 * time.Second)
	for {
		if cs := h.proc.connections(); len(cs) > i {
			return cs[i]
		}
		if time.Now().After(deadline) {
			h.t.Errorf("no ext_proc stream #%d reached the server", i)
			c := &procConn{done: make(chan struct{})}
			close(c.done)
			return c
		}
		time.Sleep(time.Millisecond)
	}
}

// exchange waits for the one exchange of the case.
func (h *epHarness) exchange() *Exchange {
	return waitExchanges(h.t, h.e, 1)[0]
}

// serverGot waits for every Process stream to end and returns what the
// server received, in order.
func (h *epHarness) serverGot() []*extprocsvc.ProcessingRequest {
	var all []*extprocsvc.ProcessingRequest
	for _, c := range h.proc.connections() {
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
			h.t.Errorf("the ext_proc stream did not end")
		}
		all = append(all, c.received()...)
	}
	return all
}

// epTrace is the exchange's ext_proc record as short strings:
// "→kind" sent, "←kind" received, events as they are.
func epTrace(x *Exchange) []string {
	var out []string
	for _, ev := range x.ExtProc {
		switch {
		case ev.Sent != nil:
			out = append(out, "→"+reqKind(ev.Sent))
		case ev.Received != nil:
			out = append(out, "←"+respKind(ev.Received))
		default:
			out = append(out, ev.Event)
		}
	}
	return out
}

func sentOf(x *Exchange) []*extprocsvc.ProcessingRequest {
	var out []*extprocsvc.ProcessingRequest
	for _, ev := range x.ExtProc {
		if ev.Sent != nil {
			out = append(out, ev.Sent)
		}
	}
	return out
}

// protoOpts compares messages semantically; header order is the codec's
// (Go's map order for the client's headers), so header maps are sorted.
var protoOpts = cmp.Options{
	protocmp.Transform(),
	protocmp.SortRepeated(func(a, b *corev3.HeaderValue) bool {
		if a.GetKey() != b.GetKey() {
			return a.GetKey() < b.GetKey()
		}
		return bytes.Compare(a.GetRawValue(), b.GetRawValue()) < 0
	}),
}
