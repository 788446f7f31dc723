package envoytest

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// The per-stream ext_proc state machine. Envoy runs a filter on one
// thread; here every event — a frame from either direction, a reply or the
// end of the gRPC stream, a timer — is handled under epInstance.mu, and
// handlers never block: what they forward is queued on the direction's
// output and written by that direction's stage goroutine. Names follow
// Envoy's (EP/ext_proc.cc Filter, EP/processor_state.cc ProcessorState) so
// that a doubt can be settled by reading the same function there.

const (
	modeNone     = extprocv3.ProcessingMode_NONE
	modeStreamed = extprocv3.ProcessingMode_STREAMED
	modeBuffered = extprocv3.ProcessingMode_BUFFERED
	modePartial  = extprocv3.ProcessingMode_BUFFERED_PARTIAL
	headerSkip   = extprocv3.ProcessingMode_SKIP
	headerSend   = extprocv3.ProcessingMode_SEND
)

type epDir int

const (
	epRequest epDir = iota
	epResponse
)

// cbState is ProcessorState::CallbackState: which reply the direction
// waits for.
type cbState int

const (
	cbIdle cbState = iota
	cbHeaders
	cbBuffered
	cbStreamed
	cbPartial
	cbTrailers
)

type epChunk struct {
	data []byte
	end  bool
}

// epInstance is one filter instance on one HTTP stream.
type epInstance struct {
	f *extProcFilter
	s *stream

	mu       sync.Mutex
	dec, enc *epSide

	processingComplete bool // Envoy's processing_complete_
	protocolConfigSent bool
	failureModeAllow   bool
	fwdNS, recvNS      []string
	routeMerged        bool

	ss      *sidestream   // the open gRPC stream, nil when none
	streams []*sidestream // every stream opened, to wait for

	stages    int  // stage goroutines still running
	destroyed bool // onDestroy ran
	recClosed bool // the Exchange is final: record nothing more
}

// epSide is one direction: Envoy's DecodingProcessorState or
// EncodingProcessorState, plus what the filter manager holds for the
// filter (the stopped headers, the buffered body, the held trailers).
type epSide struct {
	x   *epInstance
	dir epDir

	sendHeaders, sendTrailers bool
	bodyMode                  extprocv3.ProcessingMode_BodySendMode
	cb                        cbState

	hdr           *Headers // the headers frame of this direction
	headers       *Headers // Envoy's headers_: mutable while held; nil once released
	headersPassed bool
	buf           []byte // the filter manager's buffered data
	bufSet        bool   // bufferedData() != nullptr
	trailers      *Headers

	trailersAvailable, trailersPassed, trailersSent bool
	noBody, complete, bodyReplaced, partialDone     bool

	paused    bool // Envoy's paused_: the filter stopped iteration
	endSent   bool // end of stream forwarded
	queue     []epChunk
	watermark bool
	attrsSent bool

	timer      *time.Timer
	timerGen   uint64
	timerOn    bool
	newTimeout bool // an override_message_timeout was applied in this state

	out     []frame
	wake    chan struct{}
	aborted bool // stop forwarding: local reply sent or stream destroyed
}

func newEPInstance(f *extProcFilter, s *stream) *epInstance {
	x := &epInstance{f: f, s: s, failureModeAllow: f.failureModeAllow, fwdNS: f.fwdNS, recvNS: f.recvNS, stages: 2}
	x.dec = &epSide{x: x, dir: epRequest, wake: make(chan struct{}, 1)}
	x.enc = &epSide{x: x, dir: epResponse, wake: make(chan struct{}, 1)}
	x.dec.setMode(f.mode)
	x.enc.setMode(f.mode)
	return x
}

// setMode is setProcessingModeInternal: DEFAULT means SEND for headers and
// SKIP for trailers.
func (d *epSide) setMode(m *extprocv3.ProcessingMode) {
	if d.dir == epRequest {
		d.sendHeaders = m.GetRequestHeaderMode() != headerSkip
		d.sendTrailers = m.GetRequestTrailerMode() == headerSend
		d.bodyMode = m.GetRequestBodyMode()
		return
	}
	d.sendHeaders = m.GetResponseHeaderMode() != headerSkip
	d.sendTrailers = m.GetResponseTrailerMode() == headerSend
	d.bodyMode = m.GetResponseBodyMode()
}

// noExternalProcess reports that the direction sends nothing.
func (d *epSide) noExternalProcess() bool {
	return !d.sendHeaders && !d.sendTrailers && d.bodyMode == modeNone
}

func (d *epSide) shouldRemoveContentLength() bool {
	if d.x.f.allowContentLength {
		return false
	}
	return d.bodyMode == modeStreamed || d.bodyMode == modePartial || (d.bodyMode == modeBuffered && !d.sendHeaders)
}

// ---- the stages -------------------------------------------------------

// runStage is the decode or encode stage of the filter on this stream.
func (x *epInstance) runStage(d *epSide, in <-chan frame, out chan<- frame) {
	s := x.s
	defer close(out)
	defer x.stageDone()
	inDone := false
	for {
		x.mu.Lock()
		outs := d.out
		d.out = nil
		aborted, ended := d.aborted, d.endSent
		read := !inDone && !aborted && !x.watermarked(d)
		x.mu.Unlock()
		if aborted {
			return
		}
		for _, f := range outs {
			if !s.send(out, f) {
				x.gone()
				return
			}
		}
		if ended {
			return
		}
		var inCh <-chan frame
		if read {
			inCh = in
		}
		select {
		case f, ok := <-inCh:
			if !ok {
				if d.dir == epRequest && s.decodingAborted() {
					// An earlier decoder filter sent a local reply through
					// the filter chain: this filter's decoding is never
					// called again, but it lives on and encodes the reply
					// (sendLocalReplyViaFilterChain).
					return
				}
				// The input ended without end of stream: a reset (client
				// disconnect, upstream reset, a local reply sent directly).
				x.gone()
				return
			}
			inDone = f.end
			x.mu.Lock()
			x.handleFrame(d, f)
			x.mu.Unlock()
		case <-d.wake:
		case <-s.ctx.Done():
			x.gone()
			return
		}
	}
}

