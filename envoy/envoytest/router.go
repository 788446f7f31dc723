package envoytest

// The router filter (source/common/router/router.cc, upstream_request.cc):
// host selection, attempts with their upstream filter chains, retries,
// timeouts and the router's local replies.

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// routerStage is the router filter: the end of the decode chain and the
// start of the encode chain. It forwards the request to the routed
// cluster over plain HTTP/1.1 or HTTP/2, retrying as the route's retry
// policy says until a response starts downstream, and streams the
// response back chunk by chunk. Its own local replies (no route, no
// cluster, no healthy upstream, reset, timeout) go through the encode
// chain, as Envoy's router local replies reach ext_proc since v1.37.
func (e *Emulator) routerStage(s *stream, in <-chan frame, out chan<- frame) {
	defer close(out)
	var hf frame
	select {
	case f, ok := <-in:
		if !ok {
			return
		}
		hf = f
	case <-s.ctx.Done():
		return
	}
	r := &router{s: s, out: out, stop: make(chan struct{})}
	defer r.wg.Wait()
	defer r.cancelAttempts()
	defer close(r.stop)
	r.run(hf, in)
}

// router is the router filter on one stream (Envoy's Router::Filter).
type router struct {
	s    *stream
	out  chan<- frame
	stop chan struct{} // closed when the router is done
	wg   sync.WaitGroup

	rt   *matchedRoute
	act  *routeAction
	cl   *cluster // the route's cluster (for an aggregate, the aggregate)
	rs   *retryState
	body *reqBody
	// base is the request header map the attempts start from: Envoy's
	// downstream header map, which upstream filters and auto_host_rewrite
	// mutate in place, so what one attempt did carries into the next.
	base *Headers

	attempt      int  // attempt_count_
	isRetry      bool // is_retry_
	started      bool // downstream_response_started_
	modifyOn     bool // modify_headers_ is in force (attempt count in the response)
	global       time.Duration
	perTry       time.Duration
	globalC      <-chan time.Time
	globalTimer  *time.Timer
	completeSeen bool
	// idle is the stream's idle timer (hcm.go), which data passing the
	// router resets; its expiry is the stream's to answer, not the
	// router's.
	idle *idleTimer

	mu       sync.Mutex
	attempts []*attemptRun
}

func (r *router) run(hf frame, in <-chan frame) {
	s := r.s
	rt := s.currentRoute()
	switch {
	case rt == nil:
		s.rec.addFlag("NR")
		r.reply(404, "", "route_not_found", nil)
		return
	case rt.direct != nil:
		body := string(rt.direct.GetBody().GetInlineString())
		if body == "" {
			body = string(rt.direct.GetBody().GetInlineBytes())
		}
		// A direct response is a local reply (router.cc sends it with
		// sendLocalReply): local_reply_config applies to it too.
		s.rec.setDetails("direct_response")
		r.send(NewHeaders(":status", strconv.Itoa(int(rt.direct.GetStatus()))), body, "direct_response")
		return
	}
	r.rt, r.act = rt, rt.action
	cl := s.cfg.clusters[rt.cluster]
	s.rec.Cluster = rt.cluster
	// Envoy looks the route's cluster up in the cluster manager when the
	// router gets the request headers (Filter::decodeHeaders in
	// source/common/router/router.cc: getThreadLocalCluster; none is
	// 503, or the route configuration's cluster_not_found_response_code,
	// details cluster_not_found, flag NC), while the stream keeps the
	// route table it started with. So a cluster that a configuration put
	// in force since the stream started no longer has is not found, even
	// though the stream's own configuration still routes to it. (The
	// stream keeps using its own configuration's cluster otherwise: an
	// updated cluster's new version is not picked up mid-stream.)
	if rt.clusterMissing || cl == nil || s.e.clusterGone(s.cfg, rt.cluster) {
		s.rec.addFlag("NC")
		r.reply(r.act.clusterNotFoundCode, "", "cluster_not_found", nil)
		return
	}
	r.cl = cl
	// A copy: the downstream filters may still read the stream's map.
	r.base = hf.headers.Clone()
	// finalizeRequestHeaders: the route's, virtual host's and route
	// configuration's request_headers_to_remove, after the route was
	// chosen and before the host rewrite and any upstream filter.
	for _, k := range r.act.removeHeaders {
		r.base.Del(k)
	}
	if r.act.hostRewrite != "" {
		updateAuthority(r.base, r.act.hostRewrite, r.act.appendXFH)
	}
	r.global = rt.timeout
	if r.act.retry != nil {
		r.perTry = r.act.retry.perTry
	}
	if r.perTry >= r.global && r.global != 0 {
		r.perTry = 0
	}
	r.rs = newRetryState(r.act.retry, cl)
	defer func() { r.rs.release() }()
	r.idle = s.idle
	r.body = newReqBody(r.rs != nil, s.cfg.bufferLimit)
	if hf.end {
		r.body.add(nil, true)
		// Every decoder filter has processed the whole request: the
		// request timeout is disarmed (FilterManager::decodeHeaders).
		s.disarmRequestTimer()
	} else {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.body.read(s, in, r.idle, r.stop)
		}()
	}
	r.attempt = 1
	r.loop()
}

