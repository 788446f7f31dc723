package ssefilter

import (
	"encoding/json"

	"github.com/sluicegw/sluice/internal/sselex"
)

// DefaultMaxEvent bounds the bytes a Filter holds for one event: about a
// hundred times OpenAI's usage chunk.
const DefaultMaxEvent = 32 << 10

// Counts are what a Filter did since the last TakeCounts.
type Counts struct {
	// Removed is the usage-only events taken out.
	Removed int
	// Oversized is the events that could still have been usage chunks
	// when they grew past the bound, and so were passed unmodified.
	Oversized int
}

// Filter removes usage-only events from one event stream (see the package
// documentation). The zero value is not usable; call New. It is not safe
// for concurrent use.
type Filter struct {
	max int

	held    []byte // the current event's bytes from earlier chunks, not yet sent
	scratch []byte // the data lines of a multi-line candidate, joined

	lex    sselex.Lines
	dropLF bool // the last chunk ended in the '\r' of a removed event's blank line

	inEvent   bool // the current event has a non-blank line
	candidate bool // ... and may still be a usage chunk
	size      int  // the current event's bytes so far (while candidate)
	line      lineState
	field     int // bytes of "data" matched (lineField)
	dataLines int
	js        scanner

	counts Counts
}

// lineState is how far a line of a candidate event has been read.
type lineState uint8

const (
	lineField lineState = iota // in the field name, "data" matched up to field
	lineColon                  // just after "data:"; one space may follow
	lineValue                  // in the value, fed to the JSON scanner
)

// New returns a filter holding at most maxEvent bytes of one event (0 or
// less: DefaultMaxEvent).
func New(maxEvent int) *Filter {
	if maxEvent <= 0 {
		maxEvent = DefaultMaxEvent
	}
	return &Filter{max: maxEvent}
}

// Held is the number of bytes the filter holds: the start of an event
// that may be a usage chunk and has not ended. They are sent by the next
// Write (with the rest of the event, or as they are at end of stream);
// a stream that ends otherwise — in trailers, or cut — loses them.
func (f *Filter) Held() int { return len(f.held) }

// TakeCounts returns the counts since the last call and zeroes them.
func (f *Filter) TakeCounts() Counts {
	c := f.counts
	f.counts = Counts{}
	return c
}

// Write filters the next chunk p of the stream; end says it is the last.
// It returns what the client gets in its place and whether that differs
// from p. When it does not, the result is p itself; otherwise it is a
// subslice of p or a new slice (never the filter's own memory), possibly
// empty. p is not modified and not retained.
func (f *Filter) Write(p []byte, end bool) ([]byte, bool) {
	o := output{p: p}
	// start is where the current event began in p; an event that began
	// in an earlier chunk (its bytes in f.held) begins at 0.
	start := 0
	for i := 0; i < len(p); {
		stop, next, what := f.lex.Next(p, i)
		drop := f.dropLF
		f.dropLF = false
		switch {
		case what == sselex.LF:
			switch {
			case drop:
				o.drop(i, next)
			case f.candidate:
				f.grow(&o, 1)
			}
		case what == sselex.Ended && stop == i: // a blank line
			removed := false
			if f.inEvent {
				removed = f.endEvent(&o, start, i+1)
			}
			if removed {
				// The '\n' of a "\r\n" goes with the event, here or,
				// when the '\r' ends p, at the start of the next chunk.
				o.drop(i+1, next)
				f.dropLF = p[i] == '\r' && i+1 == len(p)
			}
		default:
			if what&sselex.Cont == 0 && !f.inEvent {
				f.beginEvent()
				start = i
			}
			if f.candidate {
				f.feedLine(p[i:stop])
				n := stop - i
				if what&sselex.Ended != 0 && f.candidate {
					f.endLine()
					n = next - i // the terminator
				}
				f.grow(&o, n)
			}
		}
		i = next
	}
	if f.inEvent && f.candidate {
		switch {
		case end: // an event that never ended is sent as it is
			f.release(&o)
		case len(f.held) > 0: // it began in an earlier chunk
			f.held = append(f.held, p...)
			o.cut(0)
		default:
			f.held = append(f.held[:0], p[start:]...)
			o.cut(start)
		}
	}
	if end {
		f.reset()
	}
	return o.result()
}

// reset forgets the stream (after its end), keeping the buffers.
func (f *Filter) reset() {
	*f = Filter{max: f.max, held: f.held[:0], scratch: f.scratch[:0], counts: f.counts}
}

// grow counts n more bytes of a candidate event, which stops being one
// once it is longer than the bound or was ruled out; its held bytes are
// then released.
func (f *Filter) grow(o *output, n int) {
	f.size += n
	if f.candidate && f.size > f.max {
		f.candidate = false
		f.counts.Oversized++
	}
	if !f.candidate {
		f.release(o)
	}
}

func (f *Filter) beginEvent() {
	f.inEvent, f.candidate = true, true
	f.size, f.line, f.field, f.dataLines = 0, lineField, 0, 0
	f.js = scanner{}
}

// release sends the held bytes of an event that turned out not to be
// removed, ahead of the rest of it.
func (f *Filter) release(o *output) {
	if len(f.held) > 0 {
		o.prepend(f.held)
		f.held = f.held[:0]
	}
}

