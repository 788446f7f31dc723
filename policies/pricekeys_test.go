package policies

import (
	"reflect"
	"slices"
	"testing"

	"github.com/sluicegw/sluice/internal/tokens"
)

// TestPriceKeysAreTheKinds: a pricing entry has a key per kind of token,
// named as the kinds' table says (tokens.Names.Price), and Rates a rate
// for each: a new kind without its price key fails here.
func TestPriceKeysAreTheKinds(t *testing.T) {
	var keys []string
	typ := reflect.TypeFor[Price]()
	for i := range typ.NumField() {
		switch tag := typ.Field(i).Tag.Get("yaml"); tag {
		case "long_context", "per_request":
		default:
			keys = append(keys, tag)
		}
	}
	var kinds []string
	for _, k := range tokens.All() {
		kinds = append(kinds, k.Names().Price)
	}
	slices.Sort(keys)
	slices.Sort(kinds)
	if !slices.Equal(keys, kinds) {
		t.Errorf("pricing keys %v, want the kinds' %v", keys, kinds)
	}
	// Every rate is set, each from the key of its kind.
	one := int64(1)
	p := Price{Input: 10, CachedInput: 2, CacheWrite: &one, CacheWrite1h: &one, AudioInput: &one, Output: 30, Reasoning: &one, AudioOutput: &one}
	r := p.Rates(0)
	for _, k := range tokens.All() {
		field, ok := typ.FieldByNameFunc(func(name string) bool {
			f, _ := typ.FieldByName(name)
			return f.Tag.Get("yaml") == k.Names().Price
		})
		if !ok {
			t.Fatalf("kind %s: no Price field", k)
		}
		v := reflect.ValueOf(p).FieldByIndex(field.Index)
		if v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		if got := r[k]; got != v.Int() {
			t.Errorf("Rates()[%s] = %d, want %s's %d", k, got, field.Name, v.Int())
		}
	}
}
