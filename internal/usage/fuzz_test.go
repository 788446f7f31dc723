package usage

import (
	"bytes"
	"compress/gzip"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/tokens"
)

// The fuzz targets feed arbitrary bytes, as a provider (or anything in
// between) could send them, in random chunks; the endpoint byte picks the
// schema (modulo 6) and the total_tokens rule (the parity of its sixes).
// Invariants: no panic; the result does not depend on the chunking nor on
// gzip; counts are sane, and parts are at most their wholes.
// Their seed corpus is the recorded and hand-written bodies (added below)
// plus the inputs checked in under testdata/fuzz.

func FuzzMeterSSE(f *testing.F) {
	for _, sc := range seedCases(f) {
		if sc.opts.Stream {
			f.Add([]byte(sc.body), uint64(len(sc.body)), uint8(sc.opts.Endpoint))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, seed uint64, endpoint uint8) {
		checkMeter(t, Options{
			Endpoint: llmapi.Endpoint(endpoint % 6), Stream: true, ContentType: "text/event-stream",
			Model: "gpt-4o", MaxJSONBytes: 4 << 10, TotalExcess: TotalExcess(endpoint / 6 % 2),
		}, body, seed)
	})
}

func FuzzMeterJSON(f *testing.F) {
	for _, sc := range seedCases(f) {
		if !sc.opts.Stream {
			f.Add([]byte(sc.body), uint64(len(sc.body)), uint8(sc.opts.Endpoint))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, seed uint64, endpoint uint8) {
		checkMeter(t, Options{
			Endpoint: llmapi.Endpoint(endpoint % 6), ContentType: "application/json",
			Model: "gpt-4o", MaxJSONBytes: 4 << 10, TotalExcess: TotalExcess(endpoint / 6 % 2),
		}, body, seed)
	})
}

// seedCases are the bodies under 4 KiB: larger ones make the fuzzer's
// minimisation crawl, and excerpts of the large fixtures are in
// testdata/fuzz.
func seedCases(f *testing.F) []splitCase {
	var cases []splitCase
	for _, sc := range handWritten() {
		if len(sc.body) <= 4<<10 {
			cases = append(cases, sc)
		}
	}
	for _, c := range loadCassettesOrNone(f) {
		if len(c.Body) <= 4<<10 {
			cases = append(cases, splitCase{name: c.Name, opts: c.options(), body: c.Body})
		}
	}
	return cases
}

// gzipWriters saves the fuzzer allocating a compressor (~1 MB) per input.
var gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(nil) }}

var labelRE = regexp.MustCompile(`^[a-z0-9_.-]{0,64}$`)

func checkMeter(t *testing.T, opts Options, body []byte, seed uint64) {
	whole := feedChunks(opts, body, nil, seed%2 == 0)
	rng := rand.New(rand.NewPCG(seed, seed>>32))
	var cuts []int
	for i := 0; len(body) > 1; {
		i += 1 + rng.IntN(1+len(body)/(1+rng.IntN(8)))
		if i >= len(body) {
			break
		}
		cuts = append(cuts, i)
	}
	if got := feedChunks(opts, body, cuts, seed%2 == 0); !cmp.Equal(whole, got) {
		t.Fatalf("cuts %v (-whole +chunked):\n%s", cuts, cmp.Diff(whole, got))
	}
	if len(body) <= 16<<10 && seed%4 == 1 {
		var b bytes.Buffer
		w := gzipWriters.Get().(*gzip.Writer)
		w.Reset(&b)
		_, _ = w.Write(body) // writes to a bytes.Buffer cannot fail
		_ = w.Close()
		gzipWriters.Put(w)
		zopts := opts
		zopts.ContentEncoding = "gzip"
		zcuts := cuts[:0:0]
		for _, c := range cuts {
			if c < b.Len() {
				zcuts = append(zcuts, c)
			}
		}
		if got := feedChunks(zopts, b.Bytes(), zcuts, seed%2 == 0); !cmp.Equal(whole, got) {
			t.Fatalf("gzip, cuts %v (-plain +gzip):\n%s", zcuts, cmp.Diff(whole, got))
		}
	}
	r := whole
	if r.Usage[tokens.Input] < 0 || r.Usage[tokens.Output] < 0 || r.Usage[tokens.CachedInput] < 0 || r.Usage[tokens.CacheWrite] < 0 ||
		r.Usage[tokens.Reasoning] < 0 || r.Usage[tokens.CacheWrite1h] < 0 || r.Usage[tokens.AudioInput] < 0 || r.Usage[tokens.AudioOutput] < 0 ||
		r.Events < 0 || r.OutputTextRunes < 0 {
		t.Fatalf("negative count: %+v", r)
	}
	if r.Usage[tokens.CachedInput]+r.Usage[tokens.CacheWrite] > r.Usage[tokens.Input] || r.Usage[tokens.Reasoning] > r.Usage[tokens.Output] ||
		r.Usage[tokens.CacheWrite1h] > r.Usage[tokens.CacheWrite] || r.Usage[tokens.AudioInput] > r.Usage[tokens.Input] ||
		r.Usage[tokens.AudioOutput] > r.Usage[tokens.Output] ||
		r.Usage[tokens.Input] > 3*maxCount || r.Usage[tokens.CacheWrite] > maxCount || r.Usage[tokens.Output] > maxCount && r.Reported {
		t.Fatalf("inconsistent counts: %+v", r)
	}
	if !r.Reported && !r.Estimated {
		t.Fatalf("neither reported nor estimated: %+v", r)
	}
	if r.Unparsed && r.Reported {
		t.Fatalf("unparsed yet reported: %+v", r)
	}
	switch {
	case r.Err == "", strings.HasPrefix(r.Err, "gzip: "):
	case r.Err == CodeEmptyBody, r.Err == CodeNotJSON, r.Err == CodeNotSSE, r.Err == CodeBadJSON,
		r.Err == CodeTruncatedJSON, r.Err == CodeBodyTooLarge, r.Err == CodeEventTooLarge, r.Err == CodeBadUsage:
	default:
		t.Fatalf("unknown Err %q", r.Err)
	}
	if !labelRE.MatchString(r.ProviderError) {
		t.Fatalf("ProviderError %q is not a label", r.ProviderError)
	}
}
