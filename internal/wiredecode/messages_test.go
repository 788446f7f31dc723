package wiredecode

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicegw/sluice/internal/chain"
)

// Messages as Envoy sends them to Sluice, and random ones.

// authzStruct is the ext_authz metadata Envoy forwards to ext_proc:
// keyring.Principal.Metadata's fields (allow-lists included) and the
// ext_authz_duration Envoy adds (ext_authz.cc, Filter::onComplete).
func authzStruct() *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		"key_id":             structpb.NewStringValue("k_01JZ6Q2N7W4W5XKX3Y2D8M9P0R"),
		"key_prefix":         structpb.NewStringValue("sk-slc-4f9a"),
		"key_name":           structpb.NewStringValue("ci-runner"),
		"team":               structpb.NewStringValue("platform"),
		"org":                structpb.NewStringValue("acme"),
		"key_models":         structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewStringValue("gpt-4o*"), structpb.NewStringValue("claude-*")}}),
		"team_models":        structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewStringValue("*")}}),
		"ext_authz_duration": structpb.NewNumberValue(1),
	}}
}

// envoyMetadata is the metadata_context Envoy's ext_proc forwards on
// every message (ext_proc.cc, Filter::addDynamicMetadata).
func envoyMetadata() *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{chain.AuthzNamespace: authzStruct()}}
}

// headerMap is a header map as Envoy's ext_proc sends it: key and
// raw_value (mutation_utils.cc, MutationUtils::headersToProto).
func headerMap(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

// requestHeaderPairs are the 15 headers of a client's chat completion.
var requestHeaderPairs = []string{
	":authority", "gateway.local", ":path", "/v1/chat/completions", ":method", "POST", ":scheme", "https",
	"authorization", "Bearer sk-slc-4f9a2c1e8b7d6a5f4e3d2c1b0a9f8e7d", "content-type", "application/json",
	"content-length", "1843", "user-agent", "OpenAI/Python 1.54.3", "accept", "application/json",
	"accept-encoding", "gzip, deflate", "x-stainless-lang", "python", "x-stainless-os", "Linux",
	"x-forwarded-proto", "https", "x-forwarded-for", "10.1.2.3", "x-request-id", "3f1c9a6e-8d2b-4f7a-9c1e-5b6d7e8f9a0b",
}

// requestHeaders is the first message of a stream: the request headers
// with the forwarded metadata, the attributes and the protocol
// configuration.
func requestHeaders() *extprocsvc.ProcessingRequest {
	return &extprocsvc.ProcessingRequest{
		Request:         &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocsvc.HttpHeaders{Headers: headerMap(requestHeaderPairs...)}},
		MetadataContext: envoyMetadata(),
		ProtocolConfig: &extprocsvc.ProtocolConfiguration{
			RequestBodyMode:  extprocfilterv3.ProcessingMode_BUFFERED,
			ResponseBodyMode: extprocfilterv3.ProcessingMode_STREAMED,
		},
	}
}

