package envoytest

import (
	"context"
	xdscorev3 "github.com/cncf/xds/go/xds/core/v3"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

type preq = extprocsvc.ProcessingRequest
type presp = extprocsvc.ProcessingResponse
type cresp = extprocsvc.CommonResponse
type pmode = extprocv3.ProcessingMode

// absent in a want map means "header not present".
const absent = "\x00absent"

type clientWant struct {
	status   int
	body     string
	headers  map[string]string // joined with "|"; absent = not there
	trailers map[string]string
	reset    bool // the response started and was then reset
}

type upWant struct {
	none    bool // neither upstream was called
	b       bool // upstream-b got it (and upstream nothing)
	method  string
	path    string
	host    string
	body    string
	headers map[string]string // joined with "|"; absent = not there
	chunked bool              // no content-length: the body was re-framed
}

// epCase is one ext_proc scenario; its name starts with the
// envoy-protocol.md item it covers.
type epCase struct {
	name     string
	cfg      epConfig
	script   func(t *testing.T, h *epHarness, c *procConn) error
	upstream func(h *epHarness, w http.ResponseWriter, r *http.Request)
	client   func(h *epHarness) *clientResult

	wantSent []*preq // nil: not checked; empty: nothing sent
	// interleaved: the two directions may interleave (§1.2), so wantSent
	// is compared per direction, each in order.
	interleaved bool
	noSent      bool // no stream at all
	wantTrace   []string
	wantClient  *clientWant
	wantDetails string
	wantUp      *upWant
	check       func(t *testing.T, h *epHarness, res *clientResult, x *Exchange)
}

// epc is a filter config with a message_timeout long enough for -race on
// a slow machine (cases about timeouts set their own).
func epc(mods ...func(c *extprocv3.ExternalProcessor)) *extprocv3.ExternalProcessor {
	c := &extprocv3.ExternalProcessor{MessageTimeout: durationpb.New(5 * time.Second)}
	for _, m := range mods {
		m(c)
	}
	return c
}

func mode(m *pmode) func(c *extprocv3.ExternalProcessor) {
	return func(c *extprocv3.ExternalProcessor) { c.ProcessingMode = m }
}

func timeout(d time.Duration) func(c *extprocv3.ExternalProcessor) {
	return func(c *extprocv3.ExternalProcessor) { c.MessageTimeout = durationpb.New(d) }
}

func failOpen(c *extprocv3.ExternalProcessor) { c.FailureModeAllow = true }

var respSkip = &pmode{ResponseHeaderMode: headerSkip}

// Scripts.

// onKind answers messages of the given kinds with fn's reply and every
// other message with an empty reply of its type.
func onKind(replies map[string]func(req *preq) *presp) func(t *testing.T, h *epHarness, c *procConn) error {
	return func(t *testing.T, h *epHarness, c *procConn) error {
		return c.replyAll(func(req *preq) *presp {
			if fn := replies[reqKind(req)]; fn != nil {
				return fn(req)
			}
			return nil
		})
	}
}

func always(r *presp) func(*preq) *presp { return func(*preq) *presp { return r } }

// silentAfter answers messages until kind arrives, which it never answers.
func silentAfter(kind string) func(t *testing.T, h *epHarness, c *procConn) error {
	return func(t *testing.T, h *epHarness, c *procConn) error {
		for {
			req, err := c.Recv()
			if err != nil {
				return nil
			}
			if reqKind(req) == kind {
				return c.drain()
			}
			if c.Send(continueFor(req)) != nil {
				return c.drain()
			}
		}
	}
}

// Upstreams.

func trailerUpstream(h *epHarness, w http.ResponseWriter, r *http.Request) {
	w.Header()["Date"] = nil
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Trailer", "X-T")
	w.WriteHeader(200)
	io.WriteString(w, "ok")
	w.Header().Set("X-T", "v")
}

// chunkUpstream writes "one", then waits for signal "two" to write "two",
// then for "end" to finish; it gives up when the request is gone.
func chunkUpstream(h *epHarness, w http.ResponseWriter, r *http.Request) {
	w.Header()["Date"] = nil
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(200)
	io.WriteString(w, "one")
	w.(http.Flusher).Flush()
	if !h.await(r.Context(), "two") {
		return
	}
	io.WriteString(w, "two")
	w.(http.Flusher).Flush()
	h.await(r.Context(), "end")
}

func textUpstream(body string) func(h *epHarness, w http.ResponseWriter, r *http.Request) {
	return func(h *epHarness, w http.ResponseWriter, r *http.Request) { writeText(w, body) }
}

// Clients.

func postOf(body string, kv ...string) func(h *epHarness) *clientResult {
	return func(h *epHarness) *clientResult { return h.post(body, kv...) }
}

func getWith(kv ...string) func(h *epHarness) *clientResult {
	return func(h *epHarness) *clientResult { return h.get(kv...) }
}

func streamed(trailers ...string) func(h *epHarness) *clientResult {
	return func(h *epHarness) *clientResult { return h.postStream(trailers...) }
}

// readChunked reads "ONE", lets the upstream write "two", reads "TWO",
// lets it finish: the response body moves chunk by chunk.
func readChunked(h *epHarness) *clientResult {
	req := h.newRequest("GET", nil)
	resp, err := h.clientFor(req).Do(req)
	if err != nil {
		return &clientResult{err: err}
	}
	defer resp.Body.Close()
	res := &clientResult{status: resp.StatusCode, header: resp.Header}
	buf := make([]byte, 3)
	for _, step := range []struct{ want, next string }{{"ONE", "two"}, {"TWO", "end"}} {
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			res.err = err
			return res
		}
		res.body += string(buf)
		if string(buf) != step.want {
			h.t.Errorf("client read %q, want %q before the upstream writes more", buf, step.want)
		}
		h.fire(step.next)
	}
	rest, err := io.ReadAll(resp.Body)
	res.body += string(rest)
	res.err = err
	res.trailer = resp.Trailer
	return res
}

// readOneThenCancel reads the first 3 body bytes and goes away.
func readOneThenCancel(h *epHarness) *clientResult {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := h.newRequest("GET", nil)
	resp, err := h.clientFor(req).Do(req.WithContext(ctx))
	if err != nil {
		return &clientResult{err: err}
	}
	defer resp.Body.Close()
	buf := make([]byte, 3)
	_, err = io.ReadFull(resp.Body, buf)
	res := &clientResult{status: resp.StatusCode, header: resp.Header, body: string(buf), err: err}
	cancel()
	return res
}

func TestExtProc(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, tc := range epCases(t) {
		t.Run(tc.name, func(t *testing.T) { runEPCase(t, tc) })
	}
}

