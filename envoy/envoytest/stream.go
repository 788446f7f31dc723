package envoytest

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// frame is one step of an HTTP stream through the filter chain, in one
// direction: headers, a body chunk, or trailers. end marks the end of the
// stream in that direction.
type frame struct {
	headers  *Headers
	data     []byte
	trailers *Headers
	end      bool
}

func (f frame) isHeaders() bool  { return f.headers != nil }
func (f frame) isTrailers() bool { return f.trailers != nil }

// localReply is a response a filter sends instead of the upstream's
// (Envoy's sendLocalReply).
type localReply struct {
	status  int
	headers *Headers // extra headers, no pseudo-headers
	body    []byte
	details string // response code details, as in %RESPONSE_CODE_DETAILS%
	// reset asks for a stream reset instead of a reply (e.g. an
	// ImmediateResponse after response headers went downstream).
	reset bool
	// grpc marks a reply already made a trailers-only gRPC response (to a
	// gRPC request): local_reply_config and the content-type rules do
	// not apply to it (Utility::sendLocalReply returns before them; the
	// emulator does not rewrite the grpc-message a mapper's body would
	// become).
	grpc bool
}

// stage runs one filter in one direction for one stream: it reads frames
// from in, writes frames to out, and closes out when it returns. A stream
// that ends early (reset, local reply) cancels s.ctx; a stage then returns
// without forwarding end. A consumer that sees its input closed without an
// end frame treats the stream as reset.
type stage func(s *stream, in <-chan frame, out chan<- frame)

// filterInstance is one filter's participation in one stream; nil stages
// pass frames through.
type filterInstance struct {
	decode, encode stage
}

// stream is one HTTP request/response through the emulator.
type stream struct {
	id    uint64
	e     *Emulator
	cfg   *config // the configuration the stream started with
	start time.Time

	// ctx ends when the stream ends for any reason; reset tells why.
	ctx    context.Context
	cancel context.CancelFunc
	// clientCtx is the client request's own context: it ends only when
	// the client goes away.
	clientCtx context.Context

	// Request and response header maps; decode filters mutate reqHeaders
	// in place, encode filters respHeaders.
	reqHeaders  *Headers
	respHeaders *Headers

	downstream streamPeer

	// replies are the local replies sent straight to the downstream
	// writer: sendDirectLocalReply and resets. chainReply is the one that
	// goes through the encoder filters (sendLocalReplyViaFilterChain), to
	// the encode chain's head (encodeHead).
	replies    chan localReply
	chainReply chan localReply

	mu          sync.Mutex
	meta        map[string]*structpb.Struct // dynamic metadata by namespace
	route       *matchedRoute
	routeValid  bool
	routeFrozen bool // response headers encoded: the route cache is frozen
	// encoding: response headers entered the encode chain — the router's
	// or a local reply's (Envoy's filter_manager_callbacks_.responseHeaders()
	// has a value); decodeAborted: a local reply took the encode chain, so
	// no decoder filter runs again (decoder_filter_chain_aborted_);
	// replyDone: a direct reply or a reset ended the stream.
	encoding, decodeAborted, replyDone bool
	respSent                           atomic.Bool
	rec                                *Exchange

	// The connection manager's timers (hcm.go): the stream idle timer, and
	// whether the request timer is disarmed (or fired). remoteComplete: the
	// client sent the whole request (remoteDecodeComplete). closeConn: the
	// response closes the HTTP/1 connection (saw_connection_close_).
	idle            *idleTimer
	requestDisarmed atomic.Bool
	remoteComplete  atomic.Bool
	closeConn       atomic.Bool

	// parent is set on the stream an upstream filter chain runs on, for one
	// router attempt (attempt is its number): it shares the downstream
	// stream's request headers, dynamic metadata, route and record, as
	// Envoy's UpstreamFilterManager uses the downstream StreamInfo; its own
	// ctx ends with the attempt, and its local replies go to the router.
	parent  *stream
	attempt int
	// upstreamHost is the host of the stream's latest router attempt
	// (Envoy's StreamInfo upstreamInfo()->upstreamHost(), which each
	// UpstreamRequest sets when it is created); on an upstream filter
	// chain's stream, its attempt's host. Under mu.
	upstreamHost *host
}