// envoyRequests is one stream's messages, in the order Envoy sends them,
// and an upstream filter's first message with its attributes.
func envoyRequests() []*extprocsvc.ProcessingRequest {
	md := envoyMetadata()
	body := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"Say hello."}],"stream":true}`)
	attrs := map[string]*structpb.Struct{chain.ExtProcAttributesKey: {Fields: map[string]*structpb.Value{
		chain.UpstreamHostProviderAttribute: structpb.NewStringValue("openai"),
	}}}
	return []*extprocsvc.ProcessingRequest{
		requestHeaders(),
		{Request: &extprocsvc.ProcessingRequest_RequestBody{RequestBody: &extprocsvc.HttpBody{Body: body, EndOfStream: true}}, MetadataContext: md},
		{Request: &extprocsvc.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocsvc.HttpHeaders{Headers: headerMap(
			":status", "200", "content-type", "text/event-stream; charset=utf-8", "openai-processing-ms", "210",
			"x-request-id", "req_bench", "date", "Tue, 01 Dec 2026 00:00:00 GMT")}}, MetadataContext: md},
		{Request: &extprocsvc.ProcessingRequest_ResponseBody{ResponseBody: &extprocsvc.HttpBody{Body: []byte("data: {\"id\":\"c1\"}\n\n")}}, MetadataContext: md},
		{Request: &extprocsvc.ProcessingRequest_ResponseBody{ResponseBody: &extprocsvc.HttpBody{EndOfStream: true}}, MetadataContext: md},
		{Request: &extprocsvc.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocsvc.HttpTrailers{Trailers: headerMap("grpc-status", "0")}}, MetadataContext: md},
		{Request: &extprocsvc.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocsvc.HttpTrailers{}}, MetadataContext: md},
		{
			Request:    &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocsvc.HttpHeaders{Headers: headerMap(requestHeaderPairs...), EndOfStream: true}},
			Attributes: attrs, MetadataContext: md, ObservabilityMode: true,
		},
		{Request: &extprocsvc.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocsvc.HttpHeaders{Headers: headerMap(":status", "503")}}, Attributes: attrs},
	}
}

func sockAddr(ip string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

// checkRequest is a CheckRequest as Envoy builds it
// (check_request_utils.cc, CheckRequestUtils::createHttpCheck): peers
// with socket addresses (the destination's principal when TLS), the
// request's time and HTTP attributes with every header in the headers
// map, the route's context extensions and metadata.
func checkRequest() *authv3.CheckRequest {
	headers := map[string]string{}
	for i := 0; i+1 < len(requestHeaderPairs); i += 2 {
		headers[requestHeaderPairs[i]] = requestHeaderPairs[i+1]
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:      &authv3.AttributeContext_Peer{Address: sockAddr("10.1.2.3", 51234)},
		Destination: &authv3.AttributeContext_Peer{Address: sockAddr("10.0.0.7", 10000), Principal: "spiffe://cluster.local/ns/gw/sa/sluice"},
		Request: &authv3.AttributeContext_Request{
			Time: &timestamppb.Timestamp{Seconds: 1_796_000_000, Nanos: 123_456_789},
			Http: &authv3.AttributeContext_HttpRequest{
				Id: "3f1c9a6e-8d2b-4f7a-9c1e-5b6d7e8f9a0b", Method: "POST", Headers: headers,
				Path: "/v1/chat/completions", Host: "gateway.local", Scheme: "https", Protocol: "HTTP/1.1", Size: 1843,
			},
		},
		ContextExtensions:    map[string]string{"virtual_host": "gateway"},
		RouteMetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"sluice": {Fields: map[string]*structpb.Value{"route": structpb.NewStringValue("openai")}}}},
		TlsSession:           &authv3.AttributeContext_TLSSession{Sni: "gateway.local"},
	}}
}

// envoyChecks are CheckRequests of the shapes Envoy sends.
func envoyChecks() []*authv3.CheckRequest {
	plain := checkRequest()
	plain.Attributes.TlsSession = nil
	plain.Attributes.Destination.Principal = ""
	withBody := checkRequest()
	withBody.Attributes.Request.Http.Body = `{"model":"gpt-4o"}`
	raw := checkRequest()
	raw.Attributes.Request.Http.RawBody = []byte{0xff, 0, 1}
	raw.Attributes.Request.Http.Headers = nil
	raw.Attributes.Request.Http.HeaderMap = headerMap(requestHeaderPairs...)
	raw.Attributes.MetadataContext = envoyMetadata()
	raw.Attributes.Source.Labels = map[string]string{"app": "client", "version": "v2"}
	raw.Attributes.Source.Service = "client"
	raw.Attributes.Source.Certificate = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	pipe := checkRequest()
	pipe.Attributes.Source.Address = &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: "/run/envoy.sock", Mode: 0o600}}}
	pipe.Attributes.Destination.Address = &corev3.Address{Address: &corev3.Address_EnvoyInternalAddress{EnvoyInternalAddress: &corev3.EnvoyInternalAddress{
		AddressNameSpecifier: &corev3.EnvoyInternalAddress_ServerListenerName{ServerListenerName: "internal"}, EndpointId: "e1"}}}
	pipe.Attributes.Request.Http.Query = "a=1"
	pipe.Attributes.Request.Http.Fragment = "f"
	return []*authv3.CheckRequest{checkRequest(), plain, withBody, raw, pipe, {}, {Attributes: &authv3.AttributeContext{}}}
}

// gen makes random messages. supported is cleared when a message holds
// something the decoder leaves to proto.Unmarshal on purpose.
type gen struct {
	r         *rand.Rand
	supported bool
}

func newGen(seed uint64) *gen {
	return &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), supported: true}
}

// take reports whether the last message made holds only what the
// decoder handles, and starts afresh for the next.
func (g *gen) take() bool {
	ok := g.supported
	g.supported = true
	return ok
}

func (g *gen) chance(p float64) bool { return g.r.Float64() < p }

var words = []string{"", "a", "key_id", "x-request-id", "héllo", "日本語", "emoji 🦀", "with\x00nul", strings.Repeat("long", 40)}

func (g *gen) str() string {
	if g.chance(0.3) {
		return strconv.Itoa(g.r.IntN(1000))
	}
	return words[g.r.IntN(len(words))]
}

func (g *gen) bytes() []byte {
	if g.chance(0.2) {
		return nil
	}
	b := make([]byte, g.r.IntN(40))
	for i := range b {
		b[i] = byte(g.r.UintN(256))
	}
	return b
}

var numbers = []float64{0, 1, -1, 0.5, 1e300, -1e-300, math.Inf(1), math.Inf(-1), math.NaN(), math.Copysign(0, -1)}

func (g *gen) value(depth int) *structpb.Value {
	v := &structpb.Value{}
	k := g.r.IntN(7)
	if depth > 3 && k >= 5 {
		k = 2
	}
	switch k {
	case 0: // no kind
	case 1:
		v.Kind = &structpb.Value_NullValue{}
	case 2:
		v.Kind = &structpb.Value_NumberValue{NumberValue: numbers[g.r.IntN(len(numbers))]}
	case 3:
		v.Kind = &structpb.Value_StringValue{StringValue: g.str()}
	case 4:
		v.Kind = &structpb.Value_BoolValue{BoolValue: g.chance(0.5)}
	case 5:
		v.Kind = &structpb.Value_StructValue{StructValue: g.structValue(depth + 1)}
	case 6:
		l := &structpb.ListValue{}
		for range g.r.IntN(4) {
			l.Values = append(l.Values, g.value(depth+1))
		}
		v.Kind = &structpb.Value_ListValue{ListValue: l}
	}
	return v
}

func (g *gen) structValue(depth int) *structpb.Struct {
	s := &structpb.Struct{}
	if n := g.r.IntN(5); n > 0 {
		s.Fields = map[string]*structpb.Value{}
		for range n {
			s.Fields[g.str()] = g.value(depth)
		}
	}
	return s
}

func (g *gen) structMap() map[string]*structpb.Struct {
	m := map[string]*structpb.Struct{}
	for range 1 + g.r.IntN(3) {
		m[g.str()] = g.structValue(0)
	}
	return m
}

func (g *gen) metadata() *corev3.Metadata {
	md := &corev3.Metadata{}
	if g.chance(0.8) {
		md.FilterMetadata = g.structMap()
	}
	if g.chance(0.05) {
		md.TypedFilterMetadata = map[string]*anypb.Any{"t": {TypeUrl: "type.googleapis.com/x", Value: []byte{1}}}
		g.supported = false
	}
	return md
}

func (g *gen) headerMap() *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for range g.r.IntN(6) {
		h := &corev3.HeaderValue{Key: g.str()}
		if g.chance(0.8) {
			h.RawValue = g.bytes()
		} else {
			h.Value = g.str()
		}
		m.Headers = append(m.Headers, h)
	}
	return m
}

func (g *gen) httpHeaders() *extprocsvc.HttpHeaders {
	h := &extprocsvc.HttpHeaders{EndOfStream: g.chance(0.3)}
	if g.chance(0.9) {
		h.Headers = g.headerMap()
	}
	if g.chance(0.1) {
		h.Attributes = g.structMap() //nolint:staticcheck // decoded too
	}
	return h
}

func (g *gen) httpBody() *extprocsvc.HttpBody {
	return &extprocsvc.HttpBody{Body: g.bytes(), EndOfStream: g.chance(0.5), EndOfStreamWithoutMessage: g.chance(0.1),
		GrpcMessageCompressed: g.chance(0.1), DrainComplete: g.chance(0.1)}
}

func (g *gen) trailers() *extprocsvc.HttpTrailers {
	t := &extprocsvc.HttpTrailers{}
	if g.chance(0.8) {
		t.Trailers = g.headerMap()
	}
	return t
}

func (g *gen) processingRequest() *extprocsvc.ProcessingRequest {
	r := &extprocsvc.ProcessingRequest{}
	switch g.r.IntN(7) {
	case 1:
		r.Request = &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: g.httpHeaders()}
	case 2:
		r.Request = &extprocsvc.ProcessingRequest_ResponseHeaders{ResponseHeaders: g.httpHeaders()}
	case 3:
		r.Request = &extprocsvc.ProcessingRequest_RequestBody{RequestBody: g.httpBody()}
	case 4:
		r.Request = &extprocsvc.ProcessingRequest_ResponseBody{ResponseBody: g.httpBody()}
	case 5:
		r.Request = &extprocsvc.ProcessingRequest_RequestTrailers{RequestTrailers: g.trailers()}
	case 6:
		r.Request = &extprocsvc.ProcessingRequest_ResponseTrailers{ResponseTrailers: g.trailers()}
	}
	if g.chance(0.7) {
		r.MetadataContext = g.metadata()
	}
	if g.chance(0.3) {
		r.Attributes = g.structMap()
	}
	r.ObservabilityMode = g.chance(0.2)
	if g.chance(0.3) {
		r.ProtocolConfig = &extprocsvc.ProtocolConfiguration{
			RequestBodyMode:                         extprocfilterv3.ProcessingMode_BodySendMode(g.r.IntN(5)),
			ResponseBodyMode:                        extprocfilterv3.ProcessingMode_BodySendMode(g.r.IntN(5)),
			SendBodyWithoutWaitingForHeaderResponse: g.chance(0.5),
		}
	}
	if g.chance(0.03) {
		r.FlowControlInit = &extprocsvc.ProcessingRequest_FlowControlInit{InitialWindowDownstreamToSidestream: 65536}
		g.supported = false
	}
	return r
}

func (g *gen) stringMap() map[string]string {
	if g.chance(0.3) {
		return nil
	}
	m := map[string]string{}
	for range g.r.IntN(12) {
		m[g.str()] = g.str()
	}
	return m
}

func (g *gen) address() *corev3.Address {
	switch g.r.IntN(4) {
	case 0:
		return &corev3.Address{}
	case 1:
		return &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: g.str(), Mode: g.r.Uint32()}}}
	case 2:
		a := &corev3.EnvoyInternalAddress{EndpointId: g.str()}
		if g.chance(0.7) {
			a.AddressNameSpecifier = &corev3.EnvoyInternalAddress_ServerListenerName{ServerListenerName: g.str()}
		}
		return &corev3.Address{Address: &corev3.Address_EnvoyInternalAddress{EnvoyInternalAddress: a}}
	}
	s := &corev3.SocketAddress{Protocol: corev3.SocketAddress_Protocol(g.r.IntN(3)), Address: g.str(),
		ResolverName: g.str(), Ipv4Compat: g.chance(0.2), NetworkNamespaceFilepath: g.str()}
	switch g.r.IntN(3) {
	case 1:
		s.PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: g.r.Uint32()}
	case 2:
		s.PortSpecifier = &corev3.SocketAddress_NamedPort{NamedPort: g.str()}
	}
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: s}}
}

func (g *gen) peer() *authv3.AttributeContext_Peer {
	p := &authv3.AttributeContext_Peer{Service: g.str(), Labels: g.stringMap(), Principal: g.str(), Certificate: g.str()}
	if g.chance(0.9) {
		p.Address = g.address()
	}
	return p
}

func (g *gen) checkRequest() *authv3.CheckRequest {
	if g.chance(0.05) {
		return &authv3.CheckRequest{}
	}
	a := &authv3.AttributeContext{ContextExtensions: g.stringMap()}
	if g.chance(0.9) {
		a.Source = g.peer()
	}
	if g.chance(0.9) {
		a.Destination = g.peer()
	}
	if g.chance(0.9) {
		a.Request = &authv3.AttributeContext_Request{}
		if g.chance(0.8) {
			a.Request.Time = &timestamppb.Timestamp{Seconds: g.r.Int64() >> g.r.IntN(64), Nanos: g.r.Int32N(1e9)}
		}
		if g.chance(0.9) {
			h := &authv3.AttributeContext_HttpRequest{Id: g.str(), Method: g.str(), Headers: g.stringMap(),
				Path: g.str(), Host: g.str(), Scheme: g.str(), Query: g.str(), Fragment: g.str(),
				Size: g.r.Int64() - g.r.Int64(), Protocol: g.str(), Body: g.str(), RawBody: g.bytes()}
			if g.chance(0.3) {
				h.HeaderMap = g.headerMap()
			}
			a.Request.Http = h
		}
	}
	if g.chance(0.4) {
		a.MetadataContext = g.metadata()
	}
	if g.chance(0.3) {
		a.RouteMetadataContext = g.metadata()
	}
	if g.chance(0.3) {
		a.TlsSession = &authv3.AttributeContext_TLSSession{Sni: g.str()}
	}
	return &authv3.CheckRequest{Attributes: a}
}
