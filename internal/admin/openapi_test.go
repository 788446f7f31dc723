package admin

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/internal/testenv"
	"github.com/sluicegw/sluice/internal/tokens"
	"github.com/sluicegw/sluice/policies"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const openAPIFile = "../../docs/admin-api.openapi.yaml"

// methods are the operation keys of an OpenAPI path item.
var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// routeOnlyServer is a server whose dependencies are never called: enough
// to list and route its patterns.
func routeOnlyServer(t *testing.T) *Server {
	t.Helper()
	s, err := New(Deps{
		Gatherer:   prometheus.NewRegistry(),
		Ready:      func() error { return nil },
		Log:        testenv.Quiet(),
		Policy:     func() *policies.Snapshot { return nil },
		Keys:       struct{ store.Store }{},
		Groups:     struct{ store.Store }{},
		Principals: (*keyring.Ring)(nil),
		Budgets:    (*admission.Local)(nil),
		Spend:      struct{ ledger.Reader }{},
		Now:        time.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOpenAPIMatchesRoutes: every route the server serves is an operation
// of docs/admin-api.openapi.yaml and every operation is a route the mux
// dispatches to; every $ref resolves; every /v1 operation documents the
// 401 and 403 that guard answers for it, every /debug/pprof/ one the 401
// and the 404 (pprof off) that pprofGate answers.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	data, err := os.ReadFile(openAPIFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", openAPIFile, err)
	}
	if v, _ := doc["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		t.Errorf("openapi = %q; want 3.1.x", v)
	}
	paths, ok := doc["paths"].(map[string]any)
	if !ok {
		t.Fatalf("%s has no paths", openAPIFile)
	}
	var documented []string
	for path, item := range paths {
		ops, _ := item.(map[string]any)
		for _, m := range methods {
			op, ok := ops[m].(map[string]any)
			if !ok {
				continue
			}
			documented = append(documented, strings.ToUpper(m)+" "+path)
			var codes []string
			switch {
			case strings.HasPrefix(path, "/v1/"):
				codes = []string{"401", "403"}
			case strings.HasPrefix(path, "/debug/pprof/"):
				codes = []string{"401", "404"}
			}
			responses, _ := op["responses"].(map[string]any)
			for _, code := range codes {
				if _, ok := responses[code]; !ok {
					t.Errorf("%s %s does not document %s", strings.ToUpper(m), path, code)
				}
			}
		}
	}
	s := routeOnlyServer(t)
	// OpenAPI has no {$}: "GET /debug/pprof/{$}" is the path "/debug/pprof/".
	var served []string
	for _, p := range s.patterns {
		served = append(served, strings.TrimSuffix(p, "{$}"))
	}
	slices.Sort(documented)
	slices.Sort(served)
	if diff := cmp.Diff(served, documented); diff != "" {
		t.Errorf("routes served (-) versus operations documented (+):\n%s", diff)
	}

	// Each documented operation reaches the handler of the same pattern
	// through the real mux: the path templates mean the same in both.
	for _, op := range documented {
		method, path, _ := strings.Cut(op, " ")
		var mux *http.ServeMux
		switch {
		case strings.HasPrefix(path, "/v1/"):
			mux = s.api
		case strings.HasPrefix(path, "/debug/pprof/"):
			mux = s.pprof
		default:
			continue
		}
		concrete := strings.NewReplacer("{id}", "key_x", "{name}", "n", "{profile}", "heap").Replace(path)
		_, pattern := mux.Handler(httptest.NewRequest(method, concrete, nil))
		if pattern = strings.Replace(pattern, "{$}", "", 1); pattern != op {
			t.Errorf("%s %s routes to %q; want %q", method, concrete, pattern, op)
		}
	}

	// Every $ref points at something in the document.
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				if !resolves(doc, ref) {
					t.Errorf("$ref %q does not resolve", ref)
				}
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(doc)
}

// resolves reports whether a local JSON pointer ("#/components/x/y")
// names a node of doc.
func resolves(doc map[string]any, ref string) bool {
	rest, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return false
	}
	var node any = doc
	for _, seg := range strings.Split(rest, "/") {
		m, ok := node.(map[string]any)
		if !ok {
			return false
		}
		if node, ok = m[seg]; !ok {
			return false
		}
	}
	return true
}

// TestOpenAPISchemasMatchJSON: the schemas of what the budgets and spend
// routes answer list exactly the fields the server writes, and require
// every field it always writes (no omitempty), the exact pico-dollar
// amounts among them.
func TestOpenAPISchemasMatchJSON(t *testing.T) {
	data, err := os.ReadFile(openAPIFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Required   []string       `yaml:"required"`
				Properties map[string]any `yaml:"properties"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]any{"BudgetStatus": budgetStatusJSON{}, "Total": ledger.Total{}} {
		schema, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("%s: no schema %s", openAPIFile, name)
			continue
		}
		var fields, always []string
		var walk func(typ reflect.Type)
		walk = func(typ reflect.Type) {
			for i := range typ.NumField() {
				f := typ.Field(i)
				switch {
				case f.Anonymous:
					walk(f.Type)
					continue
				case f.Type == reflect.TypeFor[tokens.Counts]():
					// A field per kind of token.
					for _, k := range tokens.All() {
						fields = append(fields, k.Names().JSON)
						always = append(always, k.Names().JSON)
					}
					continue
				}
				tag := f.Tag.Get("json")
				field, opts, _ := strings.Cut(tag, ",")
				fields = append(fields, field)
				if !strings.Contains(opts, "omitempty") {
					always = append(always, field)
				}
			}
		}
		if _, ok := v.(json.Marshaler); ok {
			// Written by its MarshalJSON, every field always: read them
			// off what it writes.
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			var o map[string]json.RawMessage
			if err := json.Unmarshal(b, &o); err != nil {
				t.Fatal(err)
			}
			fields = slices.Collect(maps.Keys(o))
			always = slices.Clone(fields)
		} else {
			walk(reflect.TypeOf(v))
		}
		slices.Sort(fields)
		slices.Sort(always)
		documented := slices.Sorted(maps.Keys(schema.Properties))
		if diff := cmp.Diff(fields, documented); diff != "" {
			t.Errorf("schema %s: properties differ from the JSON the server writes (-server +schema):\n%s", name, diff)
		}
		required := slices.Sorted(slices.Values(schema.Required))
		if diff := cmp.Diff(always, required); diff != "" {
			t.Errorf("schema %s: required differs from the fields always written (-server +schema):\n%s", name, diff)
		}
	}
}
