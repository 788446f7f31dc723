package envoytest

// The connection manager's own checks, limits and timers, before and
// around the filter chain: the HTTP/1 codec's refusals and header limits,
// the overload manager's shedding (overload.go), HTTP/1.0, protocol
// upgrades, the stream idle timeout and the request timeout. Each is a
// local reply Envoy sends itself (ConnectionManagerImpl::ActiveStream in
// source/common/http/conn_manager_impl.cc, ServerConnectionImpl in
// source/common/http/http1/codec_impl.cc), through the connection
// manager's local_reply_config like every other.

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// The connection manager's defaults: stream_idle_timeout
// (HttpConnectionManagerConfig::StreamIdleTimeoutMs, 5 minutes),
// max_request_headers_kb (Http::DEFAULT_MAX_REQUEST_HEADERS_KB, 60) and
// common_http_protocol_options.max_headers_count
// (Http::DEFAULT_MAX_HEADERS_COUNT, 100); request_timeout has none (0).
const (
	defaultStreamIdleTimeout = 5 * time.Minute
	defaultMaxHeadersKB      = 60
	defaultMaxHeadersCount   = 100
)

// Response-code details of the replies in this file
// (StreamInfo::ResponseCodeDetailValues in envoy/stream_info/stream_info.h,
// Http1ResponseCodeDetailValues in source/common/http/http1/codec_impl.cc
// and Http2ResponseCodeDetailValues in source/common/http/http2/codec_impl.cc).
const (
	detailsStreamIdleTimeout = "stream_idle_timeout"
	detailsRequestTimeout    = "request_overall_timeout"
	detailsOverload          = "overload"
	detailsLowVersion        = "low_version"
	detailsUpgradeFailed     = "upgrade_failed"
	detailsHTTP1CodecError   = "http1.codec_error"
	detailsHTTP1TooLarge     = "http1.headers_too_large"
	detailsHTTP1TooMany      = "http1.too_many_headers"
	detailsHTTP2TooMany      = "http2.too_many_headers"
)

// hcmPolicy is what the emulator implements of the connection manager's
// limits and timers.
type hcmPolicy struct {
	// streamIdle is stream_idle_timeout; 0 disables it until a route's
	// idle_timeout sets one.
	streamIdle time.Duration
	// requestTimeout is request_timeout; 0 disables it.
	requestTimeout time.Duration
	// maxHeaderBytes and maxHeaders are max_request_headers_kb (in bytes)
	// and common_http_protocol_options.max_headers_count.
	maxHeaderBytes, maxHeaders int
	// acceptHTTP10 and customMethods are http_protocol_options'
	// accept_http_10 and allow_custom_methods.
	acceptHTTP10, customMethods bool
}

// newHCMPolicy reads the connection manager's limits and timers, refusing
// those the emulator does not implement.
func newHCMPolicy(hcm *hcmv3.HttpConnectionManager) (hcmPolicy, error) {
	p := hcmPolicy{
		streamIdle:     durationOr(hcm.GetStreamIdleTimeout(), defaultStreamIdleTimeout),
		requestTimeout: hcm.GetRequestTimeout().AsDuration(),
		maxHeaderBytes: defaultMaxHeadersKB * 1024,
		maxHeaders:     defaultMaxHeadersCount,
		acceptHTTP10:   hcm.GetHttpProtocolOptions().GetAcceptHttp_10(),
		customMethods:  hcm.GetHttpProtocolOptions().GetAllowCustomMethods(),
	}
	if v := hcm.GetMaxRequestHeadersKb(); v != nil {
		p.maxHeaderBytes = int(v.GetValue()) * 1024
	}
	cp := hcm.GetCommonHttpProtocolOptions()
	if v := cp.GetMaxHeadersCount(); v != nil {
		p.maxHeaders = int(v.GetValue())
	}
	// Not emulated, so refused rather than ignored.
	switch {
	case hcm.GetRequestHeadersTimeout().AsDuration() > 0:
		// Go's HTTP server hands the emulator a request only once its
		// whole header block has arrived: a timer on the headers' own
		// arrival cannot be emulated.
		return p, errors.New("request_headers_timeout is not supported by the emulator (it sees a request only once its headers are complete)")
	case len(hcm.GetUpgradeConfigs()) > 0:
		return p, errors.New("upgrade_configs is not supported by the emulator (every upgrade is refused with 403, as without upgrade_configs)")
	case cp.GetMaxStreamDuration() != nil:
		return p, errors.New("common_http_protocol_options.max_stream_duration is not supported by the emulator")
	case cp.GetHeadersWithUnderscoresAction() != corev3.HttpProtocolOptions_ALLOW:
		return p, errors.New("common_http_protocol_options.headers_with_underscores_action is not supported by the emulator (only ALLOW, the default)")
	}
	return p, nil
}

