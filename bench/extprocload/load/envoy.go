package load

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/internal/chain"
)

// exchange is what one request needs: the clients, the bodies, the key.
type exchange struct {
	authz   authv3.AuthorizationClient
	extproc extprocsvc.ExternalProcessorClient
	key     string
	bodies  Bodies
	stream  bool
	// interval is the time between two response chunks (the upstream's
	// pace); the first chunk follows the response headers' reply at once.
	interval time.Duration
	ids      atomic.Uint64
}

func newExchange(conn grpc.ClientConnInterface, key string, b Bodies, stream bool, interval time.Duration) *exchange {
	return &exchange{
		authz: authv3.NewAuthorizationClient(conn), extproc: extprocsvc.NewExternalProcessorClient(conn),
		key: key, bodies: b, stream: stream, interval: interval,
	}
}

// errTimeout marks a reply that did not come within the message timeout:
// Envoy answers 504 (ext_proc.cc, Filter::onMessageTimeout).
var errTimeout = errors.New("ext_proc message timeout")

// headers is a header map as Envoy's ext_proc sends it: key and raw_value
// only, lower-case keys, pseudo-headers included
// (source/extensions/filters/http/ext_proc/mutation_utils.cc,
// MutationUtils::headersToProto).
func headers(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

// do runs one request: the Check, then the Process stream.
func (x *exchange) do(ctx context.Context) error {
	id := strconv.FormatUint(x.ids.Add(1), 10)
	start := time.Now()
	md, err := x.check(ctx, id)
	if err != nil {
		return err
	}
	// On an OK response Envoy adds ext_authz_duration (ms) to the
	// filter's metadata (ext_authz.cc, Filter::onComplete).
	if md == nil {
		md = &structpb.Struct{}
	}
	if md.Fields == nil {
		md.Fields = map[string]*structpb.Value{}
	}
	md.Fields["ext_authz_duration"] = structpb.NewNumberValue(float64(time.Since(start).Milliseconds()))
	return x.process(ctx, id, &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{chain.AuthzNamespace: md}})
}

// check sends the CheckRequest Envoy builds (check_request_utils.cc,
// CheckRequestUtils::createHttpCheck; no body: Sluice's filter sets no
// with_request_body) under the filter's timeout, and requires an OK.
// It returns the dynamic metadata Envoy would store: ok_response's when
// set, else the top-level one (ext_authz.cc, Filter::onComplete).
func (x *exchange) check(ctx context.Context, id string) (*structpb.Struct, error) {
	ctx, cancel := context.WithTimeout(ctx, chain.AuthzTimeout)
	defer cancel()
	resp, err := x.authz.Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:      &authv3.AttributeContext_Peer{Address: sockAddr("127.0.0.1", 40000)},
		Destination: &authv3.AttributeContext_Peer{Address: sockAddr("127.0.0.1", 10000)},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: id, Method: "POST", Path: "/v1/chat/completions", Host: "gateway.local", Scheme: "http", Protocol: "HTTP/1.1",
			Size: int64(len(x.bodies.Request)),
			Headers: map[string]string{
				":method": "POST", ":path": "/v1/chat/completions", ":authority": "gateway.local", ":scheme": "http",
				"authorization": "Bearer " + x.key, "content-type": "application/json",
				"content-length": strconv.Itoa(len(x.bodies.Request)), "user-agent": "OpenAI/Go 3.0", "x-request-id": id,
			},
		}},
	}})
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	if c := resp.GetStatus().GetCode(); c != 0 {
		return nil, fmt.Errorf("check: denied (code %d, http %d)", c, resp.GetDeniedResponse().GetStatus().GetCode())
	}
	md := resp.GetDynamicMetadata()
	if ok := resp.GetOkResponse(); ok.GetDynamicMetadata() != nil { //nolint:staticcheck // Envoy still honours it
		md = ok.GetDynamicMetadata() //nolint:staticcheck // as above
	}
	return md, nil
}