// loop runs attempts until one's response goes downstream or the router
// gives up with a local reply.
func (r *router) loop() {
	s := r.s
	for {
		r.checkComplete()
		h, lvl, ok := r.cl.pick(r.rs)
		if !ok {
			s.rec.addFlag("UH")
			r.reply(503, "no healthy upstream", "no_healthy_upstream", nil)
			return
		}
		r.rs.onHostAttempted(lvl)
		a := &UpstreamAttempt{Cluster: h.cluster.name, Endpoint: h.addr, Priority: lvl}
		s.rec.addAttempt(a)
		res := r.try(h, a)
		// From the first attempt on, router replies carry the attempt count
		// when the virtual host asks for it.
		r.modifyOn = true
		r.adopt(res.at)
		switch res.kind {
		case resultGone:
			return
		case resultLocalReply:
			// An upstream filter's local reply: sent through the downstream
			// filter manager (UpstreamFilterManager::sendLocalReply), so
			// through the downstream encoder filters, and never retried.
			res.lr.reset = res.lr.reset || r.started
			s.sendLocalReply(res.lr)
			return
		case resultHeaders:
			code, _ := strconv.Atoi(res.headers.Value(":status"))
			s.rec.updateAttempt(func() { a.Status = code })
			h.cluster.outlier.putHTTPCode(h, code)
			if rs := r.retry(); rs != nil {
				switch rs.shouldRetry(rs.wouldRetryHeaders(res.headers)) {
				case retryYes:
					s.rec.updateAttempt(func() { a.Retried = true })
					res.at.cancel()
					if !r.backoff() {
						return
					}
					continue
				case retryNoOverflow:
					s.rec.addFlag("UO")
				case retryNoLimitExceeded:
					s.rec.addFlag("URX")
				}
				rs.release()
			}
			r.forward(res)
			return
		case resultReset:
			s.rec.updateAttempt(func() { a.Reset = res.reason })
			if res.reason != resetOverflow {
				h.cluster.outlier.putHTTPCode(h, 503) // LocalOriginConnectFailed
			}
			if r.maybeRetryReset(res.reason, a) {
				if !r.backoff() {
					return
				}
				continue
			}
			r.resetReply(res.reason, res.transport)
			return
		case resultPerTryTimeout:
			s.rec.updateAttempt(func() { a.Reset = resetLocalReset })
			h.cluster.outlier.putHTTPCode(h, 504) // LocalOriginTimeout
			if r.maybeRetryReset(resetLocalReset, a) {
				if !r.backoff() {
					return
				}
				continue
			}
			s.rec.addFlag("UT")
			r.reply(504, "upstream request timeout", "upstream_per_try_timeout", nil)
			return
		case resultGlobalTimeout:
			h.cluster.outlier.putHTTPCode(h, 504)
			s.rec.updateAttempt(func() { a.Reset = resetLocalReset })
			r.globalTimeoutReply()
			return
		}
	}
}