// ---- before the filter chain --------------------------------------------

// refuseEarly answers, as Envoy does, a request refused before any filter
// exists, and reports whether it did. In Envoy's order:
//
//   - HTTP/1's codec (codec1) and HTTP/2's header limits (a reset);
//   - the overload manager's stop_accepting_requests
//     (ActiveStream::decodeHeaders, before the filter chain is created:
//     503 "envoy overloaded", details overload);
//   - a request that is not HTTP/1.1 or HTTP/2, unless accept_http_10
//     (decodeHeaders: 426 with no body, details low_version).
//
// Each is a local reply with no filter to pass through: local_reply_config
// applies, with the request's headers where the codec had made them.
func (e *Emulator) refuseEarly(s *stream, w http.ResponseWriter, r *http.Request) bool {
	p := s.cfg.hcm
	// decodeHeaders ends decoding for a request with no body
	// (maybeEndDecode) before it answers any of these.
	s.remoteComplete.Store(!requestHasBody(r))
	if r.ProtoMajor == 2 {
		// ConnectionImpl::saveHeader (http2/codec_impl.cc): past either
		// limit the stream is reset (the codec returns
		// ERR_TEMPORAL_CALLBACK_FAILURE) with details
		// http2.too_many_headers; ActiveStream::onResetStream flags a
		// local reset with codec details DPE. There is no reply.
		if s.reqHeaders.ByteSize() > p.maxHeaderBytes || s.reqHeaders.Len() > p.maxHeaders {
			s.rec.addFlag("DPE")
			s.rec.setDetails(detailsHTTP2TooMany)
			s.rec.Reset = true
			e.finishEarly(s)
			panic(http.ErrAbortHandler) // RST_STREAM
		}
	} else if status, details := codec1(r, p); status != 0 {
		e.codecError(s, w, status, details)
		return true
	} else {
		stripH2CUpgrade(s.reqHeaders)
	}
	if e.overload != nil && e.overload.shed() {
		e.earlyReply(s, w, localReply{status: http.StatusServiceUnavailable, body: []byte("envoy overloaded"), details: detailsOverload})
		return true
	}
	if r.ProtoMajor == 1 && r.ProtoMinor != 1 && !p.acceptHTTP10 {
		e.earlyReply(s, w, localReply{status: http.StatusUpgradeRequired, details: detailsLowVersion})
		return true
	}
	return false
}

// codecError is ServerConnectionImpl::sendProtocolError: a local reply
// with the codec's status (error_code_), its reason phrase as the body
// (CodeUtility::toString) and the codec's details, sent before the stream
// has request headers — so no mapper matching on :path applies — and the
// connection closed after it (ConnectionManagerImpl::handleCodecError;
// the reply carries "connection: close", closesConnection).
func (e *Emulator) codecError(s *stream, w http.ResponseWriter, status int, details string) {
	s.reqHeaders = &Headers{}
	s.rec.Method, s.rec.Path = "", ""
	s.rec.addFlag("DPE")
	s.closeConn.Store(true)
	e.earlyReply(s, w, localReply{status: status, body: []byte(http.StatusText(status)), details: details})
}

// earlyReply sends a local reply of the connection manager's, made before
// any filter exists, and ends the stream.
func (e *Emulator) earlyReply(s *stream, w http.ResponseWriter, lr localReply) {
	e.writeLocalReply(s, w, lr)
	e.finishEarly(s)
}

func (e *Emulator) finishEarly(s *stream) {
	s.cancel()
	s.rec.Duration = time.Since(s.start)
	e.accessLog(s)
	e.keep(s.rec)
}