func sockAddr(ip string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

// process runs the ext_proc stream with chain.ExtProc's modes: request
// headers SEND, request body BUFFERED, response headers SEND, response
// body STREAMED (the trailers modes never fire: no trailers arrive).
// Envoy holds the request headers until the body is in (BUFFERED), so
// each message waits for the previous reply; the response chunks go one
// per upstream chunk. Every message carries the forwarded metadata
// (ext_proc.cc, Filter::addDynamicMetadata), and its reply must arrive
// within the message timeout (processor_state.cc, startMessageTimer). At
// the end Envoy half-closes and resets the stream (grpc_client_impl.h,
// closeStream), never waiting for the server's status: cancel does that.
func (x *exchange) process(ctx context.Context, id string, md *corev3.Metadata) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := x.extproc.Process(ctx)
	if err != nil {
		return fmt.Errorf("process: open: %w", err)
	}
	replies := make(chan reply, 1)
	go func() {
		for {
			r, err := s.Recv()
			select {
			case replies <- reply{r, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	step := func(name string, req *extprocsvc.ProcessingRequest, ok func(*extprocsvc.ProcessingResponse) bool) error {
		req.MetadataContext = md
		if err := s.Send(req); err != nil {
			return fmt.Errorf("process: send %s: %w", name, err)
		}
		t := time.NewTimer(chain.ExtProcTimeout)
		defer t.Stop()
		select {
		case r := <-replies:
			if r.err != nil {
				return fmt.Errorf("process: %s: %w", name, r.err)
			}
			if ir := r.resp.GetImmediateResponse(); ir != nil {
				return fmt.Errorf("process: %s: immediate response %d: %.200s", name, ir.GetStatus().GetCode(), ir.GetBody())
			}
			if !ok(r.resp) {
				return fmt.Errorf("process: %s: spurious reply %T", name, r.resp.GetResponse())
			}
			return nil
		case <-t.C:
			return fmt.Errorf("process: %s: %w", name, errTimeout)
		}
	}

	reqLen := strconv.Itoa(len(x.bodies.Request))
	first := &extprocsvc.ProcessingRequest{
		Request: &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocsvc.HttpHeaders{Headers: headers(
			":authority", "gateway.local", ":path", "/v1/chat/completions", ":method", "POST", ":scheme", "http",
			"authorization", "Bearer "+x.key, "content-type", "application/json", "content-length", reqLen,
			"user-agent", "OpenAI/Go 3.0", "x-forwarded-proto", "http", "x-request-id", id,
		)}},
		ProtocolConfig: &extprocsvc.ProtocolConfiguration{
			RequestBodyMode:  extprocfilterv3.ProcessingMode_BUFFERED,
			ResponseBodyMode: extprocfilterv3.ProcessingMode_STREAMED,
		},
	}
	if err := step("request_headers", first, func(r *extprocsvc.ProcessingResponse) bool { return r.GetRequestHeaders() != nil }); err != nil {
		return err
	}
	if err := step("request_body", &extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_RequestBody{
		RequestBody: &extprocsvc.HttpBody{Body: x.bodies.Request, EndOfStream: true},
	}}, func(r *extprocsvc.ProcessingResponse) bool { return r.GetRequestBody() != nil }); err != nil {
		return err
	}
	var rh *corev3.HeaderMap
	if x.stream {
		rh = headers(":status", "200", "content-type", "text/event-stream; charset=utf-8", "openai-processing-ms", "210",
			"x-request-id", "req_bench", "date", "Tue, 01 Dec 2026 00:00:00 GMT")
	} else {
		rh = headers(":status", "200", "content-type", "application/json", "content-length", strconv.Itoa(len(x.bodies.Response)),
			"openai-processing-ms", "480", "x-request-id", "req_bench", "date", "Tue, 01 Dec 2026 00:00:00 GMT")
	}
	if err := step("response_headers", &extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocsvc.HttpHeaders{Headers: rh},
	}}, func(r *extprocsvc.ProcessingResponse) bool { return r.GetResponseHeaders() != nil }); err != nil {
		return err
	}
	chunks := [][]byte{x.bodies.Response}
	if x.stream {
		chunks = x.bodies.Chunks
	}
	isBody := func(r *extprocsvc.ProcessingResponse) bool { return r.GetResponseBody() != nil }
	next := time.Now()
	for i, c := range chunks {
		if i > 0 && x.interval > 0 {
			next = next.Add(x.interval)
			if err := sleepUntil(ctx, next); err != nil {
				return err
			}
		}
		if err := step("response_body", &extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocsvc.HttpBody{Body: c, EndOfStream: i == len(chunks)-1},
		}}, isBody); err != nil {
			return err
		}
	}
	_ = s.CloseSend()
	return nil
}

type reply struct {
	resp *extprocsvc.ProcessingResponse
	err  error
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
