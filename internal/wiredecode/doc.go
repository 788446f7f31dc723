// Package wiredecode owns the hand-written protobuf decoding of the two
// requests the data-path gRPC server receives most: ext_proc's
// ProcessingRequest and ext_authz's CheckRequest, with what they hold
// (header maps, addresses, config.core.v3.Metadata and
// google.protobuf.Struct). It reads the wire format with protowire into
// the same go-control-plane structs proto.Unmarshal fills, without
// protobuf reflection, which dominated the server's decoding CPU.
//
// It decodes only what it fully understands: the fields Envoy sends, in
// their own wire types, well-formed, with valid UTF-8 in every string.
// Anything else — an unknown field number, an unexpected wire type, a
// malformed varint or length, invalid UTF-8, a group, typed metadata,
// nesting deeper than maxDepth — makes it report false, and the caller
// (extproc.Codec) decodes the message with proto.Unmarshal instead, so
// the result, and any error, are proto.Unmarshal's own. Where it
// succeeds the result equals proto.Unmarshal's (proto.Equal): scalars
// and oneofs last-one-wins, a repeated embedded message (and a repeated
// member of the same oneof case) merged, map entries with a missing key
// or value given zero values and a later duplicate key winning, bytes
// and strings copied out of the input — the strings as substrings of one
// copy of the message, the bytes fields after the first as slices of
// another, each capped at its length (see msg): a few allocations a
// message rather than one a field, the copies alive while anything
// decoded from them is.
//
// It must not decide anything about requests; it only decodes them.
package wiredecode
