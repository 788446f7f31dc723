package keyring

import (
	"reflect"
	"testing"
	"time"

	"github.com/sluicegw/sluice/policies"
)

// TestRowHoldsNoPointers: a table's rows and names are memory the
// collector never scans, however many keys there are (gcpace counts on
// it), so a row must hold no pointer, string, slice, map or interface.
func TestRowHoldsNoPointers(t *testing.T) {
	var check func(path string, ty reflect.Type)
	check = func(path string, ty reflect.Type) {
		switch ty.Kind() {
		case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
			reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		case reflect.Array:
			check(path+"[]", ty.Elem())
		case reflect.Struct:
			for i := range ty.NumField() {
				check(path+"."+ty.Field(i).Name, ty.Field(i).Type)
			}
		default:
			t.Errorf("row%s is a %s: the collector would scan every row", path, ty.Kind())
		}
	}
	check("", reflect.TypeFor[row]())
}

// TestBuilderKeepsEveryField: a record added to a table reads back the
// same, its shared values numbered once, and a record whose hash or id an
// earlier one has is reported and left out.
func TestBuilderKeepsEveryField(t *testing.T) {
	in := newInterner()
	lim := in.internLimits(policies.Limits{Requests: policies.RateLimits{PerMinute: 5}})
	mods := in.internModels(mustModels(t, "gpt-*"))
	exp := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	recs := []keyRec{
		{hash: [32]byte{1}, team: "red", models: mods, limits: lim, times: newKeyTimes(exp, time.Time{}), rev: 0},
		{hash: [32]byte{2}, team: "blue", times: newKeyTimes(time.Time{}, exp), rev: 7},
		{hash: [32]byte{3}, team: "red", models: mods, limits: lim, rev: 9},
		{hash: [32]byte{1}, team: "red", rev: 10}, // the first's hash
		{hash: [32]byte{4}, team: "red", rev: 11}, // the second's id
	}
	recs[0].setNames("config:a", "", "a")
	recs[1].setNames("key_b", "sk-sluice-bbbb", "")
	recs[2].setNames("key_c", "sk-sluice-cccc", "the c key")
	recs[3].setNames("key_d", "sk-sluice-dddd", "d")
	recs[4].setNames("key_b", "sk-sluice-eeee", "e")
	b := newBuilder(0)
	for i := range recs {
		b.add(&recs[i])
	}
	var dups [][2]string
	tb := b.build(func(r, by *keyRec) { dups = append(dups, [2]string{r.id(), by.id()}) })
	if want := [][2]string{{"key_d", "config:a"}, {"key_b", "key_b"}}; !reflect.DeepEqual(dups, want) {
		t.Errorf("duplicates reported: %v, want %v", dups, want)
	}
	if tb.len() != 3 || tb.declared() != 1 {
		t.Fatalf("table holds %d rows, %d declared; want 3, 1", tb.len(), tb.declared())
	}
	if len(tb.teams) != 3 || len(tb.models) != 2 || len(tb.limits) != 2 {
		t.Errorf("shared values: %d teams, %d allow-lists, %d limits; want each numbered once (3, 2, 2)", len(tb.teams), len(tb.models), len(tb.limits))
	}
	for i, want := range recs[:3] {
		j := tb.findHash(want.hash)
		if j < 0 || tb.findID(want.id()) != j {
			t.Fatalf("record %d: by hash %d, by id %d", i, j, tb.findID(want.id()))
		}
		got := tb.rec(j)
		if got.id() != want.id() || got.prefix() != want.prefix() || got.name() != want.name() || got.team != want.team ||
			got.models != want.models || got.limits != want.limits || got.times != want.times || got.rev != want.rev {
			t.Errorf("record %d reads back as %+v, want %+v", i, got, want)
		}
	}
	if tb.findHash([32]byte{9}) >= 0 || tb.findID("key_x") >= 0 {
		t.Error("a key the table does not hold was found")
	}
}

func mustModels(t *testing.T, patterns ...string) policies.ModelSet {
	t.Helper()
	s, err := policies.NewModelSet(patterns)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
