package mockllm

import (
	"compress/gzip"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// endpoint is an API the mock speaks.
type endpoint int

const (
	epNone endpoint = iota
	epChat
	epCompletions
	epEmbeddings
	epResponses
	epMessages
	epCountTokens // Anthropic POST /v1/messages/count_tokens
)

// route is where a request path leads.
type route struct {
	ep         endpoint
	deployment string // Azure OpenAI paths only
}

func (rt route) azure() bool     { return rt.deployment != "" }
func (rt route) anthropic() bool { return rt.ep == epMessages || rt.ep == epCountTokens }
func (rt route) dialect() dialect {
	if rt.anthropic() {
		return anthropic
	}
	return openAI
}

// dialect is the error and credential convention of an endpoint: the API
// family, as Sluice's llmapi.Dialect is. It is this package's own on
// purpose (see the package doc: the mock shares no code with the gateway
// it tests).
type dialect uint8

const (
	openAI dialect = iota
	anthropic
)

const azurePrefix = "/openai/deployments/"

func parseRoute(path string) route {
	switch path {
	case "/v1/chat/completions":
		return route{ep: epChat}
	case "/v1/completions":
		return route{ep: epCompletions}
	case "/v1/embeddings":
		return route{ep: epEmbeddings}
	case "/v1/responses":
		return route{ep: epResponses}
	case "/v1/messages":
		return route{ep: epMessages}
	case "/v1/messages/count_tokens":
		return route{ep: epCountTokens}
	}
	if rest, ok := strings.CutPrefix(path, azurePrefix); ok {
		deployment, op, ok := strings.Cut(rest, "/")
		if !ok || deployment == "" {
			return route{}
		}
		switch op {
		case "chat/completions":
			return route{ep: epChat, deployment: deployment}
		case "completions":
			return route{ep: epCompletions, deployment: deployment}
		case "embeddings":
			return route{ep: epEmbeddings, deployment: deployment}
		}
	}
	return route{}
}

// ServeHTTP answers one request: record it, check the path, method,
// controls and credentials, then inject an error, replay a cassette or
// synthesise a reply.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n") // a failed write means the client left
		return
	}
	s.requests.Add(1)
	for k, v := range s.opts.ResponseHeaders {
		w.Header()[http.CanonicalHeaderKey(k)] = slices.Clone(v)
	}
	body, readErr := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	s.record(r, body)
	rt := parseRoute(r.URL.Path)
	d := rt.dialect()
	if rt.ep == epNone && strings.HasPrefix(r.URL.Path, "/v1/messages") {
		d = anthropic
	}
	s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "bytes", len(body))

	if readErr != nil {
		var tooBig *http.MaxBytesError
		if errors.As(readErr, &tooBig) {
			s.fail(w, r, nil, d, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("request body exceeds %d bytes", tooBig.Limit))
			return
		}
		s.log.Debug("reading request body", "err", readErr)
		return // the client is gone: nobody to answer
	}
	if rt.ep == epNone {
		s.fail(w, r, nil, d, http.StatusNotFound, "", fmt.Sprintf("mock: no endpoint at %s", r.URL.Path))
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.fail(w, r, nil, d, http.StatusMethodNotAllowed, "", fmt.Sprintf("mock: %s needs POST, not %s", r.URL.Path, r.Method))
		return
	}
	c, err := s.controls(r.Header)
	if err != nil {
		s.fail(w, r, nil, d, http.StatusBadRequest, "mock_control", err.Error())
		return
	}
	if sleep(r.Context(), c.latency) != nil {
		return
	}
	if !s.authorize(w, r, rt, &c) {
		s.rejected.Add(1)
		return
	}
	if c.status != 0 {
		s.fail(w, r, &c, d, c.status, "", fmt.Sprintf("mock: injected error (status %d: x-mock-status or Options.Status)", c.status))
		return
	}
	if e := s.match(r.Method, r.URL.Path, body); e != nil {
		s.replayTo(w, r, &c, rt, e)
		return
	}
	s.synthesize(w, r, &c, rt, body)
}

// authorize checks the credential configured for rt's dialect and
// answers the request itself when it fails.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, rt route, c *controls) bool {
	switch {
	case rt.anthropic():
		if s.opts.AnthropicAPIKey == "" {
			return true
		}
		if !equalKey(r.Header.Get("X-Api-Key"), s.opts.AnthropicAPIKey) {
			s.fail(w, r, c, anthropic, http.StatusUnauthorized, "", "invalid x-api-key")
			return false
		}
		if r.Header.Get("Anthropic-Version") == "" {
			s.fail(w, r, c, anthropic, http.StatusBadRequest, "", "anthropic-version: header is required")
			return false
		}
	case rt.azure():
		if s.opts.AzureAPIKey == "" {
			return true
		}
		if !equalKey(r.Header.Get("Api-Key"), s.opts.AzureAPIKey) {
			s.fail(w, r, c, openAI, http.StatusUnauthorized, "invalid_api_key",
				"Access denied due to invalid subscription key or wrong API endpoint (mock: api-key header missing or wrong).")
			return false
		}
	default:
		if s.opts.APIKey == "" {
			return true
		}
		auth := r.Header.Get("Authorization")
		key, ok := strings.CutPrefix(auth, "Bearer ")
		if !ok || !equalKey(key, s.opts.APIKey) {
			msg := "Incorrect API key provided (mock: authorization: Bearer <key> missing or wrong)."
			if auth == "" {
				msg = "You didn't provide an API key (mock: authorization: Bearer <key> expected)."
			}
			s.fail(w, r, c, openAI, http.StatusUnauthorized, "invalid_api_key", msg)
			return false
		}
	}
	return true
}

