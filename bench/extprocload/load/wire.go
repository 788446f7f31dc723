package load

import (
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
)

// The driver's wire work. Envoy builds each message in C++ at a cost that
// is not the server's; a driver that built and parsed every message with
// proto reflection spent more of its core on that than the server spent
// serving it, and so capped the rate it could offer. So the driver keeps
// what does not change as bytes: the forwarded metadata is encoded once
// per stream and sent as the tail of every message of it, the
// CheckRequest is a constant part plus the request id, and a reply is
// decoded only as far as the driver must look (its type, the Check's
// status and metadata) unless the request needs its mutations (a
// fallback attempt). The bytes are the messages Envoy sends: a test
// decodes them with proto and compares them with the messages built field
// by field (TestWireMessagesAreEnvoys).

// field is the number of the field called name in m's message.
func field(m proto.Message, name protoreflect.Name) protowire.Number {
	f := m.ProtoReflect().Descriptor().Fields().ByName(name)
	if f == nil {
		panic(fmt.Sprintf("load: %s has no field %s", m.ProtoReflect().Descriptor().FullName(), name))
	}
	return f.Number()
}

var (
	fieldMetadataContext = field(&extprocsvc.ProcessingRequest{}, "metadata_context")
	fieldImmediate       = field(&extprocsvc.ProcessingResponse{}, "immediate_response")
	replyRequestHeaders  = field(&extprocsvc.ProcessingResponse{}, "request_headers")
	replyRequestBody     = field(&extprocsvc.ProcessingResponse{}, "request_body")
	replyResponseHeaders = field(&extprocsvc.ProcessingResponse{}, "response_headers")
	replyResponseBody    = field(&extprocsvc.ProcessingResponse{}, "response_body")

	fieldCheckStatus    = field(&authv3.CheckResponse{}, "status")
	fieldCheckOK        = field(&authv3.CheckResponse{}, "ok_response")
	fieldCheckDenied    = field(&authv3.CheckResponse{}, "denied_response")
	fieldCheckError     = field(&authv3.CheckResponse{}, "error_response")
	fieldCheckMetadata  = field(&authv3.CheckResponse{}, "dynamic_metadata")
	fieldOKMetadata     = field(&authv3.OkHttpResponse{}, "dynamic_metadata")
	fieldStatusCode     = protowire.Number(1) // google.rpc.Status.code
	fieldStructFields   = field(&structpb.Struct{}, "fields")
	fieldMetadataFilter = protowire.Number(1) // envoy.config.core.v3.Metadata.filter_metadata

	fieldCheckAttributes = field(&authv3.CheckRequest{}, "attributes")
	fieldAttrRequest     = field(&authv3.AttributeContext{}, "request")
	fieldRequestHTTP     = field(&authv3.AttributeContext_Request{}, "http")
	fieldHTTPID          = field(&authv3.AttributeContext_HttpRequest{}, "id")
	fieldHTTPHeaders     = field(&authv3.AttributeContext_HttpRequest{}, "headers")
)

// codec is the driver's gRPC codec: outMsg and rawCheck go out as their
// bytes, rawReply takes a reply's bytes as they came, and any other
// message is proto's. Its name is proto's, so the requests carry
// content-type application/grpc as Envoy's do.
type codec struct{}

func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *outMsg:
		b := m.enc
		if m.req != nil {
			var err error
			if b, err = proto.Marshal(m.req); err != nil {
				return nil, err
			}
		}
		return mem.BufferSlice{mem.SliceBuffer(b), mem.SliceBuffer(m.md)}, nil
	case rawCheck:
		return mem.BufferSlice{mem.SliceBuffer(m)}, nil
	case proto.Message:
		b, err := proto.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return nil, fmt.Errorf("load: codec cannot marshal %T", v)
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	switch m := v.(type) {
	case *rawReply:
		m.b = data.Materialize()
		return nil
	case proto.Message:
		return proto.Unmarshal(data.Materialize(), m)
	}
	return fmt.Errorf("load: codec cannot unmarshal into %T", v)
}

var _ encoding.CodecV2 = codec{}

// outMsg is a ProcessingRequest without its metadata_context (req, or
// when req is nil its encoding enc), and that field already encoded (md,
// from encodeMetadataContext): a message's fields may come in any order
// on the wire, and Envoy's forwarded metadata is the same on every
// message of a stream.
type outMsg struct {
	req *extprocsvc.ProcessingRequest
	enc []byte
	md  []byte
}

// encodeMetadataContext is the metadata_context field of a
// ProcessingRequest that forwards namespace ns with the Struct whose
// encoding is st.
func encodeMetadataContext(ns string, st []byte) []byte {
	var entry []byte
	entry = protowire.AppendTag(entry, 1, protowire.BytesType) // map key
	entry = protowire.AppendString(entry, ns)
	entry = protowire.AppendTag(entry, 2, protowire.BytesType) // map value
	entry = protowire.AppendBytes(entry, st)
	var md []byte
	md = protowire.AppendTag(md, fieldMetadataFilter, protowire.BytesType)
	md = protowire.AppendBytes(md, entry)
	var f []byte
	f = protowire.AppendTag(f, fieldMetadataContext, protowire.BytesType)
	return protowire.AppendBytes(f, md)
}

// metadataContext is the metadata_context field of a ProcessingRequest
// that forwards m.
func metadataContext(m *corev3.Metadata) ([]byte, error) {
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("metadata_context: %w", err)
	}
	var f []byte
	f = protowire.AppendTag(f, fieldMetadataContext, protowire.BytesType)
	return protowire.AppendBytes(f, b), nil
}