func (x *epInstance) handleFrame(d *epSide, f frame) {
	switch {
	case f.headers != nil:
		x.onHeaders(d, f.headers, f.end)
	case f.trailers != nil:
		x.onTrailers(d, f.trailers)
	default:
		x.onData(d, f.data, f.end)
	}
}

// watermarked reports whether Envoy would have raised a watermark on this
// direction: the stage then stops reading its input (back-pressure).
func (x *epInstance) watermarked(d *epSide) bool {
	return d.watermark || (d.bodyMode != modeBuffered && len(d.buf) > x.s.cfg.bufferLimit)
}

// gone is a stream reset or end seen by a stage.
func (x *epInstance) gone() {
	x.mu.Lock()
	x.destroy()
	x.mu.Unlock()
}

// stageDone runs when a stage returns; the last one destroys the filter
// and waits for the gRPC stream's goroutines (except in observability
// mode, whose close is deferred).
func (x *epInstance) stageDone() {
	x.mu.Lock()
	x.stages--
	last := x.stages == 0
	var wait []*sidestream
	if last {
		x.destroy()
		x.recClosed = true
		if !x.f.observability {
			wait = x.streams
		}
	}
	x.mu.Unlock()
	if last {
		x.f.forget(x.s.id, x)
		for _, ss := range wait {
			<-ss.done
		}
	}
}

// destroy is Filter::onDestroy: no more messages; the stream is closed
// (half-close then cancel), or in observability mode closed after
// deferred_close_timeout. Chunk replies still pending are discarded.
func (x *epInstance) destroy() {
	if x.destroyed {
		return
	}
	x.destroyed = true
	x.processingComplete = true
	x.dec.stopTimer()
	x.enc.stopTimer()
	x.dec.abort()
	x.enc.abort()
	if x.f.observability {
		if ss := x.ss; ss != nil {
			x.ss = nil
			time.AfterFunc(x.f.deferredClose, ss.close)
		}
		return
	}
	x.closeStream()
}

func (d *epSide) abort() {
	d.aborted = true
	d.out = nil
	d.signal()
}

func (d *epSide) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (x *epInstance) wakeAll() {
	x.dec.signal()
	x.enc.signal()
}

// ---- forwarding (what the filter manager does for the filter) ----------

func (d *epSide) emit(f frame) {
	if d.aborted {
		return
	}
	d.out = append(d.out, f)
	d.signal()
}

func (d *epSide) emitData(data []byte, end bool) {
	if len(data) == 0 && !end {
		return
	}
	if end {
		d.endSent = true
	}
	d.emit(frame{data: data, end: end})
}

// flush passes on, in order, what the filter manager holds for the filter:
// the headers, the buffered data, the trailers (commonContinue), with end
// of stream on the last of them once the input has ended.
func (d *epSide) flush() {
	if d.aborted || d.hdr == nil || d.endSent {
		return
	}
	if !d.headersPassed {
		end := d.noBody && !d.bufSet && !d.trailersAvailable
		d.headersPassed = true
		d.emit(frame{headers: d.hdr, end: end})
		if end {
			d.endSent = true
			return
		}
	}
	final := d.complete && !d.trailersAvailable && len(d.queue) == 0
	if d.bufSet {
		data := d.buf
		d.buf, d.bufSet = nil, false
		d.emitData(data, final)
	} else if final {
		d.emitData(nil, true)
	}
	if d.trailersAvailable && !d.trailersPassed && d.cb != cbTrailers && len(d.queue) == 0 {
		d.trailersPassed = true
		d.endSent = true
		d.emit(frame{trailers: d.trailers, end: true})
	}
}

// resume is continueIfNecessary.
func (d *epSide) resume() {
	if d.paused {
		d.paused = false
		d.flush()
	}
}

// continueData is a data callback returning Continue: the chunk joins what
// is held and everything passes.
func (d *epSide) continueData(data []byte) {
	d.buf = append(d.buf, data...)
	d.bufSet = true
	d.paused = false
	d.flush()
}

// inject is inject{De,En}codedDataToFilterChain: held headers go first.
func (d *epSide) inject(data []byte, end bool) {
	if len(data) == 0 || d.aborted {
		return
	}
	if !d.headersPassed && d.hdr != nil {
		d.headersPassed = true
		d.emit(frame{headers: d.hdr})
	}
	d.emitData(data, end)
}

func (d *epSide) bufferData(data []byte) {
	d.buf = append(d.buf, data...)
	d.bufSet = true
}

func (d *epSide) enqueue(data []byte, end bool) {
	d.queue = append(d.queue, epChunk{data: data, end: end})
	if d.queueBytes() > d.x.s.cfg.bufferLimit {
		d.watermark = true
	}
}

func (d *epSide) queueBytes() int {
	n := 0
	for _, c := range d.queue {
		n += len(c.data)
	}
	return n
}

func (d *epSide) queueOverLimit() bool { return d.queueBytes() > d.x.s.cfg.bufferLimit }
func (d *epSide) queueBelowLow() bool  { return d.queueBytes() < d.x.s.cfg.bufferLimit/2 }

// consolidate merges the queue into one chunk (ChunkQueue::consolidate).
func (d *epSide) consolidate() epChunk {
	if len(d.queue) == 0 {
		return epChunk{}
	}
	var all []byte
	for _, c := range d.queue {
		all = append(all, c.data...)
	}
	c := epChunk{data: all, end: d.queue[len(d.queue)-1].end}
	d.queue = []epChunk{c}
	return c
}

