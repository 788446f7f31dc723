package envoytest

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// AuthzNamespace is where ext_authz dynamic metadata lands.
const AuthzNamespace = "envoy.filters.http.ext_authz"

// Envoy's ext_authz defaults (ext_authz/config.h, ext_authz.h).
const (
	defaultAuthzTimeout  = 200 * time.Millisecond
	defaultAuthzOnError  = 403
	authzFailureHeader   = "x-envoy-auth-failure-mode-allowed"
	authzPartialHeader   = "x-envoy-auth-partial-body"
	defaultMaxAuthzBytes = 4096
)

type authzFilter struct {
	name    string
	cfg     *extauthzv3.ExtAuthz
	svc     *grpcService
	timeout time.Duration
	onError int
}

func (e *Emulator) newAuthzFilter(name string, c *extauthzv3.ExtAuthz, cfg *config) (httpFilter, error) {
	if c.GetHttpService() != nil {
		return nil, fmt.Errorf("http_service is not supported by the emulator; use grpc_service")
	}
	svc, err := e.dialService(c.GetGrpcService(), cfg)
	if err != nil {
		return nil, err
	}
	f := &authzFilter{name: name, cfg: c, svc: svc, timeout: defaultAuthzTimeout, onError: defaultAuthzOnError}
	if svc.timeoutSet {
		f.timeout = svc.timeout // 0 means no timeout
	}
	if s := int(c.GetStatusOnError().GetCode()); s != 0 {
		if s >= 100 && s <= 511 {
			f.onError = s
		}
	}
	return f, nil
}

func (f *authzFilter) filterName() string { return f.name }

// authzInstance carries the response headers an OK decision asked for
// from the decode stage to the encode stage.
type authzInstance struct {
	f  *authzFilter
	mu sync.Mutex
	// respHeaders are response_headers_to_add of an OK response.
	respHeaders []*corev3.HeaderValueOption
}

func (f *authzFilter) instance(s *stream) filterInstance {
	in := &authzInstance{f: f}
	return filterInstance{decode: in.decode, encode: in.encode}
}

func (a *authzInstance) decode(s *stream, in <-chan frame, out chan<- frame) {
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
	var held []frame
	// No route, no check (ext_authz.cc: skipped when no route matched).
	if s.currentRoute() != nil {
		var ok bool
		held, ok = a.bufferBody(s, hf, in)
		if !ok {
			return
		}
		if !a.check(s, hf.headers, held) {
			return
		}
	}
	if !s.send(out, hf) {
		return
	}
	for _, f := range held {
		if !s.send(out, f) {
			return
		}
	}
	if hf.end || (len(held) > 0 && held[len(held)-1].end) {
		return
	}
	pump(s, in, out)
}

// bufferBody collects the body when with_request_body asks for it.
func (a *authzInstance) bufferBody(s *stream, hf frame, in <-chan frame) ([]frame, bool) {
	wb := a.f.cfg.GetWithRequestBody()
	if wb == nil || hf.end {
		return nil, true
	}
	max := int(wb.GetMaxRequestBytes())
	if max == 0 {
		max = defaultMaxAuthzBytes
	}
	var held []frame
	size := 0
	for {
		select {
		case f, ok := <-in:
			if !ok {
				return nil, false
			}
			held = append(held, f)
			size += len(f.data)
			switch {
			case size > max && !wb.GetAllowPartialMessage():
				s.sendLocalReply(localReply{status: 413, body: []byte("Payload Too Large"), details: "request_payload_too_large"})
				return nil, false
			case size >= max && wb.GetAllowPartialMessage():
				return held, true // the check sees the first max bytes
			}
			if f.end {
				return held, true
			}
		case <-s.ctx.Done():
			return nil, false
		}
	}
}

