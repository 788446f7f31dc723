package envoytest

import (
	"context"
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

	replies chan localReply // local replies to the downstream writer

	mu          sync.Mutex
	meta        map[string]*structpb.Struct // dynamic metadata by namespace
	route       *matchedRoute
	routeValid  bool
	routeFrozen bool // response headers encoded: the route cache is frozen
	respSent    atomic.Bool
	rec         *Exchange

	// parent is set on the stream an upstream filter chain runs on, for one
	// router attempt (attempt is its number): it shares the downstream
	// stream's request headers, dynamic metadata, route and record, as
	// Envoy's UpstreamFilterManager uses the downstream StreamInfo; its own
	// ctx ends with the attempt, and its local replies go to the router.
	parent  *stream
	attempt int
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

// sendLocalReply ends the stream with a local reply (or a reset, once
// response headers have gone downstream). Only the first one counts.
func (s *stream) sendLocalReply(r localReply) {
	select {
	case s.replies <- r:
	default:
	}
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