// adopt makes the headers an attempt's codec sent the base of the next
// attempt: in Envoy every attempt works on the one downstream header map.
func (r *router) adopt(at *attemptRun) {
	if at == nil {
		return
	}
	select {
	case h := <-at.taken:
		r.base = h
	default:
	}
}

// completeC is closed when the request is complete, until the router has
// seen it.
func (r *router) completeC() <-chan struct{} {
	if r.completeSeen {
		return nil
	}
	return r.body.completeCh
}

// retry returns the retry state, nil once retries are impossible (no
// policy, or the request body outgrew the buffer limit).
func (r *router) retry() *retryState {
	if r.rs != nil && r.body.overflowed() {
		r.rs.release()
		r.rs = nil
	}
	return r.rs
}

// maybeRetryReset is Filter::maybeRetryReset.
func (r *router) maybeRetryReset(reason string, a *UpstreamAttempt) bool {
	rs := r.retry()
	if r.started || rs == nil {
		return false
	}
	switch rs.shouldRetry(rs.wouldRetryReset(reason)) {
	case retryYes:
		r.s.rec.updateAttempt(func() { a.Retried = true })
		return true
	case retryNoOverflow:
		r.s.rec.addFlag("UO")
	case retryNoLimitExceeded:
		r.s.rec.addFlag("URX")
	}
	return false
}

// backoff waits the retry back-off (doRetry's timer), then prepares the
// next attempt. It reports false when the router has given up.
func (r *router) backoff() bool {
	s := r.s
	t := time.NewTimer(r.rs.backoff())
	defer t.Stop()
	for {
		select {
		case <-t.C:
			r.isRetry = true
			r.attempt++
			return true
		case <-r.completeC():
			r.checkComplete()
		case <-r.globalC:
			r.globalTimeoutReply()
			return false
		case <-r.body.overflowC:
			r.reply(507, "exceeded request buffer limit while retrying upstream", "request_payload_exceeded_retry_buffer_limit", nil)
			return false
		case <-s.ctx.Done():
			return false
		}
	}
}

// checkComplete arms the global timeout once the downstream request is
// complete (onRequestComplete).
func (r *router) checkComplete() {
	if r.completeSeen || !r.body.isComplete() {
		return
	}
	r.completeSeen = true
	if r.global > 0 {
		r.globalTimer = time.NewTimer(r.global)
		r.globalC = r.globalTimer.C
	}
}

// expectedTimeout is the x-envoy-expected-rq-timeout-ms value for an
// attempt (FilterUtility::setTimeoutHeaders); 0 sets none.
func (r *router) expectedTimeout() time.Duration {
	exp := r.perTry
	if exp == 0 {
		exp = r.global
	}
	if exp == 0 || r.global == 0 {
		return exp
	}
	elapsed := time.Duration(0)
	if at := r.body.completedAt(); !at.IsZero() {
		elapsed = time.Since(at).Truncate(time.Millisecond)
	}
	if elapsed >= r.global {
		return time.Millisecond
	}
	return min(exp, r.global-elapsed)
}

func (r *router) cancelAttempts() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, at := range r.attempts {
		at.cancel()
	}
	if r.globalTimer != nil {
		r.globalTimer.Stop()
	}
}

// ---- local replies ------------------------------------------------------

// reply sends a router local reply down the encode chain.
func (r *router) reply(status int, body, details string, extra *Headers) {
	h := NewHeaders(":status", strconv.Itoa(status))
	if extra != nil {
		for _, e := range extra.Entries() {
			h.Add(e.Key, e.Value)
		}
	}
	r.modify(h)
	r.s.rec.setDetails(details)
	r.send(h, body, details)
}

