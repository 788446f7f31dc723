package envoytest

import (
	"strings"
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
	// ResponseFlags is Envoy's %RESPONSE_FLAGS% for what the router
	// decided ("UF", "URX", "UO", "UH", "UT", "SI", …), comma-separated in
	// Envoy's order; "" when none.
	ResponseFlags string
	// BytesReceived and BytesSent count body bytes from and to the client.
	BytesReceived, BytesSent int64
	Duration                 time.Duration

	Authz   []AuthzCall
	ExtProc []ExtProcEvent
	// Upstream is what the router sent on its last attempt (the one whose
	// response, if any, went downstream); nil if no attempt reached the
	// upstream codec.
	Upstream *UpstreamRequest
	// Attempts lists every try of the router, in order, retries included.
	Attempts []*UpstreamAttempt
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
	// Attempt is 0 for a filter of the listener's chain, and the router's
	// attempt number (1, 2, …) for an ext_proc in a cluster's upstream
	// filter chain, which opens a new stream on every attempt.
	Attempt int
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

// UpstreamAttempt is one try of the router: where it went and how it
// ended.
type UpstreamAttempt struct {
	// Cluster is the cluster the host belongs to (for an aggregate cluster,
	// the member); Endpoint its address; Priority the priority level it was
	// chosen from (an aggregate's linearised level).
	Cluster  string
	Endpoint string
	Priority int
	// Request is what reached the upstream codec; nil when the attempt
	// ended before (circuit-breaker overflow, an upstream filter's reply).
	Request *UpstreamRequest
	// Status is the response :status the router saw (after the upstream
	// filters), 0 if none.
	Status int
	// Reset is Envoy's reset reason when the attempt ended without
	// response headers: "remote connection failure", "connection timeout",
	// "connection termination", "remote reset", "local reset" (per-try
	// timeout) or "overflow".
	Reset string
	// Retried reports that the router retried after this attempt.
	Retried bool
}

func (x *Exchange) addAttempt(a *UpstreamAttempt) {
	x.mu.Lock()
	x.Attempts = append(x.Attempts, a)
	x.mu.Unlock()
}

// updateAttempt changes an attempt under the record's lock.
func (x *Exchange) updateAttempt(fn func()) {
	x.mu.Lock()
	fn()
	x.mu.Unlock()
}

// Envoy's response flags in %RESPONSE_FLAGS% order.
var responseFlagOrder = []string{"LH", "UH", "UT", "LR", "UR", "UF", "UC", "UO", "NR", "DI", "FI", "RL", "UAEX", "RLSE", "DC", "URX", "SI", "IH", "DPE", "UMSDR", "RFCF", "NFCF", "DT", "UPE", "NC", "OM", "DF", "DO", "DR"}

// addFlag sets one response flag.
func (x *Exchange) addFlag(f string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	have := map[string]bool{f: true}
	for _, g := range strings.Split(x.ResponseFlags, ",") {
		if g != "" {
			have[g] = true
		}
	}
	var out []string
	for _, g := range responseFlagOrder {
		if have[g] {
			out = append(out, g)
		}
	}
	x.ResponseFlags = strings.Join(out, ",")
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

// appendUpstreamBody records body bytes that reached the upstream in
// request u.
func (x *Exchange) appendUpstreamBody(u *UpstreamRequest, b []byte) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(u.Body) < 1<<20 {
		u.Body = append(u.Body, b...)
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
