package wiredecode

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protowire"
)

// The ProcessingRequest fields (external_processor.proto) the decoder
// treats apart.
const (
	fieldRequestHeaders  protowire.Number = 2
	fieldMetadataContext protowire.Number = 8
	fieldAttributes      protowire.Number = 9
)

// contextField is one metadata_context or attributes field, kept to be
// decoded after the others.
type contextField struct {
	num protowire.Number
	typ protowire.Type
	v   []byte // the value, after the tag
}

// ProcessingRequest decodes b into r (replacing what r held) as
// proto.Unmarshal does, and reports whether it could; when it reports
// false r holds garbage and the caller must decode b otherwise.
//
// With skipContext, a b that holds no request_headers field is decoded
// without its metadata_context and attributes fields, which are stepped
// over whatever they hold (extproc.Codec's saving; see its comment):
// the result is then proto.Unmarshal's for b less those fields, and b
// need only be a well-formed sequence of fields around them.
//
// It decodes every field Envoy sends: the request oneof (request and
// response headers, bodies and trailers), metadata_context (its
// filter_metadata), attributes, observability_mode and protocol_config.
// flow_control_init and client_window_update, which Envoy does not
// implement, are left to proto.Unmarshal.
func ProcessingRequest(b []byte, r *extprocsvc.ProcessingRequest, skipContext bool) bool {
	r.Reset()
	d := &msg{src: b}
	var buf [4]contextField
	ctx := buf[:0]
	headers := false
	for len(b) > 0 {
		num, typ, n := tag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if num == fieldMetadataContext || num == fieldAttributes {
			// Decoded, or not, once it is known whether b holds
			// request_headers; the order of fields of different numbers
			// does not matter, and ctx keeps that of each number's.
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return false
			}
			ctx = append(ctx, contextField{num, typ, b[:n]})
			b = b[n:]
			continue
		}
		if num == 10 {
			if typ != varintType {
				return false
			}
			x, n := varint(b)
			if n < 0 {
				return false
			}
			r.ObservabilityMode = x != 0
			b = b[n:]
			continue
		}
		if typ != bytesType {
			return false
		}
		e, n := delimited(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		var ok bool
		switch num {
		case fieldRequestHeaders:
			headers = true
			w := oneof[extprocsvc.ProcessingRequest_RequestHeaders](r.Request)
			ok = d.decodeHTTPHeaders(e, orNew(&w.RequestHeaders))
			r.Request = w
		case 3:
			w := oneof[extprocsvc.ProcessingRequest_ResponseHeaders](r.Request)
			ok = d.decodeHTTPHeaders(e, orNew(&w.ResponseHeaders))
			r.Request = w
		case 4:
			w := oneof[extprocsvc.ProcessingRequest_RequestBody](r.Request)
			ok = d.decodeHTTPBody(e, orNew(&w.RequestBody))
			r.Request = w
		case 5:
			w := oneof[extprocsvc.ProcessingRequest_ResponseBody](r.Request)
			ok = d.decodeHTTPBody(e, orNew(&w.ResponseBody))
			r.Request = w
		case 6:
			w := oneof[extprocsvc.ProcessingRequest_RequestTrailers](r.Request)
			ok = d.decodeHTTPTrailers(e, orNew(&w.RequestTrailers))
			r.Request = w
		case 7:
			w := oneof[extprocsvc.ProcessingRequest_ResponseTrailers](r.Request)
			ok = d.decodeHTTPTrailers(e, orNew(&w.ResponseTrailers))
			r.Request = w
		case 11:
			if r.ProtocolConfig == nil {
				r.ProtocolConfig = &extprocsvc.ProtocolConfiguration{}
			}
			ok = d.decodeProtocolConfig(e, r.ProtocolConfig)
		}
		if !ok {
			return false
		}
	}
	if skipContext && !headers {
		return true
	}
	for _, f := range ctx {
		if f.typ != bytesType {
			return false
		}
		e, _ := delimited(f.v) // ConsumeFieldValue checked it
		if f.num == fieldMetadataContext {
			if r.MetadataContext == nil {
				r.MetadataContext = &corev3.Metadata{}
			}
			if !d.decodeMetadata(e, r.MetadataContext, 1) {
				return false
			}
		} else if !d.decodeStructMap(e, &r.Attributes, 1) {
			return false
		}
	}
	return true
}