// appendNumberField appends to a Struct's encoding the entry key: number,
// which replaces an entry of the same key, as a map's later entry does.
func appendNumberField(st []byte, key string, n float64) []byte {
	v, _ := proto.Marshal(structpb.NewNumberValue(n)) // a number value cannot fail
	var entry []byte
	entry = protowire.AppendTag(entry, 1, protowire.BytesType)
	entry = protowire.AppendString(entry, key)
	entry = protowire.AppendTag(entry, 2, protowire.BytesType)
	entry = protowire.AppendBytes(entry, v)
	st = protowire.AppendTag(st, fieldStructFields, protowire.BytesType)
	return protowire.AppendBytes(st, entry)
}

// rawCheck is an encoded CheckRequest.
type rawCheck []byte

// checkTemplate builds a request's CheckRequest from the encoding of the
// parts that every request shares.
type checkTemplate struct {
	attrs []byte // the AttributeContext without its request
	http  []byte // the HttpRequest without its id and x-request-id
}

// newCheckTemplate splits a CheckRequest, whose HttpRequest has no id and
// no x-request-id header, into the shared parts.
func newCheckTemplate(req *authv3.CheckRequest) (checkTemplate, error) {
	http := req.GetAttributes().GetRequest().GetHttp()
	attrs := proto.Clone(req.GetAttributes()).(*authv3.AttributeContext)
	attrs.Request = nil
	var t checkTemplate
	var err error
	if t.attrs, err = proto.Marshal(attrs); err != nil {
		return t, err
	}
	t.http, err = proto.Marshal(http)
	return t, err
}

// with is the CheckRequest of the request with this id: the id field and
// the x-request-id header added to the shared parts.
func (t checkTemplate) with(id string) rawCheck {
	http := make([]byte, 0, len(t.http)+2*len(id)+32)
	http = append(http, t.http...)
	http = protowire.AppendTag(http, fieldHTTPID, protowire.BytesType)
	http = protowire.AppendString(http, id)
	var entry []byte
	entry = protowire.AppendTag(entry, 1, protowire.BytesType)
	entry = protowire.AppendString(entry, "x-request-id")
	entry = protowire.AppendTag(entry, 2, protowire.BytesType)
	entry = protowire.AppendString(entry, id)
	http = protowire.AppendTag(http, fieldHTTPHeaders, protowire.BytesType)
	http = protowire.AppendBytes(http, entry)

	var request []byte
	request = protowire.AppendTag(request, fieldRequestHTTP, protowire.BytesType)
	request = protowire.AppendBytes(request, http)
	attrs := make([]byte, 0, len(t.attrs)+len(request)+8)
	attrs = append(attrs, t.attrs...)
	attrs = protowire.AppendTag(attrs, fieldAttrRequest, protowire.BytesType)
	attrs = protowire.AppendBytes(attrs, request)
	out := make([]byte, 0, len(attrs)+8)
	out = protowire.AppendTag(out, fieldCheckAttributes, protowire.BytesType)
	return protowire.AppendBytes(out, attrs)
}

// rawReply is a reply as it came.
type rawReply struct{ b []byte }

// walk calls fn with each top-level field of b that has the bytes wire
// type; it stops at the first malformed field.
func walk(b []byte, fn func(protowire.Number, []byte)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			fn(num, v)
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return protowire.ParseError(m)
		}
		b = b[m:]
	}
	return nil
}

// responseOneof is the fields of ProcessingResponse's response oneof.
var responseOneof = func() map[protowire.Number]bool {
	o := (&extprocsvc.ProcessingResponse{}).ProtoReflect().Descriptor().Oneofs().ByName("response")
	m := map[protowire.Number]bool{}
	for i := range o.Fields().Len() {
		m[o.Fields().Get(i).Number()] = true
	}
	return m
}()

// kind is the number of the ProcessingResponse's response field that is
// set (0 for none); of a oneof the last occurrence is the one that
// counts (FuzzReplyKind holds it to proto.Unmarshal).
func (r *rawReply) kind() (protowire.Number, error) {
	var k protowire.Number
	err := walk(r.b, func(num protowire.Number, _ []byte) {
		if responseOneof[num] {
			k = num
		}
	})
	return k, err
}

// full is the reply decoded.
func (r *rawReply) full() (*extprocsvc.ProcessingResponse, error) {
	m := &extprocsvc.ProcessingResponse{}
	return m, proto.Unmarshal(r.b, m)
}

// checkReply is what the driver reads of a CheckResponse: the status
// code, and the Struct encoding of the dynamic metadata Envoy would
// store (ok_response's when set, else the top-level one;
// ext_authz.cc, Filter::onComplete). It reads as proto.Unmarshal does: a
// repeated message field merges, and of the http_response oneof the last
// one counts (FuzzCheckReply holds it to that).
func checkReply(b []byte) (code int32, md []byte, err error) {
	var top, ok []byte
	var okSet bool // ok_response's dynamic_metadata is present, if empty
	err = walk(b, func(num protowire.Number, v []byte) {
		switch num {
		case fieldCheckStatus:
			code = statusCode(v, code)
		case fieldCheckMetadata:
			top = append(top, v...)
		case fieldCheckOK:
			_ = walk(v, func(n protowire.Number, w []byte) {
				if n == fieldOKMetadata {
					okSet = true
					ok = append(ok, w...)
				}
			})
		case fieldCheckDenied, fieldCheckError:
			okSet, ok = false, nil
		}
	})
	if okSet {
		return code, ok, err
	}
	return code, top, err
}

// statusCode is the code of the google.rpc.Status encoded in b, or code
// when b does not set it.
func statusCode(b []byte, code int32) int32 {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return code
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return code
		}
		if num == fieldStatusCode && typ == protowire.VarintType {
			c, _ := protowire.ConsumeVarint(b)
			code = int32(c)
		}
		b = b[m:]
	}
	return code
}