// codec1 is what Envoy's HTTP/1 codec (the Balsa parser, BalsaParser in
// source/common/http/http1/balsa_parser.cc, Envoy's default, and
// ConnectionImpl in codec_impl.cc) refuses of a request that Go's HTTP
// server accepted, in the order the codec meets it: the status and the
// details of its sendProtocolError, or 0. Go's server refuses much
// itself (README.md, "The connection manager").
func codec1(r *http.Request, p hcmPolicy) (int, string) {
	// The first byte must start a known method (BalsaParser::execute,
	// HPE_INVALID_METHOD) unless custom methods are allowed.
	if !p.customMethods && (r.Method == "" || !strings.ContainsRune("ABCDGHLMNOPRSTU", rune(r.Method[0]))) {
		return http.StatusBadRequest, detailsHTTP1CodecError
	}
	// The header block — request line, header lines, blank line — past
	// max_request_headers_kb (BalsaFrame's max_header_length:
	// HEADERS_TOO_LONG, "headers size exceeds limit"), which the codec
	// answers 431 (ConnectionImpl::dispatchSlice).
	if headerBlockSize(r) > p.maxHeaderBytes {
		return http.StatusRequestHeaderFieldsTooLarge, detailsHTTP1TooLarge
	}
	// The request line (BalsaParser::OnRequestFirstLineInput):
	// isMethodValid, isUrlValid.
	if !methodValid(r.Method, p.customMethods) || !urlValid(r.RequestURI, r.Method == http.MethodConnect) {
		return http.StatusBadRequest, detailsHTTP1CodecError
	}
	// More headers than max_headers_count
	// (ConnectionImpl::completeCurrentHeader: 431, details
	// http1.too_many_headers). Host is a header of the count; headers
	// the codec merges (inlineJoined) count once.
	n := 0
	if r.Host != "" {
		n++
	}
	for k, vs := range r.Header {
		if _, ok := inlineJoined[strings.ToLower(k)]; ok {
			n++
		} else {
			n += len(vs)
		}
	}
	if n > p.maxHeaders {
		return http.StatusRequestHeaderFieldsTooLarge, detailsHTTP1TooMany
	}
	return 0, ""
}

// headerBlockSize is the size of the request's header block on the wire,
// as the codec counts it against max_request_headers_kb: the request
// line, every header line with its ": " and CRLF, and the blank line. Go's
// server has parsed the block already; this rebuilds it, so optional
// whitespace around values and obsolete line folding are not counted.
func headerBlockSize(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
	if r.Host != "" {
		n += len("Host: ") + len(r.Host) + 2
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	for _, te := range r.TransferEncoding { // Go takes it out of r.Header
		n += len("Transfer-Encoding: ") + len(te) + 2
	}
	return n + 2
}

// balsaMethods are the methods Envoy's HTTP/1 codec accepts without
// allow_custom_methods (isMethodValid, balsa_parser.cc).
var balsaMethods = []string{
	"ACL", "BIND", "CHECKOUT", "CONNECT", "COPY", "DELETE", "GET",
	"HEAD", "LINK", "LOCK", "MERGE", "MKACTIVITY", "MKCALENDAR", "MKCOL",
	"MOVE", "MSEARCH", "NOTIFY", "OPTIONS", "PATCH", "POST", "PROPFIND",
	"PROPPATCH", "PURGE", "PUT", "REBIND", "REPORT", "SEARCH", "SOURCE",
	"SUBSCRIBE", "TRACE", "UNBIND", "UNLINK", "UNLOCK", "UNSUBSCRIBE",
}

// tokenChars are RFC 9110's token characters (kValidCharacters).
const tokenChars = "!#$%&'*+-.0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ^_`abcdefghijklmnopqrstuvwxyz|~"

func methodValid(m string, custom bool) bool {
	if custom {
		return m != "" && strings.Trim(m, tokenChars) == ""
	}
	_, ok := slices.BinarySearch(balsaMethods, m)
	return ok
}

// urlValid is isUrlValid (balsa_parser.cc), http-parser's rules: a path
// (or '*') of the bytes '!'…'~', tab and form feed — the bytes are signed
// chars there, so no byte ≥ 0x80 — or an absolute URL whose scheme and
// host are well formed.
func urlValid(u string, connect bool) bool {
	if u == "" {
		return false
	}
	pathChar := func(c byte) bool { return c == 9 || c == 12 || ('!' <= c && c <= 126) }
	allPath := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if !pathChar(s[i]) {
				return false
			}
		}
		return true
	}
	if u[0] == '/' || u[0] == '*' {
		return allPath(u[1:])
	}
	if !connect {
		alpha := func(c byte) bool { return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') }
		if !alpha(u[0]) {
			return false
		}
		i := 1
		for i < len(u) && (alpha(u[i]) || ('0' <= u[i] && u[i] <= '9') || u[i] == '+' || u[i] == '-' || u[i] == '.') {
			i++
		}
		if !strings.HasPrefix(u[i:], "://") {
			return false
		}
		u = u[i+3:]
	}
	end := strings.IndexAny(u, "/?")
	if end < 0 {
		end = len(u)
	}
	host := u[:end]
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!$%&'()*+,-.:;=@[]_~", c) >= 0) {
			return false
		}
	}
	return !strings.Contains(host, "@@") && allPath(u[end:])
}

