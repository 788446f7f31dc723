package usage

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/testenv"
)

// splitCases is every fixture response plus the hand-written bodies.
func splitCases(t *testing.T) []splitCase {
	cases := handWritten()
	for _, c := range loadCassettesOrNone(t) {
		cases = append(cases, splitCase{name: c.Name, opts: c.options(), body: c.Body})
	}
	return cases
}

// feedChunks writes body split at the given offsets (ascending) and
// closes.
func feedChunks(opts Options, body []byte, cuts []int, complete bool) Result {
	m := NewMeter(opts)
	prev := 0
	for _, c := range cuts {
		m.Write(body[prev:c])
		prev = c
	}
	m.Write(body[prev:])
	return m.Close(complete, 5)
}

// encodings returns the body as sent with each content-encoding a
// provider may use. Compressed streams are flushed every KiB,
// as streaming servers flush per event.
func encodings(t testing.TB, body []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{"": body}
	for _, enc := range []string{"gzip", "deflate", "deflate-raw"} {
		var b bytes.Buffer
		var w interface {
			Write([]byte) (int, error)
			Flush() error
			Close() error
		}
		switch enc {
		case "gzip":
			w = gzip.NewWriter(&b)
		case "deflate":
			w = zlib.NewWriter(&b)
		default:
			fw, err := flate.NewWriter(&b, flate.DefaultCompression)
			if err != nil {
				t.Fatal(err)
			}
			w = fw
		}
		for p := body; len(p) > 0; {
			n := min(len(p), 1024)
			if _, err := w.Write(p[:n]); err != nil {
				t.Fatal(err)
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			p = p[n:]
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		out[enc] = b.Bytes()
	}
	return out
}

func contentEncoding(enc string) string {
	if enc == "deflate-raw" {
		return "deflate"
	}
	return enc
}

// TestChunkSplitProperty: Envoy's chunk boundaries ignore SSE events and
// UTF-8 runes, so the result must not depend on them. Every body is split
// at every byte offset into two chunks, and into random multi-chunk
// sequences including 1-byte chunks, plain and gzip-compressed (zlib and
// raw deflate, which share gzip's hand-over, get the random sequences
// only); each must give the result of the unsplit plain feed. Plain bodies are also cut short (complete=false) at every offset
// in splitOffsets. Above everyOffsetMax bytes (only the 36 KB embeddings
// body), offsets are every one in the first and last 4 KiB and every 7th
// in between: the middle of a float array has nothing new to split. With
// -short or -race (tenfold slower) bodies over 2 KiB stride the same way
// with every 23rd offset in between, so `go test -race` stays quick; the
// plain `go test` run is the exhaustive one.
func TestChunkSplitProperty(t *testing.T) {
	for i, sc := range splitCases(t) {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(i), 2))
			plain := []byte(sc.body)
			ref := feedChunks(sc.opts, plain, nil, true)
			for enc, body := range encodings(t, plain) {
				opts := sc.opts
				opts.ContentEncoding = contentEncoding(enc)
				if got := feedChunks(opts, body, nil, true); !cmp.Equal(ref, got) {
					t.Fatalf("encoding %q differs from the plain body (-plain +%s):\n%s", enc, enc, cmp.Diff(ref, got))
				}
				offsets := splitOffsets(len(body))
				if enc == "deflate" || enc == "deflate-raw" {
					offsets = nil // the same hand-over as gzip: random cuts suffice
				}
				for _, i := range offsets {
					got := feedChunks(opts, body, []int{i}, true)
					if !cmp.Equal(ref, got) {
						t.Fatalf("encoding %q split at %d (-whole +split):\n%s", enc, i, cmp.Diff(ref, got))
					}
				}
				rounds := 20
				if enc != "" {
					rounds = 6
				}
				for r := range rounds {
					cuts := randomCuts(rng, len(body), r)
					got := feedChunks(opts, body, cuts, true)
					if !cmp.Equal(ref, got) {
						t.Fatalf("encoding %q cuts %v (-whole +split):\n%s", enc, cuts, cmp.Diff(ref, got))
					}
				}
			}
			// A body cut short after n bytes reads the same whether those
			// bytes came in one chunk or two.
			for _, n := range splitOffsets(len(plain)) {
				if n%5 != 0 && len(plain) > 4096 {
					continue
				}
				want := feedChunks(sc.opts, plain[:n], nil, false)
				got := feedChunks(sc.opts, plain[:n], []int{n / 2}, false)
				if !cmp.Equal(want, got) {
					t.Fatalf("cut at %d, split at %d (-whole +split):\n%s", n, n/2, cmp.Diff(want, got))
				}
			}
		})
	}
}

const everyOffsetMax = 16 << 10

// splitOffsets returns the offsets in (0, n) to split a body of n bytes at.
func splitOffsets(n int) []int {
	every, edge, stride := everyOffsetMax, 4096, 7
	if testenv.Race || testing.Short() {
		every, edge, stride = 2048, 1024, 23
	}
	var out []int
	for i := 1; i < n; i++ {
		if n <= every || i < edge || i >= n-edge || i%stride == 0 {
			out = append(out, i)
		}
	}
	return out
}

// randomCuts returns ascending cut offsets in (0, n): round 0 cuts every
// byte (1-byte chunks), round 1 every 2 bytes, the others at random.
func randomCuts(rng *rand.Rand, n, round int) []int {
	var cuts []int
	switch round {
	case 0, 1:
		for i := round + 1; i < n; i += round + 1 {
			cuts = append(cuts, i)
		}
		return cuts
	}
	for i := 0; ; {
		i += 1 + rng.IntN(max(2, n/(1+rng.IntN(40))))
		if i >= n {
			return cuts
		}
		cuts = append(cuts, i)
	}
}