func epCases(t *testing.T) []epCase {
	okClient := &clientWant{status: 200, body: "ok"}
	okGet := &upWant{method: "GET"}
	fullTrace := []string{"open", "→request_headers", "←request_headers", "→response_headers", "←response_headers", "half-close", "cancel"}
	reqOnlyTrace := []string{"open", "→request_headers", "←request_headers", "half-close", "cancel"}
	md := func(fields map[string]map[string]any) *structpb.Struct {
		s := &structpb.Struct{Fields: map[string]*structpb.Value{}}
		for k, v := range fields {
			s.Fields[k] = structpb.NewStructValue(mustStruct(t, v))
		}
		return s
	}
	recvNS := func(ns ...string) func(c *extprocv3.ExternalProcessor) {
		return func(c *extprocv3.ExternalProcessor) {
			if c.MetadataOptions == nil {
				c.MetadataOptions = &extprocv3.MetadataOptions{}
			}
			c.MetadataOptions.ReceivingNamespaces = &extprocv3.MetadataOptions_MetadataNamespaces{Untyped: ns}
		}
	}
	allowOverride := func(c *extprocv3.ExternalProcessor) { c.AllowModeOverride = true }
	serverErr := func(t *testing.T, h *epHarness, c *procConn) error {
		c.next(t, "request_headers")
		return status.Error(codes.Internal, "boom now")
	}
	routeScript := func(rh, rb *cresp) func(t *testing.T, h *epHarness, c *procConn) error {
		return onKind(map[string]func(*preq) *presp{
			"request_headers": always(reqHeadersReply(rh)),
			"request_body":    always(reqBodyReply(rb)),
		})
	}
	modelB := mutation(setHdr("x-model", "b"))

	return []epCase{
		// ---- §1.1 stream and encoding ----
		{
			name:       "§1.1 default modes: request_headers(eos) then response_headers, key+raw_value, pseudo-headers, protocol_config first only, metadata_context always, closed after last reply",
			cfg:        epConfig{ep: epc()},
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("GET"), true), modeNone, modeNone), respHeadersMsg(okRespHeaders("content-length", "2"), false)},
			wantTrace:  fullTrace,
			wantClient: okClient,
			wantUp:     okGet,
		},
		{
			name:       "§1.1 stream opened lazily: nothing to send, no stream",
			cfg:        epConfig{ep: epc(mode(&pmode{RequestHeaderMode: headerSkip, ResponseHeaderMode: headerSkip}))},
			noSent:     true,
			wantClient: okClient,
			wantUp:     okGet,
		},
		{
			name:   "§1.1 forward_rules allowed prefix/exact and disallowed exact; repeated headers stay repeated",
			client: getWith("X-Secret", "s", "X-Dup", "1", "X-Dup", "2"),
			cfg: epConfig{ep: epc(mode(respSkip), func(c *extprocv3.ExternalProcessor) {
				c.ForwardRules = &extprocv3.HeaderForwardingRules{
					AllowedHeaders: &matcherv3.ListStringMatcher{Patterns: []*matcherv3.StringMatcher{
						{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "x-"}},
						{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: ":path"}},
					}},
					DisallowedHeaders: &matcherv3.ListStringMatcher{Patterns: []*matcherv3.StringMatcher{
						{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "x-secret"}},
					}},
				}
			})},
			wantSent:   []*preq{pc(reqHeadersMsg(hm(":path", "/p", "x-request-id", "req-1", "x-forwarded-proto", "http", "x-dup", "1", "x-dup", "2"), true), modeNone, modeNone)},
			wantTrace:  reqOnlyTrace,
			wantClient: okClient,
			wantUp:     &upWant{method: "GET", headers: map[string]string{"X-Secret": "s", "X-Dup": "1|2"}},
		},
		{
			name: "§1.1 only raw_value is read: a server setting only value yields an empty header",
			cfg:  epConfig{ep: epc(mode(respSkip))},
			script: onKind(map[string]func(*preq) *presp{"request_headers": always(reqHeadersReply(&cresp{HeaderMutation: mutation(
				&corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "x-only-value", Value: "v"}},
				setHdr("x-raw", "r"),
			)}))}),
			wantClient: okClient,
			wantUp:     &upWant{method: "GET", headers: map[string]string{"X-Only-Value": "", "X-Raw": "r"}},
		},
		{
			name:   "§1.1 append BoolValue: unset/false overwrite, true adds an entry (inline headers join with ','), append_action ignored",
			client: getWith("X-A", "1", "X-B", "1"),
			cfg:    epConfig{ep: epc(mode(respSkip))},
			script: onKind(map[string]func(*preq) *presp{"request_headers": always(reqHeadersReply(&cresp{HeaderMutation: mutation(
				&corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "x-a", RawValue: []byte("2")}, AppendAction: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD},
				appendHdr("x-b", "2", true),
				appendHdr("x-c", "3", false),
				appendHdr("user-agent", "ua2", true),
			)}))}),
			wantClient: okClient,
			wantUp:     &upWant{method: "GET", headers: map[string]string{"X-A": "2", "X-B": "1|2", "X-C": "3", "User-Agent": "test,ua2"}},
		},
		{
			name: "§1.1 value and raw_value both set: status_on_error",
			cfg:  epConfig{ep: epc(mode(respSkip))},
			script: onKind(map[string]func(*preq) *presp{"request_headers": always(reqHeadersReply(&cresp{HeaderMutation: mutation(
				&corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "x-a", Value: "v", RawValue: []byte("r")}},
			)}))}),
			wantTrace:   reqOnlyTrace,
			wantClient:  &clientWant{status: 500},
			wantDetails: "Only_one_of_value_or_raw_value_in_the_HeaderValue_message_should_be_set.",
			wantUp:      &upWant{none: true},
		},

		// ---- §1.2 message order and modes ----
		{
			name:       "§1.2 HttpHeaders.end_of_stream: a GET in BUFFERED mode sends no body message",
			cfg:        epConfig{ep: epc(mode(&pmode{RequestBodyMode: modeBuffered}))},
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("GET"), true), modeBuffered, modeNone), respHeadersMsg(okRespHeaders("content-length", "2"), false)},
			wantTrace:  fullTrace,
			wantClient: okClient,
		},
		{
			name:       "§1.2 DEFAULT trailer mode is SKIP: trailers that arrived are not sent",
			cfg:        epConfig{ep: epc()},
			upstream:   trailerUpstream,
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("GET"), true), modeNone, modeNone), respHeadersMsg(okRespHeaders(), false)},
			wantTrace:  fullTrace,
			wantClient: &clientWant{status: 200, body: "ok", trailers: map[string]string{"X-T": "v"}},
		},
		{
			name:     "§1.2 response trailers SEND: sent after the headers, header_mutation of a trailers reply applies",
			cfg:      epConfig{ep: epc(mode(&pmode{ResponseTrailerMode: headerSend}))},
			upstream: trailerUpstream,
			script: onKind(map[string]func(*preq) *presp{"response_trailers": always(&presp{Response: &extprocsvc.ProcessingResponse_ResponseTrailers{
				ResponseTrailers: &extprocsvc.TrailersResponse{HeaderMutation: mutation(setHdr("x-t2", "w"))}}})}),
			wantSent: []*preq{pc(reqHeadersMsg(stdReq("GET"), true), modeNone, modeNone), respHeadersMsg(okRespHeaders(), false),
				respTrailersMsg(hm("x-t", "v"))},
			wantTrace:  []string{"open", "→request_headers", "←request_headers", "→response_headers", "←response_headers", "→response_trailers", "←response_trailers", "half-close", "cancel"},
			wantClient: &clientWant{status: 200, body: "ok", trailers: map[string]string{"X-T": "v", "X-T2": "w"}},
		},
		{
			name:   "§1.2 request trailers SEND with body NONE: sent when they arrive",
			cfg:    epConfig{ep: epc(mode(&pmode{RequestTrailerMode: headerSend, ResponseHeaderMode: headerSkip}))},
			client: streamed("X-Rt"),
			script: func(t *testing.T, h *epHarness, c *procConn) error {
				c.Send(continueFor(c.next(t, "request_headers")))
				h.write("abc")
				h.reqTrailer.Set("X-Rt", "v")
				h.pw.Close()
				c.Send(continueFor(c.next(t, "request_trailers")))
				return c.drain()
			},
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("POST"), false), modeNone, modeNone), reqTrailersMsg(hm("x-rt", "v"))},
			wantTrace:  []string{"open", "→request_headers", "←request_headers", "→request_trailers", "←request_trailers", "half-close", "cancel"},
			wantClient: okClient,
			wantUp:     &upWant{method: "POST", body: "abc"},
		},
		{
			name:   "§1.2 BUFFERED request: headers held, the whole body in one message, header_mutation of the body reply applies",
			cfg:    epConfig{ep: epc(mode(&pmode{RequestBodyMode: modeBuffered, ResponseHeaderMode: headerSkip}))},
			client: streamed(),
			script: func(t *testing.T, h *epHarness, c *procConn) error {
				c.Send(continueFor(c.next(t, "request_headers")))
				h.write("hello ")
				h.waitState("first chunk buffered", func(x *epInstance) bool { return string(x.dec.buf) == "hello " })
				h.write("world")
				h.pw.Close()
				c.next(t, "request_body")
				c.Send(reqBodyReply(&cresp{HeaderMutation: mutation(setHdr("x-seen", "1")), BodyMutation: newBody("HELLO WORLD")}))
				return c.drain()
			},
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("POST"), false), modeBuffered, modeNone), reqBodyMsg("hello world", true)},
			wantTrace:  []string{"open", "→request_headers", "←request_headers", "→request_body", "←request_body", "half-close", "cancel"},
			wantClient: okClient,
			wantUp:     &upWant{method: "POST", body: "HELLO WORLD", headers: map[string]string{"X-Seen": "1"}, chunked: true},
		},
		{
			name:   "§1.2 BUFFERED with trailers: body sent with end_of_stream=false, trailers after the body reply",
			cfg:    epConfig{ep: epc(mode(&pmode{RequestBodyMode: modeBuffered, RequestTrailerMode: headerSend, ResponseHeaderMode: headerSkip}))},
			client: streamed("X-Rt"),
			script: func(t *testing.T, h *epHarness, c *procConn) error {
				c.Send(continueFor(c.next(t, "request_headers")))
				h.write("abc")
				h.reqTrailer.Set("X-Rt", "v")
				h.pw.Close()
				c.Send(continueFor(c.next(t, "request_body")))
				c.Send(continueFor(c.next(t, "request_trailers")))
				return c.drain()
			},
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("POST"), false), modeBuffered, modeNone), reqBodyMsg("abc", false), reqTrailersMsg(hm("x-rt", "v"))},
			wantTrace:  []string{"open", "→request_headers", "←request_headers", "→request_body", "←request_body", "→request_trailers", "←request_trailers", "half-close", "cancel"},
			wantClient: okClient,
			wantUp:     &upWant{method: "POST", body: "abc"},
		},
		{
			name:   "§1.2 BUFFERED request overflow: 413",
			cfg:    epConfig{ep: epc(mode(&pmode{RequestBodyMode: modeBuffered, ResponseHeaderMode: headerSkip})), bufferLimit: 8},
			client: streamed(),
			script: func(t *testing.T, h *epHarness, c *procConn) error {
				c.next(t, "request_headers") // not answered: the body arrives during the headers call
				h.write("0123456789")
				return c.drain()
			},
			wantSent:    []*preq{pc(reqHeadersMsg(stdReq("POST"), false), modeBuffered, modeNone)},
			wantTrace:   []string{"open", "→request_headers", "half-close", "cancel"},
			wantClient:  &clientWant{status: 413, body: "Payload Too Large"},
			wantDetails: "request_payload_too_large",
			wantUp:      &upWant{none: true},
		},
		{
			// The filter manager's buffer is a watermark buffer whose high
			// watermark is the limit (ActiveStreamDecoderFilter::createBuffer,
			// source/common/http/filter_manager.cc); requestDataTooLarge
			// runs only once it holds more than that, so a body of exactly
			// the limit is buffered and sent whole.
			name:   "§1.2 BUFFERED request of exactly the buffer limit: sent whole",
			cfg:    epConfig{ep: epc(mode(&pmode{RequestBodyMode: modeBuffered, ResponseHeaderMode: headerSkip})), bufferLimit: 8},
			client: streamed(),
			script: func(t *testing.T, h *epHarness, c *procConn) error {
				c.Send(continueFor(c.next(t, "request_headers")))
				h.write("01234567")
				h.pw.Close()
				c.Send(continueFor(c.next(t, "request_body")))
				return c.drain()
			},
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("POST"), false), modeBuffered, modeNone), reqBodyMsg("01234567", true)},
			wantTrace:  []string{"open", "→request_headers", "←request_headers", "→request_body", "←request_body", "half-close", "cancel"},
			wantClient: okClient,
			wantUp:     &upWant{method: "POST", body: "01234567"},
		},
		{
			name:        "§1.2 BUFFERED response overflow: 500",
			cfg:         epConfig{ep: epc(mode(&pmode{ResponseBodyMode: modeBuffered})), bufferLimit: 8},
			upstream:    textUpstream("0123456789"),
			script:      silentAfter("response_headers"),
			wantSent:    []*preq{pc(reqHeadersMsg(stdReq("GET"), true), modeNone, modeBuffered), respHeadersMsg(okRespHeaders("content-length", "10"), false)},
			wantTrace:   []string{"open", "→request_headers", "←request_headers", "→response_headers", "half-close", "cancel"},
			wantClient:  &clientWant{status: 500, body: "Internal Server Error"},
			wantDetails: "response_payload_too_large",
		},
		{
			name:   "§1.2 STREAMED request, body after the headers reply: one message per chunk, each held until its reply",
			cfg:    epConfig{ep: epc(mode(&pmode{RequestBodyMode: modeStreamed, ResponseHeaderMode: headerSkip}))},
			client: streamed(),
			script: func(t *testing.T, h *epHarness, c *procConn) error {
				c.Send(continueFor(c.next(t, "request_headers")))
				h.waitState("headers passed", func(x *epInstance) bool { return x.dec.headersPassed })
				h.write("aa")
				c.next(t, "request_body")
				c.Send(reqBodyReply(&cresp{BodyMutation: newBody("AA")}))
				h.waitState("reply applied", chunksAnswered)
				h.write("bb")
				c.next(t, "request_body")
				c.Send(reqBodyReply(&cresp{BodyMutation: newBody("BB")}))
				h.waitState("reply applied", chunksAnswered)
				h.pw.Close()
				c.Send(continueFor(c.next(t, "request_body")))
				return c.drain()
			},
			wantSent: []*preq{pc(reqHeadersMsg(stdReq("POST"), false), modeStreamed, modeNone),
				reqBodyMsg("aa", false), reqBodyMsg("bb", false), reqBodyMsg("", true)},
			wantTrace: []string{"open", "→request_headers", "←request_headers", "→request_body", "←request_body",
				"→request_body", "←request_body", "→request_body", "←request_body", "half-close", "cancel"},
			wantClient: okClient,
			wantUp:     &upWant{method: "POST", body: "AABB", chunked: true},
		},
		{
			name:   "§1.2 STREAMED request, data before the headers reply is sent as one merged chunk",
			cfg:    epConfig{ep: epc(mode(&pmode{RequestBodyMode: modeStreamed, ResponseHeaderMode: headerSkip}))},
			client: streamed(),
			script: func(t *testing.T, h *epHarness, c *procConn) error {
				rh := c.next(t, "request_headers")
				h.write("c1")
				h.waitState("c1 buffered", func(x *epInstance) bool { return string(x.dec.buf) == "c1" })
				h.write("c2")
				h.waitState("c1c2 buffered", func(x *epInstance) bool { return string(x.dec.buf) == "c1c2" })
				c.Send(continueFor(rh))
				c.Send(continueFor(c.next(t, "request_body")))
				h.waitState("reply applied", chunksAnswered)
				h.write("c3")
				c.Send(continueFor(c.next(t, "request_body")))
				h.waitState("reply applied", chunksAnswered)
				h.pw.Close()
				c.Send(continueFor(c.next(t, "request_body")))
				return c.drain()
			},
			wantSent: []*preq{pc(reqHeadersMsg(stdReq("POST"), false), modeStreamed, modeNone),
				reqBodyMsg("c1c2", false), reqBodyMsg("c3", false), reqBodyMsg("", true)},
			wantClient: okClient,
			wantUp:     &upWant{method: "POST", body: "c1c2c3", chunked: true},
		},
		{
			name:   "§1.2 STREAMED request, whole body before the headers reply: one message with end_of_stream, handled like BUFFERED (header_mutation applies), content-length removed",
			cfg:    epConfig{ep: epc(mode(&pmode{RequestBodyMode: modeStreamed, ResponseHeaderMode: headerSkip}))},
			client: postOf("hello"),
			script: func(t *testing.T, h *epHarness, c *procConn) error {
				rh := c.next(t, "request_headers")
				h.waitState("whole body arrived", func(x *epInstance) bool { return x.dec.complete })
				c.Send(continueFor(rh))
				c.next(t, "request_body")
				c.Send(reqBodyReply(&cresp{HeaderMutation: mutation(setHdr("x-from-body", "1")), BodyMutation: newBody("HELLO!")}))
				return c.drain()
			},
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("POST", "content-length", "5"), false), modeStreamed, modeNone), reqBodyMsg("hello", true)},
			wantTrace:  []string{"open", "→request_headers", "←request_headers", "→request_body", "←request_body", "half-close", "cancel"},
			wantClient: okClient,
			wantUp:     &upWant{method: "POST", body: "HELLO!", headers: map[string]string{"X-From-Body": "1"}, chunked: true},
		},
		{
			name:     "§1.2 §4 STREAMED response chunk by chunk: each chunk goes downstream after its reply, header_mutation ignored in chunk replies, last message an empty body with end_of_stream",
			cfg:      epConfig{ep: epc(mode(&pmode{ResponseBodyMode: modeStreamed}))},
			upstream: chunkUpstream,
			client:   readChunked,
			script: onKind(map[string]func(*preq) *presp{"response_body": func(req *preq) *presp {
				b := string(req.GetResponseBody().GetBody())
				if b == "" {
					return nil
				}
				return respBodyReply(&cresp{HeaderMutation: mutation(setHdr("x-ignored", "1")), BodyMutation: newBody(strings.ToUpper(b))})
			}}),
			wantSent: []*preq{pc(reqHeadersMsg(stdReq("GET"), true), modeNone, modeStreamed), respHeadersMsg(okRespHeaders(), false),
				respBodyMsg("one", false), respBodyMsg("two", false), respBodyMsg("", true)},
			wantTrace: []string{"open", "→request_headers", "←request_headers", "→response_headers", "←response_headers",
				"→response_body", "←response_body", "→response_body", "←response_body", "→response_body", "←response_body", "half-close", "cancel"},
			wantClient: &clientWant{status: 200, body: "ONETWO", headers: map[string]string{"X-Ignored": absent, "Content-Length": absent}},
		},
		{
			name:     "§1.2 STREAMED response: content-length removed, set_headers of content-length skipped",
			cfg:      epConfig{ep: epc(mode(&pmode{ResponseBodyMode: modeStreamed}))},
			upstream: textUpstream("hello"),
			script: onKind(map[string]func(*preq) *presp{"response_headers": always(respHeadersReply(&cresp{HeaderMutation: mutation(
				setHdr("content-length", "99"), setHdr("x-h", "1"))}))}),
			wantSent: []*preq{pc(reqHeadersMsg(stdReq("GET"), true), modeNone, modeStreamed),
				respHeadersMsg(okRespHeaders("content-length", "5"), false), respBodyMsg("hello", true)},
			wantClient: &clientWant{status: 200, body: "hello", headers: map[string]string{"X-H": "1", "Content-Length": absent}},
		},
		{
			name:   "§1.2 STREAMED trailers are held until every chunk was answered",
			cfg:    epConfig{ep: epc(mode(&pmode{RequestBodyMode: modeStreamed, RequestTrailerMode: headerSend, ResponseHeaderMode: headerSkip}))},
			client: streamed("X-Rt"),
			script: func(t *testing.T, h *epHarness, c *procConn) error {
				c.Send(continueFor(c.next(t, "request_headers")))
				h.waitState("headers passed", func(x *epInstance) bool { return x.dec.headersPassed })
				h.write("a")
				chunk := c.next(t, "request_body")
				h.reqTrailer.Set("X-Rt", "v")
				h.pw.Close()
				h.waitState("trailers arrived", func(x *epInstance) bool { return x.dec.trailersAvailable })
				c.Send(continueFor(chunk))
				c.Send(continueFor(c.next(t, "request_trailers")))
				return c.drain()
			},
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("POST"), false), modeStreamed, modeNone), reqBodyMsg("a", false), reqTrailersMsg(hm("x-rt", "v"))},
			wantTrace:  []string{"open", "→request_headers", "←request_headers", "→request_body", "←request_body", "→request_trailers", "←request_trailers", "half-close", "cancel"},
			wantClient: okClient,
			wantUp:     &upWant{method: "POST", body: "a"},
		},
		{
			name:   "§1.2 STREAMED queue over the buffer limit: back-pressure (the next chunk waits for the reply), not an error",
			cfg:    epConfig{ep: epc(mode(&pmode{RequestBodyMode: modeStreamed, ResponseHeaderMode: headerSkip})), bufferLimit: 8},
			client: streamed(),
			script: func(t *testing.T, h *epHarness, c *procConn) error {
				c.Send(continueFor(c.next(t, "request_headers")))
				h.waitState("headers passed", func(x *epInstance) bool { return x.dec.headersPassed })
				h.write("0123456789")
				first := c.next(t, "request_body")
				h.write("ab")
				time.Sleep(50 * time.Millisecond) // room for the emulator to (wrongly) send "ab" early
				c.Send(continueFor(first))
				c.Send(continueFor(c.next(t, "request_body")))
				h.waitState("replies applied", chunksAnswered)
				h.pw.Close()
				c.Send(continueFor(c.next(t, "request_body")))
				return c.drain()
			},
			wantSent: []*preq{pc(reqHeadersMsg(stdReq("POST"), false), modeStreamed, modeNone),
				reqBodyMsg("0123456789", false), reqBodyMsg("ab", false), reqBodyMsg("", true)},
			wantTrace: []string{"open", "→request_headers", "←request_headers", "→request_body", "←request_body",
				"→request_body", "←request_body", "→request_body", "←request_body", "half-close", "cancel"},
			wantClient: okClient,
			wantUp:     &upWant{method: "POST", body: "0123456789ab", chunked: true},
		},
		{
			name:   "§1.2 BUFFERED_PARTIAL under the limit: one message at end of stream",
			cfg:    epConfig{ep: epc(mode(&pmode{RequestBodyMode: modePartial, ResponseHeaderMode: headerSkip})), bufferLimit: 64},
			client: streamed(),
			script: func(t *testing.T, h *epHarness, c *procConn) error {
				c.Send(continueFor(c.next(t, "request_headers")))
				h.write("ab")
				h.write("cd")
				h.pw.Close()
				c.next(t, "request_body")
				c.Send(reqBodyReply(&cresp{BodyMutation: newBody("ABCD")}))
				return c.drain()
			},
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("POST"), false), modePartial, modeNone), reqBodyMsg("abcd", true)},
			wantTrace:  []string{"open", "→request_headers", "←request_headers", "→request_body", "←request_body", "half-close", "cancel"},
			wantClient: okClient,
			wantUp:     &upWant{method: "POST", body: "ABCD", chunked: true},
		},
		{
			name:   "§1.2 §1.4 BUFFERED_PARTIAL over the limit: end_of_stream=false, header_mutation applies, the rest passes unseen",
			cfg:    epConfig{ep: epc(mode(&pmode{RequestBodyMode: modePartial, ResponseHeaderMode: headerSkip})), bufferLimit: 8},
			client: streamed(),
			script: func(t *testing.T, h *epHarness, c *procConn) error {
				c.Send(continueFor(c.next(t, "request_headers")))
				h.waitState("headers reply processed", func(x *epInstance) bool { return x.dec.cb == cbIdle })
				h.write("0123456789")
				c.next(t, "request_body")
				c.Send(reqBodyReply(&cresp{HeaderMutation: mutation(setHdr("x-partial", "1")), BodyMutation: newBody("X")}))
				h.write("rest")
				h.pw.Close()
				return c.drain()
			},
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("POST"), false), modePartial, modeNone), reqBodyMsg("0123456789", false)},
			wantTrace:  []string{"open", "→request_headers", "←request_headers", "→request_body", "←request_body", "half-close", "cancel"},
			wantClient: okClient,
			wantUp:     &upWant{method: "POST", body: "Xrest", headers: map[string]string{"X-Partial": "1"}, chunked: true},
		},
		{
			name:   "§1.2 send_body_without_waiting_for_header_response: STREAMED body sent while the headers reply is pending",
			cfg:    epConfig{ep: epc(mode(&pmode{RequestBodyMode: modeStreamed, ResponseHeaderMode: headerSkip}), func(c *extprocv3.ExternalProcessor) { c.SendBodyWithoutWaitingForHeaderResponse = true })},
			client: streamed(),
			script: func(t *testing.T, h *epHarness, c *procConn) error {
				rh := c.next(t, "request_headers")
				h.write("aa")
				c.next(t, "request_body")
				c.Send(continueFor(rh))
				c.Send(reqBodyReply(&cresp{BodyMutation: newBody("AA")}))
				h.waitState("replies applied", chunksAnswered)
				h.pw.Close()
				c.Send(continueFor(c.next(t, "request_body")))
				return c.drain()
			},
			wantSent: []*preq{func() *preq {
				m := pc(reqHeadersMsg(stdReq("POST"), false), modeStreamed, modeNone)
				m.ProtocolConfig.SendBodyWithoutWaitingForHeaderResponse = true
				return m
			}(), reqBodyMsg("aa", false), reqBodyMsg("", true)},
			wantTrace: []string{"open", "→request_headers", "→request_body", "←request_headers", "←request_body",
				"→request_body", "←request_body", "half-close", "cancel"},
			wantClient: okClient,
			wantUp:     &upWant{method: "POST", body: "AA", chunked: true},
		},

		// ---- §1.3 what Envoy requires of the replies ----
		{
			name:        "§1.3 wrong reply type: spurious, fail-closed status_on_error spurious_message",
			cfg:         epConfig{ep: epc()},
			script:      onKind(map[string]func(*preq) *presp{"request_headers": always(respHeadersReply(nil))}),
			wantSent:    []*preq{pc(reqHeadersMsg(stdReq("GET"), true), modeNone, modeNone)},
			wantTrace:   []string{"open", "→request_headers", "←response_headers", "spurious", "half-close", "cancel"},
			wantClient:  &clientWant{status: 500},
			wantDetails: "spurious_message",
			wantUp:      &upWant{none: true},
		},
		{
			name:       "§1.3 spurious with failure_mode_allow: close and continue without the server",
			cfg:        epConfig{ep: epc(failOpen)},
			script:     onKind(map[string]func(*preq) *presp{"request_headers": always(respHeadersReply(nil))}),
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("GET"), true), modeNone, modeNone)},
			wantTrace:  []string{"open", "→request_headers", "←response_headers", "spurious", "half-close", "cancel"},
			wantClient: okClient,
			wantUp:     okGet,
		},
		{
			name:        "§1.3 empty oneof: spurious (Envoy's detail is unhandled_message)",
			cfg:         epConfig{ep: epc()},
			script:      onKind(map[string]func(*preq) *presp{"request_headers": always(&presp{})}),
			wantTrace:   []string{"open", "→request_headers", "←empty", "spurious", "half-close", "cancel"},
			wantClient:  &clientWant{status: 500},
			wantDetails: "unhandled_message",
			wantUp:      &upWant{none: true},
		},
		{
			name: "§1.3 override_message_timeout extends the timer; its other fields are ignored",
			cfg: epConfig{ep: epc(mode(respSkip), timeout(100*time.Millisecond), func(c *extprocv3.ExternalProcessor) {
				c.MaxMessageTimeout = durationpb.New(5 * time.Second)
			})},
			script: func(t *testing.T, h *epHarness, c *procConn) error {
				rh := c.next(t, "request_headers")
				ext := reqHeadersReply(&cresp{HeaderMutation: mutation(setHdr("x-ignored", "1"))})
				ext.OverrideMessageTimeout = durationpb.New(time.Second)
				c.Send(ext)
				time.Sleep(300 * time.Millisecond) // a slow server, past message_timeout
				c.Send(continueFor(rh))
				return c.drain()
			},
			wantTrace:  []string{"open", "→request_headers", "←override_message_timeout", "←request_headers", "half-close", "cancel"},
			wantClient: okClient,
			wantUp:     &upWant{method: "GET", headers: map[string]string{"X-Ignored": absent}},
		},
		{
			name: "§1.3 override_message_timeout above max_message_timeout is ignored: 504",
			cfg: epConfig{ep: epc(timeout(100*time.Millisecond), func(c *extprocv3.ExternalProcessor) {
				c.MaxMessageTimeout = durationpb.New(200 * time.Millisecond)
			})},
			script: func(t *testing.T, h *epHarness, c *procConn) error {
				c.next(t, "request_headers")
				c.Send(&presp{OverrideMessageTimeout: durationpb.New(time.Second)})
				return c.drain()
			},
			wantTrace:   []string{"open", "→request_headers", "←override_message_timeout", "ignored", "timeout", "half-close", "cancel"},
			wantClient:  &clientWant{status: 504},
			wantDetails: "ext_proc_error_per-message_timeout_exceeded",
			wantUp:      &upWant{none: true},
		},
		{
			name: "§1.3 max_message_timeout unset (0) disables override_message_timeout: 504",
			cfg:  epConfig{ep: epc(timeout(100 * time.Millisecond))},
			script: func(t *testing.T, h *epHarness, c *procConn) error {
				c.next(t, "request_headers")
				c.Send(&presp{OverrideMessageTimeout: durationpb.New(50 * time.Millisecond)})
				return c.drain()
			},
			wantTrace:   []string{"open", "→request_headers", "←override_message_timeout", "ignored", "timeout", "half-close", "cancel"},
			wantClient:  &clientWant{status: 504},
			wantDetails: "ext_proc_error_per-message_timeout_exceeded",
		},
		{
			name: "§1.3 a second override_message_timeout in the same state is ignored",
			cfg: epConfig{ep: epc(timeout(100*time.Millisecond), func(c *extprocv3.ExternalProcessor) {
				c.MaxMessageTimeout = durationpb.New(5 * time.Second)
			})},
			script: func(t *testing.T, h *epHarness, c *procConn) error {
				c.next(t, "request_headers")
				c.Send(&presp{OverrideMessageTimeout: durationpb.New(200 * time.Millisecond)})
				c.Send(&presp{OverrideMessageTimeout: durationpb.New(3 * time.Second)})
				return c.drain()
			},
			wantTrace:   []string{"open", "→request_headers", "←override_message_timeout", "←override_message_timeout", "ignored", "timeout", "half-close", "cancel"},
			wantClient:  &clientWant{status: 504},
			wantDetails: "ext_proc_error_per-message_timeout_exceeded",
		},

		// ---- §1.4 CommonResponse ----
		{
			name:   "§1.4 CONTINUE_AND_REPLACE in request_headers: header mutation (:method allowed) and body replaced, then body mode NONE and no trailers",
			cfg:    epConfig{ep: epc(mode(&pmode{RequestBodyMode: modeBuffered, RequestTrailerMode: headerSend, ResponseHeaderMode: headerSkip}))},
			client: streamed("X-Rt"),
			script: func(t *testing.T, h *epHarness, c *procConn) error {
				c.next(t, "request_headers")
				c.Send(reqHeadersReply(&cresp{Status: extprocsvc.CommonResponse_CONTINUE_AND_REPLACE,
					HeaderMutation: mutation(setHdr(":method", "PUT"), setHdr("x-r", "1")), BodyMutation: newBody("replaced")}))
				h.write("original")
				h.reqTrailer.Set("X-Rt", "v")
				h.pw.Close()
				return c.drain()
			},
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("POST"), false), modeBuffered, modeNone)},
			wantTrace:  reqOnlyTrace,
			wantClient: okClient,
			wantUp:     &upWant{method: "PUT", body: "replaced", headers: map[string]string{"X-R": "1"}, chunked: true},
		},
		{
			name:   "§1.4 default mutation rules: host, :authority, :method, :scheme, x-envoy-* refused silently; :path set; removing :path/host refused; appending to :path refused",
			cfg:    epConfig{ep: epc(mode(respSkip))},
			client: getWith("X-Other", "o"),
			script: onKind(map[string]func(*preq) *presp{"request_headers": always(reqHeadersReply(&cresp{HeaderMutation: &extprocsvc.HeaderMutation{
				RemoveHeaders: []string{":path", "host", "x-other"},
				SetHeaders: []*corev3.HeaderValueOption{setHdr(":authority", "evil.test"), setHdr(":method", "PUT"), setHdr(":scheme", "https"),
					setHdr("x-envoy-foo", "1"), setHdr("host", "evil.test"), setHdr(":path", "/new"), appendHdr(":path", "/x", true)},
			}}))}),
			wantClient: okClient,
			wantUp:     &upWant{method: "GET", path: "/new", host: "api.test", headers: map[string]string{"X-Envoy-Foo": absent, "X-Other": absent}},
			check: func(t *testing.T, h *epHarness, res *clientResult, x *Exchange) {
				// remove :path, remove host, set :authority, :method, :scheme,
				// x-envoy-foo, host, append :path.
				if n := h.filter.rejected.Load(); n != 8 {
					t.Errorf("rejected_header_mutations = %d, want 8", n)
				}
			},
		},
		{
			name: "§1.4 disallow_is_error: a refused mutation answers status_on_error",
			cfg: epConfig{ep: epc(mode(respSkip), func(c *extprocv3.ExternalProcessor) {
				c.MutationRules = &mutationrulesv3.HeaderMutationRules{DisallowIsError: wrapperspb.Bool(true)}
				c.StatusOnError = &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable}
			})},
			script:      onKind(map[string]func(*preq) *presp{"request_headers": always(reqHeadersReply(&cresp{HeaderMutation: mutation(setHdr("x-envoy-foo", "1"))}))}),
			wantTrace:   reqOnlyTrace,
			wantClient:  &clientWant{status: 503},
			wantDetails: "Invalid_attempt_to_modify_x-envoy-foo",
			wantUp:      &upWant{none: true},
		},
		{
			name: "§1.4 mutation_rules allow_all_routing, allow_envoy, disallow_expression",
			cfg: epConfig{ep: epc(mode(respSkip), func(c *extprocv3.ExternalProcessor) {
				c.MutationRules = &mutationrulesv3.HeaderMutationRules{AllowAllRouting: wrapperspb.Bool(true), AllowEnvoy: wrapperspb.Bool(true),
					DisallowExpression: &matcherv3.RegexMatcher{Regex: "x-no-.*"}}
			})},
			script: onKind(map[string]func(*preq) *presp{"request_headers": always(reqHeadersReply(&cresp{HeaderMutation: mutation(
				setHdr(":authority", "other.test"), setHdr("x-envoy-foo", "1"), setHdr("x-no-thing", "1"))}))}),
			wantClient: okClient,
			wantUp:     &upWant{method: "GET", host: "other.test", headers: map[string]string{"X-Envoy-Foo": "1", "X-No-Thing": absent}},
		},
		{
			name:        "§1.4 invalid header value character: status_on_error, even with failure_mode_allow",
			cfg:         epConfig{ep: epc(mode(respSkip), failOpen)},
			script:      onKind(map[string]func(*preq) *presp{"request_headers": always(reqHeadersReply(&cresp{HeaderMutation: mutation(setHdr("x-bad", "a\nb"))}))}),
			wantClient:  &clientWant{status: 500},
			wantDetails: "Invalid_character_in_set_headers_mutation.",
			wantUp:      &upWant{none: true},
		},
		{
			name: "§1.4 more set_headers than the header-count limit: status_on_error",
			cfg:  epConfig{ep: epc(mode(respSkip))},
			script: onKind(map[string]func(*preq) *presp{"request_headers": func(*preq) *presp {
				var set []*corev3.HeaderValueOption
				for i := 0; i < 101; i++ {
					set = append(set, setHdr("x-h", "v"))
				}
				return reqHeadersReply(&cresp{HeaderMutation: mutation(set...)})
			}}),
			wantClient:  &clientWant{status: 500},
			wantDetails: "Header_mutation_remove_header_count_0_or_set_header_count_101_exceed_the_HCM_header_countlimit_100",
			wantUp:      &upWant{none: true},
		},
		{
			name:        "§1.4 BUFFERED body_mutation: content-length must equal the new body (mismatch → 500)",
			cfg:         epConfig{ep: epc(mode(&pmode{RequestBodyMode: modeBuffered, ResponseHeaderMode: headerSkip}))},
			client:      postOf("hello"),
			script:      onKind(map[string]func(*preq) *presp{"request_body": always(reqBodyReply(&cresp{BodyMutation: newBody("hi")}))}),
			wantSent:    []*preq{pc(reqHeadersMsg(stdReq("POST", "content-length", "5"), false), modeBuffered, modeNone), reqBodyMsg("hello", true)},
			wantTrace:   []string{"open", "→request_headers", "←request_headers", "→request_body", "←request_body", "half-close", "cancel"},
			wantClient:  &clientWant{status: 500},
			wantDetails: "mismatch_between_content_length_and_the_length_of_the_mutated_body",
			wantUp:      &upWant{none: true},
		},
		{
			name:   "§1.4 BUFFERED body_mutation: content-length fixed in the same reply's header_mutation",
			cfg:    epConfig{ep: epc(mode(&pmode{RequestBodyMode: modeBuffered, ResponseHeaderMode: headerSkip}))},
			client: postOf("hello"),
			script: onKind(map[string]func(*preq) *presp{"request_body": always(reqBodyReply(&cresp{
				HeaderMutation: mutation(setHdr("content-length", "2")), BodyMutation: newBody("hi")}))}),
			wantClient: okClient,
			wantUp:     &upWant{method: "POST", body: "hi"},
			check: func(t *testing.T, h *epHarness, res *clientResult, x *Exchange) {
				if got := h.up.requests(); len(got) == 1 && got[0].ContentLength != 2 {
					t.Errorf("upstream content length %d, want 2", got[0].ContentLength)
				}
			},
		},
		{
			name:   "§1.4 BUFFERED body_mutation clear_body",
			cfg:    epConfig{ep: epc(mode(&pmode{RequestBodyMode: modeBuffered, ResponseHeaderMode: headerSkip}))},
			client: postOf("hello"),
			script: onKind(map[string]func(*preq) *presp{"request_body": always(reqBodyReply(&cresp{
				HeaderMutation: mutation(setHdr("content-length", "0")),
				BodyMutation:   &extprocsvc.BodyMutation{Mutation: &extprocsvc.BodyMutation_ClearBody{ClearBody: true}}}))}),
			wantClient: okClient,
			wantUp:     &upWant{method: "POST", body: ""},
		},
		{
			name:       "§1.4 clear_route_cache in a request_headers reply re-routes",
			cfg:        epConfig{ep: epc(mode(respSkip))},
			script:     routeScript(&cresp{HeaderMutation: modelB, ClearRouteCache: true}, nil),
			wantClient: okClient,
			wantUp:     &upWant{b: true, method: "GET", headers: map[string]string{"X-Model": "b"}},
		},
		{
			name:       "§1.4 clear_route_cache in a BUFFERED request_body reply re-routes (ai-gateway model routing)",
			cfg:        epConfig{ep: epc(mode(&pmode{RequestBodyMode: modeBuffered, ResponseHeaderMode: headerSkip}))},
			client:     postOf("{}"),
			script:     routeScript(nil, &cresp{HeaderMutation: modelB, ClearRouteCache: true}),
			wantClient: okClient,
			wantUp:     &upWant{b: true, method: "POST", body: "{}"},
		},
		{
			name:       "§1.4 clear_route_cache without the flag keeps the cached route",
			cfg:        epConfig{ep: epc(mode(respSkip))},
			script:     routeScript(&cresp{HeaderMutation: modelB}, nil),
			wantClient: okClient,
			wantUp:     &upWant{method: "GET", headers: map[string]string{"X-Model": "b"}},
		},
		{
			name:       "§1.4 clear_route_cache counts with an empty header_mutation",
			cfg:        epConfig{ep: epc(mode(&pmode{RequestBodyMode: modeBuffered, ResponseHeaderMode: headerSkip}))},
			client:     postOf("{}"),
			script:     routeScript(&cresp{HeaderMutation: modelB}, &cresp{HeaderMutation: &extprocsvc.HeaderMutation{}, ClearRouteCache: true}),
			wantClient: okClient,
			wantUp:     &upWant{b: true, method: "POST", body: "{}"},
		},
		{
			name:       "§1.4 clear_route_cache is ignored without header_mutation",
			cfg:        epConfig{ep: epc(mode(&pmode{RequestBodyMode: modeBuffered, ResponseHeaderMode: headerSkip}))},
			client:     postOf("{}"),
			script:     routeScript(&cresp{HeaderMutation: modelB}, &cresp{ClearRouteCache: true}),
			wantClient: okClient,
			wantUp:     &upWant{method: "POST", body: "{}", headers: map[string]string{"X-Model": "b"}},
		},
		{
			name: "§1.4 route_cache_action RETAIN ignores clear_route_cache",
			cfg: epConfig{ep: epc(mode(respSkip), func(c *extprocv3.ExternalProcessor) {
				c.RouteCacheAction = extprocv3.ExternalProcessor_RETAIN
			})},
			script:     routeScript(&cresp{HeaderMutation: modelB, ClearRouteCache: true}, nil),
			wantClient: okClient,
			wantUp:     &upWant{method: "GET"},
		},
		{
			name: "§1.4 route_cache_action CLEAR clears on any header_mutation",
			cfg: epConfig{ep: epc(mode(respSkip), func(c *extprocv3.ExternalProcessor) {
				c.RouteCacheAction = extprocv3.ExternalProcessor_CLEAR
			})},
			script:     routeScript(&cresp{HeaderMutation: modelB}, nil),
			wantClient: okClient,
			wantUp:     &upWant{b: true, method: "GET"},
		},
		{
			name:   "§1.4 clear_route_cache in a STREAMED chunk reply has no effect: the headers were routed already",
			cfg:    epConfig{ep: epc(mode(&pmode{RequestBodyMode: modeStreamed, ResponseHeaderMode: headerSkip}))},
			client: streamed(),
			script: func(t *testing.T, h *epHarness, c *procConn) error {
				c.Send(continueFor(c.next(t, "request_headers")))
				h.waitState("headers passed", func(x *epInstance) bool { return x.dec.headersPassed })
				h.write("x")
				c.next(t, "request_body")
				c.Send(reqBodyReply(&cresp{HeaderMutation: modelB, ClearRouteCache: true}))
				h.waitState("reply applied", chunksAnswered)
				h.pw.Close()
				c.Send(continueFor(c.next(t, "request_body")))
				return c.drain()
			},
			wantClient: okClient,
			wantUp:     &upWant{method: "POST", body: "x", headers: map[string]string{"X-Model": absent}},
		},

		// ---- §1.5 ImmediateResponse ----
		{
			name: "§1.5 ImmediateResponse: stream closed first, then the local reply; headers through the configured rules; details spaces→_; dynamic metadata applied",
			cfg:  epConfig{ep: epc(recvNS("ns.recv"))},
			script: onKind(map[string]func(*preq) *presp{"request_headers": func(*preq) *presp {
				r := immediate(&extprocsvc.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_Forbidden},
					Headers: mutation(setHdr("x-reason", "no"), setHdr("x-envoy-x", "1")), Body: []byte("denied"), Details: "not allowed here"})
				r.DynamicMetadata = md(map[string]map[string]any{"ns.recv": {"k": "v"}})
				return r
			}}),
			wantTrace:   []string{"open", "→request_headers", "←immediate_response", "half-close", "cancel"},
			wantClient:  &clientWant{status: 403, body: "denied", headers: map[string]string{"X-Reason": "no", "X-Envoy-X": absent}},
			wantDetails: "not_allowed_here",
			wantUp:      &upWant{none: true},
			check: func(t *testing.T, h *epHarness, res *clientResult, x *Exchange) {
				if d := cmp.Diff(map[string]any{"k": "v"}, x.Metadata["ns.recv"].AsMap()); d != "" {
					t.Errorf("metadata ns.recv (-want +got):\n%s", d)
				}
			},
		},
		{
			name: "§1.5 ImmediateResponse status below 200 becomes 200",
			cfg:  epConfig{ep: epc()},
			script: onKind(map[string]func(*preq) *presp{"request_headers": always(immediate(&extprocsvc.ImmediateResponse{
				Status: &typev3.HttpStatus{Code: typev3.StatusCode_Continue}, Body: []byte("x")}))}),
			wantClient: &clientWant{status: 200, body: "x"},
			wantUp:     &upWant{none: true},
		},
		{
			name:   "§1.5 ImmediateResponse grpc_status on a gRPC request: trailers-only gRPC answer",
			cfg:    epConfig{ep: epc()},
			client: postOf("", "Content-Type", "application/grpc"),
			script: onKind(map[string]func(*preq) *presp{"request_headers": always(immediate(&extprocsvc.ImmediateResponse{
				Status: &typev3.HttpStatus{Code: typev3.StatusCode_Forbidden}, GrpcStatus: &extprocsvc.GrpcStatus{Status: 7}, Body: []byte("no way")}))}),
			wantClient: &clientWant{status: 200, headers: map[string]string{"Grpc-Status": "7", "Grpc-Message": "no way", "Content-Type": "application/grpc"}},
			wantUp:     &upWant{none: true},
		},
		{
			name: "§1.5 disable_immediate_response: an ImmediateResponse is spurious",
			cfg:  epConfig{ep: epc(func(c *extprocv3.ExternalProcessor) { c.DisableImmediateResponse = true })},
			script: onKind(map[string]func(*preq) *presp{"request_headers": always(immediate(&extprocsvc.ImmediateResponse{
				Status: &typev3.HttpStatus{Code: typev3.StatusCode_Forbidden}}))}),
			wantTrace:   []string{"open", "→request_headers", "←immediate_response", "spurious", "half-close", "cancel"},
			wantClient:  &clientWant{status: 500},
			wantDetails: "unhandled_immediate_response_due_to_config_disabled_it",
			wantUp:      &upWant{none: true},
		},
		{
			name: "§1.5 ImmediateResponse after response headers went downstream: a reset",
			cfg:  epConfig{ep: epc(mode(&pmode{ResponseBodyMode: modeStreamed}))},
			upstream: func(h *epHarness, w http.ResponseWriter, r *http.Request) {
				w.Header()["Date"] = nil
				w.Header().Set("Content-Type", "text/plain")
				io.WriteString(w, "one")
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			},
			script: onKind(map[string]func(*preq) *presp{"response_body": always(immediate(&extprocsvc.ImmediateResponse{
				Status: &typev3.HttpStatus{Code: typev3.StatusCode_Forbidden}, Details: "late"}))}),
			wantSent: []*preq{pc(reqHeadersMsg(stdReq("GET"), true), modeNone, modeStreamed), respHeadersMsg(okRespHeaders(), false), respBodyMsg("one", false)},
			wantTrace: []string{"open", "→request_headers", "←request_headers", "→response_headers", "←response_headers",
				"→response_body", "←immediate_response", "half-close", "cancel"},
			wantClient:  &clientWant{status: 200, reset: true},
			wantDetails: "late",
		},

		// ---- §1.6 mode_override ----
		{
			name:   "§1.6 mode_override in a request_headers reply: request body NONE → BUFFERED",
			cfg:    epConfig{ep: epc(allowOverride)},
			client: postOf("hello"),
			script: onKind(map[string]func(*preq) *presp{"request_headers": func(*preq) *presp {
				r := continueFor(reqHeadersMsg(nil, false))
				r.ModeOverride = &pmode{RequestBodyMode: modeBuffered}
				return r
			}}),
			wantSent: []*preq{pc(reqHeadersMsg(stdReq("POST", "content-length", "5"), false), modeNone, modeNone), reqBodyMsg("hello", true),
				respHeadersMsg(okRespHeaders("content-length", "2"), false)},
			wantTrace: []string{"open", "→request_headers", "←request_headers", "→request_body", "←request_body",
				"→response_headers", "←response_headers", "half-close", "cancel"},
			wantClient: okClient,
			wantUp:     &upWant{method: "POST", body: "hello"},
		},
		{
			name:   "§1.6 mode_override is ignored without allow_mode_override",
			cfg:    epConfig{ep: epc()},
			client: postOf("hello"),
			script: onKind(map[string]func(*preq) *presp{"request_headers": func(*preq) *presp {
				r := continueFor(reqHeadersMsg(nil, false))
				r.ModeOverride = &pmode{RequestBodyMode: modeBuffered}
				return r
			}}),
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("POST", "content-length", "5"), false), modeNone, modeNone), respHeadersMsg(okRespHeaders("content-length", "2"), false)},
			wantClient: okClient,
		},
		{
			name: "§1.6 mode_override body modes are always copied: unset becomes NONE",
			cfg:  epConfig{ep: epc(allowOverride, mode(&pmode{ResponseBodyMode: modeBuffered}))},
			script: onKind(map[string]func(*preq) *presp{"request_headers": func(*preq) *presp {
				r := continueFor(reqHeadersMsg(nil, false))
				r.ModeOverride = &pmode{ResponseHeaderMode: headerSend}
				return r
			}}),
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("GET"), true), modeNone, modeBuffered), respHeadersMsg(okRespHeaders("content-length", "2"), false)},
			wantTrace:  fullTrace,
			wantClient: &clientWant{status: 200, body: "ok", headers: map[string]string{"Content-Length": "2"}},
		},
		{
			name: "§1.6 allowed_override_modes: a mode in the list applies",
			cfg: epConfig{ep: epc(allowOverride, func(c *extprocv3.ExternalProcessor) {
				c.AllowedOverrideModes = []*pmode{{RequestBodyMode: modeStreamed}, {RequestBodyMode: modeBuffered}}
			})},
			client: postOf("hello"),
			script: onKind(map[string]func(*preq) *presp{"request_headers": func(*preq) *presp {
				r := continueFor(reqHeadersMsg(nil, false))
				r.ModeOverride = &pmode{RequestBodyMode: modeBuffered, RequestHeaderMode: headerSend}
				return r
			}}),
			wantSent: []*preq{pc(reqHeadersMsg(stdReq("POST", "content-length", "5"), false), modeNone, modeNone), reqBodyMsg("hello", true),
				respHeadersMsg(okRespHeaders("content-length", "2"), false)},
			wantClient: okClient,
		},
		{
			name: "§1.6 allowed_override_modes: a mode not in the list is ignored",
			cfg: epConfig{ep: epc(allowOverride, func(c *extprocv3.ExternalProcessor) {
				c.AllowedOverrideModes = []*pmode{{RequestBodyMode: modeStreamed}}
			})},
			client: postOf("hello"),
			script: onKind(map[string]func(*preq) *presp{"request_headers": func(*preq) *presp {
				r := continueFor(reqHeadersMsg(nil, false))
				r.ModeOverride = &pmode{RequestBodyMode: modeBuffered}
				return r
			}}),
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("POST", "content-length", "5"), false), modeNone, modeNone), respHeadersMsg(okRespHeaders("content-length", "2"), false)},
			wantClient: okClient,
		},
		{
			name: "§1.6 mode_override is ignored with send_body_without_waiting_for_header_response",
			cfg: epConfig{ep: epc(allowOverride, func(c *extprocv3.ExternalProcessor) {
				c.SendBodyWithoutWaitingForHeaderResponse = true
				c.ProcessingMode = respSkip
			})},
			client: postOf("hello"),
			script: onKind(map[string]func(*preq) *presp{"request_headers": func(*preq) *presp {
				r := continueFor(reqHeadersMsg(nil, false))
				r.ModeOverride = &pmode{RequestBodyMode: modeBuffered}
				return r
			}}),
			wantSent: []*preq{func() *preq {
				m := pc(reqHeadersMsg(stdReq("POST", "content-length", "5"), false), modeNone, modeNone)
				m.ProtocolConfig.SendBodyWithoutWaitingForHeaderResponse = true
				return m
			}()},
			wantClient: okClient,
			wantUp:     &upWant{method: "POST", body: "hello"},
		},
		{
			name:   "§1.6 mode_override applies only while a headers call is in flight",
			cfg:    epConfig{ep: epc(allowOverride, mode(&pmode{RequestBodyMode: modeBuffered}))},
			client: postOf("hello"),
			script: onKind(map[string]func(*preq) *presp{"request_body": func(*preq) *presp {
				r := reqBodyReply(nil)
				r.ModeOverride = &pmode{ResponseHeaderMode: headerSkip}
				return r
			}}),
			wantSent: []*preq{pc(reqHeadersMsg(stdReq("POST", "content-length", "5"), false), modeBuffered, modeNone), reqBodyMsg("hello", true),
				respHeadersMsg(okRespHeaders("content-length", "2"), false)},
			wantClient: okClient,
		},
		{
			name: "§1.6 mode_override's base is the filter-level mode, not the per-route one",
			cfg: epConfig{ep: epc(allowOverride), perRoute: &extprocv3.ExtProcPerRoute{Override: &extprocv3.ExtProcPerRoute_Overrides{
				Overrides: &extprocv3.ExtProcOverrides{ProcessingMode: respSkip}}}},
			script: onKind(map[string]func(*preq) *presp{"request_headers": func(*preq) *presp {
				r := continueFor(reqHeadersMsg(nil, false))
				r.ModeOverride = &pmode{RequestHeaderMode: headerSend}
				return r
			}}),
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("GET"), true), modeNone, modeNone), respHeadersMsg(okRespHeaders("content-length", "2"), false)},
			wantTrace:  fullTrace,
			wantClient: okClient,
		},
		{
			name:     "§1.6 mode_override to STREAMED in a response_headers reply keeps content-length",
			cfg:      epConfig{ep: epc(allowOverride)},
			upstream: textUpstream("hello"),
			script: onKind(map[string]func(*preq) *presp{"response_headers": func(*preq) *presp {
				r := respHeadersReply(nil)
				r.ModeOverride = &pmode{ResponseBodyMode: modeStreamed}
				return r
			}}),
			wantSent: []*preq{pc(reqHeadersMsg(stdReq("GET"), true), modeNone, modeNone), respHeadersMsg(okRespHeaders("content-length", "5"), false),
				respBodyMsg("hello", true)},
			wantClient: &clientWant{status: 200, body: "hello", headers: map[string]string{"Content-Length": "5"}},
		},

		// ---- §1.7 observability mode ----
		{
			name: "§1.7 observability mode: observability_mode on every message, no protocol_config, STREAMED bodies only, trailers sent, replies ignored, close deferred",
			cfg: epConfig{ep: epc(mode(&pmode{RequestBodyMode: modeStreamed, ResponseBodyMode: modeBuffered, ResponseTrailerMode: headerSend}), func(c *extprocv3.ExternalProcessor) {
				c.ObservabilityMode = true
				c.DeferredCloseTimeout = durationpb.New(300 * time.Millisecond)
			})},
			client:      postOf("hi"),
			upstream:    trailerUpstream,
			interleaved: true, // Envoy does not wait in this mode: the response may overtake the request's end
			wantSent: []*preq{obs(reqHeadersMsg(stdReq("POST", "content-length", "2"), false)), obs(reqBodyMsg("hi", false)), obs(reqBodyMsg("", true)),
				obs(respHeadersMsg(okRespHeaders(), false)), obs(respTrailersMsg(hm("x-t", "v")))},
			wantClient: &clientWant{status: 200, body: "ok", trailers: map[string]string{"X-T": "v"}},
			check: func(t *testing.T, h *epHarness, res *clientResult, x *Exchange) {
				var sent []string
				tr := epTrace(x)
				for i, e := range tr {
					switch {
					case strings.HasPrefix(e, "←"):
						if i+1 >= len(tr) || tr[i+1] != "ignored" {
							t.Errorf("reply %s at %d not followed by ignored: %v", e, i, tr)
						}
					case e != "ignored":
						sent = append(sent, e)
					}
				}
				// Per direction, in order: the directions interleave (§1.2).
				var reqs, resps []string
				for _, e := range sent {
					if strings.HasPrefix(e, "→response") {
						resps = append(resps, e)
					} else {
						reqs = append(reqs, e)
					}
				}
				want := []string{"open", "→request_headers", "→request_body", "→request_body", "|", "→response_headers", "→response_trailers"}
				if d := cmp.Diff(want, append(append(reqs, "|"), resps...)); d != "" {
					t.Errorf("trace without replies (-want +got):\n%s", d)
				}
				// The close is deferred: the stream outlives the exchange.
				select {
				case <-h.conn(0).done:
					t.Errorf("the ext_proc stream ended with the HTTP stream; want it closed after deferred_close_timeout")
				default:
				}
			},
		},

		// ---- §1.8 timeouts and failures ----
		{
			name:        "§1.8 message timeout: 504 ext_proc_error_per-message_timeout_exceeded",
			cfg:         epConfig{ep: epc(timeout(50 * time.Millisecond))},
			script:      silentAfter("request_headers"),
			wantTrace:   []string{"open", "→request_headers", "timeout", "half-close", "cancel"},
			wantClient:  &clientWant{status: 504},
			wantDetails: "ext_proc_error_per-message_timeout_exceeded",
			wantUp:      &upWant{none: true},
		},
		{
			name:       "§1.8 message timeout with failure_mode_allow: continue without the server",
			cfg:        epConfig{ep: epc(timeout(50*time.Millisecond), failOpen)},
			script:     silentAfter("request_headers"),
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("GET"), true), modeNone, modeNone)},
			wantTrace:  []string{"open", "→request_headers", "timeout", "half-close", "cancel"},
			wantClient: okClient,
			wantUp:     okGet,
		},
		{
			name: "§1.8 §4 message timeout after response headers went downstream: a reset, not a 504",
			cfg:  epConfig{ep: epc(timeout(200*time.Millisecond), mode(&pmode{ResponseBodyMode: modeStreamed}))},
			upstream: func(h *epHarness, w http.ResponseWriter, r *http.Request) {
				w.Header()["Date"] = nil
				w.Header().Set("Content-Type", "text/plain")
				io.WriteString(w, "one")
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			},
			script:      silentAfter("response_body"),
			wantSent:    []*preq{pc(reqHeadersMsg(stdReq("GET"), true), modeNone, modeStreamed), respHeadersMsg(okRespHeaders(), false), respBodyMsg("one", false)},
			wantTrace:   []string{"open", "→request_headers", "←request_headers", "→response_headers", "←response_headers", "→response_body", "timeout", "half-close", "cancel"},
			wantClient:  &clientWant{status: 200, reset: true},
			wantDetails: "ext_proc_error_per-message_timeout_exceeded",
		},
		{
			name:   "§1.8 the timer stops on any reply for the direction: an older STREAMED chunk is not re-timed",
			cfg:    epConfig{ep: epc(timeout(150*time.Millisecond), mode(&pmode{RequestBodyMode: modeStreamed, ResponseHeaderMode: headerSkip}))},
			client: streamed(),
			script: func(t *testing.T, h *epHarness, c *procConn) error {
				c.Send(continueFor(c.next(t, "request_headers")))
				h.waitState("headers passed", func(x *epInstance) bool { return x.dec.headersPassed })
				h.write("a")
				a := c.next(t, "request_body")
				h.write("b")
				b := c.next(t, "request_body")
				c.Send(continueFor(a))
				time.Sleep(400 * time.Millisecond) // a slow reply for b, past message_timeout
				c.Send(continueFor(b))
				h.waitState("replies applied", chunksAnswered)
				h.pw.Close()
				c.Send(continueFor(c.next(t, "request_body")))
				return c.drain()
			},
			wantTrace: []string{"open", "→request_headers", "←request_headers", "→request_body", "→request_body", "←request_body", "←request_body",
				"→request_body", "←request_body", "half-close", "cancel"},
			wantClient: okClient,
			wantUp:     &upWant{method: "POST", body: "ab"},
		},
		{
			name: "§1.8 server ends the stream with OK: continue without ext_proc whatever failure_mode_allow says",
			cfg:  epConfig{ep: epc()},
			script: func(t *testing.T, h *epHarness, c *procConn) error {
				c.next(t, "request_headers")
				return nil
			},
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("GET"), true), modeNone, modeNone)},
			wantTrace:  []string{"open", "→request_headers", "server-closed: OK"},
			wantClient: okClient,
			wantUp:     okGet,
		},
		{
			name: "§1.8 server ends the stream with an error: status_on_error, details ext_proc_error_gRPC_error_<code>{<msg>}",
			cfg: epConfig{ep: epc(func(c *extprocv3.ExternalProcessor) {
				c.StatusOnError = &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable}
			})},
			script:      serverErr,
			wantTrace:   []string{"open", "→request_headers", "server-closed: Internal"},
			wantClient:  &clientWant{status: 503},
			wantDetails: "ext_proc_error_gRPC_error_13{boom_now}",
			wantUp:      &upWant{none: true},
		},
		{
			name:       "§1.8 server error with failure_mode_allow: continue",
			cfg:        epConfig{ep: epc(failOpen)},
			script:     serverErr,
			wantTrace:  []string{"open", "→request_headers", "server-closed: Internal"},
			wantClient: okClient,
			wantUp:     okGet,
		},
		{
			name: "§1.8 status_on_error outside 4xx/5xx becomes 500",
			cfg: epConfig{ep: epc(func(c *extprocv3.ExternalProcessor) {
				c.StatusOnError = &typev3.HttpStatus{Code: typev3.StatusCode_Found}
			})},
			script:      serverErr,
			wantClient:  &clientWant{status: 500},
			wantDetails: "ext_proc_error_gRPC_error_13{boom_now}",
		},
		{
			name: "§1.8 per-route failure_mode_allow overrides the filter's",
			cfg: epConfig{ep: epc(), perRoute: &extprocv3.ExtProcPerRoute{Override: &extprocv3.ExtProcPerRoute_Overrides{
				Overrides: &extprocv3.ExtProcOverrides{FailureModeAllow: wrapperspb.Bool(true)}}}},
			script:     serverErr,
			wantClient: okClient,
			wantUp:     okGet,
		},
		{
			name:       "§1.8 the stream fails to open: status_on_error, ext_proc_error_gRPC_error_14",
			cfg:        epConfig{ep: epc(), procDown: true},
			wantTrace:  []string{"open", "→request_headers", "server-closed: Unavailable"},
			wantClient: &clientWant{status: 500},
			wantUp:     &upWant{none: true},
			check: func(t *testing.T, h *epHarness, res *clientResult, x *Exchange) {
				if !strings.HasPrefix(x.Details, "ext_proc_error_gRPC_error_14{") {
					t.Errorf("details %q, want ext_proc_error_gRPC_error_14{…}", x.Details)
				}
			},
		},

		// ---- §1.9 closing the stream ----
		{
			name: "§1.9 closed right after the last expected reply (request_headers, response sends nothing), before the upstream answers",
			cfg:  epConfig{ep: epc(mode(respSkip))},
			upstream: func(h *epHarness, w http.ResponseWriter, r *http.Request) {
				select {
				case <-h.conn(0).done:
				case <-time.After(5 * time.Second):
					h.t.Errorf("the ext_proc stream is still open when the upstream is called")
				}
				writeText(w, "ok")
			},
			wantTrace:  reqOnlyTrace,
			wantClient: okClient,
		},
		{
			name:   "§1.9 closed in encodeHeaders when the response direction has nothing to process",
			cfg:    epConfig{ep: epc(mode(&pmode{RequestTrailerMode: headerSend, ResponseHeaderMode: headerSkip}))},
			client: postOf("x"),
			upstream: func(h *epHarness, w http.ResponseWriter, r *http.Request) {
				select {
				case <-h.conn(0).done:
					h.t.Errorf("the ext_proc stream closed before encodeHeaders")
				default:
				}
				writeText(w, "ok")
			},
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("POST", "content-length", "1"), false), modeNone, modeNone)},
			wantTrace:  reqOnlyTrace,
			wantClient: okClient,
		},
		{
			name:       "§1.9 closed on destroy at the normal end of the stream",
			cfg:        epConfig{ep: epc(mode(&pmode{ResponseTrailerMode: headerSend}))},
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("GET"), true), modeNone, modeNone), respHeadersMsg(okRespHeaders("content-length", "2"), false)},
			wantTrace:  fullTrace,
			wantClient: okClient,
		},
		{
			name: "§4 upstream error before headers: response_headers carries the upstream's 5xx :status, body follows in the configured mode",
			cfg:  epConfig{ep: epc(mode(&pmode{ResponseBodyMode: modeBuffered}))},
			upstream: func(h *epHarness, w http.ResponseWriter, r *http.Request) {
				w.Header()["Date"] = nil
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(503)
				io.WriteString(w, `{"error":"overloaded"}`)
			},
			wantSent: []*preq{
				pc(reqHeadersMsg(stdReq("GET"), true), modeNone, modeBuffered),
				respHeadersMsg(hm(":status", "503", "content-type", "application/json", "content-length", "22"), false),
				respBodyMsg(`{"error":"overloaded"}`, true),
			},
			wantClient: &clientWant{status: 503, body: `{"error":"overloaded"}`},
		},
		{
			name:       "§4 client disconnect mid-stream: no further messages, no end_of_stream, half-close + cancel",
			cfg:        epConfig{ep: epc(mode(&pmode{ResponseBodyMode: modeStreamed}))},
			upstream:   chunkUpstream,
			client:     readOneThenCancel,
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("GET"), true), modeNone, modeStreamed), respHeadersMsg(okRespHeaders(), false), respBodyMsg("one", false)},
			wantTrace:  []string{"open", "→request_headers", "←request_headers", "→response_headers", "←response_headers", "→response_body", "←response_body", "half-close", "cancel"},
			wantClient: &clientWant{status: 200, body: "one"},
			check: func(t *testing.T, h *epHarness, res *clientResult, x *Exchange) {
				if !x.Reset {
					t.Errorf("exchange not reset")
				}
			},
		},
		{
			name: "§4 upstream reset mid-body: no end_of_stream, the pending chunk reply is discarded, half-close + cancel",
			cfg:  epConfig{ep: epc(mode(&pmode{ResponseBodyMode: modeStreamed}))},
			upstream: func(h *epHarness, w http.ResponseWriter, r *http.Request) {
				w.Header()["Date"] = nil
				w.Header().Set("Content-Type", "text/plain")
				io.WriteString(w, "one")
				w.(http.Flusher).Flush()
				h.await(r.Context(), "abort")
				panic(http.ErrAbortHandler)
			},
			script: func(t *testing.T, h *epHarness, c *procConn) error {
				c.Send(continueFor(c.next(t, "request_headers")))
				c.Send(continueFor(c.next(t, "response_headers")))
				c.next(t, "response_body")
				h.fire("abort")
				return c.drain()
			},
			wantSent:   []*preq{pc(reqHeadersMsg(stdReq("GET"), true), modeNone, modeStreamed), respHeadersMsg(okRespHeaders(), false), respBodyMsg("one", false)},
			wantTrace:  []string{"open", "→request_headers", "←request_headers", "→response_headers", "←response_headers", "→response_body", "half-close", "cancel"},
			wantClient: &clientWant{status: 200, body: "", reset: true},
			check: func(t *testing.T, h *epHarness, res *clientResult, x *Exchange) {
				if !x.Reset {
					t.Errorf("exchange not reset")
				}
			},
		},

		// ---- §1.10 attributes and metadata ----
		{
			name: "§1.10 attributes: request ones in the first request message only, response ones in the first response message only, those that do not evaluate skipped",
			cfg: epConfig{ep: epc(mode(&pmode{RequestBodyMode: modeBuffered}), func(c *extprocv3.ExternalProcessor) {
				c.RequestAttributes = []string{"request.path", "request.method", "request.id", "request.headers['x-a']", "request.protocol", "request.headers['absent']",
					"xds.upstream_host_metadata.filter_metadata['ns']['k']"} // no upstream host yet
				c.ResponseAttributes = []string{"response.code", "request.path"}
			})},
			client: postOf("hi", "X-A", "1"),
			wantSent: []*preq{
				withAttrs(t, pc(reqHeadersMsg(stdReq("POST", "content-length", "2", "x-a", "1"), false), modeBuffered, modeNone), map[string]any{
					"request.path": "/p", "request.method": "POST", "request.id": "req-1", "request.headers['x-a']": "1", "request.protocol": "HTTP/2"}),
				reqBodyMsg("hi", true),
				withAttrs(t, respHeadersMsg(okRespHeaders("content-length", "2"), false), map[string]any{"response.code": 200, "request.path": "/p"}),
			},
			wantClient: okClient,
		},
		{
			name: "§1.10 dynamic_metadata applied for receiving namespaces only (merged); forwarding namespaces in metadata_context",
			cfg: epConfig{ep: epc(func(c *extprocv3.ExternalProcessor) {
				c.MetadataOptions = &extprocv3.MetadataOptions{
					ForwardingNamespaces: &extprocv3.MetadataOptions_MetadataNamespaces{Untyped: []string{"ns.a"}},
					ReceivingNamespaces:  &extprocv3.MetadataOptions_MetadataNamespaces{Untyped: []string{"ns.a"}},
				}
			})},
			script: onKind(map[string]func(*preq) *presp{
				"request_headers": func(req *preq) *presp {
					r := continueFor(req)
					r.DynamicMetadata = md(map[string]map[string]any{"ns.a": {"k": "v"}, "ns.b": {"k": "v"}})
					return r
				},
				"response_headers": func(req *preq) *presp {
					r := continueFor(req)
					r.DynamicMetadata = md(map[string]map[string]any{"ns.a": {"k2": "w"}})
					return r
				},
			}),
			wantSent: []*preq{pc(reqHeadersMsg(stdReq("GET"), true), modeNone, modeNone), func() *preq {
				m := respHeadersMsg(okRespHeaders("content-length", "2"), false)
				m.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"ns.a": mustStruct(t, map[string]any{"k": "v"})}}
				return m
			}()},
			wantClient: okClient,
			check: func(t *testing.T, h *epHarness, res *clientResult, x *Exchange) {
				if d := cmp.Diff(map[string]any{"k": "v", "k2": "w"}, x.Metadata["ns.a"].AsMap()); d != "" {
					t.Errorf("metadata ns.a (-want +got):\n%s", d)
				}
				if _, ok := x.Metadata["ns.b"]; ok {
					t.Errorf("ns.b applied, but it is not a receiving namespace")
				}
			},
		},
		{
			name: "§1.10 dynamic_metadata is applied before the reply's validity check",
			cfg:  epConfig{ep: epc(recvNS("ns.a"))},
			script: onKind(map[string]func(*preq) *presp{"request_headers": func(*preq) *presp {
				r := respHeadersReply(nil) // the wrong type: spurious
				r.DynamicMetadata = md(map[string]map[string]any{"ns.a": {"k": "v"}})
				return r
			}}),
			wantClient:  &clientWant{status: 500},
			wantDetails: "spurious_message",
			check: func(t *testing.T, h *epHarness, res *clientResult, x *Exchange) {
				if d := cmp.Diff(map[string]any{"k": "v"}, x.Metadata["ns.a"].AsMap()); d != "" {
					t.Errorf("metadata ns.a (-want +got):\n%s", d)
				}
			},
		},

		// ---- per-route ----
		{
			name:       "per-route disabled: no stream at all",
			cfg:        epConfig{ep: epc(), perRoute: &extprocv3.ExtProcPerRoute{Override: &extprocv3.ExtProcPerRoute_Disabled{Disabled: true}}},
			noSent:     true,
			wantClient: okClient,
			wantUp:     okGet,
		},
		{
			name: "per-route processing_mode replaces the filter's",
			cfg: epConfig{ep: epc(), perRoute: &extprocv3.ExtProcPerRoute{Override: &extprocv3.ExtProcPerRoute_Overrides{
				Overrides: &extprocv3.ExtProcOverrides{ProcessingMode: &pmode{RequestHeaderMode: headerSkip}}}}},
			wantSent:   []*preq{pc(respHeadersMsg(okRespHeaders("content-length", "2"), false), modeNone, modeNone)},
			wantTrace:  []string{"open", "→response_headers", "←response_headers", "half-close", "cancel"},
			wantClient: okClient,
		},
	}
}