// stripH2CUpgrade is the HTTP/1 codec's handling of an h2c upgrade
// request, which Envoy does not support: it removes the upgrade header,
// upgrade and http2-settings from connection, and http2-settings, and
// serves the request as a plain one (ConnectionImpl::onHeadersCompleteImpl).
func stripH2CUpgrade(h *Headers) {
	if !strings.EqualFold(h.Value("upgrade"), "h2c") || !hasToken(h.Value("connection"), "upgrade") {
		return
	}
	h.Del("upgrade")
	var keep []string
	for _, t := range strings.Split(h.Value("connection"), ",") {
		if t = strings.TrimSpace(t); t != "" && !strings.EqualFold(t, "upgrade") && !strings.EqualFold(t, "http2-settings") {
			keep = append(keep, t)
		}
	}
	if len(keep) == 0 {
		h.Del("connection")
	} else {
		h.Set("connection", strings.Join(keep, ","))
	}
	h.Del("http2-settings")
}

// isUpgrade is Utility::isUpgrade: a connection header with the upgrade
// token and an upgrade header.
func isUpgrade(h *Headers) bool {
	_, ok := h.Get("upgrade")
	return ok && hasToken(h.Value("connection"), "upgrade")
}

func hasToken(list, token string) bool {
	for _, t := range strings.Split(list, ",") {
		if strings.EqualFold(strings.TrimSpace(t), token) {
			return true
		}
	}
	return false
}

// refuseUpgrade is decodeHeaders' answer to an upgrade request on a
// listener without upgrade_configs: FilterManager::createFilterChain finds
// no upgrade filter chain, creates the default one and reports the
// upgrade rejected, and, the request having a route, the connection
// manager sends 403 with no body (details upgrade_failed) — through the
// encoder filters, before any decoder filter saw the request — and closes
// the connection after it (saw_connection_close_). It reports whether it
// did.
func (s *stream) refuseUpgrade() bool {
	if !isUpgrade(s.reqHeaders) || s.currentRoute() == nil {
		return false
	}
	s.closeConn.Store(true)
	s.sendLocalReply(localReply{status: http.StatusForbidden, details: detailsUpgradeFailed})
	return true
}

// requestHasBody says whether the codec hands the connection manager a
// body after the request headers. Go's HTTP/2 server never hands over
// http.NoBody; a request whose HEADERS frame ended the stream shows up as
// a zero, undeclared content length.
func requestHasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody &&
		!(r.ProtoMajor == 2 && r.ContentLength == 0 && len(r.Header["Content-Length"]) == 0)
}

// closesConnection says whether ActiveStream::encodeHeaders answers with
// "connection: close" — on HTTP/1, when the connection is closing: the
// stream saw a reason to close it (saw_connection_close_: a 400 local
// reply, a refused upgrade), or the response starts before the client
// sent the whole request.
func (s *stream) closesConnection() bool {
	return s.downstream.protocol != "HTTP/2" && (s.closeConn.Load() || !s.remoteComplete.Load())
}

// ---- the stream's timers -------------------------------------------------

// startTimers arms the connection manager's stream timers as the
// ActiveStream constructor does: the stream idle timer with
// stream_idle_timeout and the request timer with request_timeout. A
// route's idle_timeout replaces the idle timer's duration when the route
// is chosen (setRoute → refreshIdleTimeout, stream.currentRoute).
func (e *Emulator) startTimers(s *stream) {
	s.idle = newIdleTimer(s.cfg.hcm.streamIdle)
	go s.idle.run(s.ctx.Done())
	go func() {
		select {
		case <-s.idle.c():
			e.streamIdleTimeout(s)
		case <-s.ctx.Done():
		}
	}()
	if d := s.cfg.hcm.requestTimeout; d > 0 {
		t := time.AfterFunc(d, func() {
			if s.requestDisarmed.CompareAndSwap(false, true) {
				e.requestTimeout(s)
			}
		})
		go func() {
			<-s.ctx.Done()
			t.Stop()
		}()
	}
}

// streamIdleTimeout is ActiveStream::onIdleTimeout: flag SI and a local
// reply "stream timeout" (details stream_idle_timeout), 408 while the
// client has not sent the whole request, 504 once it has
// (Utility::maybeRequestTimeoutCode). It goes out as any local reply
// (DownstreamFilterManager::sendLocalReply): through the encoder filters,
// directly, or — response headers having gone downstream — as a reset.
func (e *Emulator) streamIdleTimeout(s *stream) {
	s.rec.addFlag("SI")
	e.timeoutReply(s, "stream timeout", detailsStreamIdleTimeout)
}

