package envoytest

import (
	"sync"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Exchange is the record of one HTTP request through the emulator: every
// message exchanged with each external service, in order, and the
// outcome. Golden tests compare these. An Exchange is complete (and
// immutable) once Emulator.Exchanges returns it.
type Exchange struct {
	StreamID uint64
	Method   string
	Path     string // as received from the client
	// Status is the status sent downstream; 0 if the stream was reset
	// before response headers.
	Status int
	// Reset reports that the downstream stream was reset (no clean end).
	Reset bool
	// Details is Envoy's %RESPONSE_CODE_DETAILS% for local replies and
	// resets ("ext_authz_denied", "ext_proc_error_per-message_timeout_exceeded", …); "via_upstream" otherwise.
	Details string
	Cluster string // the cluster the router used, if any
	// BytesReceived and BytesSent count body bytes from and to the client.
	BytesReceived, BytesSent int64
	Duration                 time.Duration

	Authz    []AuthzCall
	ExtProc  []ExtProcEvent
	Upstream *UpstreamRequest
	// Metadata is the stream's dynamic metadata at the end, by namespace.
	Metadata map[string]*structpb.Struct

	mu sync.Mutex
}

// AuthzCall is one ext_authz Check.
type AuthzCall struct {
	Filter   string
	Request  *authv3.CheckRequest
	Response *authv3.CheckResponse // nil on error
	Err      error
}

// ExtProcEvent is one event on an ext_proc stream, from Envoy's side.
type ExtProcEvent struct {
	Filter string
	// Exactly one of Sent, Received and Event is set.
	Sent     *extprocsvc.ProcessingRequest  // Envoy → server
	Received *extprocsvc.ProcessingResponse // server → Envoy
	// Event names a stream event: "open", "half-close", "cancel",
	// "server-closed: <grpc status>", "timeout", "spurious", "ignored".
	Event string
}

// UpstreamRequest is what the router sent to the upstream.
type UpstreamRequest struct {
	Cluster  string
	Endpoint string
	Method   string
	Path     string
	Headers  *Headers
	Body     []byte // what reached the upstream (capped at 1 MiB in the record)
}

func (x *Exchange) addAuthz(c AuthzCall) {
	x.mu.Lock()
	x.Authz = append(x.Authz, c)
	x.mu.Unlock()
}

func (x *Exchange) addExtProc(ev ExtProcEvent) {
	x.mu.Lock()
	x.ExtProc = append(x.ExtProc, ev)
	x.mu.Unlock()
}

func (x *Exchange) setUpstream(u *UpstreamRequest) {
	x.mu.Lock()
	x.Upstream = u
	x.mu.Unlock()
}

// appendUpstreamBody records body bytes that reached the upstream.
func (x *Exchange) appendUpstreamBody(b []byte) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.Upstream != nil && len(x.Upstream.Body) < 1<<20 {
		x.Upstream.Body = append(x.Upstream.Body, b...)
	}
}

func (x *Exchange) setDetails(d string) {
	x.mu.Lock()
	x.Details = d
	x.mu.Unlock()
}

// defaultDetails sets Details only if nothing has set it yet.
func (x *Exchange) defaultDetails(d string) {
	x.mu.Lock()
	if x.Details == "" {
		x.Details = d
	}
	x.mu.Unlock()
}