func (d *epSide) pop() epChunk {
	if len(d.queue) == 0 {
		return epChunk{}
	}
	c := d.queue[0]
	d.queue = d.queue[1:]
	return c
}

func (d *epSide) clearWatermark() {
	if d.watermark {
		d.watermark = false
		d.signal()
	}
}

// ---- timers -----------------------------------------------------------

// startCall is onStartProcessorCall.
func (d *epSide) startCall(cb cbState) {
	d.cb = cb
	d.startTimer(d.x.f.messageTimeout)
	d.newTimeout = false
}

// finishCall is onFinishProcessorCall: the timer stops.
func (d *epSide) finishCall(next cbState) {
	d.stopTimer()
	d.cb = next
	d.newTimeout = false
}

func (d *epSide) startTimer(dur time.Duration) {
	d.stopTimer()
	d.timerOn = true
	gen := d.timerGen
	x := d.x
	d.timer = time.AfterFunc(dur, func() {
		x.mu.Lock()
		defer x.mu.Unlock()
		if d.timerGen != gen || !d.timerOn {
			return
		}
		d.timerOn = false
		x.onMessageTimeout()
		x.wakeAll()
	})
}

func (d *epSide) stopTimer() {
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	d.timerOn = false
	d.timerGen++
}

// restartTimer is restartMessageTimer: only a running timer, only once per
// state.
func (d *epSide) restartTimer(dur time.Duration) bool {
	if !d.timerOn || d.newTimeout {
		return false
	}
	d.startTimer(dur)
	d.newTimeout = true
	return true
}

// ---- messages to the server -------------------------------------------

func (x *epInstance) event(ev string) {
	if !x.recClosed {
		x.s.rec.addExtProc(ExtProcEvent{Filter: x.f.name, Attempt: x.s.attempt, Event: ev})
	}
}

// openStream opens the gRPC stream on the first message; false means
// processing is complete (Envoy's IgnoreError: continue without ext_proc).
func (x *epInstance) openStream() bool {
	if x.processingComplete {
		return false
	}
	if x.ss == nil {
		x.event("open")
		ss := newSidestream(x)
		x.ss = ss
		x.streams = append(x.streams, ss)
		go ss.run()
	}
	return true
}

func (x *epInstance) send(req *extprocsvc.ProcessingRequest) {
	if x.ss == nil {
		return
	}
	if !x.recClosed {
		x.s.rec.addExtProc(ExtProcEvent{Filter: x.f.name, Attempt: x.s.attempt, Sent: proto.Clone(req).(*extprocsvc.ProcessingRequest)})
	}
	x.ss.enqueue(req)
}

// closeStream is Filter::closeStream: half-close then cancel, never
// waiting for the server's status.
func (x *epInstance) closeStream() {
	ss := x.ss
	if ss == nil {
		return
	}
	x.ss = nil
	if !ss.remoteDone {
		x.event("half-close")
		x.event("cancel")
	}
	ss.close()
}

func (x *epInstance) closeStreamMaybeGraceful() {
	x.processingComplete = true
	x.closeStream()
}

func (x *epInstance) newRequest(d *epSide, obs bool) *extprocsvc.ProcessingRequest {
	req := &extprocsvc.ProcessingRequest{ObservabilityMode: obs}
	x.addAttributes(d, req)
	req.MetadataContext = x.forwardingMetadata()
	return req
}

// encodeProtocolConfig puts protocol_config in the first message only,
// never in observability mode.
func (x *epInstance) encodeProtocolConfig(req *extprocsvc.ProcessingRequest) {
	if x.protocolConfigSent || x.f.observability {
		return
	}
	x.protocolConfigSent = true
	req.ProtocolConfig = &extprocsvc.ProtocolConfiguration{
		RequestBodyMode:                         x.dec.bodyMode,
		ResponseBodyMode:                        x.enc.bodyMode,
		SendBodyWithoutWaitingForHeaderResponse: x.f.sendBodyWithoutWaiting,
	}
}

func (x *epInstance) headersRequest(d *epSide, h *Headers, end, obs bool) *extprocsvc.ProcessingRequest {
	req := x.newRequest(d, obs)
	hh := &extprocsvc.HttpHeaders{Headers: x.f.headersToProto(h), EndOfStream: end}
	if d.dir == epRequest {
		req.Request = &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: hh}
	} else {
		req.Request = &extprocsvc.ProcessingRequest_ResponseHeaders{ResponseHeaders: hh}
	}
	x.encodeProtocolConfig(req)
	return req
}

// bodyRequest is setupBodyChunk.
func (x *epInstance) bodyRequest(d *epSide, data []byte, end, obs bool) *extprocsvc.ProcessingRequest {
	req := x.newRequest(d, obs)
	hb := &extprocsvc.HttpBody{Body: append([]byte(nil), data...), EndOfStream: end}
	if d.dir == epRequest {
		req.Request = &extprocsvc.ProcessingRequest_RequestBody{RequestBody: hb}
	} else {
		req.Request = &extprocsvc.ProcessingRequest_ResponseBody{ResponseBody: hb}
	}
	x.encodeProtocolConfig(req)
	return req
}

func (x *epInstance) trailersRequest(d *epSide, t *Headers, obs bool) *extprocsvc.ProcessingRequest {
	req := x.newRequest(d, obs)
	ht := &extprocsvc.HttpTrailers{Trailers: x.f.headersToProto(t)}
	if d.dir == epRequest {
		req.Request = &extprocsvc.ProcessingRequest_RequestTrailers{RequestTrailers: ht}
	} else {
		req.Request = &extprocsvc.ProcessingRequest_ResponseTrailers{ResponseTrailers: ht}
	}
	x.encodeProtocolConfig(req)
	return req
}

func (x *epInstance) sendBodyChunk(d *epSide, req *extprocsvc.ProcessingRequest, cb cbState) {
	d.startCall(cb)
	x.send(req)
}

