// Package sselex owns the line grammar of text/event-stream (the WHATWG
// HTML standard's "event stream interpretation") that Sluice's two readers
// of provider streams share: usage, which meters a stream, and ssefilter,
// which takes the usage chunk out of it. Lines end in "\r\n", "\n" or
// "\r" — also when the '\r' and the '\n' arrive in different chunks — a
// blank line ends an event, and a line's field name runs to its first
// ':', after which one space is dropped from its value.
//
// Lines reads a stream as its chunks arrive, split anywhere, and reports
// each line or piece of a line by its offsets in the caller's chunk: it
// never copies, buffers or allocates, and carries two bits between
// chunks. What a line means (which fields matter, what an event holds,
// what is kept, sent or removed) belongs to its callers. It is one place
// to fuzz and keep right (FuzzLines checks it against a whole-stream
// split).
//
// It must not know about usage, JSON, providers or Envoy.
package sselex
