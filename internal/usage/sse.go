package usage

import "github.com/sluicegw/sluice/internal/sselex"

// sseSink receives the events an sseParser dispatches.
type sseSink interface {
	// keep reports whether the data of an event named name (so far) is
	// worth buffering; it is asked once per event, at its first data line.
	keep(name []byte) bool
	// event receives a dispatched event. data is only valid during the
	// call and is empty when kept was false.
	event(name, data []byte, kept bool)
}

const (
	// maxEventName bounds an event name; a longer one is replaced by
	// badEventName, which no schema knows.
	maxEventName = 128
	// shrinkData is the capacity above which the event buffer is released
	// after an event rather than reused.
	shrinkData = 64 << 10
)

var badEventName = []byte("\x00")

// sseParser is an incremental text/event-stream parser. It carries only
// the partial last line and the current event between feeds, both bounded.
type sseParser struct {
	max int // bound on one kept event's data

	lex      sselex.Lines
	line     []byte // the partial last line (a data or event line, or ≤5 undecided bytes)
	skipping bool   // dropping the rest of a line that need not be read

	name     []byte // event type buffer
	data     []byte // data buffer (lines joined with '\n', no trailing '\n')
	borrow   []byte // the event's only data line, still in the caller's bytes
	borrowed bool
	lines    int  // data lines kept
	hasData  bool // a data line was seen (the event will be dispatched)
	keep     bool // its data is buffered

	err string // CodeEventTooLarge once stopped
}

// feed parses p. It returns false once parsing has stopped (s.err set).
func (s *sseParser) feed(p []byte, sink sseSink) bool {
	if s.err != "" {
		return false
	}
	for i := 0; i < len(p); {
		stop, next, what := s.lex.Next(p, i)
		switch {
		case what == sselex.LF:
		case what&sselex.Ended == 0:
			s.settle()
			s.partial(p[i:], sink)
			return s.err == ""
		case s.skipping:
			s.skipping = false
		case len(s.line) > 0:
			s.line = append(s.line, p[i:stop]...)
			s.processLine(s.line, sink)
			s.line = s.line[:0]
		default:
			s.processLine(p[i:stop], sink)
		}
		if s.err != "" {
			return false
		}
		i = next
	}
	s.settle()
	return true
}

// finish ends the stream: an unterminated last line and event are
// processed (a deliberate leniency, see README.md).
func (s *sseParser) finish(sink sseSink) {
	if s.err != "" {
		return
	}
	if !s.skipping && len(s.line) > 0 {
		s.processLine(s.line, sink)
	}
	s.line, s.skipping = nil, false
	if s.err == "" && s.hasData {
		s.dispatch(sink)
	}
}

// settle copies a borrowed data line before the caller's bytes go away.
func (s *sseParser) settle() {
	if s.borrowed {
		s.data = append(s.data[:0], s.borrow...)
		s.borrow, s.borrowed = nil, false
	}
}

type lineKind uint8

const (
	lineUndecided lineKind = iota // a proper prefix of "data:" or "event:", or exactly "data"/"event"
	lineData
	lineEvent
	lineIgnored // comment, id, retry, unknown field
)

// classify tells what line starts with q (the first bytes of a partial
// line).
func classify(q []byte) lineKind {
	for _, f := range [...]struct {
		name string
		kind lineKind
	}{{"data:", lineData}, {"event:", lineEvent}} {
		n := min(len(q), len(f.name))
		if string(q[:n]) != f.name[:n] {
			continue
		}
		if len(q) >= len(f.name) {
			return f.kind
		}
		return lineUndecided
	}
	return lineIgnored
}

// partial stores p, the start (or continuation) of a line whose end has not
// arrived, or drops it when the line need not be read. Decisions taken here
// are those processLine would take on the whole line, so the outcome does
// not depend on where the line was split.
func (s *sseParser) partial(p []byte, sink sseSink) {
	if s.skipping {
		return
	}
	var q [6]byte
	n := copy(q[:], s.line)
	n += copy(q[n:], p)
	total := len(s.line) + len(p)
	switch classify(q[:n]) {
	case lineUndecided:
	case lineData:
		if !s.hasData {
			s.hasData = true
			s.keep = sink.keep(s.name)
		}
		if !s.keep {
			s.skip()
			return
		}
		// The value is at least total-6 bytes ("data:" and one space), so
		// this certainly exceeds the bound processLine applies.
		if s.dataLen()+s.sep()+total-6 > s.max {
			s.err = CodeEventTooLarge
			return
		}
	case lineEvent:
		if total-7 > maxEventName {
			s.name = append(s.name[:0], badEventName...)
			s.skip()
			return
		}
	case lineIgnored:
		s.skip()
		return
	}
	s.line = append(s.line, p...)
}

func (s *sseParser) skip() {
	s.skipping = true
	s.line = s.line[:0]
}

func (s *sseParser) dataLen() int {
	if s.borrowed {
		return len(s.borrow)
	}
	return len(s.data)
}

func (s *sseParser) sep() int {
	if s.lines > 0 {
		return 1
	}
	return 0
}

func (s *sseParser) processLine(line []byte, sink sseSink) {
	if len(line) == 0 {
		s.dispatch(sink)
		return
	}
	field, value := sselex.Field(line) // a comment's field is ""
	switch string(field) {
	case "data":
		s.addData(value, sink)
	case "event":
		if len(value) > maxEventName {
			value = badEventName
		}
		s.name = append(s.name[:0], value...)
	}
}

func (s *sseParser) addData(v []byte, sink sseSink) {
	if !s.hasData {
		s.hasData = true
		s.keep = sink.keep(s.name)
	}
	if !s.keep {
		return
	}
	if s.dataLen()+s.sep()+len(v) > s.max {
		s.err = CodeEventTooLarge
		return
	}
	switch {
	case s.lines == 0:
		s.borrow, s.borrowed = v, true
	default:
		s.settle()
		s.data = append(s.data, '\n')
		s.data = append(s.data, v...)
	}
	s.lines++
}

func (s *sseParser) dispatch(sink sseSink) {
	if s.hasData {
		data := s.data
		if s.borrowed {
			data = s.borrow
		}
		if !s.keep {
			data = nil
		}
		sink.event(s.name, data, s.keep)
	}
	s.name = s.name[:0]
	s.borrow, s.borrowed = nil, false
	s.lines, s.hasData, s.keep = 0, false, false
	if cap(s.data) > shrinkData {
		s.data = nil
	} else {
		s.data = s.data[:0]
	}
}