// sendTrailers sends the trailers once.
func (x *epInstance) sendTrailers(d *epSide) {
	if d.trailersSent {
		return
	}
	d.trailersSent = true
	req := x.trailersRequest(d, d.trailers, false)
	cb := d.cb
	if cb == cbIdle {
		cb = cbTrailers
	}
	d.startCall(cb)
	x.send(req)
}

// addAttributes puts the direction's attributes in its first message.
func (x *epInstance) addAttributes(d *epSide, req *extprocsvc.ProcessingRequest) {
	names := x.f.reqAttrs
	if d.dir == epResponse {
		names = x.f.respAttrs
	}
	if d.attrsSent || len(names) == 0 {
		return
	}
	d.attrsSent = true
	st := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for _, n := range names {
		if v, ok := x.f.attrs[n](x); ok {
			st.Fields[n] = v
		}
	}
	req.Attributes = map[string]*structpb.Struct{ExtProcAttributesKey: st}
}

// forwardingMetadata is addDynamicMetadata: always set, possibly empty.
func (x *epInstance) forwardingMetadata() *corev3.Metadata {
	md := &corev3.Metadata{}
	for _, ns := range x.fwdNS {
		if m := x.s.metadata(ns); m != nil {
			if md.FilterMetadata == nil {
				md.FilterMetadata = map[string]*structpb.Struct{}
			}
			md.FilterMetadata[ns] = m
		}
	}
	return md
}

// ---- HTTP callbacks -----------------------------------------------------

// mergePerRouteConfig applies ExtProcPerRoute once per stream.
func (x *epInstance) mergePerRouteConfig() {
	if x.routeMerged {
		return
	}
	x.routeMerged = true
	rt := x.s.currentRoute()
	if rt == nil {
		return
	}
	a := rt.perFilter[x.f.name]
	if a == nil {
		return
	}
	p := x.f.perRouteConfig(a)
	if p == nil {
		return
	}
	if p.disabled {
		off := &extprocv3.ProcessingMode{RequestHeaderMode: headerSkip, ResponseHeaderMode: headerSkip}
		x.dec.setMode(off)
		x.enc.setMode(off)
		return
	}
	if p.mode != nil {
		x.dec.setMode(p.mode)
		x.enc.setMode(p.mode)
	}
	if p.fwdNS != nil {
		x.fwdNS = *p.fwdNS
	}
	if p.recvNS != nil {
		x.recvNS = *p.recvNS
	}
	if p.failureModeAllow != nil {
		x.failureModeAllow = *p.failureModeAllow
	}
}

// onHeaders is decodeHeaders / encodeHeaders.
func (x *epInstance) onHeaders(d *epSide, h *Headers, end bool) {
	x.mergePerRouteConfig()
	d.hdr = h
	d.noBody = end
	if end {
		d.complete = true
	}
	if x.f.observability && d.sendHeaders {
		if x.openStream() {
			x.send(x.headersRequest(d, h, end, true))
		}
		d.flush()
		return
	}
	sending := d.sendHeaders && !x.processingComplete && x.openStream()
	if sending {
		req := x.headersRequest(d, h, end, false)
		d.headers = h
		d.startCall(cbHeaders)
		x.send(req)
		d.paused = true
	}
	// The server saw the original content-length; it goes now if the body
	// may change under it.
	if !x.processingComplete && d.shouldRemoveContentLength() {
		h.Del("content-length")
	}
	if !sending {
		d.flush()
	}
	if d.dir == epResponse && d.noExternalProcess() {
		x.closeStreamMaybeGraceful()
	}
}

// onData is decodeData / encodeData.
func (x *epInstance) onData(d *epSide, data []byte, end bool) {
	f := x.f
	if end {
		d.complete = true
	}
	if f.observability {
		if d.bodyMode == modeStreamed && x.openStream() {
			x.send(x.bodyRequest(d, data, end, true))
		}
		d.continueData(data)
		return
	}
	if d.bodyReplaced {
		d.continueData(nil) // CONTINUE_AND_REPLACE: later chunks are drained
		return
	}
	if x.processingComplete {
		d.continueData(data)
		return
	}
	if d.cb == cbHeaders && !(d.bodyMode == modeStreamed && f.sendBodyWithoutWaiting) {
		// Header processing in progress: hold the body. BUFFERED is
		// StopIterationAndBuffer (overflow is an error), the others
		// StopIterationAndWatermark (back-pressure).
		d.paused = true
		d.bufferData(data)
		if d.bodyMode == modeBuffered {
			x.checkOverflow(d)
		}
		return
	}
	switch d.bodyMode {
	case modeBuffered:
		if !end {
			d.paused = true
			d.bufferData(data)
			x.checkOverflow(d)
			return
		}
		if !x.openStream() {
			d.continueData(data)
			return
		}
		d.bufferData(data)
		if x.checkOverflow(d) {
			return
		}
		x.sendBodyChunk(d, x.bodyRequest(d, d.buf, true, false), cbBuffered)
		d.paused = true
	case modeStreamed:
		if !x.openStream() {
			d.continueData(data)
			return
		}
		req := x.bodyRequest(d, data, end, false)
		d.enqueue(data, end)
		if d.cb == cbHeaders {
			x.sendBodyChunk(d, req, cbHeaders)
		} else {
			x.sendBodyChunk(d, req, cbStreamed)
		}
		if end || d.cb == cbHeaders {
			d.paused = true
		} else {
			d.flush()
		}
	case modePartial:
		switch {
		case d.partialDone:
			d.headers = nil
			d.continueData(data)
		case d.cb == cbPartial:
			d.enqueue(data, end)
			d.paused = true
		default:
			d.enqueue(data, end)
			if end || d.queueOverLimit() {
				if !x.openStream() {
					c := d.consolidate()
					d.queue = nil
					d.continueData(c.data)
					return
				}
				c := d.consolidate()
				x.sendBodyChunk(d, x.bodyRequest(d, c.data, c.end, false), cbPartial)
				d.paused = true
			}
		}
	default:
		d.continueData(data)
	}
}

