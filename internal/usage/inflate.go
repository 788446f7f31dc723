package usage

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
)

// inflater decodes a compressed body. compress/flate can only pull its
// input from an io.Reader and cannot resume once that reader runs dry, so
// the decoder runs in its own goroutine. Write copies each chunk into a
// small queue and returns without waiting for it to be decoded (it blocks
// only when maxQueued chunks are waiting: memory stays bounded); the
// goroutine decodes and feeds the Meter, and is the only one to touch the
// parsing state until Close has ended the input and waited for it.
type inflater struct {
	chunks  chan []byte   // compressed chunks, closed by close
	stopped chan struct{} // closed when the goroutine stops reading
	done    chan struct{} // closed when the goroutine has returned
	cur     []byte        // the chunk being read (goroutine only)
	err     error         // the decoder's failure; read after done
}

// maxQueued bounds the chunks waiting to be decoded.
const maxQueued = 4

// inflateBuf is the size of the decoded pieces handed to the parser.
const inflateBuf = 8 << 10

func (m *Meter) startInflate() *inflater {
	inf := &inflater{
		chunks:  make(chan []byte, maxQueued),
		stopped: make(chan struct{}),
		done:    make(chan struct{}),
	}
	go func() {
		defer close(inf.done)
		inf.err = m.inflate(inf)
		close(inf.stopped)
	}()
	return inf
}

func (inf *inflater) write(p []byte) {
	select {
	case <-inf.stopped: // the decoder finished or failed: nothing reads
	case inf.chunks <- bytes.Clone(p):
	}
}

// close ends the input, waits for the goroutine and returns the decoder's
// error, if any.
func (inf *inflater) close() error {
	close(inf.chunks)
	<-inf.done
	return inf.err
}

// Read implements io.Reader over the queued chunks for the decoder.
func (inf *inflater) Read(p []byte) (int, error) {
	for len(inf.cur) == 0 {
		c, ok := <-inf.chunks
		if !ok {
			return 0, io.EOF
		}
		inf.cur = c
	}
	n := copy(p, inf.cur)
	inf.cur = inf.cur[n:]
	return n, nil
}

// inflate runs in the decoder goroutine.
func (m *Meter) inflate(r io.Reader) error {
	br := bufio.NewReaderSize(r, 4<<10)
	magic, _ := br.Peek(2)
	if len(magic) == 0 {
		return nil // empty body
	}
	var zr io.Reader
	switch {
	case m.enc == encGzip && (len(magic) < 2 || magic[0] != 0x1f || magic[1] != 0x8b):
		zr = br // declared gzip, but plain: read as is
	case m.enc == encGzip:
		g, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		zr = g
	case len(magic) == 2 && isZlibHeader(magic[0], magic[1]):
		z, err := zlib.NewReader(br)
		if err != nil {
			return err
		}
		zr = z
	default:
		zr = flate.NewReader(br) // raw deflate, as some servers send
	}
	buf := make([]byte, inflateBuf)
	for {
		n, err := zr.Read(buf)
		if n > 0 && !m.feed(buf[:n]) {
			return nil
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// isZlibHeader reports whether two bytes are an RFC 1950 header with the
// deflate method.
func isZlibHeader(cmf, flg byte) bool {
	return cmf&0x0f == 8 && cmf>>4 <= 7 && (uint16(cmf)<<8|uint16(flg))%31 == 0
}

// inflateCode maps a decoder error to a stable Result.Err value.
// Truncation is no error when the body was cut (complete=false).
func inflateCode(enc encoding, err error, complete bool) string {
	prefix := "gzip: "
	if enc == encDeflate {
		prefix = "deflate: "
	}
	var corrupt flate.CorruptInputError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		if !complete {
			return ""
		}
		return prefix + "truncated"
	case errors.Is(err, gzip.ErrHeader), errors.Is(err, zlib.ErrHeader):
		return prefix + "bad_header"
	case errors.Is(err, gzip.ErrChecksum), errors.Is(err, zlib.ErrChecksum):
		return prefix + "checksum"
	case errors.Is(err, zlib.ErrDictionary):
		return prefix + "dictionary"
	case errors.As(err, &corrupt):
		return prefix + "corrupt"
	}
	return prefix + "error"
}