// check calls the authorization service and applies its answer. It
// reports whether the request goes on.
func (a *authzInstance) check(s *stream, h *Headers, held []frame) bool {
	f := a.f
	req := f.buildCheck(s, h, held)
	ctx := s.ctx
	cancel := context.CancelFunc(func() {})
	if f.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, f.timeout)
	}
	start := time.Now()
	var resp *authv3.CheckResponse
	conn, upstream, err := f.svc.pick()
	if err == nil {
		resp, err = authv3.NewAuthorizationClient(conn).Check(ctx, req)
		f.svc.report(upstream, err, err == nil, s.ctx)
	}
	cancel()
	s.rec.addAuthz(AuthzCall{Filter: f.name, Request: req, Response: resp, Err: err})
	if s.ctx.Err() != nil {
		return false // the stream is gone; the call was cancelled with it
	}
	if err != nil {
		return a.onError(s, h, nil)
	}
	if !f.cfg.GetEnableDynamicMetadataIngestion().GetValue() && f.cfg.GetEnableDynamicMetadataIngestion() != nil {
		// Ingestion explicitly disabled.
	} else {
		md := resp.GetDynamicMetadata()
		if ok := resp.GetOkResponse(); ok != nil && ok.GetDynamicMetadata() != nil { //nolint:staticcheck // Envoy still honours it
			md = ok.GetDynamicMetadata()
		}
		if md != nil || resp.GetStatus().GetCode() == int32(codes.OK) {
			merged := &structpb.Struct{Fields: map[string]*structpb.Value{}}
			for k, v := range md.GetFields() {
				merged.Fields[k] = v
			}
			if resp.GetStatus().GetCode() == int32(codes.OK) {
				merged.Fields["ext_authz_duration"] = structpb.NewNumberValue(float64(time.Since(start).Milliseconds()))
			}
			s.mergeMetadata(AuthzNamespace, merged)
		}
	}
	switch {
	case resp.GetStatus().GetCode() == int32(codes.OK):
		a.applyOK(s, h, resp.GetOkResponse())
		return true
	case resp.GetErrorResponse() != nil:
		return a.onError(s, h, resp.GetErrorResponse())
	default:
		d := resp.GetDeniedResponse()
		status := 403
		if c := int(d.GetStatus().GetCode()); c > 0 {
			status = c
		}
		lr := localReply{status: status, headers: &Headers{}, body: []byte(d.GetBody()), details: "ext_authz_denied"}
		// Only non-append headers are used; existing ones of the same
		// name are replaced, repeats are kept (several set-cookie).
		replaced := map[string]bool{}
		for _, hv := range d.GetHeaders() {
			if hv.GetAppend().GetValue() {
				continue
			}
			k := strings.ToLower(hv.GetHeader().GetKey())
			if !replaced[k] {
				lr.headers.Del(k)
				replaced[k] = true
			}
			lr.headers.Add(k, hv.GetHeader().GetValue())
		}
		// Filter::onComplete, CheckStatus::Denied: "setResponseFlag must
		// be called before sendLocalReply" — UAEX (ext_authz.cc).
		s.rec.addFlag("UAEX")
		s.sendLocalReply(lr)
		return false
	}
}

// onError applies failure_mode_allow or answers status_on_error (or the
// error_response's status).
func (a *authzInstance) onError(s *stream, h *Headers, er *authv3.DeniedHttpResponse) bool {
	if a.f.cfg.GetFailureModeAllow() {
		if a.f.cfg.GetFailureModeAllowHeaderAdd() {
			h.Set(authzFailureHeader, "true")
		}
		return true
	}
	status := a.f.onError
	lr := localReply{status: status, details: "ext_authz_error"}
	// CheckStatus::Error without failure_mode_allow: UAEX, as a denial.
	s.rec.addFlag("UAEX")
	if er != nil {
		if c := int(er.GetStatus().GetCode()); c > 0 {
			lr.status = c
		}
		lr.body = []byte(er.GetBody())
		lr.headers = &Headers{}
		for _, hv := range er.GetHeaders() {
			if !hv.GetAppend().GetValue() {
				lr.headers.Add(hv.GetHeader().GetKey(), hv.GetHeader().GetValue())
			}
		}
	}
	s.sendLocalReply(lr)
	return false
}

// applyOK applies an OK response to the request headers
// (envoy-protocol.md §2: values from `value`; append=true is an appendCopy
// that is skipped when the header is absent; otherwise setCopy).
func (a *authzInstance) applyOK(s *stream, h *Headers, ok *authv3.OkHttpResponse) {
	mutated := false
	for _, hv := range ok.GetHeaders() {
		k := strings.ToLower(hv.GetHeader().GetKey())
		v := hv.GetHeader().GetValue()
		if hv.GetAppend().GetValue() {
			if _, present := h.Get(k); present {
				h.AppendCopy(k, v)
				mutated = true
			}
			continue
		}
		h.Set(k, v)
		mutated = true
	}
	for _, k := range ok.GetHeadersToRemove() {
		k = strings.ToLower(k)
		if strings.HasPrefix(k, ":") || k == "host" {
			continue
		}
		if _, present := h.Get(k); present {
			h.Del(k)
			mutated = true
		}
	}
	if len(ok.GetQueryParametersToSet()) > 0 || len(ok.GetQueryParametersToRemove()) > 0 {
		path := h.Value(":path")
		p, rawQuery, _ := strings.Cut(path, "?")
		q, _ := url.ParseQuery(rawQuery)
		for _, k := range ok.GetQueryParametersToRemove() {
			q.Del(k)
		}
		for _, qp := range ok.GetQueryParametersToSet() {
			q.Set(qp.GetKey(), qp.GetValue())
		}
		if enc := q.Encode(); enc != "" {
			p += "?" + enc
		}
		h.Set(":path", p)
		mutated = true
	}
	a.mu.Lock()
	a.respHeaders = ok.GetResponseHeadersToAdd()
	a.mu.Unlock()
	if mutated && a.f.cfg.GetClearRouteCache() {
		s.clearRouteCache()
	}
}

