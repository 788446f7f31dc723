package policies

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/providerkind"
)

func compileFile(t *testing.T, file string) *Snapshot {
	t.Helper()
	cfg, err := Load(file, lookupTestEnv)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Compile(cfg, file)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCompile(t *testing.T) {
	s := compileFile(t, "testdata/good/full.yaml")

	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.SQLitePath(), filepath.Join(wd, "testdata/good/data/sluice.db"); got != want {
		t.Errorf("SQLitePath() = %q, want %q", got, want)
	}
	if got, want := s.Listen(), (Listen{GRPC: "127.0.0.1:9001", XDS: "127.0.0.1:18000", Admin: "127.0.0.1:9090", Envoy: "0.0.0.0:10000"}); got != want {
		t.Errorf("Listen() = %+v, want %+v", got, want)
	}
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(s.Version()) {
		t.Errorf("Version() = %q, want 16 hex characters", s.Version())
	}

	openai, ok := s.Provider("openai")
	if !ok || openai.BaseURL != "https://api.openai.com" || openai.APIKey.Reveal() != "sk-test-SECRET-openai" {
		t.Errorf("Provider(openai) = %+v, %v", openai, ok)
	}
	if p, ok := s.Provider("nope"); ok || p != nil {
		t.Errorf("Provider(nope) = %v, %v; want nil, false", p, ok)
	}

	// route is the part of a ModelRoute the table compares: providers by
	// name (their settings are checked in TestProviderDefaults).
	type route struct {
		Name, Upstream, Provider, Routing string
		Aliases                           []string
		Targets                           []string // provider=upstream
		Price                             Price
		Priced                            bool
	}
	view := func(r *ModelRoute) *route {
		if r == nil {
			return nil
		}
		v := &route{Name: r.Name, Upstream: r.Upstream, Provider: r.Provider.Name, Routing: r.Routing, Aliases: r.Aliases, Price: r.Price, Priced: r.Priced}
		for _, t := range r.Targets {
			v.Targets = append(v.Targets, t.Provider.Name+"="+t.Upstream)
		}
		return v
	}
	gpt4o := &route{Name: "gpt-4o", Aliases: []string{"gpt4o", "gpt-4o-latest"}, Upstream: "gpt-4o", Provider: "openai", Routing: RoutingPriority,
		Targets: []string{"openai=gpt-4o"}, Price: Price{Input: 2500000, CachedInput: 1250000, Output: 10000000}, Priced: true}
	modelTests := []struct {
		ask  string
		want *route
	}{
		{"gpt-4o", gpt4o},
		{"gpt-4o-latest", gpt4o},
		{"sonnet", &route{Name: "claude-sonnet-4", Aliases: []string{"sonnet"}, Upstream: "claude-sonnet-4-20250514", Provider: "anthropic", Routing: RoutingPriority,
			Targets: []string{"anthropic=claude-sonnet-4-20250514"}, Price: Price{Input: 3000000, CachedInput: 300000, Output: 15000000}, Priced: true}},
		{"azure/gpt-4o", &route{Name: "azure/gpt-4o", Upstream: "gpt4o-deployment", Provider: "azure-eu", Routing: RoutingPriority,
			Targets: []string{"azure-eu=gpt4o-deployment"}}},
		{"llama3.1:8b", &route{Name: "meta-llama/Llama-3.1-8B-Instruct", Aliases: []string{"llama3.1:8b"}, Upstream: "meta-llama/Llama-3.1-8B-Instruct", Provider: "vllm", Routing: RoutingPriority,
			Targets: []string{"vllm=meta-llama/Llama-3.1-8B-Instruct"}}},
		{"GPT-4o", nil},
		{"upstream-only", nil},
	}
	for _, tt := range modelTests {
		got, ok := s.Model(tt.ask)
		if ok != (tt.want != nil) {
			t.Errorf("Model(%q) ok = %v", tt.ask, ok)
		}
		if diff := cmp.Diff(tt.want, view(got), cmpEmpty); diff != "" {
			t.Errorf("Model(%q) (-want +got):\n%s", tt.ask, diff)
		}
	}
	if p, _ := s.Provider("anthropic"); p.AnthropicVersion != providerkind.DefaultAnthropicVersion {
		t.Errorf("anthropic provider's AnthropicVersion = %q, want the default", p.AnthropicVersion)
	}
	// Each provider's kind is a known one: the request path maps it to
	// its adapter (provider.For) without checking it again.
	for _, p := range s.Providers() {
		if !p.Kind.Known() {
			t.Errorf("provider %q: kind %q is not known", p.Name, p.Kind)
		}
	}
	if r, _ := s.Model("gpt4o"); r.Provider != openai {
		t.Error("routes do not share the snapshot's provider")
	}

	if diff := cmp.Diff([]string{"azure/gpt-4o", "claude-sonnet-4", "gpt-4o", "gpt-4o-mini", "meta-llama/Llama-3.1-8B-Instruct"}, s.ModelNames()); diff != "" {
		t.Errorf("ModelNames (-want +got):\n%s", diff)
	}
	if !s.Org("acme") || s.Org("globex") {
		t.Errorf("Org(acme), Org(globex) = %v, %v; want true, false", s.Org("acme"), s.Org("globex"))
	}

	platformModels, _ := NewModelSet([]string{"gpt-4o*", "sonnet", "meta-llama/*"})
	wantTeams := []TeamPolicy{
		{Name: "platform", Org: "acme", Models: platformModels, Limits: Limits{Requests: RateLimits{PerMinute: 600, PerDay: 100000}}},
		{Name: "research"},
	}
	cmpSets := cmp.Comparer(func(a, b ModelSet) bool { return cmp.Equal(a.Patterns(), b.Patterns()) })
	if diff := cmp.Diff(wantTeams, s.Teams(), cmpSets); diff != "" {
		t.Errorf("Teams (-want +got):\n%s", diff)
	}
	if team, ok := s.Team("research"); !ok || team.Name != "research" || !team.Models.Unrestricted() {
		t.Errorf("Team(research) = %+v, %v", team, ok)
	}
	if _, ok := s.Team("nope"); ok {
		t.Error("Team(nope) found")
	}

	ciModels, _ := NewModelSet([]string{"gpt-4o-mini"})
	wantKeys := []KeyPolicy{
		{ID: "config:ci-bot", Name: "ci-bot", Team: "platform", Prefix: "sk-sluice-ci", Hash: sha256Bytes(t, hashFoo),
			Models: ciModels, Limits: Limits{Requests: RateLimits{PerMinute: 60}}, ExpiresAt: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
		{ID: "config:notebook", Name: "notebook", Team: "research", Hash: sha256Bytes(t, hashBar)},
	}
	if diff := cmp.Diff(wantKeys, s.DeclaredKeys(), cmpSets); diff != "" {
		t.Errorf("DeclaredKeys (-want +got):\n%s", diff)
	}
	var each []KeyPolicy
	s.EachDeclaredKey(func(k *KeyPolicy) { each = append(each, *k) })
	if diff := cmp.Diff(wantKeys, each, cmpSets); diff != "" {
		t.Errorf("EachDeclaredKey (-want +got):\n%s", diff)
	}
	for _, want := range wantKeys {
		if got, ok := s.DeclaredKey(want.ID); !ok || !cmp.Equal(want, got, cmpSets) {
			t.Errorf("DeclaredKey(%q) = %+v, %v; want %+v", want.ID, got, ok, want)
		}
	}
	for _, id := range []string{"config:nope", "ci-bot", "", "config:"} {
		if k, ok := s.DeclaredKey(id); ok {
			t.Errorf("DeclaredKey(%q) found %+v", id, k)
		}
	}
}

// TestDeclaredKeysComeBackAsDeclared: the snapshot keeps declared keys
// as compact rows (declared.go); each comes back with exactly the fields
// it was declared with, empty and nil alike, whatever its neighbours.
func TestDeclaredKeysComeBackAsDeclared(t *testing.T) {
	expiry := time.Date(2027, 3, 4, 5, 6, 7, 8, time.FixedZone("x", 3600))
	c := validConfig()
	c.Teams = append(c.Teams, Team{Name: "research", Org: "acme"})
	c.Keys = []DeclaredKey{
		{Name: "a", Team: "platform", SHA256: hashFoo, Prefix: "sk-sluice-aaaa"},
		{Name: "ab", Team: "research", SHA256: hashBar},
		{Name: "b", Team: "platform", SHA256: strings.Repeat("0", 64), Prefix: "sk-sluice-", Models: []string{"gpt-4o"},
			Limits: Limits{Budgets: []Budget{}}, ExpiresAt: &expiry},
		{Name: "c", Team: "research", SHA256: strings.Repeat("f", 64),
			Limits: Limits{Tokens: TokenLimits{Total: RateLimits{PerHour: 1 << 62}}, Models: map[string]Limits{"gpt-4o": {Requests: RateLimits{PerDay: 1}}}}},
		{Name: "d", Team: "platform", SHA256: strings.Repeat("1", 64), Models: []string{"gpt-4o"}, ExpiresAt: &expiry},
	}
	s, err := Compile(c, "sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cmpSets := cmp.Comparer(func(a, b ModelSet) bool { return cmp.Equal(a.Patterns(), b.Patterns()) })
	got := s.DeclaredKeys()
	if len(got) != len(c.Keys) || s.DeclaredKeyCount() != len(c.Keys) {
		t.Fatalf("%d keys (count %d), want %d", len(got), s.DeclaredKeyCount(), len(c.Keys))
	}
	for i, k := range c.Keys {
		set, _ := NewModelSet(k.Models)
		want := KeyPolicy{ID: "config:" + k.Name, Name: k.Name, Team: k.Team, Prefix: k.Prefix, Hash: sha256Bytes(t, k.SHA256), Models: set, Limits: k.Limits}
		if k.ExpiresAt != nil {
			want.ExpiresAt = *k.ExpiresAt
		}
		if diff := cmp.Diff(want, got[i], cmpSets); diff != "" {
			t.Errorf("keys[%d] (-want +got):\n%s", i, diff)
		}
		if one, ok := s.DeclaredKey(want.ID); !ok || !cmp.Equal(want, one, cmpSets) {
			t.Errorf("DeclaredKey(%q) = %+v, %v", want.ID, one, ok)
		}
	}
	if got[2].Limits.Budgets == nil || got[0].Limits.Budgets != nil {
		t.Error("an empty budget list and none are told apart no longer")
	}
	if got[2].ExpiresAt.Location() != expiry.Location() {
		t.Error("the expiry lost its zone")
	}
}

// TestEachDeclaredKeySharesEqualSets checks that keys with the same
// allow-list get one set between them, which allows what each key's own
// would, and that every key is what DeclaredKeys makes.
func TestEachDeclaredKeySharesEqualSets(t *testing.T) {
	c := validConfig()
	c.Keys = []DeclaredKey{
		{Name: "a", Team: "platform", SHA256: hashFoo, Models: []string{"gpt-4o", "sonnet"}},
		{Name: "b", Team: "platform", SHA256: hashBar, Models: []string{"gpt-4o*"}},
		{Name: "c", Team: "platform", SHA256: strings.Repeat("a", 64), Models: []string{"gpt-4o", "sonnet"}},
		{Name: "d", Team: "platform", SHA256: strings.Repeat("b", 64)},
	}
	s, err := Compile(c, "sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var each []KeyPolicy
	s.EachDeclaredKey(func(k *KeyPolicy) { each = append(each, *k) })
	want := s.DeclaredKeys()
	if len(each) != len(want) {
		t.Fatalf("EachDeclaredKey gave %d keys, DeclaredKeys %d", len(each), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(want[i], each[i]) {
			t.Errorf("key %d: EachDeclaredKey gave %+v, DeclaredKeys %+v", i, each[i], want[i])
		}
	}
	if &each[0].Models.patterns[0] != &each[2].Models.patterns[0] {
		t.Error("keys a and c have the same allow-list but not one set")
	}
	for _, m := range []string{"gpt-4o", "sonnet", "gpt-4o-2024", "o3"} {
		if each[0].Models.Allows(m) != each[2].Models.Allows(m) || each[0].Models.Allows(m) != (m == "gpt-4o" || m == "sonnet") {
			t.Errorf("a and c disagree on %s, or allow it wrongly", m)
		}
		if got := each[1].Models.Allows(m); got != strings.HasPrefix(m, "gpt-4o") {
			t.Errorf("b allows %s: %v", m, got)
		}
	}
}

func sha256Bytes(t *testing.T, hexHash string) [32]byte {
	t.Helper()
	var h [32]byte
	if n, err := hex.Decode(h[:], []byte(hexHash)); err != nil || n != 32 {
		t.Fatalf("bad hash %q: %v", hexHash, err)
	}
	return h
}

func TestModelRouteAllowedBy(t *testing.T) {
	s := compileFile(t, "testdata/good/full.yaml")
	team, _ := s.Team("platform") // gpt-4o*, sonnet, meta-llama/*
	tests := []struct {
		model string
		want  bool
	}{
		{"gpt-4o", true},
		{"gpt4o", true},           // an alias of an allowed model
		{"claude-sonnet-4", true}, // allowed through its alias "sonnet"
		{"llama3.1:8b", true},     // alias of meta-llama/...
		{"azure/gpt-4o", false},
	}
	for _, tt := range tests {
		r, ok := s.Model(tt.model)
		if !ok {
			t.Fatalf("Model(%q) not found", tt.model)
		}
		if got := r.AllowedBy(team.Models); got != tt.want {
			t.Errorf("Model(%q).AllowedBy(platform) = %v, want %v", tt.model, got, tt.want)
		}
		if !r.AllowedBy(ModelSet{}) {
			t.Errorf("Model(%q).AllowedBy(zero set) = false", tt.model)
		}
	}
}

func TestCompileInvalid(t *testing.T) {
	c := validConfig()
	c.Models[0].Provider = "opnai"
	_, err := Compile(c, "sluice.yaml")
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("Compile = %v, want Problems", err)
	}
	if got, want := err.Error(), `sluice.yaml: models[0].provider: unknown provider "opnai" (did you mean "openai"?)`; got != want {
		t.Errorf("Compile error = %q, want %q", got, want)
	}
	if _, err := Compile(nil, ""); err == nil {
		t.Error("Compile(nil) succeeded")
	}
}

func TestSnapshotIsIsolatedFromItsSource(t *testing.T) {
	c := validConfig()
	s, err := Compile(c, "sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	version := s.Version()
	c.Providers[0].BaseURL = "https://changed"
	c.Models[0].Aliases[0] = "changed"
	c.Teams[0].Models[0] = "changed"
	c.Pricing["gpt-4o"] = Price{}
	c.Keys[0].Name, c.Keys[0].Prefix = "changed", "sk-sluice-changed"
	if p, _ := s.Provider("openai"); p.BaseURL != "https://api.openai.com" {
		t.Errorf("provider changed with its source: %q", p.BaseURL)
	}
	if _, ok := s.Model("gpt4o"); !ok {
		t.Error("alias changed with its source")
	}
	// The config without its keys, which the snapshot keeps apart.
	want := validConfig()
	keys := want.Keys
	want.Keys = nil
	if diff := cmp.Diff(want, s.Config()); diff != "" {
		t.Errorf("Config() changed with its source (-want +got):\n%s", diff)
	}
	got := s.DeclaredKeys()
	if len(got) != len(keys) || got[0].Name != keys[0].Name || got[0].Prefix != keys[0].Prefix {
		t.Errorf("DeclaredKeys changed with their source: %+v", got)
	}
	if s.Version() != version {
		t.Error("version changed")
	}
	names := s.ModelNames()
	names[0] = "changed"
	if s.ModelNames()[0] == "changed" {
		t.Error("ModelNames returns the snapshot's own slice")
	}
}

func TestVersion(t *testing.T) {
	version := func(change func(c *Config)) string {
		t.Helper()
		c := validConfig()
		change(c)
		s, err := Compile(c, "sluice.yaml")
		if err != nil {
			t.Fatal(err)
		}
		return s.Version()
	}
	v0 := version(func(*Config) {})
	if got := version(func(*Config) {}); got != v0 {
		t.Errorf("equal configs have versions %s and %s", v0, got)
	}
	if got := version(func(c *Config) { c.Orgs = []Org{{Name: "acme"}} }); got != v0 {
		t.Errorf("an equal copy has version %s, want %s", got, v0)
	}
	changes := map[string]func(c *Config){
		"rotated credential":        func(c *Config) { c.Providers[0].APIKey = "sk-y" },
		"price":                     func(c *Config) { c.Pricing["gpt-4o"] = Price{Input: 1} },
		"limit":                     func(c *Config) { c.Keys[0].Limits.Requests.PerHour = 5 },
		"limit of the field before": func(c *Config) { c.Keys[0].Limits.Requests.PerMinute = 5 },
		"strings of two fields swapped": func(c *Config) {
			c.Listen.XDS, c.Listen.Admin = c.Listen.Admin, c.Listen.XDS
		},
		"expiry":       func(c *Config) { e := time.Unix(0, 0); c.Keys[0].ExpiresAt = &e },
		"listen":       func(c *Config) { c.Listen.Admin = "127.0.0.1:9091" },
		"moved string": func(c *Config) { c.Models[0].Aliases = []string{"gpt", "4o"} },
	}
	seen := map[string]string{v0: "original"}
	for name, change := range changes {
		v := version(change)
		if other, ok := seen[v]; ok {
			t.Errorf("%s: version %s equals that of %s", name, v, other)
		}
		seen[v] = name
	}
}

func TestSQLitePath(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		sqlite, file, want string
	}{
		{"sluice.db", "/etc/sluice/sluice.yaml", "/etc/sluice/sluice.db"},
		{"../data/s.db", "/etc/sluice/sluice.yaml", "/etc/data/s.db"},
		{"/var/lib/s.db", "/etc/sluice/sluice.yaml", "/var/lib/s.db"},
		{"sluice.db", "sluice.yaml", filepath.Join(wd, "sluice.db")},
		{"sluice.db", "", filepath.Join(wd, "sluice.db")},
		{":memory:", "/etc/sluice.yaml", ":memory:"},
		{"file:x.db?mode=memory", "/etc/sluice.yaml", "file:x.db?mode=memory"},
	}
	for _, tt := range tests {
		c := validConfig()
		c.Store.SQLite = tt.sqlite
		s, err := Compile(c, tt.file)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.SQLitePath(); got != tt.want {
			t.Errorf("SQLite %q in %q: SQLitePath() = %q, want %q", tt.sqlite, tt.file, got, tt.want)
		}
	}
}

func TestModelRouting(t *testing.T) {
	cfg, err := Parse([]byte(`
listen: {grpc: "0.0.0.0:9001"}
providers:
  - {name: a, kind: openai, base_url: "https://a.example/v1", api_key: k}
  - {name: b, kind: azure-openai, base_url: "https://b.example", api_key: k, api_version: "2024-10-21", retries: {max: 0}}
models:
  - {name: solo, provider: a}
  - name: ha
    upstream: gpt-4o
    providers: [{name: a}, {name: b, upstream: gpt4o-deployment}]
  - name: split
    routing: weighted
    providers: [{name: a, weight: 3}, {name: b}]
`), "f.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Compile(cfg, "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	solo, _ := s.Model("solo")
	if tg, h := solo.Route(7); solo.Fallback() || h != "a" || tg.Upstream != "solo" {
		t.Errorf("solo: Fallback %v, Route = %+v, %q", solo.Fallback(), tg, h)
	}
	ha, _ := s.Model("ha")
	if tg, h := ha.Route(7); !ha.Fallback() || h != "sluice.fallback.ha" || tg.Provider.Name != "a" || tg.Upstream != "gpt-4o" {
		t.Errorf("ha: Fallback %v, Route = %+v, %q", ha.Fallback(), tg, h)
	}
	if tg, ok := ha.Target("b"); !ok || tg.Upstream != "gpt4o-deployment" {
		t.Errorf("ha.Target(b) = %+v, %v", tg, ok)
	}
	split, _ := s.Model("split")
	counts := map[string]int{}
	for n := range uint64(400) {
		tg, h := split.Route(n)
		if h != tg.Provider.Name {
			t.Fatalf("weighted Route(%d) header %q for provider %q", n, h, tg.Provider.Name)
		}
		counts[h]++
	}
	if counts["a"] != 300 || counts["b"] != 100 {
		t.Errorf("weights 3:1 over 400 consecutive draws gave %v", counts)
	}
	if split.Fallback() {
		t.Error("a weighted model must not fall back")
	}

	a, _ := s.Provider("a")
	if a.ConnectTimeout != DefaultConnectTimeout || a.IdleTimeout != DefaultIdleTimeout || *a.Retries.Max != 1 ||
		!slices.Equal(a.Retries.On, DefaultRetryOn) || a.OutlierDetection.Consecutive5xx != 5 {
		t.Errorf("provider defaults not applied: %+v", a)
	}
	if b, _ := s.Provider("b"); *b.Retries.Max != 0 {
		t.Errorf("retries.max 0 became %d", *b.Retries.Max)
	}
	if got := s.XDS().SluiceAddresses; !slices.Equal(got, []string{"127.0.0.1:9001"}) {
		t.Errorf("default sluice_addresses = %v, want the dialable listen.grpc", got)
	}
	if s.Config().XDS.SluiceAddresses != nil {
		t.Error("defaults leaked into Config()")
	}
	if got := len(s.Models()); got != 3 {
		t.Errorf("Models() has %d routes, want 3", got)
	}
}

// TestVersionZeroStructsAreReflections checks that the version hash's
// shortcut for zero structs writes what the field-by-field encoding does,
// on configs that set every limit and leave many unset.
func TestVersionZeroStructsAreReflections(t *testing.T) {
	digest := func(c *Config, reflective bool) string {
		h := &hasher{h: sha256.New(), buf: make([]byte, 0, 64), reflective: reflective}
		h.value(reflect.ValueOf(c).Elem())
		h.flush()
		return hex.EncodeToString(h.h.Sum(nil))
	}
	full, err := Load("testdata/good/full.yaml", lookupTestEnv)
	if err != nil {
		t.Fatal(err)
	}
	c := validConfig()
	all := RateLimits{PerMinute: 1, PerHour: -2, PerDay: 1 << 62}
	c.Keys[0].Limits = Limits{Requests: all, Tokens: TokenLimits{Input: RateLimits{PerMinute: 4}, Output: RateLimits{PerHour: 5}, Total: RateLimits{PerDay: 6}},
		Budgets: []Budget{{MicroUSD: 7, Period: PeriodRolling, Window: time.Hour}},
		Models:  map[string]Limits{"gpt-4o": {Requests: all, Budgets: []Budget{{MicroUSD: 8, Period: "day"}}}}}
	c.Teams[0].Limits = c.Keys[0].Limits
	many, err := Parse(manyKeys(30), "sluice.yaml", func(string) (string, bool) { return "sk-sluice-env", true })
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []*Config{full, c, Default(), many} {
		if fast, slow := digest(cfg, false), digest(cfg, true); fast != slow {
			t.Errorf("with zero structs written at once the config hashes to %s, written field by field to %s", fast, slow)
		}
	}
}