// equalKey compares a presented key with the configured one in constant
// time (for their common length).
func equalKey(got, want string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// openAIError is OpenAI's error body.
type openAIError struct {
	Error openAIErrorBody `json:"error"`
}

type openAIErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// anthropicError is Anthropic's error body (also the data of an
// in-stream "error" event).
type anthropicError struct {
	Type  string             `json:"type"`
	Error anthropicErrorBody `json:"error"`
}

type anthropicErrorBody struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// errorBody renders an error in dialect d. code overrides the OpenAI
// code derived from status; param names the offending request field.
func errorBody(d dialect, status int, code, param, msg string) []byte {
	if d == anthropic {
		return mustJSON(anthropicError{Type: "error", Error: anthropicErrorBody{Type: anthropicErrorType(status), Message: msg}})
	}
	typ, defCode := openAIErrorType(status)
	if code == "" {
		code = defCode
	}
	return mustJSON(openAIError{Error: openAIErrorBody{Message: msg, Type: typ, Param: strOrNil(param), Code: strOrNil(code)}})
}

func openAIErrorType(status int) (typ, code string) {
	switch {
	case status == http.StatusUnauthorized:
		return "invalid_request_error", "invalid_api_key"
	case status == http.StatusNotFound:
		return "invalid_request_error", "model_not_found"
	case status == http.StatusTooManyRequests:
		return "requests", "rate_limit_exceeded"
	case status >= 500:
		return "server_error", ""
	}
	return "invalid_request_error", ""
}

func anthropicErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// fail answers with an error in dialect d. c, when not nil, applies the
// request's delivery controls (first byte, split, gzip, retry-after).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, c *controls, d dialect, status int, code, msg string) {
	s.failParam(w, r, c, d, status, code, "", msg)
}

func (s *Server) failParam(w http.ResponseWriter, r *http.Request, c *controls, d dialect, status int, code, param, msg string) {
	if c == nil {
		c = &controls{abortAfter: -1, errorAfter: -1}
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	switch {
	case c.retryAfter != "":
		h.Set("Retry-After", c.retryAfter)
	case status == http.StatusTooManyRequests:
		h.Set("Retry-After", "1")
	}
	s.log.Debug("error reply", "path", r.URL.Path, "status", status)
	s.send(w, r, c, reply{status: status, body: errorBody(d, status, code, param, msg)})
}

// reply is a synthesised or replayed response: a body, or a stream of
// events.
type reply struct {
	status int
	body   []byte  // when events is nil
	events []event // a stream
	// errEvent ends the stream cleanly in place of the rest when
	// x-mock-error-after triggers.
	errEvent []byte
}

// event is one SSE event, already framed.
type event struct {
	data  []byte
	phase phase
}

// phase tells content events (the ones abort-after and error-after
// count) from the preamble and the terminal events.
type phase int

const (
	phasePre phase = iota
	phaseContent
	phasePost
)

// send writes rep with the request's delivery controls. The headers the
// caller set on w are kept.
func (s *Server) send(w http.ResponseWriter, r *http.Request, c *controls, rep reply) {
	o := &out{w: w, rc: http.NewResponseController(w), ctx: r.Context(), c: c}
	if rep.events == nil {
		cl := len(rep.body)
		if c.abortAfter >= 0 {
			cl = -1 // chunked, so a reset cannot be mistaken for a short body
		}
		if c.trailerName != "" {
			cl = -1 // HTTP/1.1 has trailers only in a chunked body
		}
		if o.begin(rep.status, cl) != nil {
			o.abort() // cut short (shutdown, client gone): never a clean end
		}
		if c.abortAfter >= 0 {
			n := min(c.abortAfter, max(len(rep.body)-1, 0))
			if o.write(rep.body[:n], true) != nil {
				return
			}
			o.abort()
		}
		if o.write(rep.body, false) != nil {
			return
		}
		_ = o.finish() // an error here means the client left
		return
	}
	if o.begin(rep.status, -1) != nil {
		o.abort() // cut short (shutdown, client gone): never a clean end
	}
	o.stream(rep)
}

// out writes one response body: first-byte delay, split pieces, gzip,
// flushes and aborts.
type out struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	ctx context.Context // the request's
	c   *controls
	gz  *gzip.Writer
	off int // body bytes written so far (before compression)
}