// decodeHTTPHeaders merges the HttpHeaders b encodes into m: headers
// (1), the deprecated attributes (2), end_of_stream (3).
func (d *msg) decodeHTTPHeaders(b []byte, m *extprocsvc.HttpHeaders) bool {
	for len(b) > 0 {
		num, typ, n := tag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == 1 && typ == bytesType:
			var e []byte
			if e, n = delimited(b); n < 0 {
				return false
			}
			if m.Headers == nil {
				m.Headers = &corev3.HeaderMap{}
			}
			if !d.decodeHeaderMap(e, m.Headers) {
				return false
			}
		case num == 3 && typ == varintType:
			var x uint64
			if x, n = varint(b); n >= 0 {
				m.EndOfStream = x != 0
			}
		case num == 2 && typ == bytesType:
			var e []byte
			if e, n = delimited(b); n < 0 {
				return false
			}
			if !d.decodeStructMap(e, &m.Attributes, 2) { //nolint:staticcheck // decoded as proto.Unmarshal does
				return false
			}
		default:
			return false
		}
		if n < 0 {
			return false
		}
		b = b[n:]
	}
	return true
}

// decodeHTTPBody merges the HttpBody b encodes into m: body (1),
// end_of_stream (2), end_of_stream_without_message (3),
// grpc_message_compressed (4), drain_complete (5).
func (d *msg) decodeHTTPBody(b []byte, m *extprocsvc.HttpBody) bool {
	for len(b) > 0 {
		num, typ, n := tag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if num == 1 {
			if typ != bytesType {
				return false
			}
			if m.Body, n = d.bytesValue(b); n < 0 {
				return false
			}
			b = b[n:]
			continue
		}
		if typ != varintType {
			return false
		}
		x, n := varint(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch num {
		case 2:
			m.EndOfStream = x != 0
		case 3:
			m.EndOfStreamWithoutMessage = x != 0
		case 4:
			m.GrpcMessageCompressed = x != 0
		case 5:
			m.DrainComplete = x != 0
		default:
			return false
		}
	}
	return true
}

// decodeHTTPTrailers merges the HttpTrailers b encodes into m: trailers
// (1).
func (d *msg) decodeHTTPTrailers(b []byte, m *extprocsvc.HttpTrailers) bool {
	return messageFields(b, func(num protowire.Number, e []byte) bool {
		if num != 1 {
			return false
		}
		if m.Trailers == nil {
			m.Trailers = &corev3.HeaderMap{}
		}
		if !d.decodeHeaderMap(e, m.Trailers) {
			return false
		}
		return true
	})
}

// decodeProtocolConfig merges the ProtocolConfiguration b encodes into
// m: request_body_mode (1), response_body_mode (2),
// send_body_without_waiting_for_header_response (3).
func (d *msg) decodeProtocolConfig(b []byte, m *extprocsvc.ProtocolConfiguration) bool {
	for len(b) > 0 {
		num, typ, n := tag(b)
		if n < 0 || typ != varintType {
			return false
		}
		b = b[n:]
		x, n := varint(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch num {
		case 1:
			m.RequestBodyMode = extprocfilterv3.ProcessingMode_BodySendMode(int32(x))
		case 2:
			m.ResponseBodyMode = extprocfilterv3.ProcessingMode_BodySendMode(int32(x))
		case 3:
			m.SendBodyWithoutWaitingForHeaderResponse = x != 0
		default:
			return false
		}
	}
	return true
}