// checkOverflow is the filter manager's buffer limit for
// StopIterationAndBuffer: 413 on the request, 500 on the response
// (source/common/http/filter_manager.cc: the buffer createBuffer makes has
// the limit as its high watermark, and requestDataTooLarge —
// responseDataTooLarge — sends the local reply, details
// request_payload_too_large, once it holds more than that; a body of
// exactly the limit passes). (The emulator also counts the final chunk of
// a BUFFERED body.)
func (x *epInstance) checkOverflow(d *epSide) bool {
	if len(d.buf) <= x.s.cfg.bufferLimit {
		return false
	}
	if d.dir == epRequest {
		x.localReply(413, nil, []byte("Payload Too Large"), "request_payload_too_large", nil)
	} else {
		x.localReply(500, nil, []byte("Internal Server Error"), "response_payload_too_large", nil)
	}
	return true
}

// onTrailers is decodeTrailers / encodeTrailers.
func (x *epInstance) onTrailers(d *epSide, t *Headers) {
	f := x.f
	if x.processingComplete {
		d.trailers, d.trailersAvailable, d.complete = t, true, true
		d.flush()
		return
	}
	if f.observability && d.sendTrailers {
		if x.openStream() {
			d.trailersSent = true
			x.send(x.trailersRequest(d, t, true))
		}
		d.trailers, d.trailersAvailable, d.complete = t, true, true
		d.flush()
		return
	}
	bodyDelivered := d.complete
	d.complete = true
	d.trailers, d.trailersAvailable = t, true
	if d.cb != cbIdle {
		d.paused = true // a call is in flight: hold the trailers
		return
	}
	if !bodyDelivered && ((d.bufSet && d.bodyMode == modeBuffered) || (len(d.queue) > 0 && d.bodyMode == modePartial)) {
		if !x.openStream() {
			d.flush()
			return
		}
		// The body is complete now: send it with end_of_stream=false; the
		// trailers follow its reply.
		if d.bodyMode == modeBuffered {
			x.sendBodyChunk(d, x.bodyRequest(d, d.buf, false, false), cbBuffered)
		} else {
			c := d.consolidate()
			x.sendBodyChunk(d, x.bodyRequest(d, c.data, false, false), cbPartial)
		}
		d.paused = true
		return
	}
	if !d.sendTrailers || !x.openStream() {
		d.flush()
		return
	}
	x.sendTrailers(d)
	d.paused = true
}

// ---- replies --------------------------------------------------------------

// onMessage is Filter::onReceiveMessage.
func (x *epInstance) onMessage(ss *sidestream, resp *extprocsvc.ProcessingResponse) {
	x.mu.Lock()
	defer x.mu.Unlock()
	defer x.wakeAll()
	if ss != x.ss || x.recClosed {
		return
	}
	f := x.f
	x.s.rec.addExtProc(ExtProcEvent{Filter: f.name, Attempt: x.s.attempt, Received: resp})
	if f.observability || x.processingComplete {
		x.event("ignored")
		return
	}
	if t := resp.GetOverrideMessageTimeout(); t != nil {
		x.onNewTimeout(t)
		return
	}
	x.maybeOverrideMode(resp)

	var err error
	isLastBody := false
	switch r := resp.GetResponse().(type) {
	case *extprocsvc.ProcessingResponse_RequestHeaders:
		x.setDynamicMetadata(resp)
		err = x.handleHeadersResponse(x.dec, r.RequestHeaders)
	case *extprocsvc.ProcessingResponse_ResponseHeaders:
		x.setDynamicMetadata(resp)
		err = x.handleHeadersResponse(x.enc, r.ResponseHeaders)
	case *extprocsvc.ProcessingResponse_RequestBody:
		isLastBody = x.dec.isLastBodyResponse()
		x.setDynamicMetadata(resp)
		err = x.handleBodyResponse(x.dec, r.RequestBody)
	case *extprocsvc.ProcessingResponse_ResponseBody:
		isLastBody = x.enc.isLastBodyResponse()
		x.setDynamicMetadata(resp)
		err = x.handleBodyResponse(x.enc, r.ResponseBody)
	case *extprocsvc.ProcessingResponse_RequestTrailers:
		x.setDynamicMetadata(resp)
		err = x.handleTrailersResponse(x.dec, r.RequestTrailers)
	case *extprocsvc.ProcessingResponse_ResponseTrailers:
		x.setDynamicMetadata(resp)
		err = x.handleTrailersResponse(x.enc, r.ResponseTrailers)
	case *extprocsvc.ProcessingResponse_ImmediateResponse:
		if f.disableImmediate {
			err = errSpurious("unhandled immediate response due to config disabled it")
			break
		}
		x.setDynamicMetadata(resp)
		x.processingComplete = true
		x.dec.finishCall(cbIdle)
		x.enc.finishCall(cbIdle)
		x.closeStreamMaybeGraceful()
		x.sendImmediate(r.ImmediateResponse)
	default:
		err = errSpurious("unhandled message")
	}

	var sp errSpurious
	switch {
	case err == nil:
	case errors.As(err, &sp):
		x.event("spurious")
		if x.failureModeAllow {
			x.closeStream()
			x.clearAsyncState()
			x.processingComplete = true
		} else {
			x.errorReply(err)
		}
	default:
		x.errorReply(err)
	}
	x.closeIfLastResponse(resp, isLastBody)
}

