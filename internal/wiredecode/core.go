package wiredecode

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// envoy.config.core.v3 messages (base.proto, address.proto) and
// google.protobuf.Timestamp.

// decodeMetadata merges the Metadata b encodes into m: filter_metadata
// (1), a map<string, Struct>. typed_filter_metadata (2), which Envoy's
// ext_authz and ext_proc forward only when configured to, is left to
// proto.Unmarshal.
func (d *msg) decodeMetadata(b []byte, m *corev3.Metadata, depth int) bool {
	if depth >= maxDepth {
		return false
	}
	return messageFields(b, func(num protowire.Number, e []byte) bool {
		if num != 1 {
			return false
		}
		return d.decodeStructMap(e, &m.FilterMetadata, depth+1)
	})
}

// decodeHeaderMap merges the HeaderMap b encodes into m: headers (1),
// repeated HeaderValue, appended.
func (d *msg) decodeHeaderMap(b []byte, m *corev3.HeaderMap) bool {
	var batch []corev3.HeaderValue // the headers, allocated at once
	return messageFields(b, func(num protowire.Number, e []byte) bool {
		if num != 1 {
			return false
		}
		if len(batch) == 0 {
			c := count(b, 1) // every field 1 of b, this one included
			batch = make([]corev3.HeaderValue, c)
			if m.Headers == nil {
				m.Headers = make([]*corev3.HeaderValue, 0, c)
			}
		}
		h := &batch[0]
		batch = batch[1:]
		if !d.decodeHeaderValue(e, h) {
			return false
		}
		m.Headers = append(m.Headers, h)
		return true
	})
}

// decodeHeaderValue merges the HeaderValue b encodes into m: key (1),
// value (2), raw_value (3).
func (d *msg) decodeHeaderValue(b []byte, m *corev3.HeaderValue) bool {
	for len(b) > 0 {
		num, typ, n := tag(b)
		if n < 0 || typ != bytesType {
			return false
		}
		b = b[n:]
		switch num {
		case 1:
			m.Key, n = d.str(b)
		case 3:
			m.RawValue, n = d.bytesValue(b)
		case 2:
			m.Value, n = d.str(b)
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

// stringEntry decodes a map<string, string> entry (HTTP headers, labels,
// context extensions), "" for what it lacks.
func (d *msg) stringEntry(b []byte) (k, v string, ok bool) {
	for len(b) > 0 {
		num, typ, n := tag(b)
		if n < 0 || typ != bytesType {
			return "", "", false
		}
		b = b[n:]
		switch num {
		case 1:
			k, n = d.str(b)
		case 2:
			v, n = d.str(b)
		default:
			return "", "", false
		}
		if n < 0 {
			return "", "", false
		}
		b = b[n:]
	}
	return k, v, true
}

// stringMapEntry reads the length-delimited map<string, string> entry
// at the front of b into *m; a nil *m it makes, sized for the entries of
// the same field, num, that follow in b. It returns the entry's length,
// negative when the entry is not one it decodes.
func (d *msg) stringMapEntry(b []byte, m *map[string]string, num protowire.Number) int {
	e, n := delimited(b)
	if n < 0 {
		return -1
	}
	k, v, ok := d.stringEntry(e)
	if !ok {
		return -1
	}
	if *m == nil {
		*m = make(map[string]string, 1+count(b[n:], num))
	}
	(*m)[k] = v
	return n
}

// decodeAddress merges the Address b encodes into m: the address oneof
// of socket_address (1), pipe (2) and envoy_internal_address (3).
func (d *msg) decodeAddress(b []byte, m *corev3.Address) bool {
	return messageFields(b, func(num protowire.Number, e []byte) bool {
		switch num {
		case 1:
			a := oneof[corev3.Address_SocketAddress](m.Address)
			if !d.decodeSocketAddress(e, orNew(&a.SocketAddress)) {
				return false
			}
			m.Address = a
		case 2:
			a := oneof[corev3.Address_Pipe](m.Address)
			if !d.decodePipe(e, orNew(&a.Pipe)) {
				return false
			}
			m.Address = a
		case 3:
			a := oneof[corev3.Address_EnvoyInternalAddress](m.Address)
			if !d.decodeInternalAddress(e, orNew(&a.EnvoyInternalAddress)) {
				return false
			}
			m.Address = a
		default:
			return false
		}
		return true
	})
}

// decodeSocketAddress merges the SocketAddress b encodes into m:
// protocol (1), address (2), the port_specifier oneof of port_value (3)
// and named_port (4), resolver_name (5), ipv4_compat (6),
// network_namespace_filepath (7).
func (d *msg) decodeSocketAddress(b []byte, m *corev3.SocketAddress) bool {
	for len(b) > 0 {
		num, typ, n := tag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		var x uint64
		switch {
		case num == 2 && typ == bytesType:
			m.Address, n = d.str(b)
		case num == 3 && typ == varintType:
			if x, n = varint(b); n >= 0 {
				m.PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: uint32(x)}
			}
		case num == 1 && typ == varintType:
			if x, n = varint(b); n >= 0 {
				m.Protocol = corev3.SocketAddress_Protocol(int32(x))
			}
		case num == 4 && typ == bytesType:
			var s string
			if s, n = d.str(b); n >= 0 {
				m.PortSpecifier = &corev3.SocketAddress_NamedPort{NamedPort: s}
			}
		case num == 5 && typ == bytesType:
			m.ResolverName, n = d.str(b)
		case num == 6 && typ == varintType:
			if x, n = varint(b); n >= 0 {
				m.Ipv4Compat = x != 0
			}
		case num == 7 && typ == bytesType:
			m.NetworkNamespaceFilepath, n = d.str(b)
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

// decodePipe merges the Pipe b encodes into m: path (1), mode (2).
func (d *msg) decodePipe(b []byte, m *corev3.Pipe) bool {
	for len(b) > 0 {
		num, typ, n := tag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == 1 && typ == bytesType:
			m.Path, n = d.str(b)
		case num == 2 && typ == varintType:
			var x uint64
			if x, n = varint(b); n >= 0 {
				m.Mode = uint32(x)
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

// decodeInternalAddress merges the EnvoyInternalAddress b encodes into m:
// server_listener_name (1, the only member of its oneof), endpoint_id
// (2).
func (d *msg) decodeInternalAddress(b []byte, m *corev3.EnvoyInternalAddress) bool {
	for len(b) > 0 {
		num, typ, n := tag(b)
		if n < 0 || typ != bytesType {
			return false
		}
		b = b[n:]
		switch num {
		case 1:
			var s string
			if s, n = d.str(b); n >= 0 {
				m.AddressNameSpecifier = &corev3.EnvoyInternalAddress_ServerListenerName{ServerListenerName: s}
			}
		case 2:
			m.EndpointId, n = d.str(b)
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

// decodeTimestamp merges the Timestamp b encodes into m: seconds (1),
// nanos (2).
func (d *msg) decodeTimestamp(b []byte, m *timestamppb.Timestamp) bool {
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
			m.Seconds = int64(x)
		case 2:
			m.Nanos = int32(x)
		default:
			return false
		}
	}
	return true
}