// endEvent ends the current event at p[:end] (just after the first byte
// of its blank line), which began at p[start] or in f.held, and reports
// whether it was removed.
func (f *Filter) endEvent(o *output, start, end int) bool {
	f.inEvent = false
	if !f.candidate {
		return false
	}
	f.candidate = false
	size := f.size + 1
	if size > f.max {
		f.counts.Oversized++
		f.release(o)
		return false
	}
	held := len(f.held)
	raw := o.p[start:end]
	if held > 0 {
		f.held = append(f.held, o.p[:end]...)
		raw = f.held
	}
	if !f.js.usageOnly() || !f.validJSON(raw) {
		f.held = f.held[:held]
		f.release(o)
		return false
	}
	f.held = f.held[:0]
	o.drop(start, end)
	f.counts.Removed++
	return true
}

// validJSON reports whether the data of the event raw (all data lines,
// ending with a blank line) is valid JSON.
func (f *Filter) validJSON(raw []byte) bool {
	var data []byte
	n := 0
	for len(raw) > 0 {
		e := sselex.LineEnd(raw)
		if e <= 0 { // the blank line
			break
		}
		_, v := sselex.Field(raw[:e])
		next := e + 1
		if raw[e] == '\r' && next < len(raw) && raw[next] == '\n' {
			next++
		}
		raw = raw[next:]
		switch n {
		case 0:
			data = v
		case 1:
			f.scratch = append(append(append(f.scratch[:0], data...), '\n'), v...)
			data = f.scratch
		default:
			f.scratch = append(append(f.scratch, '\n'), v...)
			data = f.scratch
		}
		n++
	}
	return json.Valid(data)
}

// feedLine reads b, a piece of a line of a candidate event (no
// terminator), clearing f.candidate at the first byte that rules the
// event out.
func (f *Filter) feedLine(b []byte) {
	for len(b) > 0 {
		switch f.line {
		case lineField:
			c := b[0]
			if f.field < len("data") {
				if c != "data"[f.field] {
					f.candidate = false // a comment, or another field
					return
				}
				f.field++
				b = b[1:]
				continue
			}
			if c != ':' {
				f.candidate = false // "data…", another field
				return
			}
			f.line = lineColon
			b = b[1:]
		case lineColon:
			if !f.beginValue() {
				return
			}
			if b[0] == ' ' {
				b = b[1:]
			}
			f.line = lineValue
		case lineValue:
			if !f.js.feed(b) {
				f.candidate = false
			}
			return
		}
	}
}

// endLine ends a line of a candidate event.
func (f *Filter) endLine() {
	switch f.line {
	case lineField:
		if f.field < len("data") {
			f.candidate = false // a shorter field name ("dat")
			return
		}
		f.beginValue() // "data" alone: a data line with an empty value
	case lineColon:
		f.beginValue() // "data:" with an empty value
	}
	f.line, f.field = lineField, 0
}

var newline = []byte{'\n'}

// beginValue starts the value of a data line: the lines' values are
// joined by "\n".
func (f *Filter) beginValue() bool {
	if f.dataLines > 0 && !f.js.feed(newline) {
		f.candidate = false
	}
	f.dataLines++
	return f.candidate
}

// output builds what replaces one chunk p: runs of p, in order, after
// held bytes of an earlier chunk. While it is one run of p it is that
// subslice; it is copied into a new slice only when a second run or
// held bytes come in.
type output struct {
	p       []byte
	pend    int    // start of the run of p not yet emitted
	buf     []byte // the output, once it is not one run of p
	copied  bool   // buf is in use
	has     bool   // one run, p[from:to], is the output so far
	from    int
	to      int
	changed bool
}

// emit adds p[a:b] to the output.
func (o *output) emit(a, b int) {
	switch {
	case a == b:
	case o.copied:
		o.buf = append(o.buf, o.p[a:b]...)
	case !o.has:
		o.has, o.from, o.to = true, a, b
	default:
		o.buf = make([]byte, 0, len(o.p))
		o.buf = append(append(o.buf, o.p[o.from:o.to]...), o.p[a:b]...)
		o.copied = true
	}
}

// drop leaves p[a:b] out; the run before it goes out.
func (o *output) drop(a, b int) {
	o.emit(o.pend, a)
	o.pend = b
	o.changed = true
}

// cut leaves p[a:] out (held for the next chunk).
func (o *output) cut(a int) { o.drop(a, len(o.p)) }

// prepend puts h (held bytes, copied) ahead of p. It is called only
// before any of p went out: held bytes belong to an event that began in
// an earlier chunk, so p's first bytes are that event's too.
func (o *output) prepend(h []byte) {
	o.buf = append(make([]byte, 0, len(h)+len(o.p)), h...)
	o.copied = true
	o.changed = true
}

func (o *output) result() ([]byte, bool) {
	if !o.changed {
		return o.p, false
	}
	o.emit(o.pend, len(o.p))
	switch {
	case o.copied:
		return o.buf, true
	case o.has:
		return o.p[o.from:o.to], true
	}
	return o.p[:0], true
}