// chunksAnswered: every body chunk sent has had its reply applied.
func chunksAnswered(x *epInstance) bool { return len(x.dec.queue) == 0 && len(x.enc.queue) == 0 }

func withAttrs(t testing.TB, r *preq, attrs map[string]any) *preq {
	r.Attributes = map[string]*structpb.Struct{ExtProcAttributesKey: mustStruct(t, attrs)}
	return r
}

func runEPCase(t *testing.T, tc epCase) {
	h := newEPHarness(t, &tc.cfg)
	if tc.script != nil {
		h.proc.setScript(func(c *procConn) error { return tc.script(t, h, c) })
	}
	if tc.upstream != nil {
		up := func(w http.ResponseWriter, r *http.Request) { tc.upstream(h, w, r) }
		h.up.setHandler(up)
		h.upB.setHandler(up)
	}
	client := tc.client
	if client == nil {
		client = func(h *epHarness) *clientResult { return h.get() }
	}
	res := client(h)
	x := h.exchange()
	if tc.check != nil {
		tc.check(t, h, res, x)
	}
	got := h.serverGot()

	if tc.noSent {
		if len(x.ExtProc) != 0 || len(got) != 0 {
			t.Errorf("want no ext_proc stream, got record %v and server messages %d", epTrace(x), len(got))
		}
	}
	if tc.wantSent != nil {
		want, gotSrv, gotRec := tc.wantSent, got, sentOf(x)
		if tc.interleaved {
			want, gotSrv, gotRec = byDirection(want), byDirection(gotSrv), byDirection(gotRec)
		}
		if d := cmp.Diff(want, gotSrv, protoOpts); d != "" {
			t.Errorf("messages the server received (-want +got):\n%s", d)
		}
		if d := cmp.Diff(want, gotRec, protoOpts); d != "" {
			t.Errorf("messages the emulator recorded as sent (-want +got):\n%s", d)
		}
	}
	if tc.wantTrace != nil {
		if d := cmp.Diff(tc.wantTrace, epTrace(x)); d != "" {
			t.Errorf("ext_proc trace (-want +got):\n%s", d)
		}
	}
	if tc.wantDetails != "" && x.Details != tc.wantDetails {
		t.Errorf("details %q, want %q", x.Details, tc.wantDetails)
	}
	if w := tc.wantClient; w != nil {
		checkClient(t, w, res)
	}
	if w := tc.wantUp; w != nil {
		checkUpstream(t, w, h)
	}
}

