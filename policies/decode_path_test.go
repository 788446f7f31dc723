package policies

import (
	"math/rand/v2"
	"testing"
)

// TestPathTextIsThePathHelpers checks that the decoder's path of segments
// reads as the path helpers the checks use would write it.
func TestPathTextIsThePathHelpers(t *testing.T) {
	names := []string{"keys", "limits", "gpt-4.1", "", "a b", `x"y`, "models", "per_minute", "é", "[0]"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var segs []pathSeg
		want := ""
		for range r.IntN(6) {
			seg := pathSeg{name: names[r.IntN(len(names))], index: r.IntN(1000), kind: pathKind(r.IntN(3))}
			segs = append(segs, seg)
			switch seg.kind {
			case pathField:
				want = fieldPath(want, seg.name)
			case pathKey:
				want = keyPath(want, seg.name)
			case pathIndex:
				want = indexPath(want, seg.index)
			}
		}
		d := &decoder{path: segs}
		if got := d.pathText(); got != want {
			t.Fatalf("segments %+v: %q, want %q", segs, got, want)
		}
	}
}
