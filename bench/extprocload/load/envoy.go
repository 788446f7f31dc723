package load

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/internal/chain"
)

// bufferLimit is the encoder buffer limit of a request in Sluice's Envoy:
// the listener's per_connection_buffer_limit_bytes, which xds sets to
// policies.Gateway.BodyBufferBytes (the default body limit,
// chain.MaxRequestBodySize, plus 64 KiB). ext_proc's STREAMED chunk queue
// raises the watermark above it and clears it below half of it
// (processor_state.h, queueOverHighLimit / queueBelowLowLimit).
const bufferLimit = chain.MaxRequestBodySize + 64<<10

// stallLimit bounds the wait for a reply while Envoy's message timer is
// not running (see pump): Envoy itself would wait for the route's idle
// timeout, minutes; the driver gives up sooner and counts an error.
const stallLimit = 10 * chain.ExtProcTimeout

// exchange is what one request needs: the connections, the bodies, the
// key, and the messages every request sends alike, encoded once (see
// wire.go).
type exchange struct {
	// One gRPC connection per Envoy worker: each has its own connection
	// to the cluster, and a request's Check, its ext_proc stream and its
	// attempt's ext_proc stream all run on its worker's.
	conns  []grpc.ClientConnInterface
	opts   []grpc.CallOption
	key    string
	bodies Bodies
	stream bool
	check0 checkTemplate
	// The encoded ProcessingRequests that do not change between requests
	// (without their metadata_context): the buffered request body, the
	// response headers and the response body messages.
	requestBody     []byte
	responseHeaders []byte
	responseBody    [][]byte
	// interval is the time between two response chunks (the upstream's
	// pace); the first chunk follows the response headers' reply at once.
	interval time.Duration
	// hostProvider, when set, makes every request a fallback model's
	// whose one attempt goes to a host of this provider (see attempt).
	hostProvider string
	ids          atomic.Uint64
}

func newExchange(conns []grpc.ClientConnInterface, key string, b Bodies, stream bool, interval time.Duration, hostProvider string) (*exchange, error) {
	x := &exchange{conns: conns, opts: []grpc.CallOption{grpc.ForceCodecV2(codec{})},
		key: key, bodies: b, stream: stream, interval: interval, hostProvider: hostProvider}
	var err error
	if x.check0, err = newCheckTemplate(x.checkRequest("")); err != nil {
		return nil, err
	}
	if x.requestBody, err = proto.Marshal(requestBodyMsg(b.Request)); err != nil {
		return nil, err
	}
	if x.responseHeaders, err = proto.Marshal(responseHeadersMsg(x.responseHeaderMap())); err != nil {
		return nil, err
	}
	for i, c := range x.chunks() {
		m, err := proto.Marshal(responseBodyMsg(c, i == len(x.chunks())-1))
		if err != nil {
			return nil, err
		}
		x.responseBody = append(x.responseBody, m)
	}
	return x, nil
}

// chunks is the response body as the upstream delivers it: one chunk for
// a JSON response, the SSE chunks of a stream.
func (x *exchange) chunks() [][]byte {
	if x.stream {
		return x.bodies.Chunks
	}
	return [][]byte{x.bodies.Response}
}

func requestBodyMsg(body []byte) *extprocsvc.ProcessingRequest {
	return &extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_RequestBody{
		RequestBody: &extprocsvc.HttpBody{Body: body, EndOfStream: true},
	}}
}

func responseHeadersMsg(h *corev3.HeaderMap) *extprocsvc.ProcessingRequest {
	return &extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocsvc.HttpHeaders{Headers: h},
	}}
}

func responseBodyMsg(chunk []byte, last bool) *extprocsvc.ProcessingRequest {
	return &extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocsvc.HttpBody{Body: chunk, EndOfStream: last},
	}}
}

// responseHeaderMap is the upstream's response headers.
func (x *exchange) responseHeaderMap() *corev3.HeaderMap {
	if x.stream {
		return headers(":status", "200", "content-type", "text/event-stream; charset=utf-8", "openai-processing-ms", "210",
			"x-request-id", "req_bench", "date", "Tue, 01 Dec 2026 00:00:00 GMT")
	}
	return headers(":status", "200", "content-type", "application/json", "content-length", strconv.Itoa(len(x.bodies.Response)),
		"openai-processing-ms", "480", "x-request-id", "req_bench", "date", "Tue, 01 Dec 2026 00:00:00 GMT")
}

