package wiredecode

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

var writeSeeds = flag.Bool("seeds", false, "rewrite the fuzz seed corpora under testdata/fuzz from the realistic messages")

// FuzzProcessingRequest: for any bytes, the decoder's ProcessingRequest,
// with and without skipContext, is proto.Unmarshal's whenever it
// decodes, and it never panics.
func FuzzProcessingRequest(f *testing.F) {
	for _, s := range seeds(f, prDesc) {
		f.Add(s.b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkProcessingRequest(t, b) })
}

// FuzzCheckRequest: for any bytes, the decoder's CheckRequest is
// proto.Unmarshal's whenever it decodes, and it never panics.
func FuzzCheckRequest(f *testing.F) {
	for _, s := range seeds(f, checkDesc) {
		f.Add(s.b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkCheckRequest(t, b) })
}

// seeds are the realistic messages of the kind md describes, and of
// each some variants: shuffled at every depth, a field repeated, a
// varint padded, two concatenated.
func seeds(t testing.TB, md protoreflect.MessageDescriptor) []sample {
	var out, base []sample
	for _, s := range envoySamples(t) {
		if s.desc == md {
			base = append(base, s)
		}
	}
	g := newGen(3)
	for i, s := range base {
		out = append(out, sample{name: fmt.Sprintf("envoy-%02d", i), b: s.b})
	}
	for i, s := range base[:3] {
		out = append(out,
			sample{name: fmt.Sprintf("shuffled-%02d", i), b: shuffle(g, s.b, md)},
			sample{name: fmt.Sprintf("repeated-%02d", i), b: duplicate(g, s.b, md)},
			sample{name: fmt.Sprintf("padded-%02d", i), b: padVarint(g, s.b, md)},
		)
	}
	out = append(out, sample{name: "concatenated", b: append(bytes.Clone(base[0].b), base[1].b...)})
	return out
}

// TestFuzzSeeds: the checked-in corpora hold the seeds (go test
// -run TestFuzzSeeds -seeds rewrites them).
func TestFuzzSeeds(t *testing.T) {
	for name, md := range map[string]protoreflect.MessageDescriptor{"FuzzProcessingRequest": prDesc, "FuzzCheckRequest": checkDesc} {
		dir := filepath.Join("testdata", "fuzz", name)
		for _, s := range seeds(t, md) {
			file := filepath.Join(dir, s.name)
			want := "go test fuzz v1\n[]byte(" + strconv.Quote(string(s.b)) + ")\n"
			if *writeSeeds {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got, err := os.ReadFile(file)
			if err != nil || string(got) != want {
				t.Errorf("%s: missing or stale (err %v); rewrite with go test -run TestFuzzSeeds -seeds", file, err)
			}
		}
	}
}