// begin sends the status line and headers (contentLength < 0: unknown).
func (o *out) begin(status, contentLength int) error {
	h := o.w.Header()
	if o.c.gzip && h.Get("Content-Encoding") == "" {
		h.Set("Content-Encoding", "gzip")
		o.gz = gzip.NewWriter(o.w)
		contentLength = -1
	}
	if contentLength >= 0 {
		h.Set("Content-Length", strconv.Itoa(contentLength))
	}
	if o.c.trailerName != "" {
		// Announced, so that net/http sends the body chunked even when it
		// would know its length (HTTP/1.1 has trailers only there).
		h.Set("Trailer", o.c.trailerName)
	}
	o.w.WriteHeader(status)
	if o.c.firstByte > 0 {
		if err := o.rc.Flush(); err != nil {
			return err
		}
		return sleep(o.ctx, o.c.firstByte)
	}
	return nil
}

// write writes p. With a split size it goes out in pieces that end at
// multiples of the split size (counted over the whole body) and at the
// end of p, each flushed on its own; otherwise it is flushed when flush
// is set.
func (o *out) write(p []byte, flush bool) error {
	if o.c.split <= 0 {
		if err := o.raw(p); err != nil {
			return err
		}
		if flush {
			return o.flush()
		}
		return nil
	}
	for len(p) > 0 {
		n := min(o.c.split-o.off%o.c.split, len(p))
		if err := o.raw(p[:n]); err != nil {
			return err
		}
		if err := o.flush(); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

func (o *out) raw(p []byte) error {
	var err error
	if o.gz != nil {
		_, err = o.gz.Write(p)
	} else {
		_, err = o.w.Write(p)
	}
	o.off += len(p)
	return err
}

func (o *out) flush() error {
	if o.gz != nil {
		if err := o.gz.Flush(); err != nil {
			return err
		}
	}
	return o.rc.Flush()
}

// finish ends a body that ends cleanly: it closes the compressor and sets
// the trailer the request asked for (announced in begin; net/http sends
// it after the body: the chunked encoding's trailer section on HTTP/1.1,
// a HEADERS frame ending the stream on HTTP/2).
func (o *out) finish() error {
	var err error
	if o.gz != nil {
		err = o.gz.Close()
	}
	if o.c.trailerName != "" {
		o.w.Header().Set(o.c.trailerName, o.c.trailerValue)
	}
	return err
}

// abort delivers what was written and then resets the connection (HTTP/1:
// closed without the terminating chunk; HTTP/2: RST_STREAM), through
// net/http's documented http.ErrAbortHandler panic.
func (o *out) abort() {
	_ = o.flush() // the connection is reset next either way
	panic(http.ErrAbortHandler)
}

// stream writes rep's events, pausing the interval before every event
// after the first and honouring abort-after and error-after: with N set,
// the stream stops after N content events, or after the last content
// event when there are no more than N.
func (o *out) stream(rep reply) {
	sent := 0
	due := func(n int, e event) bool {
		return n >= 0 && (e.phase == phaseContent && sent == n || e.phase == phasePost && sent <= n)
	}
	for i, e := range rep.events {
		if due(o.c.abortAfter, e) {
			o.abort()
		}
		if due(o.c.errorAfter, e) && rep.errEvent != nil {
			if o.write(rep.errEvent, true) == nil {
				_ = o.finish() // the stream is over either way
			}
			return
		}
		if i > 0 && sleep(o.ctx, o.c.interval) != nil {
			o.abort() // cut short (shutdown, client gone): never a clean end
		}
		if o.write(e.data, true) != nil {
			o.abort()
		}
		if e.phase == phaseContent {
			sent++
		}
	}
	_ = o.finish() // an error here means the client left
}

// sleep waits d or until ctx ends (then it returns ctx's error).
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// mustJSON marshals values of this package's own types, which cannot
// fail; a failure is a programming error.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("mockllm: marshal %T: %v", v, err))
	}
	return b
}

func strOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// sseData frames payload as an unnamed SSE event (the OpenAI style).
func sseData(crlf bool, payload []byte) []byte {
	nl := newline(crlf)
	b := make([]byte, 0, len(payload)+6+2*len(nl))
	b = append(b, "data: "...)
	b = append(b, payload...)
	b = append(b, nl...)
	return append(b, nl...)
}

// sseNamed frames payload as a named SSE event (the Anthropic and
// Responses API style).
func sseNamed(crlf bool, name string, payload []byte) []byte {
	nl := newline(crlf)
	b := make([]byte, 0, len(payload)+len(name)+13+3*len(nl))
	b = append(b, "event: "...)
	b = append(b, name...)
	b = append(b, nl...)
	b = append(b, "data: "...)
	b = append(b, payload...)
	b = append(b, nl...)
	return append(b, nl...)
}

func newline(crlf bool) string {
	if crlf {
		return "\r\n"
	}
	return "\n"
}