// errTimeout marks a reply that did not come within the message timeout:
// Envoy answers 504 (ext_proc.cc, Filter::onMessageTimeout).
var errTimeout = errors.New("ext_proc message timeout")

// errStalled marks a reply that did not come within stallLimit while no
// message timer ran.
var errStalled = errors.New("ext_proc reply stalled (no message timer running)")

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

// timing is what one request measured, from its start (the scheduled
// send time in open loop).
type timing struct {
	total time.Duration // to the reply to the last response body message
	// ttfc is to the reply to the first response body chunk: what the
	// server adds before Envoy may pass the first chunk on.
	ttfc time.Duration
}

// do runs one request started at start: the Check, then the Process
// stream (and, for a fallback model, the attempt's).
func (x *exchange) do(ctx context.Context, start time.Time) (timing, error) {
	n := x.ids.Add(1)
	id := strconv.FormatUint(n, 10)
	w := int(n % uint64(len(x.conns)))
	checked := time.Now()
	md, err := x.check(ctx, w, id)
	if err != nil {
		return timing{}, err
	}
	// On an OK response Envoy adds ext_authz_duration (ms) to the
	// filter's metadata (ext_authz.cc, Filter::onComplete).
	md = appendNumberField(md, "ext_authz_duration", float64(time.Since(checked).Milliseconds()))
	return x.process(ctx, w, id, start, md)
}

// check sends the CheckRequest Envoy builds (check_request_utils.cc,
// CheckRequestUtils::createHttpCheck; no body: Sluice's filter sets no
// with_request_body) under the filter's timeout, and requires an OK.
// It returns the encoding of the dynamic metadata Envoy would store:
// ok_response's when set, else the top-level one (ext_authz.cc,
// Filter::onComplete; see checkReply).
func (x *exchange) check(ctx context.Context, w int, id string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, chain.AuthzTimeout)
	defer cancel()
	var out rawReply
	if err := x.conns[w].Invoke(ctx, authv3.Authorization_Check_FullMethodName, x.check0.with(id), &out, x.opts...); err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	code, md, err := checkReply(out.b)
	if err != nil {
		return nil, fmt.Errorf("check: malformed reply: %w", err)
	}
	if code != 0 {
		resp := &authv3.CheckResponse{}
		_ = proto.Unmarshal(out.b, resp) // it parsed above
		return nil, fmt.Errorf("check: denied (code %d, http %d)", code, resp.GetDeniedResponse().GetStatus().GetCode())
	}
	return md, nil
}

// checkRequest is the CheckRequest Envoy builds for the request with this
// id; with no id, the part every request shares (see checkTemplate).
func (x *exchange) checkRequest(id string) *authv3.CheckRequest {
	h := map[string]string{
		":method": "POST", ":path": "/v1/chat/completions", ":authority": "gateway.local", ":scheme": "http",
		"authorization": "Bearer " + x.key, "content-type": "application/json",
		"content-length": strconv.Itoa(len(x.bodies.Request)), "user-agent": "OpenAI/Go 3.0",
	}
	if id != "" {
		h["x-request-id"] = id
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:      &authv3.AttributeContext_Peer{Address: sockAddr("127.0.0.1", 40000)},
		Destination: &authv3.AttributeContext_Peer{Address: sockAddr("127.0.0.1", 10000)},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: id, Method: "POST", Path: "/v1/chat/completions", Host: "gateway.local", Scheme: "http", Protocol: "HTTP/1.1",
			Size: int64(len(x.bodies.Request)), Headers: h,
		}},
	}}
}

