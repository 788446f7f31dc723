package policies

// The sizes that follow from gateway.max_request_body_bytes, computed in
// one place for the parts that must agree on them: Envoy's listener
// buffer (xds), the gRPC server's receive limit (app), and the 413 that
// ext_proc answers.

// bodySlack is how far past the body limit Envoy's per-connection buffer
// reaches: a body a little over the limit still reaches Sluice, which
// refuses it with its own JSON 413 rather than Envoy's plain-text one.
const bodySlack = 64 << 10

// grpcHeadroom is what an ext_proc or ext_authz message holds besides the
// body bytes: the request's headers (Envoy's max_request_headers_kb is 60
// KiB by default and at most 8 MiB, but a body message carries none of
// them), the metadata context, attributes and protobuf framing. 1 MiB is
// ample for every message Envoy sends with the default header limit.
const grpcHeadroom = 1 << 20

// BodyBufferBytes is the per-connection buffer Envoy's listener must have
// (per_connection_buffer_limit_bytes): ext_proc buffers the whole request
// body there, so it holds the largest body Sluice accepts, plus a margin.
func (g Gateway) BodyBufferBytes() int64 { return g.MaxRequestBodyBytes + bodySlack }

// GRPCRecvBytes is the largest message the gRPC server must accept
// (grpc.MaxRecvMsgSize): the largest body Envoy can buffer, in one
// request_body message, plus the room its headers and metadata take. With
// grpc-go's 4 MiB default instead, a body near or over a 4 MiB limit
// failed the stream (an empty 500) instead of being answered.
func (g Gateway) GRPCRecvBytes() int64 { return g.BodyBufferBytes() + grpcHeadroom }