// onNewTimeout applies override_message_timeout: within [1ms,
// max_message_timeout], to the running timer, once per state.
func (x *epInstance) onNewTimeout(t *durationpb.Duration) {
	if t.CheckValid() != nil {
		x.event("ignored")
		return
	}
	d := t.AsDuration().Truncate(time.Millisecond)
	if d < time.Millisecond || d > x.f.maxMessageTimeout.Truncate(time.Millisecond) {
		x.event("ignored")
		return
	}
	a := x.dec.restartTimer(d)
	b := x.enc.restartTimer(d)
	if !a && !b {
		x.event("ignored")
	}
}

// maybeOverrideMode applies mode_override under Envoy's conditions.
func (x *epInstance) maybeOverrideMode(resp *extprocsvc.ProcessingResponse) {
	mo := resp.GetModeOverride()
	f := x.f
	if mo == nil || !f.allowModeOverride || f.sendBodyWithoutWaiting || (x.dec.cb != cbHeaders && x.enc.cb != cbHeaders) {
		return
	}
	// DEFAULT header modes leave the base unchanged; body modes are
	// always copied (unset = NONE). The base is the filter-level mode.
	eff := proto.Clone(f.mode).(*extprocv3.ProcessingMode)
	if mo.GetRequestHeaderMode() != extprocv3.ProcessingMode_DEFAULT {
		eff.RequestHeaderMode = mo.GetRequestHeaderMode()
	}
	if mo.GetResponseHeaderMode() != extprocv3.ProcessingMode_DEFAULT {
		eff.ResponseHeaderMode = mo.GetResponseHeaderMode()
	}
	if mo.GetRequestTrailerMode() != extprocv3.ProcessingMode_DEFAULT {
		eff.RequestTrailerMode = mo.GetRequestTrailerMode()
	}
	if mo.GetResponseTrailerMode() != extprocv3.ProcessingMode_DEFAULT {
		eff.ResponseTrailerMode = mo.GetResponseTrailerMode()
	}
	eff.RequestBodyMode = mo.GetRequestBodyMode()
	eff.ResponseBodyMode = mo.GetResponseBodyMode()
	if checkExtProcMode("mode_override", eff) != nil {
		return // FULL_DUPLEX_STREAMED / GRPC: not emulated
	}
	if len(f.allowedOverrideModes) > 0 {
		ok := false
		for _, m := range f.allowedOverrideModes {
			if eff.GetRequestBodyMode() == m.GetRequestBodyMode() &&
				eff.GetRequestTrailerMode() == m.GetRequestTrailerMode() &&
				eff.GetResponseHeaderMode() == m.GetResponseHeaderMode() &&
				eff.GetResponseBodyMode() == m.GetResponseBodyMode() &&
				eff.GetResponseTrailerMode() == m.GetResponseTrailerMode() {
				ok = true
				break
			}
		}
		if !ok {
			return
		}
	}
	x.dec.setMode(eff)
	x.enc.setMode(eff)
}

// setDynamicMetadata applies dynamic_metadata for the receiving
// namespaces only.
func (x *epInstance) setDynamicMetadata(resp *extprocsvc.ProcessingResponse) {
	if len(x.recvNS) == 0 || resp.GetDynamicMetadata() == nil {
		return
	}
	for k, v := range resp.GetDynamicMetadata().GetFields() {
		for _, ns := range x.recvNS {
			if ns == k {
				st := v.GetStructValue()
				if st == nil {
					st = &structpb.Struct{}
				}
				x.s.mergeMetadata(k, st)
				break
			}
		}
	}
}

func (d *epSide) isLastBodyResponse() bool {
	return d.bodyMode == modeStreamed && len(d.queue) > 0 && d.queue[0].end
}

// mutateHeaders is processHeaderMutation on the held headers.
func (x *epInstance) mutateHeaders(d *epSide, cr *extprocsvc.CommonResponse) error {
	return x.f.applyHeaderMutations(cr.GetHeaderMutation(), d.headers,
		cr.GetStatus() == extprocsvc.CommonResponse_CONTINUE_AND_REPLACE, d.shouldRemoveContentLength())
}

// clearRouteCache applies clear_route_cache / route_cache_action: request
// direction only, only with a header_mutation, and only while the headers
// are still held (afterwards the router has routed).
func (x *epInstance) clearRouteCache(d *epSide, cr *extprocsvc.CommonResponse) {
	if d.dir != epRequest || cr.GetHeaderMutation() == nil || d.headersPassed {
		return
	}
	switch x.f.routeCacheAction {
	case extprocv3.ExternalProcessor_DEFAULT:
		if cr.GetClearRouteCache() {
			x.s.clearRouteCache()
		}
	case extprocv3.ExternalProcessor_CLEAR:
		x.s.clearRouteCache()
	}
}