func checkClient(t *testing.T, w *clientWant, res *clientResult) {
	t.Helper()
	if w.reset {
		if res.err == nil {
			t.Errorf("client: want a reset, got a clean end (status %d, body %q)", res.status, res.body)
		}
	} else if res.err != nil {
		t.Errorf("client: %v", res.err)
		return
	}
	if res.status != w.status {
		t.Errorf("client status %d, want %d (body %q)", res.status, w.status, res.body)
	}
	if !w.reset && res.body != w.body {
		t.Errorf("client body %q, want %q", res.body, w.body)
	}
	checkHeaderMap(t, "client header", w.headers, res.header)
	checkHeaderMap(t, "client trailer", w.trailers, res.trailer)
}

func checkHeaderMap(t *testing.T, what string, want map[string]string, got http.Header) {
	t.Helper()
	for k, v := range want {
		vs, ok := got[http.CanonicalHeaderKey(k)]
		switch {
		case v == absent && ok:
			t.Errorf("%s %s = %q, want absent", what, k, vs)
		case v != absent && !ok:
			t.Errorf("%s %s absent, want %q", what, k, v)
		case v != absent && strings.Join(vs, "|") != v:
			t.Errorf("%s %s = %q, want %q", what, k, strings.Join(vs, "|"), v)
		}
	}
}