// send sends a local reply with headers h (":status" and the filter's own)
// and body down the encode chain, after local_reply_config rewrote it
// (Utility::sendLocalReply: the rewrite comes before the headers are
// encoded, so the encode filters see the rewritten reply).
func (r *router) send(h *Headers, body, details string) {
	s := r.s
	status, _ := strconv.Atoi(h.Value(":status"))
	extra := h.Clone()
	extra.Del(":status")
	hd, out := s.prepareLocalReply(localReply{status: status, headers: extra, body: []byte(body), details: details})
	if s.send(r.out, frame{headers: hd, end: len(out) == 0}) && len(out) > 0 {
		s.send(r.out, frame{data: out, end: true})
	}
}

// modify is modify_headers_: the attempt count in the response when the
// virtual host asks for it.
func (r *router) modify(h *Headers) {
	if r.modifyOn && r.act != nil && r.act.attemptCountResponse {
		h.Set("x-envoy-attempt-count", strconv.Itoa(r.attempt))
	}
}

// resetReply is onUpstreamReset's reply when the router does not retry.
func (r *router) resetReply(reason, transport string) {
	s := r.s
	s.rec.addFlag(resetFlag(reason))
	body := "upstream connect error or disconnect/reset before headers. "
	if r.isRetry {
		body += "retried and the latest "
	}
	body += "reset reason: " + reason
	d := reason
	if transport != "" {
		body += ", transport failure reason: " + transport
		d += "|" + transport
	}
	var extra *Headers
	if reason == resetOverflow {
		extra = NewHeaders("x-envoy-overloaded", "true")
	}
	r.reply(503, body, "upstream_reset_before_response_started{"+replaceSpaces(d)+"}", extra)
}

// globalTimeoutReply is onResponseTimeout before the response started.
func (r *router) globalTimeoutReply() {
	r.s.rec.addFlag("UT")
	r.reply(504, "upstream request timeout", "upstream_response_timeout", nil)
}

// resetFlag is streamResetReasonToResponseFlag.
func resetFlag(reason string) string {
	switch reason {
	case resetRemoteConnectionFailure, resetConnectionTimeout:
		return "UF"
	case resetConnectionTermination:
		return "UC"
	case resetLocalReset:
		return "LR"
	case resetOverflow:
		return "UO"
	}
	return "UR"
}

// updateAuthority is Http::Utility::updateAuthority.
func updateAuthority(h *Headers, host string, appendXFH bool) {
	if cur := h.Value(":authority"); appendXFH && cur != "" {
		if _, ok := h.Get("x-forwarded-host"); ok {
			h.AppendCopy("x-forwarded-host", cur)
		} else {
			h.Add("x-forwarded-host", cur)
		}
	}
	h.Set(":authority", host)
}

// ---- forwarding the response ------------------------------------------