// handleHeadersResponse is ProcessorState::handleHeadersResponse.
func (x *epInstance) handleHeadersResponse(d *epSide, r *extprocsvc.HeadersResponse) error {
	if d.cb != cbHeaders {
		return errSpurious("spurious message")
	}
	cr := r.GetResponse()
	if cr.GetHeaderMutation() != nil {
		if err := x.mutateHeaders(d, cr); err != nil {
			return err
		}
	}
	x.clearRouteCache(d, cr)
	next := cbIdle
	if cr.GetStatus() != extprocsvc.CommonResponse_CONTINUE_AND_REPLACE &&
		d.bodyMode == modeStreamed && x.f.sendBodyWithoutWaiting && len(d.queue) > 0 {
		next = cbStreamed
	}
	d.finishCall(next)
	if cr.GetStatus() == extprocsvc.CommonResponse_CONTINUE_AND_REPLACE {
		if bm := cr.GetBodyMutation(); bm != nil {
			d.hdr.Del("content-length")
			d.bodyReplaced = true
			d.buf = applyBodyMutation(bm, d.buf)
			d.bufSet = true
		}
		d.queue = nil
		d.bodyMode = modeNone
		d.sendTrailers = false
		d.clearWatermark()
		x.finalizeResponse(d)
		return nil
	}
	if d.noBody {
		x.finalizeContinueResponse(d)
		return nil
	}
	if d.complete && d.bodyMode != modeNone {
		// The body came in while the headers were processed.
		if d.cb == cbIdle {
			if d.bufSet {
				x.sendBodyChunk(d, x.bodyRequest(d, d.buf, !d.trailersAvailable, false), cbBuffered)
				d.clearWatermark()
				return nil
			}
			// No data frame came (headers then trailers): send the
			// trailers or continue, as the pre-refactor ProcessorState
			// does (the refactored one stalls here).
			x.finalizeContinueResponse(d)
			return nil
		}
		x.sendBufferedStreamed(d, !d.trailersAvailable)
		return nil
	}
	switch d.bodyMode {
	case modeBuffered:
		d.clearWatermark() // keep the headers until the body is complete
	case modeStreamed:
		x.sendBufferedStreamed(d, false)
		d.resume()
	case modePartial:
		if len(d.buf) > 0 {
			data := d.buf
			d.buf, d.bufSet = nil, false
			d.enqueue(data, false)
		}
		if d.queueOverLimit() {
			c := d.consolidate()
			x.sendBodyChunk(d, x.bodyRequest(d, c.data, false, false), cbPartial)
			return nil
		}
		d.clearWatermark()
	default:
		x.finalizeContinueResponse(d)
	}
	return nil
}

// sendBufferedStreamed is sendBufferedDataInStreamedMode: what arrived
// before the headers reply becomes one chunk.
func (x *epInstance) sendBufferedStreamed(d *epSide, end bool) {
	if len(d.buf) > 0 {
		data := d.buf
		d.buf, d.bufSet = nil, false
		req := x.bodyRequest(d, data, end, false)
		d.enqueue(data, end)
		x.sendBodyChunk(d, req, cbStreamed)
	}
	if d.queueBelowLow() {
		d.clearWatermark()
	}
}

func (x *epInstance) finalizeContinueResponse(d *epSide) {
	if d.sendTrailers && d.trailersAvailable {
		x.sendTrailers(d)
		d.clearWatermark()
		return
	}
	x.finalizeResponse(d)
}

func (x *epInstance) finalizeResponse(d *epSide) {
	d.headers = nil
	d.resume()
	d.clearWatermark()
}

// handleBodyResponse is ProcessorState::handleBodyResponse.
func (x *epInstance) handleBodyResponse(d *epSide, r *extprocsvc.BodyResponse) error {
	cr := r.GetResponse()
	bm := cr.GetBodyMutation()
	shouldContinue := false
	switch d.cb {
	case cbBuffered:
		if cr.GetHeaderMutation() != nil && d.headers != nil {
			if err := x.mutateHeaders(d, cr); err != nil {
				return err
			}
		}
		if bm != nil {
			if d.headers != nil {
				if cl, ok := d.headers.Get("content-length"); ok {
					if n, err := strconv.ParseUint(cl, 10, 64); err == nil && n != uint64(len(bm.GetBody())) {
						return errMutation("mismatch between content length and the length of the mutated body")
					}
				}
			}
			d.buf = applyBodyMutation(bm, d.buf)
			d.bufSet = true
		}
		d.clearWatermark()
		d.finishCall(cbIdle)
		shouldContinue = true
	case cbStreamed:
		if bm.GetStreamedResponse() != nil {
			return errSpurious("spurious message: streamed_response is received while body_mode_ is not FULL_DUPLEX_STREAMED")
		}
		// header_mutation is ignored here: the headers went on already.
		c := d.pop()
		if bm != nil {
			c.data = applyBodyMutation(bm, c.data)
		}
		shouldContinue = c.end
		d.inject(c.data, c.end)
		if d.queueBelowLow() {
			d.clearWatermark()
		}
		if len(d.queue) == 0 {
			d.finishCall(cbIdle)
		} else {
			d.finishCall(cbStreamed)
		}
	case cbPartial:
		c := d.pop()
		if cr.GetHeaderMutation() != nil && d.headers != nil {
			if err := x.mutateHeaders(d, cr); err != nil {
				return err
			}
		}
		if bm != nil {
			c.data = applyBodyMutation(bm, c.data)
		}
		d.inject(c.data, c.end)
		shouldContinue = true
		d.clearWatermark()
		d.finishCall(cbIdle)
		d.partialDone = true
		if len(d.queue) > 0 {
			rest := d.consolidate()
			d.queue = nil
			d.inject(rest.data, rest.end)
		}
	default:
		return errSpurious("spurious message")
	}
	x.clearRouteCache(d, cr)
	d.headers = nil
	if d.sendTrailers && d.trailersAvailable && len(d.queue) == 0 {
		x.sendTrailers(d)
		return nil
	}
	if shouldContinue || (d.trailersAvailable && len(d.queue) == 0) {
		d.resume()
	}
	return nil
}

// handleTrailersResponse is ProcessorState::handleTrailersResponse.
func (x *epInstance) handleTrailersResponse(d *epSide, r *extprocsvc.TrailersResponse) error {
	if d.cb != cbTrailers {
		return errSpurious("spurious message")
	}
	if hm := r.GetHeaderMutation(); hm != nil {
		if err := x.f.applyHeaderMutations(hm, d.trailers, false, false); err != nil {
			return err
		}
	}
	d.finishCall(cbIdle)
	d.resume()
	return nil
}