func checkUpstream(t *testing.T, w *upWant, h *epHarness) {
	t.Helper()
	a, b := h.up.requests(), h.upB.requests()
	if w.none {
		if len(a)+len(b) != 0 {
			t.Errorf("upstream called (%d, %d times), want not called", len(a), len(b))
		}
		return
	}
	got, other := a, b
	if w.b {
		got, other = b, a
	}
	if len(got) != 1 || len(other) != 0 {
		t.Errorf("upstream calls: want 1 on upstream-b=%v, got upstream %d, upstream-b %d", w.b, len(a), len(b))
		return
	}
	r := got[0]
	if w.method != "" && r.Method != w.method {
		t.Errorf("upstream method %s, want %s", r.Method, w.method)
	}
	path := w.path
	if path == "" {
		path = "/p"
	}
	if r.Path != path {
		t.Errorf("upstream path %s, want %s", r.Path, path)
	}
	if w.host != "" && r.Host != w.host {
		t.Errorf("upstream host %s, want %s", r.Host, w.host)
	}
	if w.body != "" || w.method == "POST" || w.method == "PUT" {
		if r.Body != w.body {
			t.Errorf("upstream body %q, want %q", r.Body, w.body)
		}
	}
	if w.chunked && r.ContentLength != -1 {
		t.Errorf("upstream content length %d, want none (chunked)", r.ContentLength)
	}
	checkHeaderMap(t, "upstream header", w.headers, r.Header)
}