// forward sends the chosen attempt's response downstream: from here on
// there is no retry, and a failure is a reset.
func (r *router) forward(res attemptResult) {
	s := r.s
	at := res.at
	r.started = true
	r.modify(res.headers)
	s.respHeaders = res.headers
	r.idle.touch()
	if !s.send(r.out, frame{headers: res.headers, end: res.end}) || res.end {
		return
	}
	for {
		select {
		case f, ok := <-at.resp:
			if !ok {
				select {
				case lr := <-at.replies:
					lr.reset = true
					s.sendLocalReply(lr)
					return
				default:
				}
				if s.ctx.Err() == nil {
					reason := at.resetReason()
					if reason == "" {
						reason = resetRemoteReset
					}
					s.rec.setDetails("upstream_reset_after_response_started{" + replaceSpaces(reason) + "}")
					s.rec.addFlag(resetFlag(reason))
				}
				return
			}
			r.idle.touch()
			if !s.send(r.out, f) || f.end {
				return
			}
		case lr := <-at.replies:
			lr.reset = true
			s.sendLocalReply(lr)
			return
		case <-r.completeC():
			r.checkComplete()
		case <-r.globalC:
			s.rec.addFlag("UT")
			s.rec.setDetails("upstream_response_timeout")
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// ---- one attempt ------------------------------------------------------

type resultKind int

const (
	resultGone resultKind = iota
	resultHeaders
	resultReset
	resultLocalReply
	resultPerTryTimeout
	resultGlobalTimeout
)

type attemptResult struct {
	kind              resultKind
	at                *attemptRun
	headers           *Headers
	end               bool
	reason, transport string
	lr                localReply
}

// attemptRun is one UpstreamRequest: its upstream filter chain and codec.
type attemptRun struct {
	r      *router
	h      *host
	a      *UpstreamAttempt
	ctx    context.Context
	cancel context.CancelFunc

	resp    <-chan frame      // response frames after the upstream filters
	replies <-chan localReply // local replies of the upstream filters
	taken   chan *Headers     // the headers the codec sent

	mu                sync.Mutex
	reason, transport string // why the codec's request failed
	pendingHeld       bool
}

func (at *attemptRun) setReset(reason, transport string) {
	at.mu.Lock()
	at.reason, at.transport = reason, transport
	at.mu.Unlock()
}

func (at *attemptRun) resetReason() string {
	at.mu.Lock()
	defer at.mu.Unlock()
	return at.reason
}

// gotConn is the connection pool's onPoolReady: the attempt is no longer
// pending.
func (at *attemptRun) gotConn() {
	at.mu.Lock()
	held := at.pendingHeld
	at.pendingHeld = false
	at.mu.Unlock()
	if held {
		at.h.cluster.pending.release()
	}
}

// try runs one attempt to host h until its response headers come out of
// the upstream filter chain, or it fails.
func (r *router) try(h *host, a *UpstreamAttempt) attemptResult {
	s := r.s
	hc := h.cluster
	// The connection pool's circuit breakers (the host's cluster's).
	if !hc.requests.tryAcquire(hc.breakers.maxRequests) {
		return attemptResult{kind: resultReset, reason: resetOverflow}
	}
	if p := hc.pending.n.Load(); p > 0 && p >= hc.breakers.maxPending {
		hc.requests.release()
		return attemptResult{kind: resultReset, reason: resetOverflow}
	}
	hc.pending.n.Add(1)

	ctx, cancel := context.WithCancel(s.ctx)
	at := &attemptRun{r: r, h: h, a: a, ctx: ctx, cancel: cancel, taken: make(chan *Headers, 1), pendingHeld: true}
	r.mu.Lock()
	r.attempts = append(r.attempts, at)
	r.mu.Unlock()

	hdrs := r.base.Clone()
	if r.act.attemptCountRequest {
		hdrs.Set("x-envoy-attempt-count", strconv.Itoa(r.attempt))
	}
	if d := r.expectedTimeout(); d > 0 {
		hdrs.Set("x-envoy-expected-rq-timeout-ms", strconv.FormatInt(d.Milliseconds(), 10))
	}

	// The upstream filter chain: the route cluster's (Envoy builds it from
	// the router's cluster_, so an aggregate cluster's own http_filters,
	// not its members').
	src := make(chan frame, 16)
	codecIn, codecOut := (<-chan frame)(src), make(chan frame, 16)
	resp := (<-chan frame)(codecOut)
	// UpstreamRequest's constructor puts the attempt's host on the stream
	// info before the upstream filters run (upstream_request.cc).
	s.setUpstreamHost(h)
	if fl := r.cl.upstreamFilters; len(fl) > 0 {
		child := &stream{
			id: s.id, e: s.e, cfg: s.cfg, start: s.start, ctx: ctx, cancel: cancel, clientCtx: s.clientCtx,
			reqHeaders: hdrs.Clone(), downstream: s.downstream, replies: make(chan localReply, 1), rec: s.rec,
			parent: s, attempt: r.attempt, upstreamHost: h,
		}
		at.replies = child.replies
		insts := make([]filterInstance, len(fl))
		next := codecIn
		for i, f := range fl {
			insts[i] = f.instance(child)
			o := make(chan frame, 16)
			r.runStage(child, insts[i].decode, next, o)
			next = o
		}
		codecIn = next
		enc := resp
		for i := len(insts) - 1; i >= 0; i-- {
			o := make(chan frame, 16)
			r.runStage(child, insts[i].encode, enc, o)
			enc = o
		}
		resp = enc
	}
	at.resp = resp
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		r.feed(at, hdrs, src)
	}()
	go func() {
		defer r.wg.Done()
		r.codec(at, codecIn, codecOut)
	}()

	// Wait for the response headers. The per-try timeout runs from when
	// both the attempt has started and the request is complete.
	var perTry *time.Timer
	var perTryC <-chan time.Time
	defer func() {
		if perTry != nil {
			perTry.Stop()
		}
	}()
	armPerTry := func() {
		if perTry == nil && r.perTry > 0 && r.body.isComplete() {
			perTry = time.NewTimer(r.perTry)
			perTryC = perTry.C
		}
	}
	armPerTry()
	for {
		select {
		case f, ok := <-at.resp:
			if !ok {
				select {
				case lr := <-at.replies:
					cancel()
					return attemptResult{kind: resultLocalReply, at: at, lr: lr}
				default:
				}
				if s.ctx.Err() != nil {
					return attemptResult{kind: resultGone}
				}
				at.mu.Lock()
				reason, transport := at.reason, at.transport
				at.mu.Unlock()
				if reason == "" {
					reason = resetRemoteReset
				}
				cancel()
				return attemptResult{kind: resultReset, at: at, reason: reason, transport: transport}
			}
			if f.headers == nil {
				continue // not expected: the codec sends headers first
			}
			return attemptResult{kind: resultHeaders, at: at, headers: f.headers, end: f.end}
		case lr := <-at.replies:
			cancel()
			return attemptResult{kind: resultLocalReply, at: at, lr: lr}
		case <-r.completeC():
			r.checkComplete()
			armPerTry()
		case <-perTryC:
			cancel()
			return attemptResult{kind: resultPerTryTimeout, at: at}
		case <-r.globalC:
			cancel()
			return attemptResult{kind: resultGlobalTimeout, at: at}
		case <-s.ctx.Done():
			cancel()
			return attemptResult{kind: resultGone}
		}
	}
}

// runStage runs one upstream filter stage on the attempt's stream.
func (r *router) runStage(child *stream, st stage, in <-chan frame, out chan<- frame) {
	if st == nil {
		st = passThrough
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		st(child, in, out)
	}()
}

// feed sends the attempt its request: the headers, then the body as
// buffered so far and as it keeps arriving.
func (r *router) feed(at *attemptRun, h *Headers, out chan<- frame) {
	defer close(out) // after end of stream nobody reads; before, a reset
	send := func(f frame) bool {
		select {
		case out <- f:
			return true
		case <-at.ctx.Done():
			return false
		}
	}
	headersEnd := r.body.isComplete() && r.body.empty()
	if !send(frame{headers: h, end: headersEnd}) || headersEnd {
		return
	}
	cursor := 0
	for {
		data, end, ok := r.body.next(at.ctx, &cursor)
		if !ok {
			return // the downstream went away mid-body: a reset
		}
		if !send(frame{data: data, end: end}) || end {
			return
		}
	}
}

// codec is the upstream codec filter: it sends the request to the host
// and turns the response into frames, one per read.
func (r *router) codec(at *attemptRun, in <-chan frame, out chan<- frame) {
	s := r.s
	h := at.h
	defer close(out)
	defer h.cluster.requests.release()
	defer at.gotConn() // releases the pending slot if still held
	var hf frame
	select {
	case f, ok := <-in:
		if !ok {
			return
		}
		hf = f
	case <-at.ctx.Done():
		return
	}
	hdrs := hf.headers
	// The HTTP request's own context: cancelling it when the codec is done
	// must not end the attempt's filter chain, which may still be
	// processing the response.
	ctx, cancel := context.WithCancel(at.ctx)
	defer cancel()
	// auto_host_rewrite, per attempt, as onPoolReady does.
	if r.act.autoHostRewrite && h.hostname != "" {
		updateAuthority(hdrs, h.hostname, r.act.appendXFH)
	}
	req, err := http.NewRequestWithContext(ctx, hdrs.Value(":method"), "http://"+h.addr+hdrs.Value(":path"), nil)
	if err != nil {
		at.setReset(resetLocalReset, "invalid request: "+err.Error())
		return
	}
	hdrs.toHTTP(req.Header)
	req.Host = hdrs.Value(":authority")
	u := &UpstreamRequest{Cluster: h.cluster.name, Endpoint: h.addr, Method: req.Method, Path: hdrs.Value(":path"), Headers: hdrs.Clone()}
	s.rec.updateAttempt(func() {
		at.a.Request = u
		s.rec.Upstream = u
	})
	at.taken <- hdrs

	bodyDone := make(chan struct{})
	var pr *io.PipeReader
	// stopBody ends the request body goroutine, even mid-write.
	stopBody := func() {
		cancel()
		if pr != nil {
			pr.CloseWithError(context.Canceled)
		}
		<-bodyDone
	}
	if hf.end {
		req.Body = http.NoBody
		req.ContentLength = 0
		close(bodyDone)
	} else {
		var pw *io.PipeWriter
		pr, pw = io.Pipe()
		req.Body = pr
		req.ContentLength = -1
		if cl, err := strconv.ParseInt(hdrs.Value("content-length"), 10, 64); err == nil {
			req.ContentLength = cl
		}
		go func() {
			defer close(bodyDone)
			for {
				select {
				case f, ok := <-in:
					if !ok {
						pw.CloseWithError(errors.New("downstream reset"))
						return
					}
					if len(f.data) > 0 {
						s.rec.appendUpstreamBody(u, f.data)
						if _, err := pw.Write(f.data); err != nil {
							return
						}
					}
					if f.end {
						pw.Close()
						return
					}
				case <-ctx.Done():
					pw.CloseWithError(ctx.Err())
					return
				}
			}
		}()
	}
	var connected atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) {
			connected.Store(true)
			at.gotConn()
		},
	}))
	resp, err := h.cluster.client.Do(req)
	if err != nil {
		stopBody()
		at.setReset(classifyError(err, connected.Load(), h.cluster.http2))
		return
	}
	defer resp.Body.Close()
	defer stopBody()

	rh := NewHeaders(":status", strconv.Itoa(resp.StatusCode))
	for k, vs := range resp.Header {
		for _, v := range vs {
			rh.Add(strings.ToLower(k), v)
		}
	}
	if resp.ContentLength > 0 {
		if _, ok := rh.Get("content-length"); !ok {
			rh.Set("content-length", strconv.FormatInt(resp.ContentLength, 10))
		}
	}
	noBody := resp.ContentLength == 0 && len(resp.Trailer) == 0
	send := func(f frame) bool {
		select {
		case out <- f:
			return true
		case <-at.ctx.Done():
			return false
		}
	}
	if !send(frame{headers: rh, end: noBody}) || noBody {
		return
	}
	// Stream the body: one frame per read, as Envoy's codec delivers data.
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		f := frame{}
		if n > 0 {
			f.data = append([]byte(nil), buf[:n]...)
		}
		if err == io.EOF {
			if len(resp.Trailer) > 0 {
				if n > 0 && !send(f) {
					return
				}
				t := &Headers{}
				for k, vs := range resp.Trailer {
					for _, v := range vs {
						t.Add(strings.ToLower(k), v)
					}
				}
				f = frame{trailers: t}
			}
			f.end = true
		} else if err != nil {
			reason, _ := classifyError(err, true, h.cluster.http2)
			at.setReset(reason, "")
			if n > 0 {
				send(f)
			}
			return // upstream reset mid-body: no end of stream
		}
		if n == 0 && !f.end && f.trailers == nil {
			continue
		}
		if !send(f) || f.end {
			return
		}
	}
}