// requestTimeout is ActiveStream::onRequestTimeout: a local reply
// "request timeout" (details request_overall_timeout), 408 or 504 as for
// the idle timeout. The timer is disarmed once the router has the whole
// request or a response started (disarmRequestTimer).
func (e *Emulator) requestTimeout(s *stream) {
	e.timeoutReply(s, "request timeout", detailsRequestTimeout)
}

func (e *Emulator) timeoutReply(s *stream, body, details string) {
	status := http.StatusRequestTimeout
	if s.remoteComplete.Load() {
		status = http.StatusGatewayTimeout
	}
	if s.sendLocalReply(localReply{status: status, body: []byte(body), details: details}) == replyReset {
		// Nothing else ends a stream that has gone quiet.
		s.cancel()
	}
}

// disarmRequestTimer disarms the request timer: the router has the whole
// request (FilterManager::decodeHeaders / decodeData with end of stream
// past the last filter) or a response started.
func (s *stream) disarmRequestTimer() {
	if s.parent != nil {
		s.parent.disarmRequestTimer()
		return
	}
	s.requestDisarmed.Store(true)
}

// fromClient is the head of the decode chain, where the codec hands the
// connection manager the client's request: every frame resets the stream
// idle timer (ActiveStream::decodeHeaders, FilterManager::decodeData), and
// the one ending the request marks it complete (remoteDecodeComplete).
func (s *stream) fromClient(in <-chan frame, out chan<- frame) {
	defer close(out)
	for {
		select {
		case f, ok := <-in:
			if !ok {
				return
			}
			s.idle.touch()
			if f.end {
				s.remoteComplete.Store(true)
			}
			if !s.send(out, f) || f.end {
				return
			}
		case <-s.ctx.Done():
			return
		}
	}
}

// routeIdleTimeout is refreshIdleTimeout: a route whose action sets
// idle_timeout replaces the stream idle timer's duration (0 disables it);
// a route without one, or a direct response, leaves it.
func (s *stream) routeIdleTimeout(rt *matchedRoute) {
	if rt != nil && rt.action != nil && rt.action.idleSet {
		s.idle.set(rt.action.idleTimeout)
	}
}

// idleTimer is the stream idle timer: it fires (closes its channel) once
// nothing passed for its duration; a duration of 0 disarms it. Envoy
// re-arms the timer with the current duration on every resetIdleTimer;
// here the deadline is the last touch plus the current duration, which is
// the same as long as the duration changes only when the route does and a
// touch follows. A nil timer never fires.
type idleTimer struct {
	d    atomic.Int64 // time.Duration
	last atomic.Int64 // unix nanoseconds of the last touch
	wake chan struct{}
	fire chan struct{}
}

func newIdleTimer(d time.Duration) *idleTimer {
	t := &idleTimer{wake: make(chan struct{}, 1), fire: make(chan struct{})}
	t.d.Store(int64(d))
	t.touch()
	return t
}

// run fires the timer when it expires, until stop.
func (t *idleTimer) run(stop <-chan struct{}) {
	for {
		var expire <-chan time.Time
		var tm *time.Timer
		if d := time.Duration(t.d.Load()); d > 0 {
			wait := time.Until(time.Unix(0, t.last.Load()).Add(d))
			if wait <= 0 {
				close(t.fire)
				return
			}
			tm = time.NewTimer(wait)
			expire = tm.C
		}
		select {
		case <-expire:
		case <-t.wake:
		case <-stop:
		}
		if tm != nil {
			tm.Stop()
		}
		select {
		case <-stop:
			return
		default:
		}
	}
}

func (t *idleTimer) touch() {
	if t != nil {
		t.last.Store(time.Now().UnixNano())
	}
}

// set changes the timer's duration (0 disarms it).
func (t *idleTimer) set(d time.Duration) {
	if t == nil {
		return
	}
	t.d.Store(int64(d))
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

func (t *idleTimer) c() <-chan struct{} {
	if t == nil {
		return nil
	}
	return t.fire
}

// clusterGone says whether cluster, which cfg (a stream's configuration)
// has, is missing from the configuration now in force: Envoy's router
// would not find it in the cluster manager.
func (e *Emulator) clusterGone(cfg *config, cluster string) bool {
	cur := e.cfg.Load()
	return cur != nil && cur != cfg && cur.clusters[cluster] == nil
}
