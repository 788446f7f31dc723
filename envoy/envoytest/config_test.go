package envoytest

import (
	"strings"
	"testing"
	"time"
)

func TestLoadBootstrap(t *testing.T) {
	b, err := LoadBootstrap("testdata/bootstrap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(b, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.conns.close()
	cfg := e.cfg.Load()
	if cfg.listenAddr != "127.0.0.1:0" || cfg.bufferLimit != 4<<20 {
		t.Errorf("listener %q buffer %d", cfg.listenAddr, cfg.bufferLimit)
	}
	if len(cfg.filters) != 1 || cfg.filters[0].filterName() != "envoy.filters.http.ext_authz" {
		t.Fatalf("filters %v", cfg.filters)
	}
	if a := cfg.filters[0].(*authzFilter); a.timeout != 200*time.Millisecond || a.svc.cluster != cfg.clusters["sluice"] {
		t.Errorf("authz timeout %s cluster %v", a.timeout, a.svc.cluster)
	}
	if !cfg.clusters["sluice"].http2 || cfg.clusters["provider"].http2 {
		t.Error("http2 flags wrong")
	}
	m := cfg.routes.match(NewHeaders(":authority", "x", ":path", "/v1/chat/completions"))
	if m == nil || m.cluster != "provider" || m.timeout != 0 {
		t.Errorf("route %+v (timeout 0s must disable the route timeout)", m)
	}
}

func TestParseBootstrapErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"static_resources: [", "parse bootstrap"},
		{"static_resources: {listeners: [{name: x, bogus: 1}]}", "unknown field"},
		{`static_resources: {listeners: [{name: x, filter_chains: [{filters: [{name: f, typed_config: {"@type": "type.googleapis.com/not.A.Type"}}]}]}]}`, "not.A.Type"},
	} {
		_, err := ParseBootstrap([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

func TestHeadersInlineJoin(t *testing.T) {
	h := &Headers{}
	h.Add(":path", "/")
	h.Add("a", "1")
	h.Add(":method", "GET")
	if got := h.Entries(); got[0].Key != ":path" || got[1].Key != ":method" || got[2].Key != "a" {
		t.Errorf("pseudo-headers must come first: %v", got)
	}
	h.Add("a", "2")
	if v, _ := h.Joined("a"); v != "1,2" {
		t.Errorf("Joined = %q", v)
	}
	h.Set("a", "3")
	if vs := h.Values("a"); len(vs) != 1 || vs[0] != "3" {
		t.Errorf("Set left %v", vs)
	}
	h.AppendCopy("absent", "x")
	if _, ok := h.Get("absent"); ok {
		t.Error("AppendCopy added an absent header")
	}
}