// classifyError maps a Go transport error to Envoy's reset reason and
// transport failure reason.
func classifyError(err error, connected, http2 bool) (string, string) {
	// A failed upstream TLS handshake: the connection closes as a remote
	// close (ConnectionImpl closes with RemoteClose when the transport
	// socket's doRead/doWrite asks to close), so remote connection failure
	// with the TLS socket's failure reason.
	var te *tlsError
	if !connected && errors.As(err, &te) {
		return resetRemoteConnectionFailure, te.reason
	}
	if !connected {
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
			return resetConnectionTimeout, ""
		}
		var errno syscall.Errno
		if errors.As(err, &errno) {
			msg := errno.Error()
			if msg != "" {
				msg = strings.ToUpper(msg[:1]) + msg[1:]
			}
			return resetRemoteConnectionFailure, "delayed connect error: " + msg
		}
		return resetRemoteConnectionFailure, err.Error()
	}
	if http2 {
		return resetRemoteReset, ""
	}
	return resetConnectionTermination, ""
}

// ---- the request body, buffered for retries ------------------------------

// reqBody is the request body as the router receives it. While retries are
// possible it is kept whole (Envoy's decoding buffer), so that a retry can
// send it again; past the buffer limit retries are given up.
type reqBody struct {
	mu          sync.Mutex
	chunks      [][]byte
	size        int
	limit       int
	retain      bool
	complete    bool
	gone        bool
	over        bool
	completedTS time.Time
	notify      chan struct{} // closed and replaced on every change
	completeCh  chan struct{}
	overflowC   chan struct{}
}