// closeIfLastResponse is closeGrpcStreamIfLastRespReceived (runtime
// ext_proc_stream_close_optimization).
func (x *epInstance) closeIfLastResponse(resp *extprocsvc.ProcessingResponse, isLastBody bool) {
	if x.ss == nil {
		return
	}
	dec, enc := x.dec, x.enc
	last := false
	switch resp.GetResponse().(type) {
	case *extprocsvc.ProcessingResponse_RequestHeaders:
		last = (dec.noBody || (dec.bodyMode == modeNone && !dec.sendTrailers)) && enc.noExternalProcess()
	case *extprocsvc.ProcessingResponse_RequestBody:
		last = isLastBody && enc.noExternalProcess()
	case *extprocsvc.ProcessingResponse_RequestTrailers:
		last = enc.noExternalProcess()
	case *extprocsvc.ProcessingResponse_ResponseHeaders:
		last = enc.noBody || (enc.bodyMode == modeNone && !enc.sendTrailers)
	case *extprocsvc.ProcessingResponse_ResponseBody:
		last = isLastBody
	case *extprocsvc.ProcessingResponse_ResponseTrailers:
		last = true
	}
	if last {
		x.closeStreamMaybeGraceful()
	}
}

// clearAsyncState resets both directions to idle and lets everything held
// pass (fail-open, server closed with OK).
func (x *epInstance) clearAsyncState() {
	for _, d := range []*epSide{x.dec, x.enc} {
		d.finishCall(cbIdle)
		if d.queueBytes() > 0 {
			c := d.consolidate()
			d.queue = nil
			d.inject(c.data, c.end)
		}
		d.queue = nil
		d.clearWatermark()
		d.paused = true
		d.resume()
	}
}

// ---- errors, timeouts, local replies -------------------------------------

// onMessageTimeout: fail open, or a hard-coded 504 (500 before Envoy 1.31:
// timeoutStatus).
func (x *epInstance) onMessageTimeout() {
	if x.recClosed || x.processingComplete {
		return
	}
	x.event("timeout")
	x.processingComplete = true
	x.closeStream()
	if x.failureModeAllow {
		x.clearAsyncState()
		return
	}
	x.dec.finishCall(cbIdle)
	x.enc.finishCall(cbIdle)
	x.localReply(x.f.timeoutStatus, nil, nil, "ext_proc_error_per-message_timeout_exceeded", nil)
}

// errorReply is handleErrorResponse: status_on_error, no fail-open.
func (x *epInstance) errorReply(err error) {
	x.processingComplete = true
	x.dec.finishCall(cbIdle)
	x.enc.finishCall(cbIdle)
	x.closeStream()
	x.localReply(x.f.statusOnError, nil, nil, err.Error(), nil)
}

// onStreamEnd is the gRPC stream ending from the server's side (or failing
// to open): OK means continue without ext_proc whatever
// failure_mode_allow says; an error fails open or answers status_on_error.
func (x *epInstance) onStreamEnd(ss *sidestream, err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	defer x.wakeAll()
	ss.remoteDone = true
	if ss != x.ss || x.recClosed {
		return
	}
	code, msg := codes.OK, ""
	if !errors.Is(err, io.EOF) {
		st := status.Convert(err)
		code, msg = st.Code(), st.Message()
	}
	x.event("server-closed: " + code.String())
	if code == codes.OK || (x.failureModeAllow && !x.processingComplete) {
		if x.processingComplete {
			return
		}
		x.processingComplete = true
		x.closeStream()
		x.clearAsyncState()
		return
	}
	if x.processingComplete {
		return
	}
	x.processingComplete = true
	x.dec.finishCall(cbIdle)
	x.enc.finishCall(cbIdle)
	x.closeStream()
	x.localReply(x.f.statusOnError, nil, nil, fmt.Sprintf("ext_proc_error_gRPC_error_%d{%s}", code, msg), nil)
}

// sendImmediate is sendImmediateResponse.
func (x *epInstance) sendImmediate(ir *extprocsvc.ImmediateResponse) {
	code := 200
	if ir.GetStatus() != nil {
		code = int(ir.GetStatus().GetCode())
	}
	if code < 200 {
		code = 200
	}
	h := &Headers{}
	if ir.GetHeaders() != nil {
		// Through the configured rules; a failure is only logged by Envoy.
		_ = x.f.applyHeaderMutations(ir.GetHeaders(), h, false, false)
	}
	var gs *uint32
	if ir.GetGrpcStatus() != nil {
		v := ir.GetGrpcStatus().GetStatus()
		gs = &v
	}
	x.localReply(code, h, ir.GetBody(), ir.GetDetails(), gs)
}

// localReply ends the stream with a local reply — a reset once response
// headers went downstream. For a gRPC request it is a trailers-only gRPC
// response, as Envoy's sendLocalReply makes it.
func (x *epInstance) localReply(code int, h *Headers, body []byte, details string, grpcStatus *uint32) {
	if h == nil {
		h = &Headers{}
	}
	for _, e := range h.Entries() {
		if strings.HasPrefix(e.Key, ":") {
			h.Del(e.Key)
		}
	}
	lr := localReply{status: code, headers: h, body: body, details: replaceSpaces(details)}
	if ct := x.s.reqHeaders.Value("content-type"); strings.HasPrefix(ct, "application/grpc") {
		gs := grpcStatusForHTTP(code)
		if grpcStatus != nil {
			gs = *grpcStatus
		}
		h.Set("content-type", "application/grpc")
		h.Set("grpc-status", strconv.FormatUint(uint64(gs), 10))
		if len(body) > 0 {
			h.Set("grpc-message", percentEncode(string(body)))
		}
		lr.status, lr.body, lr.grpc = 200, nil, true
	}
	lr.reset = x.enc.headersPassed || x.s.respSent.Load()
	path := x.s.sendLocalReply(lr)
	x.dec.abort()
	if path != replyViaChain {
		x.enc.abort()
	}
	// Through the chain, the reply reaches this filter's own encodeHeaders
	// too, like every encoder filter's: with processing complete (an
	// ImmediateResponse, an error, a timeout) it passes unprocessed and
	// keeps its content-length; a reply sent while processing goes on (the
	// buffer limit's 413) is sent to the server as response headers.
}