// TestExtProcConfig checks what the filter refuses at load and the
// defaults it derives.
func TestExtProcConfig(t *testing.T) {
	full := &pmode{RequestBodyMode: extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED, RequestTrailerMode: headerSend}
	for _, tc := range []struct {
		name     string
		ep       *extprocv3.ExternalProcessor
		perRoute *extprocv3.ExtProcPerRoute
		wantErr  string
	}{
		{name: "FULL_DUPLEX_STREAMED refused with its reason", ep: epc(mode(full)), wantErr: "FULL_DUPLEX_STREAMED is not supported by the emulator"},
		{name: "GRPC body mode refused", ep: epc(mode(&pmode{ResponseBodyMode: extprocv3.ProcessingMode_GRPC})), wantErr: "response_body_mode GRPC is not supported"},
		{name: "http_service refused", ep: epc(func(c *extprocv3.ExternalProcessor) { c.HttpService = &extprocv3.ExtProcHttpService{} }), wantErr: "http_service is not supported"},
		{name: "forward_rules custom matcher refused", ep: epc(func(c *extprocv3.ExternalProcessor) {
			c.ForwardRules = &extprocv3.HeaderForwardingRules{AllowedHeaders: &matcherv3.ListStringMatcher{Patterns: []*matcherv3.StringMatcher{
				{MatchPattern: &matcherv3.StringMatcher_Custom{Custom: &xdscorev3.TypedExtensionConfig{Name: "x"}}}}}}
		}), wantErr: "forward_rules.allowed_headers: patterns[0]: only exact, prefix, suffix, contains and safe_regex"},
		{name: "bad mutation regex refused", ep: epc(func(c *extprocv3.ExternalProcessor) {
			c.MutationRules = &mutationrulesv3.HeaderMutationRules{AllowExpression: &matcherv3.RegexMatcher{Regex: "("}}
		}), wantErr: "mutation_rules: allow_expression"},
		{name: "processing_request_modifier refused", ep: epc(func(c *extprocv3.ExternalProcessor) {
			c.ProcessingRequestModifier = &corev3.TypedExtensionConfig{Name: "m"}
		}), wantErr: "processing_request_modifier is not supported"},
		{name: "disable_clear_route_cache with route_cache_action refused", ep: epc(func(c *extprocv3.ExternalProcessor) {
			c.DisableClearRouteCache = true
			c.RouteCacheAction = extprocv3.ExternalProcessor_CLEAR
		}), wantErr: "only one of disable_clear_route_cache and route_cache_action"},
		{name: "per-route grpc_service override refused", ep: epc(), perRoute: &extprocv3.ExtProcPerRoute{Override: &extprocv3.ExtProcPerRoute_Overrides{
			Overrides: &extprocv3.ExtProcOverrides{GrpcService: grpcCluster("extproc", -1)}}}, wantErr: "overrides.grpc_service is not supported"},
		{name: "per-route FULL_DUPLEX_STREAMED refused", ep: epc(), perRoute: &extprocv3.ExtProcPerRoute{Override: &extprocv3.ExtProcPerRoute_Overrides{
			Overrides: &extprocv3.ExtProcOverrides{ProcessingMode: full}}}, wantErr: "overrides.processing_mode.request_body_mode FULL_DUPLEX_STREAMED"},
		{name: "§1.10 an attribute the emulator does not evaluate refused", ep: epc(func(c *extprocv3.ExternalProcessor) {
			c.RequestAttributes = []string{"request.path", "unknown.attr"}
		}), wantErr: `request_attributes: "unknown.attr" is not an attribute the emulator evaluates`},
		{name: "§1.10 the whole upstream host metadata refused", ep: epc(func(c *extprocv3.ExternalProcessor) {
			c.ResponseAttributes = []string{"xds.upstream_host_metadata"}
		}), wantErr: `response_attributes: "xds.upstream_host_metadata" is not an attribute`},
		{name: "§1.10 a malformed metadata index refused", ep: epc(func(c *extprocv3.ExternalProcessor) {
			c.RequestAttributes = []string{"xds.upstream_host_metadata.filter_metadata['ns']"}
		}), wantErr: `is not an attribute the emulator evaluates`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := buildEPFilter(t, tc.ep, tc.perRoute)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}

	t.Run("defaults", func(t *testing.T) {
		f, err := buildEPFilter(t, &extprocv3.ExternalProcessor{StatusOnError: &typev3.HttpStatus{Code: typev3.StatusCode_Found}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if f.messageTimeout != 200*time.Millisecond || f.deferredClose != 5*time.Second || f.maxMessageTimeout != 0 || f.statusOnError != 500 {
			t.Errorf("defaults: message_timeout %v, deferred_close %v, max_message_timeout %v, status_on_error %d; want 200ms, 5s, 0, 500",
				f.messageTimeout, f.deferredClose, f.maxMessageTimeout, f.statusOnError)
		}
	})
}

// buildEPFilter builds the emulator config with one ext_proc filter.
func buildEPFilter(t *testing.T, ep *extprocv3.ExternalProcessor, perRoute *extprocv3.ExtProcPerRoute) (*extProcFilter, error) {
	ep.GrpcService = grpcCluster("extproc", -1)
	rc := routeAll("upstream")
	if perRoute != nil {
		rc.VirtualHosts[0].TypedPerFilterConfig = map[string]*anypb.Any{epFilterName: mustAny(t, perRoute)}
	}
	b := testBootstrap(t, rc, []*clusterv3.Cluster{testCluster(t, "upstream", "127.0.0.1:1", false), testCluster(t, "extproc", "127.0.0.1:1", true)},
		filterOf(t, epFilterName, ep))
	e, err := New(b, Options{})
	if err != nil {
		return nil, err
	}
	t.Cleanup(e.conns.close)
	return e.cfg.Load().filters[0].(*extProcFilter), nil
}

// byDirection reorders messages: the request direction's first, then the
// response direction's, each keeping its order.
func byDirection(ms []*preq) []*preq {
	var req, resp []*preq
	for _, m := range ms {
		switch m.GetRequest().(type) {
		case *extprocsvc.ProcessingRequest_ResponseHeaders, *extprocsvc.ProcessingRequest_ResponseBody, *extprocsvc.ProcessingRequest_ResponseTrailers:
			resp = append(resp, m)
		default:
			req = append(req, m)
		}
	}
	return append(req, resp...)
}
