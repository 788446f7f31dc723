package wiredecode

import (
	"google.golang.org/protobuf/encoding/protowire"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// CheckRequest decodes b into r (replacing what r held) as proto.Unmarshal
// does, and reports whether it could; when it reports false r holds
// garbage and the caller must decode b otherwise.
//
// It decodes every field of the AttributeContext Envoy builds
// (check_request_utils.cc, CheckRequestUtils::createHttpCheck): the
// source and destination peers, the request (time and HTTP request,
// headers map and header_map included), context_extensions,
// metadata_context and route_metadata_context (their filter_metadata)
// and tls_session.
func CheckRequest(b []byte, r *authv3.CheckRequest) bool {
	r.Reset()
	d := &msg{src: b}
	return messageFields(b, func(num protowire.Number, e []byte) bool {
		if num != 1 {
			return false
		}
		if r.Attributes == nil {
			r.Attributes = &authv3.AttributeContext{}
		}
		if !d.decodeAttributeContext(e, r.Attributes) {
			return false
		}
		return true
	})
}

// decodeAttributeContext merges the AttributeContext b encodes into m:
// source (1), destination (2), request (4), context_extensions (10),
// metadata_context (11), tls_session (12), route_metadata_context (13).
func (d *msg) decodeAttributeContext(b []byte, m *authv3.AttributeContext) bool {
	for len(b) > 0 {
		num, typ, n := tag(b)
		if n < 0 || typ != bytesType {
			return false
		}
		b = b[n:]
		if num == 10 {
			if n = d.stringMapEntry(b, &m.ContextExtensions, num); n < 0 {
				return false
			}
			b = b[n:]
			continue
		}
		e, n := delimited(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		var ok bool
		switch num {
		case 1:
			if m.Source == nil {
				m.Source = &authv3.AttributeContext_Peer{}
			}
			ok = d.decodePeer(e, m.Source)
		case 2:
			if m.Destination == nil {
				m.Destination = &authv3.AttributeContext_Peer{}
			}
			ok = d.decodePeer(e, m.Destination)
		case 4:
			if m.Request == nil {
				m.Request = &authv3.AttributeContext_Request{}
			}
			ok = d.decodeRequest(e, m.Request)
		case 11:
			if m.MetadataContext == nil {
				m.MetadataContext = &corev3.Metadata{}
			}
			ok = d.decodeMetadata(e, m.MetadataContext, 2)
		case 12:
			if m.TlsSession == nil {
				m.TlsSession = &authv3.AttributeContext_TLSSession{}
			}
			ok = d.decodeTLSSession(e, m.TlsSession)
		case 13:
			if m.RouteMetadataContext == nil {
				m.RouteMetadataContext = &corev3.Metadata{}
			}
			ok = d.decodeMetadata(e, m.RouteMetadataContext, 2)
		}
		if !ok {
			return false
		}
	}
	return true
}

// decodePeer merges the AttributeContext.Peer b encodes into m: address
// (1), service (2), labels (3), principal (4), certificate (5).
func (d *msg) decodePeer(b []byte, m *authv3.AttributeContext_Peer) bool {
	for len(b) > 0 {
		num, typ, n := tag(b)
		if n < 0 || typ != bytesType {
			return false
		}
		b = b[n:]
		switch num {
		case 1:
			var e []byte
			if e, n = delimited(b); n < 0 {
				return false
			}
			if m.Address == nil {
				m.Address = &corev3.Address{}
			}
			if !d.decodeAddress(e, m.Address) {
				return false
			}
		case 2:
			m.Service, n = d.str(b)
		case 3:
			n = d.stringMapEntry(b, &m.Labels, num)
		case 4:
			m.Principal, n = d.str(b)
		case 5:
			m.Certificate, n = d.str(b)
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

// decodeRequest merges the AttributeContext.Request b encodes into m:
// time (1), http (2).
func (d *msg) decodeRequest(b []byte, m *authv3.AttributeContext_Request) bool {
	return messageFields(b, func(num protowire.Number, e []byte) bool {
		switch num {
		case 1:
			if m.Time == nil {
				m.Time = &timestamppb.Timestamp{}
			}
			if !d.decodeTimestamp(e, m.Time) {
				return false
			}
		case 2:
			if m.Http == nil {
				m.Http = &authv3.AttributeContext_HttpRequest{}
			}
			if !d.decodeHTTPRequest(e, m.Http) {
				return false
			}
		default:
			return false
		}
		return true
	})
}

// decodeHTTPRequest merges the AttributeContext.HttpRequest b encodes
// into m: id (1), method (2), headers (3), path (4), host (5), scheme
// (6), query (7), fragment (8), size (9), protocol (10), body (11),
// raw_body (12), header_map (13).
func (d *msg) decodeHTTPRequest(b []byte, m *authv3.AttributeContext_HttpRequest) bool {
	for len(b) > 0 {
		num, typ, n := tag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if num == 9 {
			if typ != varintType {
				return false
			}
			x, n := varint(b)
			if n < 0 {
				return false
			}
			m.Size = int64(x)
			b = b[n:]
			continue
		}
		if typ != bytesType {
			return false
		}
		switch num {
		case 3:
			n = d.stringMapEntry(b, &m.Headers, num)
		case 1:
			m.Id, n = d.str(b)
		case 2:
			m.Method, n = d.str(b)
		case 4:
			m.Path, n = d.str(b)
		case 5:
			m.Host, n = d.str(b)
		case 6:
			m.Scheme, n = d.str(b)
		case 7:
			m.Query, n = d.str(b)
		case 8:
			m.Fragment, n = d.str(b)
		case 10:
			m.Protocol, n = d.str(b)
		case 11:
			m.Body, n = d.str(b)
		case 12:
			m.RawBody, n = d.bytesValue(b)
		case 13:
			var e []byte
			if e, n = delimited(b); n < 0 {
				return false
			}
			if m.HeaderMap == nil {
				m.HeaderMap = &corev3.HeaderMap{}
			}
			if !d.decodeHeaderMap(e, m.HeaderMap) {
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

// decodeTLSSession merges the AttributeContext.TLSSession b encodes into
// m: sni (1).
func (d *msg) decodeTLSSession(b []byte, m *authv3.AttributeContext_TLSSession) bool {
	for len(b) > 0 {
		num, typ, n := tag(b)
		if n < 0 || num != 1 || typ != bytesType {
			return false
		}
		b = b[n:]
		if m.Sni, n = d.str(b); n < 0 {
			return false
		}
		b = b[n:]
	}
	return true
}
