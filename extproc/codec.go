package extproc

import (
	"fmt"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"

	"github.com/sluicegw/sluice/internal/wiredecode"
)

// Codec is the gRPC codec of the data-path server (ext_authz and
// ext_proc): protobuf, as grpc-go's own, with three savings.
//
// ProcessingRequests and CheckRequests, the messages the server receives
// on every request, are decoded by internal/wiredecode's hand-written
// decoder, without protobuf reflection. It fills the same structs; any
// input it does not fully understand (an unknown field, an unexpected
// wire type, malformed or invalid UTF-8 bytes, typed metadata) it leaves
// to the decoding below, so the result and any error stay
// proto.Unmarshal's.
//
// Decoding a ProcessingRequest that is not the request's headers skips
// its metadata_context and attributes. Envoy sends the forwarded
// ext_authz metadata on every message of the stream (envoy-protocol.md
// §1.4), and the attributes on the first of each direction, but Sluice
// reads both only from the request headers (Processor.requestHeaders,
// UpstreamProcessor.requestHeaders): on every other message they would
// be decoded into maps of structs only to be dropped. Every other field,
// and every other message, decodes exactly as proto.Unmarshal does.
//
// Encoding uses the message's generated vtprotobuf marshaller when the
// build has one (go-control-plane ships them behind the vtprotobuf build
// tag, which Sluice's Makefile sets), and proto.Marshal otherwise; both
// write the same fields.
//
// Pass it with grpc.ForceServerCodecV2.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// Name is the content subtype it answers for: protobuf's.
func (Codec) Name() string { return "proto" }

// vtMarshaler is what vtprotobuf generates.
type vtMarshaler interface {
	SizeVT() int
	MarshalToSizedBufferVTStrict([]byte) (int, error)
}

// Marshal encodes v, into a pooled buffer when it is large enough for
// grpc-go to pool it.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	m := messageOf(v)
	if m == nil {
		return nil, fmt.Errorf("extproc codec: cannot marshal %T, not a protobuf message", v)
	}
	vt, ok := m.(vtMarshaler)
	if !ok {
		size := proto.Size(m)
		opts := proto.MarshalOptions{UseCachedSize: true} // the size was just computed
		if mem.IsBelowBufferPoolingThreshold(size) {
			b, err := opts.Marshal(m)
			if err != nil {
				return nil, err
			}
			return mem.BufferSlice{mem.SliceBuffer(b)}, nil
		}
		pool := mem.DefaultBufferPool()
		buf := pool.Get(size)
		b, err := opts.MarshalAppend((*buf)[:0], m)
		if err != nil {
			pool.Put(buf)
			return nil, err
		}
		*buf = b
		return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
	}
	size := vt.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		b := make([]byte, size)
		if _, err := vt.MarshalToSizedBufferVTStrict(b); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := vt.MarshalToSizedBufferVTStrict((*buf)[:size]); err != nil {
		pool.Put(buf)
		return nil, err
	}
	*buf = (*buf)[:size]
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// Unmarshal decodes data into v.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m := messageOf(v)
	if m == nil {
		return fmt.Errorf("extproc codec: cannot unmarshal into %T, not a protobuf message", v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	switch r := m.(type) {
	case *extprocsvc.ProcessingRequest:
		if wiredecode.ProcessingRequest(b, r, true) {
			return nil
		}
		return unmarshalProcessingRequest(b, r)
	case *authv3.CheckRequest:
		if wiredecode.CheckRequest(b, r) {
			return nil
		}
	}
	return proto.Unmarshal(b, m)
}

// The ProcessingRequest fields unmarshalProcessingRequest looks at
// (external_processor.proto).
const (
	fieldRequestHeaders  protowire.Number = 2
	fieldMetadataContext protowire.Number = 8
	fieldAttributes      protowire.Number = 9
)

// unmarshalProcessingRequest, the fallback of wiredecode.ProcessingRequest
// (which makes the same saving), decodes b into r as proto.Unmarshal would,
// except that, unless b holds request_headers, it leaves out
// metadata_context and attributes. The fields it keeps are decoded run by
// run with Merge, which for protobuf is the same as decoding them
// together: a message is the concatenation of its fields. Bytes that are
// not a well-formed field sequence are decoded whole, so that the error
// is proto.Unmarshal's own.
func unmarshalProcessingRequest(b []byte, r *extprocsvc.ProcessingRequest) error {
	if !skippable(b) {
		return proto.Unmarshal(b, r)
	}
	proto.Reset(r)
	merge := proto.UnmarshalOptions{Merge: true}
	start := 0 // of the current run of kept fields
	for i := 0; i < len(b); {
		num, typ, n := protowire.ConsumeTag(b[i:])
		m := protowire.ConsumeFieldValue(num, typ, b[i+n:])
		end := i + n + m // skippable checked that both parse
		if num == fieldMetadataContext || num == fieldAttributes {
			if start < i {
				if err := merge.Unmarshal(b[start:i], r); err != nil {
					return err
				}
			}
			start = end
		}
		i = end
	}
	if start < len(b) {
		return merge.Unmarshal(b[start:], r)
	}
	return nil
}

// skippable reports whether b is a well-formed sequence of fields that
// holds metadata_context or attributes and no request_headers.
func skippable(b []byte) bool {
	skip := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return false
		}
		switch num {
		case fieldRequestHeaders:
			return false
		case fieldMetadataContext, fieldAttributes:
			skip = true
		}
		b = b[n+m:]
	}
	return skip
}

func messageOf(v any) proto.Message {
	switch v := v.(type) {
	case protoadapt.MessageV2:
		return v
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(v)
	}
	return nil
}