// setUpstreamHost records the host the router's new attempt goes to.
func (s *stream) setUpstreamHost(h *host) {
	s.mu.Lock()
	s.upstreamHost = h
	s.mu.Unlock()
}

// currentUpstreamHost is the host of the latest attempt, nil before any.
func (s *stream) currentUpstreamHost() *host {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.upstreamHost
}

// streamPeer is what Envoy knows about the downstream connection.
type streamPeer struct {
	remoteIP   string
	remotePort uint32
	localIP    string
	localPort  uint32
	protocol   string // "HTTP/1.1", "HTTP/2"
	scheme     string
}

// send delivers f on out unless the stream has ended.
func (s *stream) send(out chan<- frame, f frame) bool {
	select {
	case out <- f:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// replyPath is how the filter manager sends a local reply.
type replyPath int

const (
	// replyIgnored: the stream had already ended with a direct reply or a
	// reset.
	replyIgnored replyPath = iota
	// replyViaChain: no response headers existed yet; the reply runs
	// through every encoder filter, from the first (encodeHead).
	replyViaChain
	// replyDirect: response headers were in the encode chain but had not
	// gone downstream; the reply goes straight to the client.
	replyDirect
	// replyReset: response headers had gone downstream (or the reply asked
	// for it): the stream is reset.
	replyReset
	// replyUpstream: the stream is an upstream filter chain's; the router
	// takes the reply (and sends it as the downstream stream's).
	replyUpstream
)

// sendLocalReply is DownstreamFilterManager::sendLocalReply
// (source/common/http/filter_manager.cc): without response headers the
// reply is sent through the filter chain — sendLocalReplyViaFilterChain,
// which encodes it from the first encoder filter (encodeHeaders(nullptr,
// …)), so every encoder filter sees it, the sender's own encoder side
// included, whichever decoder filter sent it; with response headers in the
// encode chain but none sent downstream it goes to the codec directly
// (sendDirectLocalReply), bypassing the filters; once response headers went
// downstream the stream is reset. The response-code details are set first
// (streamInfo().setResponseCodeDetails). It reports the path taken.
func (s *stream) sendLocalReply(r localReply) replyPath {
	if s.parent != nil {
		select {
		case s.replies <- r:
		default:
		}
		return replyUpstream
	}
	// A response is initiated: the request timer is disarmed.
	s.disarmRequestTimer()
	// ActiveStream::onLocalReply: a 400 ends an HTTP/1 connection.
	if r.status == 400 {
		s.closeConn.Store(true)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.replyDone {
		return replyIgnored
	}
	if !r.reset && !s.encoding && !s.respSent.Load() {
		s.encoding, s.decodeAborted = true, true
		s.rec.setDetails(r.details)
		s.chainReply <- r // capacity 1, and only ever one via the chain
		return replyViaChain
	}
	s.replyDone = true
	select {
	case s.replies <- r:
	default:
	}
	if r.reset || s.respSent.Load() {
		return replyReset
	}
	return replyDirect
}

// startEncoding marks the router's response headers as entering the encode
// chain; false when a local reply already took it (the router's response
// is then dropped).
func (s *stream) startEncoding() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.decodeAborted {
		return false
	}
	s.encoding = true
	s.requestDisarmed.Store(true) // a response is initiated
	return true
}

// decodingAborted reports that a local reply took the encode chain: a
// decoder filter whose input then ends without end of stream was not reset,
// only never called again.
func (s *stream) decodingAborted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.decodeAborted
}

// encodeHead is the head of the encode chain: it passes on what the router
// sends, or — once a filter sent a local reply before any response headers
// existed — that reply, prepared as Utility::prepareLocalReply does
// (source/common/http/utility.cc) and encoded from the first encoder filter
// (sendLocalReplyViaFilterChain); the router's frames are then dropped.
func (s *stream) encodeHead(in <-chan frame, out chan<- frame) {
	defer close(out)
	dropping := false
	for {
		select {
		case f, ok := <-in:
			if !ok {
				// The router ended without end of stream. A local reply that
				// took the chain is encoded now (its sender ended the decode
				// chain after sending it); otherwise this is a reset.
				select {
				case lr := <-s.chainReply:
					s.encodeLocalReply(lr, nil, out)
				default:
				}
				return
			}
			if f.headers != nil && !s.startEncoding() {
				dropping = true
			}
			if dropping {
				continue
			}
			if !s.send(out, f) || f.end {
				return
			}
		case lr := <-s.chainReply:
			s.encodeLocalReply(lr, in, out)
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// encodeLocalReply sends a prepared local reply down the encode chain,
// draining (and dropping) what the router still sends on in.
func (s *stream) encodeLocalReply(lr localReply, in <-chan frame, out chan<- frame) {
	h, body := s.prepareLocalReply(lr)
	frames := []frame{{headers: h, end: len(body) == 0}}
	if len(body) > 0 {
		frames = append(frames, frame{data: body, end: true})
	}
	for len(frames) > 0 {
		select {
		case out <- frames[0]:
			frames = frames[1:]
		case _, ok := <-in:
			if !ok {
				in = nil
			}
		case <-s.ctx.Done():
			return
		}
	}
}

// prepareLocalReply is Utility::prepareLocalReply: the reply's headers
// (":status" and its own), local_reply_config's rewrite (before any
// encoder filter sees the reply) and Envoy's content-length and
// content-type rules, which rewrite applies; a headers-only reply gets the
// content-length 0 Envoy's HTTP/1 codec gives it. A reply already made a
// trailers-only gRPC response is not rewritten (see localReply.grpc).
func (s *stream) prepareLocalReply(lr localReply) (*Headers, []byte) {
	h := NewHeaders(":status", strconv.Itoa(lr.status))
	if lr.headers != nil {
		for _, e := range lr.headers.Entries() {
			h.Add(e.Key, e.Value)
		}
	}
	body := lr.body
	if !lr.grpc {
		body = s.cfg.localReply.rewrite(s.reqHeaders, h, lr.status, lr.body, lr.details)
	}
	if len(body) == 0 && !lr.grpc {
		h.Set("content-length", "0")
	}
	return h, body
}

// Metadata returns a copy of the stream's dynamic metadata in namespace ns.
func (s *stream) metadata(ns string) *structpb.Struct {
	if s.parent != nil {
		return s.parent.metadata(ns)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.meta[ns]; m != nil {
		return proto.Clone(m).(*structpb.Struct)
	}
	return nil
}

// metadataNamespaces returns a copy of every namespace.
func (s *stream) allMetadata() map[string]*structpb.Struct {
	if s.parent != nil {
		return s.parent.allMetadata()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*structpb.Struct, len(s.meta))
	for k, v := range s.meta {
		out[k] = proto.Clone(v).(*structpb.Struct)
	}
	return out
}

// mergeMetadata merges v into namespace ns (Envoy's MergeFrom: top-level
// keys of v replace those already there).
func (s *stream) mergeMetadata(ns string, v *structpb.Struct) {
	if v == nil {
		return
	}
	if s.parent != nil {
		s.parent.mergeMetadata(ns, v)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.meta == nil {
		s.meta = map[string]*structpb.Struct{}
	}
	cur := s.meta[ns]
	if cur == nil {
		cur = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		s.meta[ns] = cur
	}
	for k, val := range v.GetFields() {
		cur.Fields[k] = proto.Clone(val).(*structpb.Value)
	}
}

// currentRoute returns the route for the request headers as they are now,
// computing it if the cache is empty (Envoy's route cache).
func (s *stream) currentRoute() *matchedRoute {
	if s.parent != nil {
		return s.parent.currentRoute()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.routeValid {
		s.route = s.cfg.routes.match(s.reqHeaders)
		s.routeValid = true
		// ActiveStream::setRoute → refreshIdleTimeout.
		s.routeIdleTimeout(s.route)
	}
	return s.route
}

// clearRouteCache drops the cached route so the next lookup re-matches.
// It has no effect once response headers have been encoded, nor in an
// upstream filter chain (the router has routed).
func (s *stream) clearRouteCache() bool {
	if s.parent != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.routeFrozen {
		return false
	}
	s.routeValid = false
	return true
}

func (s *stream) freezeRoute() {
	s.mu.Lock()
	s.routeFrozen = true
	s.mu.Unlock()
}