func newReqBody(retain bool, limit int) *reqBody {
	return &reqBody{retain: retain, limit: limit, notify: make(chan struct{}), completeCh: make(chan struct{}), overflowC: make(chan struct{})}
}

// read stores the request frames from the decode chain until end of
// stream, or until the router is done (stop): a router that ends with a
// reset must not wait for the rest of the request.
func (b *reqBody) read(s *stream, in <-chan frame, idle *idleTimer, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case f, ok := <-in:
			if !ok {
				b.mu.Lock()
				b.gone = true
				b.changed()
				b.mu.Unlock()
				return
			}
			idle.touch()
			b.add(f.data, f.end) // request trailers are not forwarded
			if f.end {
				s.disarmRequestTimer()
				return
			}
		case <-s.ctx.Done():
			return
		}
	}
}

func (b *reqBody) add(data []byte, end bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(data) > 0 {
		if b.retain && b.size+len(data) > b.limit {
			// The request is larger than should be retried.
			b.retain, b.over = false, true
			close(b.overflowC)
		}
		b.chunks = append(b.chunks, data)
		b.size += len(data)
	}
	if end && !b.complete {
		b.complete = true
		b.completedTS = time.Now()
		close(b.completeCh)
	}
	b.changed()
}

func (b *reqBody) changed() {
	close(b.notify)
	b.notify = make(chan struct{})
}

// next returns the chunk at *i (advancing it), waiting for one; end is set
// on the last. ok is false if the downstream went away or ctx ended.
func (b *reqBody) next(ctx context.Context, i *int) (data []byte, end, ok bool) {
	for {
		b.mu.Lock()
		if *i < len(b.chunks) {
			data = b.chunks[*i]
			if !b.retain {
				b.chunks[*i] = nil
			}
			*i++
			end = b.complete && *i == len(b.chunks)
			b.mu.Unlock()
			return data, end, true
		}
		if b.complete {
			b.mu.Unlock()
			return nil, true, true
		}
		if b.gone {
			b.mu.Unlock()
			return nil, false, false
		}
		wait := b.notify
		b.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, false, false
		}
	}
}

func (b *reqBody) isComplete() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.complete
}

func (b *reqBody) empty() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.size == 0
}

func (b *reqBody) overflowed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.over
}

func (b *reqBody) completedAt() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.completedTS
}