func sockAddr(ip string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

// procStream is one ext_proc stream as Envoy's filter runs it: every
// message carries the forwarded metadata (ext_proc.cc,
// Filter::addDynamicMetadata: read from the stream's dynamic metadata at
// send time), and one message timer per stream, (re)armed on every send
// and stopped when any reply is processed (processor_state.cc,
// ProcessorState::onStartProcessorCall and onFinishProcessorCall; in
// STREAMED mode a reply stops it even while older chunks are still
// unanswered, and they are not timed again).
type procStream struct {
	s       grpc.ClientStream
	replies chan reply
	md      func() ([]byte, error) // the encoded metadata_context field
	timer   *time.Timer
	armed   bool
	cancel  context.CancelFunc
}

type reply struct {
	resp *rawReply
	err  error
}

// open opens a Process stream on worker w; ctx carries any initial
// metadata. depth is how many replies may be outstanding.
func (x *exchange) open(ctx context.Context, w, depth int, md func() ([]byte, error)) (*procStream, error) {
	ctx, cancel := context.WithCancel(ctx)
	s, err := x.conns[w].NewStream(ctx, &extprocsvc.ExternalProcessor_ServiceDesc.Streams[0], extprocsvc.ExternalProcessor_Process_FullMethodName, x.opts...)
	if err != nil {
		cancel()
		return nil, err
	}
	p := &procStream{s: s, replies: make(chan reply, depth+1), md: md, cancel: cancel, timer: time.NewTimer(time.Hour)}
	p.timer.Stop()
	go func() {
		for {
			r := &rawReply{}
			err := s.RecvMsg(r)
			select {
			case p.replies <- reply{r, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return p, nil
}

// close ends the stream as Envoy does: a half-close, then a reset, never
// waiting for the server's status (grpc_client_impl.h, closeStream).
func (p *procStream) close() {
	_ = p.s.CloseSend()
	p.cancel()
	p.timer.Stop()
}

// send sends a message: req, or when req is nil the encoded enc; either
// way with the stream's metadata_context.
func (p *procStream) send(name string, req *extprocsvc.ProcessingRequest, enc []byte) error {
	md, err := p.md()
	if err != nil {
		return fmt.Errorf("process: send %s: %w", name, err)
	}
	if err := p.s.SendMsg(&outMsg{req: req, enc: enc, md: md}); err != nil {
		return fmt.Errorf("process: send %s: %w", name, err)
	}
	p.timer.Reset(chain.ExtProcTimeout)
	p.armed = true
	return nil
}

// check turns a reply into an error unless its response is of the type
// want (a ProcessingResponse field number, replyRequestHeaders...).
func check(name string, r reply, want protowire.Number) error {
	if r.err != nil {
		return fmt.Errorf("process: %s: %w", name, r.err)
	}
	k, err := r.resp.kind()
	if err == nil && k == want {
		return nil
	}
	resp, err := r.resp.full()
	if err != nil {
		return fmt.Errorf("process: %s: malformed reply: %w", name, err)
	}
	if ir := resp.GetImmediateResponse(); ir != nil {
		return fmt.Errorf("process: %s: immediate response %d: %.200s", name, ir.GetStatus().GetCode(), ir.GetBody())
	}
	return fmt.Errorf("process: %s: spurious reply %T", name, resp.GetResponse())
}

// answered stops the message timer: a reply was processed.
func (p *procStream) answered() {
	p.timer.Stop()
	p.armed = false
}

// call sends req (or enc, see send) and waits for its reply, of the
// type want: the headers and buffered-body messages, each of which Envoy
// holds the stream on until it is answered.
func (p *procStream) call(ctx context.Context, name string, req *extprocsvc.ProcessingRequest, enc []byte, want protowire.Number) (*rawReply, error) {
	if err := p.send(name, req, enc); err != nil {
		return nil, err
	}
	select {
	case r := <-p.replies:
		p.answered()
		if err := check(name, r, want); err != nil {
			return nil, err
		}
		return r.resp, nil
	case <-p.timer.C:
		return nil, fmt.Errorf("process: %s: %w", name, errTimeout)
	case <-ctx.Done():
		return nil, fmt.Errorf("process: %s: %w", name, ctx.Err())
	}
}

// request is the downstream request as the filter chain holds it: the
// header map and body that ext_proc's replies mutate, and the stream's
// dynamic metadata in chain.UsageNamespace (chain.ExtProc's
// receiving_namespaces).
type request struct {
	headers *corev3.HeaderMap
	body    []byte
	usage   *structpb.Struct
}

// received merges a reply's dynamic metadata for chain.UsageNamespace
// into the stream's, as Envoy does for a receiving namespace (ext_proc.cc,
// Filter::setDynamicMetadata; StreamInfo::setDynamicMetadata merges).
func (r *request) received(resp *extprocsvc.ProcessingResponse) {
	v, ok := resp.GetDynamicMetadata().GetFields()[chain.UsageNamespace]
	if !ok || v.GetStructValue() == nil {
		return
	}
	if r.usage == nil {
		r.usage = &structpb.Struct{}
	}
	proto.Merge(r.usage, v.GetStructValue())
}

// process runs the ext_proc stream with chain.ExtProc's modes: request
// headers SEND, request body BUFFERED, response headers SEND, response
// body STREAMED (the trailers modes never fire: no trailers arrive).
// Envoy holds the request headers until the body is in (BUFFERED), so
// each of those messages waits for the previous reply; the response
// chunks go one per upstream chunk, without waiting (see streamBody).
// Envoy closes the stream after the last expected reply.
func (x *exchange) process(ctx context.Context, w int, id string, start time.Time, authz []byte) (timing, error) {
	md := encodeMetadataContext(chain.AuthzNamespace, authz)
	p, err := x.open(ctx, w, len(x.responseBody), func() ([]byte, error) { return md, nil })
	if err != nil {
		return timing{}, fmt.Errorf("process: open: %w", err)
	}
	defer p.close()

	req := &request{body: x.bodies.Request, headers: headers(
		":authority", "gateway.local", ":path", "/v1/chat/completions", ":method", "POST", ":scheme", "http",
		"authorization", "Bearer "+x.key, "content-type", "application/json", "content-length", strconv.Itoa(len(x.bodies.Request)),
		"user-agent", "OpenAI/Go 3.0", "x-forwarded-proto", "http", "x-request-id", id,
	)}
	// SendMsg encodes the message before it returns, so req.headers may
	// be mutated by the reply afterwards.
	first := &extprocsvc.ProcessingRequest{
		Request: &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocsvc.HttpHeaders{Headers: req.headers}},
		ProtocolConfig: &extprocsvc.ProtocolConfiguration{
			RequestBodyMode:  extprocfilterv3.ProcessingMode_BUFFERED,
			ResponseBodyMode: extprocfilterv3.ProcessingMode_STREAMED,
		},
	}
	// The replies' mutations and metadata are read only where a later
	// message carries them: the fallback attempt's stream.
	fallback := x.hostProvider != ""
	raw, err := p.call(ctx, "request_headers", first, nil, replyRequestHeaders)
	if err != nil {
		return timing{}, err
	}
	if fallback {
		resp, err := raw.full()
		if err != nil {
			return timing{}, fmt.Errorf("process: request_headers: %w", err)
		}
		req.received(resp)
		applyHeaderMutation(req.headers, resp.GetRequestHeaders().GetResponse().GetHeaderMutation())
	}
	if raw, err = p.call(ctx, "request_body", nil, x.requestBody, replyRequestBody); err != nil {
		return timing{}, err
	}
	if fallback {
		// A BUFFERED body reply mutates the held headers and the body
		// (processor_state.cc, ProcessorState::handleBodyResponse).
		resp, err := raw.full()
		if err != nil {
			return timing{}, fmt.Errorf("process: request_body: %w", err)
		}
		req.received(resp)
		cr := resp.GetRequestBody().GetResponse()
		applyHeaderMutation(req.headers, cr.GetHeaderMutation())
		req.body = applyBodyMutation(req.body, cr.GetBodyMutation())

		// The attempt's reply to the response headers mutates what the
		// downstream ext_proc then sees.
		rh := x.responseHeaderMap()
		if err := x.attempt(ctx, w, req, rh); err != nil {
			return timing{}, err
		}
		if _, err := p.call(ctx, "response_headers", responseHeadersMsg(rh), nil, replyResponseHeaders); err != nil {
			return timing{}, err
		}
	} else if _, err := p.call(ctx, "response_headers", nil, x.responseHeaders, replyResponseHeaders); err != nil {
		return timing{}, err
	}
	return x.streamBody(ctx, p, start, x.responseBody)
}

// streamBody sends the response body in STREAMED mode as Envoy does: it
// pipelines. Filter::onData (ext_proc.cc) handles each encodeData call
// by building the chunk's message (setupBodyChunk), moving the data into
// the chunk queue (ProcessorState::enqueueStreamingChunk) and sending it
// at once (sendBodyChunk), then returns Continue with an empty buffer; it
// never waits for the reply to the previous chunk ("This way, we pipeline
// data from the proxy to the external processor", the comment on the
// STREAMED case there). Replies are matched to the queue's head in order
// (processor_state.cc, ProcessorState::handleBodyResponse dequeues one
// chunk per BodyResponse and injects it). The only bound is the queue's
// size in bytes: above the encoder buffer limit enqueueStreamingChunk
// requests a watermark, which stops Envoy reading the upstream, and a
// reply that brings it below half the limit clears it (queueOverHighLimit
// / queueBelowLowLimit in processor_state.h). So chunk N+1 goes to the
// server when the upstream delivers it, whether or not chunk N has been
// answered, unless bufferLimit bytes are unanswered. msgs are the
// encoded messages, one for each of x.chunks().
func (x *exchange) streamBody(ctx context.Context, p *procStream, start time.Time, msgs [][]byte) (timing, error) {
	var (
		t        timing
		sent     int
		answered int
		queued   int   // bytes sent and not answered: Envoy's chunk queue
		sizes    []int // their sizes, oldest first
		paused   bool  // watermark raised: the upstream is not read
		due      = time.Now()
	)
	tick := time.NewTimer(time.Hour)
	defer tick.Stop()
	stall := time.NewTimer(time.Hour)
	defer stall.Stop()
	for answered < len(msgs) {
		if sent < len(msgs) && !paused && !time.Now().Before(due) {
			if err := p.send("response_body", nil, msgs[sent]); err != nil {
				return t, err
			}
			c := x.chunks()[sent]
			sent++
			sizes = append(sizes, len(c))
			if queued += len(c); queued > bufferLimit {
				paused = true
			}
			if x.interval > 0 {
				due = due.Add(x.interval)
			}
			continue
		}
		var tickC, stallC <-chan time.Time
		if sent < len(msgs) && !paused {
			tick.Reset(time.Until(due))
			tickC = tick.C
		}
		if !p.armed {
			stall.Reset(stallLimit)
			stallC = stall.C
		}
		select {
		case r := <-p.replies:
			p.answered()
			if err := check("response_body", r, replyResponseBody); err != nil {
				return t, err
			}
			if answered == 0 {
				t.ttfc = time.Since(start)
			}
			answered++
			queued -= sizes[0]
			sizes = sizes[1:]
			if paused && queued < bufferLimit/2 {
				paused = false
			}
		case <-tickC:
		case <-p.timer.C:
			return t, fmt.Errorf("process: response_body: %w", errTimeout)
		case <-stallC:
			return t, fmt.Errorf("process: response_body: %w", errStalled)
		case <-ctx.Done():
			return t, fmt.Errorf("process: response_body: %w", ctx.Err())
		}
	}
	t.total = time.Since(start)
	return t, nil
}

// attempt plays the one attempt of a fallback request, which succeeds,
// in the upstream filter chain of the model's aggregate cluster
// (chain.UpstreamHTTPFilters: ext_proc, upstream_codec), with
// chain.UpstreamExtProc's modes: request headers SEND, request body
// BUFFERED, response headers SEND, response body NONE, trailers SKIP.
//
// What reaches that ext_proc, in Envoy:
//   - the router creates the attempt's UpstreamRequest once the
//     downstream filters let the request through (here, after the body
//     reply); its UpstreamFilterManager returns the downstream stream's
//     StreamInfo (source/common/router/upstream_request.cc,
//     UpstreamFilterManager::streamInfo), so the forwarded
//     chain.UsageNamespace metadata is what the downstream ext_proc's
//     replies left there (the handoff), and the attempt's host, set on it
//     before the filter chain is built (UpstreamRequest's constructor,
//     setUpstreamInfo), is what xds.upstream_host_metadata reads;
//   - the stream carries the gRPC initial metadata of the filter's
//     grpc_service (chain.UpstreamMetadataKey);
//   - request headers: the header map as the downstream filters left it,
//     less the route's request_headers_to_remove (chain.RoutingHeader),
//     plus x-envoy-attempt-count (the virtual host's
//     include_request_attempt_count), with the request attribute
//     chain.UpstreamHostProviderAttribute, evaluated for the first
//     request-direction message only (ext_proc.cc, Filter::addAttributes);
//   - the buffered body (the router's copy, as the downstream body reply
//     left it) in one message with end_of_stream;
//   - the provider's response headers; the reply's mutation applies to
//     the headers the downstream ext_proc then sees;
//   - no body message (NONE), and Envoy closes the stream after the last
//     expected reply (ext_proc.cc, Filter::onReceiveMessage and the
//     stream close optimization; at the latest in onDestroy).
func (x *exchange) attempt(ctx context.Context, w int, req *request, rh *corev3.HeaderMap) error {
	md := func() ([]byte, error) {
		m := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
		if req.usage != nil {
			m.FilterMetadata[chain.UsageNamespace] = req.usage
		}
		return metadataContext(m)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, chain.UpstreamMetadataKey, chain.UpstreamMetadataValue)
	p, err := x.open(ctx, w, 3, md)
	if err != nil {
		return fmt.Errorf("attempt: open: %w", err)
	}
	defer p.close()

	h := cloneHeaders(req.headers)
	removeHeader(h, chain.RoutingHeader)
	h.Headers = append(h.Headers, &corev3.HeaderValue{Key: chain.AttemptCountHeader, RawValue: []byte("1")})
	first := &extprocsvc.ProcessingRequest{
		Request: &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocsvc.HttpHeaders{Headers: h}},
		ProtocolConfig: &extprocsvc.ProtocolConfiguration{
			RequestBodyMode:  extprocfilterv3.ProcessingMode_BUFFERED,
			ResponseBodyMode: extprocfilterv3.ProcessingMode_NONE,
		},
		Attributes: map[string]*structpb.Struct{chain.ExtProcAttributesKey: {Fields: map[string]*structpb.Value{
			chain.UpstreamHostProviderAttribute: structpb.NewStringValue(x.hostProvider),
		}}},
	}
	if _, err := p.call(ctx, "attempt request_headers", first, nil, replyRequestHeaders); err != nil {
		return err
	}
	if _, err := p.call(ctx, "attempt request_body", requestBodyMsg(req.body), nil, replyRequestBody); err != nil {
		return err
	}
	raw, err := p.call(ctx, "attempt response_headers", responseHeadersMsg(rh), nil, replyResponseHeaders)
	if err != nil {
		return err
	}
	resp, err := raw.full()
	if err != nil {
		return fmt.Errorf("process: attempt response_headers: %w", err)
	}
	applyHeaderMutation(rh, resp.GetResponseHeaders().GetResponse().GetHeaderMutation())
	return nil
}

func cloneHeaders(h *corev3.HeaderMap) *corev3.HeaderMap {
	return proto.Clone(h).(*corev3.HeaderMap)
}

func removeHeader(h *corev3.HeaderMap, key string) {
	kept := h.Headers[:0]
	for _, v := range h.Headers {
		if v.GetKey() != key {
			kept = append(kept, v)
		}
	}
	h.Headers = kept
}

// refusedByDefault are the headers Envoy's default mutation rules refuse
// (and ignore): source/extensions/filters/common/mutation_rules/
// mutation_rules.cc, Checker::isAllowed. Sluice's downstream filter sets
// no mutation_rules; the upstream filter's allow only
// chain.AttemptCountHeader, on the request the driver does not forward.
func refusedByDefault(key string) bool {
	switch key {
	case "host", ":authority", ":method", ":scheme":
		return true
	}
	return strings.HasPrefix(key, "x-envoy-")
}

// applyHeaderMutation applies m to h as Envoy does: removes first, then
// sets; a set overwrites unless append is true; Envoy reads raw_value
// only (mutation_utils.cc, MutationUtils::applyHeaderMutations).
// Pseudo-headers and host are never removed.
func applyHeaderMutation(h *corev3.HeaderMap, m *extprocsvc.HeaderMutation) {
	if m == nil {
		return
	}
	for _, k := range m.GetRemoveHeaders() {
		k = strings.ToLower(k)
		if strings.HasPrefix(k, ":") || k == "host" || refusedByDefault(k) {
			continue
		}
		removeHeader(h, k)
	}
	for _, s := range m.GetSetHeaders() {
		k := strings.ToLower(s.GetHeader().GetKey())
		if refusedByDefault(k) {
			continue
		}
		if !s.GetAppend().GetValue() {
			removeHeader(h, k)
		}
		h.Headers = append(h.Headers, &corev3.HeaderValue{Key: k, RawValue: s.GetHeader().GetRawValue()})
	}
}

// applyBodyMutation is the body after m (mutation_utils.cc,
// MutationUtils::applyBodyMutations: body replaces, clear_body drains).
func applyBodyMutation(b []byte, m *extprocsvc.BodyMutation) []byte {
	switch m.GetMutation().(type) {
	case *extprocsvc.BodyMutation_Body:
		return m.GetBody()
	case *extprocsvc.BodyMutation_ClearBody:
		if m.GetClearBody() {
			return nil
		}
	}
	return b
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