// encode applies response_headers_to_add at encodeHeaders.
func (a *authzInstance) encode(s *stream, in <-chan frame, out chan<- frame) {
	defer close(out)
	for {
		select {
		case f, ok := <-in:
			if !ok {
				return
			}
			if f.headers != nil {
				a.mu.Lock()
				add := a.respHeaders
				a.mu.Unlock()
				for _, hv := range add {
					applyResponseHeader(f.headers, hv)
				}
			}
			if !s.send(out, f) || f.end {
				return
			}
		case <-s.ctx.Done():
			return
		}
	}
}

// applyResponseHeader follows ext_authz's response_headers_to_add rules:
// `append` set decides (true add, false set); otherwise append_action.
func applyResponseHeader(h *Headers, hv *corev3.HeaderValueOption) {
	k, v := strings.ToLower(hv.GetHeader().GetKey()), hv.GetHeader().GetValue()
	if hv.GetAppend() != nil {
		if hv.GetAppend().GetValue() {
			h.Add(k, v)
		} else {
			h.Set(k, v)
		}
		return
	}
	_, present := h.Get(k)
	switch hv.GetAppendAction() {
	case corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD:
		h.Add(k, v)
	case corev3.HeaderValueOption_ADD_IF_ABSENT:
		if !present {
			h.Add(k, v)
		}
	case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:
		if present {
			h.Set(k, v)
		}
	case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD:
		h.Set(k, v)
	}
}

// buildCheck builds the CheckRequest as check_request_utils.cc does.
func (f *authzFilter) buildCheck(s *stream, h *Headers, held []frame) *authv3.CheckRequest {
	hr := &authv3.AttributeContext_HttpRequest{
		Id:       strconv.FormatUint(s.id, 10),
		Method:   h.Value(":method"),
		Path:     h.Value(":path"),
		Host:     h.Value(":authority"),
		Scheme:   h.Value(":scheme"),
		Protocol: s.downstream.protocol,
	}
	if f.cfg.GetEncodeRawHeaders() {
		hm := &corev3.HeaderMap{}
		for _, e := range h.Entries() {
			hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: e.Key, RawValue: []byte(e.Value)})
		}
		hr.HeaderMap = hm
	} else {
		hr.Headers = map[string]string{}
		for _, e := range h.Entries() {
			if v, ok := hr.Headers[e.Key]; ok {
				hr.Headers[e.Key] = v + "," + sanitizeUTF8(e.Value)
			} else {
				hr.Headers[e.Key] = sanitizeUTF8(e.Value)
			}
		}
	}
	var body []byte
	for _, fr := range held {
		body = append(body, fr.data...)
	}
	hr.Size = int64(len(body))
	if wb := f.cfg.GetWithRequestBody(); wb != nil && len(held) > 0 {
		max := int(wb.GetMaxRequestBytes())
		if max == 0 {
			max = defaultMaxAuthzBytes
		}
		partial := len(body) > max || !held[len(held)-1].end
		if len(body) > max {
			body = body[:max]
		}
		if wb.GetPackAsBytes() {
			hr.RawBody = body
		} else {
			hr.Body = sanitizeUTF8(string(body))
		}
		if hr.Headers != nil {
			hr.Headers[authzPartialHeader] = strconv.FormatBool(partial)
		}
	}
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:      &authv3.AttributeContext_Peer{Address: sockAddress(s.downstream.remoteIP, s.downstream.remotePort)},
		Destination: &authv3.AttributeContext_Peer{Address: sockAddress(s.downstream.localIP, s.downstream.localPort)},
		Request:     &authv3.AttributeContext_Request{Time: timestamppb.New(s.start), Http: hr},
	}}
	if rt := s.currentRoute(); rt != nil {
		req.Attributes.ContextExtensions = rt.contextExtensions(f.name)
	}
	if ns := f.cfg.GetMetadataContextNamespaces(); len(ns) > 0 {
		mc := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
		for _, n := range ns {
			if m := s.metadata(n); m != nil {
				mc.FilterMetadata[n] = m
			}
		}
		req.Attributes.MetadataContext = mc
	}
	return req
}

func sockAddress(ip string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

// sanitizeUTF8 replaces bytes that are not valid UTF-8 with '!', as
// Envoy's MessageUtil::sanitizeUtf8String does.
func sanitizeUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 {
			b = append(b, '!')
			i++
			continue
		}
		b = append(b, s[i:i+n]...)
		i += n
	}
	return string(b)
}
