package policies

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"maps"
	"net"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/providerkind"
)

// Snapshot is a compiled, immutable configuration: everything the hot path
// needs, looked up by name without parsing. It is safe for concurrent use.
// Nothing returned by its methods may be modified.
type Snapshot struct {
	version    func() string // waits for the hash, made beside the rest
	cfg        *Config
	sqlitePath string
	ledgerPath string
	spoolPath  string // the PostgreSQL ledger's spool
	redis      Redis  // admission.redis, resolved (resolveRedis)
	// storeURL and ledgerURL are the PostgreSQL connection strings, with
	// the settings beside the URL folded in ("" with SQLite).
	storeURL, ledgerURL string
	principals          []Secret   // files read; nil: none configured
	serverTLS           *ServerTLS // files resolved; nil: plaintext
	providers           map[string]*Provider
	pathPrefix          map[string]string // provider name → base_url path, no trailing slash
	passTo              map[llmapi.Dialect]*Provider
	models              map[string]*ModelRoute // by name and by alias
	modelNames          []string
	orgs                map[string]Limits
	teams               []TeamPolicy
	teamIndex           map[string]int
	declared            declaredKeys
	xds                 XDS // with defaults applied
}

// ModelRoute is where requests for a model go.
type ModelRoute struct {
	Name    string   // the canonical model name
	Aliases []string // the model's other names
	// Targets are the model's providers, at least one: in priority order
	// (Routing RoutingPriority) or to choose from by weight.
	Targets []Target
	Routing string
	// Upstream and Provider are Targets[0]'s: the provider a request goes
	// to first.
	Upstream string
	Provider *Provider
	Price    Price
	Priced   bool // whether the pricing table has the model
	// MaxOutputTokens is reserved when a request sets no max_tokens: the
	// model's max_output_tokens, else gateway.default_max_output_tokens.
	MaxOutputTokens int64
	// ContextWindow is the most input the model takes, in tokens, reserved
	// for a prompt by reference: its context_window, else the built-in
	// window of its name or its providers' names for it (the largest), else
	// 0, unknown.
	ContextWindow int64
	// weights are the cumulative weights of Targets (routing weighted).
	weights []int64
}

// Target is one provider of a model and the model's name there.
type Target struct {
	Provider *Provider
	Upstream string
	Weight   int64
}

// FallbackClusterPrefix starts the name of the Envoy cluster (and the value
// of the routing header) of a model whose providers are tried in order.
const FallbackClusterPrefix = "sluice.fallback."

// Fallback reports whether requests for the model go to its providers in
// priority order, falling back on failure (more than one provider,
// routing priority).
func (r *ModelRoute) Fallback() bool {
	return r.Routing == RoutingPriority && len(r.Targets) > 1
}

// Route returns the provider a request goes to first and the value of the
// routing header that sends it there: the provider's name, or for a
// fallback model the model's fallback cluster. For weighted routing, n is
// a uniformly random number in [0, 2^63) choosing the provider.
func (r *ModelRoute) Route(n uint64) (Target, string) {
	switch {
	case r.Fallback():
		return r.Targets[0], FallbackClusterPrefix + r.Name
	case r.Routing == RoutingWeighted && len(r.Targets) > 1:
		total := r.weights[len(r.weights)-1]
		x := int64(n % uint64(total))
		i, _ := slices.BinarySearch(r.weights, x+1)
		return r.Targets[i], r.Targets[i].Provider.Name
	}
	return r.Targets[0], r.Targets[0].Provider.Name
}

// Target returns the model's target at the named provider.
func (r *ModelRoute) Target(provider string) (Target, bool) {
	for _, t := range r.Targets {
		if t.Provider.Name == provider {
			return t, true
		}
	}
	return Target{}, false
}

// AllowedBy reports whether the allow-list set allows this model, under
// its canonical name or any of its aliases: an allow-list names models, so
// "gpt-4o" on the list lets a client ask for it by an alias too, and the
// other way round.
func (r *ModelRoute) AllowedBy(set ModelSet) bool {
	if set.Unrestricted() || set.Allows(r.Name) {
		return true
	}
	for _, a := range r.Aliases {
		if set.Allows(a) {
			return true
		}
	}
	return false
}

// TeamPolicy is a team's compiled policy.
type TeamPolicy struct {
	Name, Org string
	Models    ModelSet
	Limits    Limits
}

// KeyPolicy is a compiled API key declared in the config.
type KeyPolicy struct {
	ID        string // "config:" + Name
	Name      string
	Team      string
	Prefix    string
	Hash      [32]byte // SHA-256 of the key's secret
	Models    ModelSet
	Limits    Limits
	ExpiresAt time.Time // zero: never
}

// Compile turns a configuration into a Snapshot. cfg must be valid: if
// Validate finds problems, Compile returns them. A relative Store.SQLite
// is resolved against the directory of file. The snapshot keeps a copy of
// cfg, so later changes to cfg do not reach it.
func Compile(cfg *Config, file string) (*Snapshot, error) {
	return compile(cfg, file, false)
}

// CompileWithoutProviderKeys is Compile for a configuration loaded by
// LoadWithoutProviderKeys, whose providers have no api_key: their keys
// are not checked, and the snapshot's providers have none (it is for a
// command that never calls a provider).
func CompileWithoutProviderKeys(cfg *Config, file string) (*Snapshot, error) {
	return compile(cfg, file, true)
}

func compile(cfg *Config, file string, skipProviderKeys bool) (*Snapshot, error) {
	if cfg == nil {
		return nil, errors.New("compile policies: nil config")
	}
	ps := cfg.Validate()
	if skipProviderKeys {
		ps = slices.DeleteFunc(ps, func(p Problem) bool { return isProviderKey(p.Path) })
	}
	if len(ps) > 0 {
		for i := range ps {
			ps[i].File = file
		}
		return nil, ps
	}
	return newSnapshot(cfg.clone(), file)
}

// newSnapshot makes the Snapshot of c, which must be valid and which the
// snapshot keeps: Compile passes a copy it has validated; a Watcher, the
// configuration Parse has just made (Parse returns only a valid one, and
// nothing else holds it), so that a large file is neither checked twice
// nor copied.
func newSnapshot(c *Config, file string) (*Snapshot, error) {
	sqlitePath, err := resolveSQLite(c.Store.SQLite, file)
	if err != nil {
		return nil, fmt.Errorf("compile policies: store.sqlite: %w", err)
	}
	ledgerPath, err := resolveSQLite(c.Ledger.SQLite, file)
	if err != nil {
		return nil, fmt.Errorf("compile policies: ledger.sqlite: %w", err)
	}
	var spoolPath string
	storeURL, err := c.Store.Postgres.connString(file)
	if err != nil {
		return nil, fmt.Errorf("compile policies: store.postgres: %w", err)
	}
	ledgerURL, err := c.Ledger.Postgres.connString(file)
	if err != nil {
		return nil, fmt.Errorf("compile policies: ledger.postgres: %w", err)
	}
	if c.Ledger.Postgres.set() {
		if spoolPath, err = resolveSQLite(cmp.Or(c.Ledger.Spool, "sluice-ledger-spool"), file); err != nil {
			return nil, fmt.Errorf("compile policies: ledger.spool: %w", err)
		}
	}
	keys, err := principalSecrets(c.Security, file)
	if err != nil {
		return nil, err
	}
	// The version hashes every value of the config, a large part of the
	// work for a config of many keys: it is made on another goroutine,
	// beside whatever the caller does next, and Version waits for it.
	// Nothing changes c once it is the snapshot's.
	version := make(chan string, 1)
	go func() { version <- configVersion(c) }()
	s := &Snapshot{
		version:    sync.OnceValue(func() string { return <-version }),
		cfg:        c,
		redis:      resolveRedis(c.Admission.Redis, file),
		sqlitePath: sqlitePath,
		ledgerPath: ledgerPath,
		spoolPath:  spoolPath,
		storeURL:   storeURL,
		ledgerURL:  ledgerURL,
		providers:  make(map[string]*Provider, len(c.Providers)),
		models:     make(map[string]*ModelRoute),
		orgs:       make(map[string]Limits, len(c.Orgs)),
		teamIndex:  make(map[string]int, len(c.Teams)),
		xds:        c.XDS,
		principals: keys,
		serverTLS:  resolveTLS(c.Security.TLS, file),
	}
	if len(s.xds.SluiceAddresses) == 0 {
		s.xds.SluiceAddresses = []string{Dialable(c.Listen.GRPC)}
	}
	for _, p := range c.Providers {
		set, _ := p.Kind.Configure(p.settings()) // validated already: no problem
		p.AnthropicVersion = set.AnthropicVersion
		p.ForwardClientHeaders = set.ForwardClientHeaders
		p.applyDefaults()
		s.providers[p.Name] = &p
		if u, err := url.Parse(p.BaseURL); err == nil { // validated already
			if s.pathPrefix == nil {
				s.pathPrefix = map[string]string{}
			}
			s.pathPrefix[p.Name] = strings.TrimSuffix(u.Path, "/")
		}
	}
	passTo, _ := passTargets(c) // validated already
	for d, i := range passTo {
		if s.passTo == nil {
			s.passTo = map[llmapi.Dialect]*Provider{}
		}
		s.passTo[d] = s.providers[c.Providers[i].Name]
	}
	for _, m := range c.Models {
		r := &ModelRoute{Name: m.Name, Aliases: slices.Clone(m.Aliases), Routing: m.Routing, MaxOutputTokens: m.MaxOutputTokens}
		if r.MaxOutputTokens == 0 {
			r.MaxOutputTokens = c.Gateway.DefaultMaxOutputTokens
		}
		if r.Routing == "" {
			r.Routing = RoutingPriority
		}
		upstream := func(u string) string {
			switch {
			case u != "":
				return u
			case m.Upstream != "":
				return m.Upstream
			}
			return m.Name
		}
		if m.Provider != "" {
			r.Targets = []Target{{Provider: s.providers[m.Provider], Upstream: upstream(""), Weight: 1}}
		}
		var sum int64
		for _, mp := range m.Providers {
			w := mp.Weight
			if w == 0 {
				w = 1
			}
			sum += w
			r.weights = append(r.weights, sum)
			r.Targets = append(r.Targets, Target{Provider: s.providers[mp.Name], Upstream: upstream(mp.Upstream), Weight: w})
		}
		r.Provider, r.Upstream = r.Targets[0].Provider, r.Targets[0].Upstream
		r.Price, r.Priced = c.Pricing[m.Name]
		r.ContextWindow = contextWindow(m, r.Targets)
		s.models[m.Name] = r
		for _, a := range m.Aliases {
			s.models[a] = r
		}
		s.modelNames = append(s.modelNames, m.Name)
	}
	slices.Sort(s.modelNames)
	for _, o := range c.Orgs {
		s.orgs[o.Name] = o.Limits
	}
	for i, t := range c.Teams {
		set, err := NewModelSet(t.Models)
		if err != nil {
			return nil, fmt.Errorf("compile policies: teams[%d].models: %w", i, err)
		}
		s.teamIndex[t.Name] = len(s.teams)
		s.teams = append(s.teams, TeamPolicy{Name: t.Name, Org: t.Org, Models: set, Limits: t.Limits})
	}
	// The declared keys are kept as compact rows (declaredKeys), and
	// their policies made from them when asked for (DeclaredKeys), not
	// kept as the config declared them: the snapshot's config has none,
	// and c's go with the version's hash once it is made.
	if s.declared, err = compileDeclared(c.Keys, s.teamIndex); err != nil {
		return nil, fmt.Errorf("compile policies: %w", err)
	}
	keyless := *c
	keyless.Keys = nil
	s.cfg = &keyless
	return s, nil
}

// Version is a stable hash of the configuration's content (16 hex
// characters): equal configurations have equal versions, and any change,
// a rotated credential included, changes it.
func (s *Snapshot) Version() string { return s.version() }

// Config returns the configuration the snapshot was compiled from,
// without its declared keys (Keys is nil: DeclaredKeys and
// DeclaredKeyCount give them). It must not be modified.
func (s *Snapshot) Config() *Config { return s.cfg }

// Listen returns the listen addresses.
func (s *Snapshot) Listen() Listen { return s.cfg.Listen }

// SQLitePath returns the SQLite database path, resolved against the
// config file's directory; empty when the store is not SQLite.
func (s *Snapshot) SQLitePath() string { return s.sqlitePath }

// StorePostgres is the PostgreSQL connection URL of the key store; empty
// when the store is SQLite. It may hold a password: never log it.
func (s *Snapshot) StorePostgres() string { return s.storeURL }

// SpoolMaxBytes is ledger.spool_max_bytes.
func (s *Snapshot) SpoolMaxBytes() int64 { return s.cfg.Ledger.SpoolMaxBytes }

// LedgerPath is the resolved path of the spend ledger's SQLite file; empty
// with ledger.postgres.
func (s *Snapshot) LedgerPath() string { return s.ledgerPath }

// LedgerPostgres is the PostgreSQL connection URL of the spend ledger;
// empty with ledger.sqlite.
func (s *Snapshot) LedgerPostgres() string { return s.ledgerURL }

// LedgerSpool is the resolved path of the PostgreSQL ledger's spool;
// empty with ledger.sqlite.
func (s *Snapshot) LedgerSpool() string { return s.spoolPath }

// LedgerRetention is ledger.retention: 0 keeps every record.
func (s *Snapshot) LedgerRetention() time.Duration { return s.cfg.Ledger.Retention }

// AdmissionRedis is admission.redis with its defaults applied (Timeout)
// and its TLS files resolved against the config file's directory; URL ""
// when counters are per replica. The URL may hold a password: never log
// it.
func (s *Snapshot) AdmissionRedis() Redis { return s.redis }

// resolveRedis is r with its defaults applied and its files resolved
// against the directory of the config file.
func resolveRedis(r Redis, file string) Redis {
	if r.URL == "" {
		return Redis{}
	}
	if r.Timeout == 0 {
		r.Timeout = DefaultRedisTimeout
	}
	for _, f := range []*string{&r.TLS.CAFile, &r.TLS.CertFile, &r.TLS.KeyFile} {
		if *f != "" && !filepath.IsAbs(*f) {
			*f = filepath.Join(filepath.Dir(file), *f)
		}
	}
	return r
}

// FailureMode is admission.failure_mode, FailClosed when unset.
func (s *Snapshot) FailureMode() string { return cmp.Or(s.cfg.Admission.FailureMode, FailClosed) }

// XDS returns the control-plane settings, with defaults applied: the
// Sluice addresses are never empty.
func (s *Snapshot) XDS() XDS { return s.xds }

// Providers returns the providers in config order, with defaults applied.
func (s *Snapshot) Providers() []*Provider {
	out := make([]*Provider, 0, len(s.cfg.Providers))
	for _, p := range s.cfg.Providers {
		out = append(out, s.providers[p.Name])
	}
	return out
}

// Models returns each model's route once (not once per alias), in config
// order.
func (s *Snapshot) Models() []*ModelRoute {
	out := make([]*ModelRoute, 0, len(s.cfg.Models))
	for _, m := range s.cfg.Models {
		out = append(out, s.models[m.Name])
	}
	return out
}

// Gateway returns the request-path settings.
func (s *Snapshot) Gateway() Gateway { return s.cfg.Gateway }

// PrincipalSecrets are the secrets of security.principal_keys, in order
// (the first signs), each file read and at least MinPrincipalSecretBytes
// long; nil when none is configured (the process then signs with one of
// its own). The keys that sign with them are made by their user, not here:
// the snapshot holds configuration, not signing state.
func (s *Snapshot) PrincipalSecrets() []Secret { return s.principals }

// PrincipalMaxAge is security.principal_max_age.
func (s *Snapshot) PrincipalMaxAge() time.Duration { return s.cfg.Security.PrincipalMaxAge }

// ServerTLS is security.tls with its files resolved against the config
// file's directory; nil when Sluice's servers speak plaintext.
func (s *Snapshot) ServerTLS() *ServerTLS { return s.serverTLS }

// PathPrefix is the path of a provider's base_url (no trailing slash),
// put before the request path: parsed once here, not per request.
func (s *Snapshot) PathPrefix(provider string) string { return s.pathPrefix[provider] }

// PassTo is the provider that takes unknown paths of API d under
// gateway.unknown_paths: pass (gateway.pass_to), or nil: none does, or
// unknown_paths is deny.
func (s *Snapshot) PassTo(d llmapi.Dialect) *Provider { return s.passTo[d] }

// Provider returns the provider with the given name, with defaults applied
// (an anthropic provider's AnthropicVersion is never empty) and a known
// Kind.
func (s *Snapshot) Provider(name string) (*Provider, bool) {
	p, ok := s.providers[name]
	return p, ok
}

// Model resolves a model name or alias.
func (s *Snapshot) Model(nameOrAlias string) (*ModelRoute, bool) {
	r, ok := s.models[nameOrAlias]
	return r, ok
}

// ModelNames returns the canonical model names, sorted.
func (s *Snapshot) ModelNames() []string { return slices.Clone(s.modelNames) }

// Org reports whether the org is configured.
func (s *Snapshot) Org(name string) bool {
	_, ok := s.orgs[name]
	return ok
}

// OrgLimits returns the limits of an org declared in the config (none for
// an org that exists only in the store).
func (s *Snapshot) OrgLimits(name string) Limits { return s.orgs[name] }

// Team returns the policy of the named team.
func (s *Snapshot) Team(name string) (TeamPolicy, bool) {
	i, ok := s.teamIndex[name]
	if !ok {
		return TeamPolicy{}, false
	}
	return s.teams[i], true
}

// Teams returns every team's policy, in config order.
func (s *Snapshot) Teams() []TeamPolicy { return slices.Clone(s.teams) }

// DeclaredKeyCount is how many keys the config declares.
func (s *Snapshot) DeclaredKeyCount() int { return len(s.declared.rows) }

// DeclaredKeys returns the keys declared in the config, in config order,
// made anew for each call.
func (s *Snapshot) DeclaredKeys() []KeyPolicy {
	d := &s.declared
	ks := make([]KeyPolicy, len(d.rows))
	for i := range d.rows {
		d.policy(s, &d.rows[i], d.set(&d.rows[i]), &ks[i])
	}
	return ks
}

// EachDeclaredKey calls f with each key declared in the config, in config
// order: DeclaredKeys without the slice. The KeyPolicy f gets is reused
// for the next key, so f must copy what it keeps; keys with the same
// allow-list share one ModelSet, which no one changes.
func (s *Snapshot) EachDeclaredKey(f func(*KeyPolicy)) {
	d := &s.declared
	var kp KeyPolicy
	sets := make([]ModelSet, len(d.models)) // compiled on first use
	made := make([]bool, len(d.models))
	for i := range d.rows {
		r := &d.rows[i]
		var set ModelSet
		if m := r.models; m > 0 {
			if !made[m-1] {
				sets[m-1], made[m-1] = d.set(r), true
			}
			set = sets[m-1]
		}
		d.policy(s, r, set, &kp)
		f(&kp)
	}
}

// DeclaredKey returns the declared key whose ID is id ("config:<name>"),
// compiling only that one.
func (s *Snapshot) DeclaredKey(id string) (KeyPolicy, bool) {
	name, ok := strings.CutPrefix(id, "config:")
	if !ok {
		return KeyPolicy{}, false
	}
	d := &s.declared
	for i := range d.rows {
		if r := &d.rows[i]; d.name(r) == name {
			var kp KeyPolicy
			d.policy(s, r, d.set(r), &kp)
			return kp, true
		}
	}
	return KeyPolicy{}, false
}

// resolveSQLite resolves a relative SQLite path against the directory of
// the config file. ":memory:" and "file:" URIs are kept as written.
func resolveSQLite(path, file string) (string, error) {
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") {
		return path, nil
	}
	if !filepath.IsAbs(path) {
		path = filepath.Join(filepath.Dir(file), path)
	}
	return filepath.Abs(path)
}

// clone returns a deep copy of c.
func (c *Config) clone() *Config {
	out := *c
	out.Providers = slices.Clone(c.Providers)
	for i := range out.Providers {
		p := &out.Providers[i]
		p.Endpoints = slices.Clone(p.Endpoints)
		p.Retries.On = slices.Clone(p.Retries.On)
		if p.Retries.Max != nil {
			m := *p.Retries.Max
			p.Retries.Max = &m
		}
		p.CAFile = clonePtr(p.CAFile)
	}
	out.Models = slices.Clone(c.Models)
	for i := range out.Models {
		out.Models[i].Aliases = slices.Clone(out.Models[i].Aliases)
		out.Models[i].Providers = slices.Clone(out.Models[i].Providers)
	}
	out.XDS.SluiceAddresses = slices.Clone(c.XDS.SluiceAddresses)
	out.XDS.NodeGroups = slices.Clone(c.XDS.NodeGroups)
	for i := range out.XDS.NodeGroups {
		g := &out.XDS.NodeGroups[i]
		g.Metadata = maps.Clone(g.Metadata)
		g.SluiceAddresses = slices.Clone(g.SluiceAddresses)
		g.UpstreamCAFile = clonePtr(g.UpstreamCAFile)
	}
	if t := c.XDS.ExtensionTLS; t != nil {
		t2 := *t
		t2.ServerSANs = Identities{URIs: slices.Clone(t.ServerSANs.URIs), DNS: slices.Clone(t.ServerSANs.DNS)}
		out.XDS.ExtensionTLS = &t2
	}
	out.Security.PrincipalKeys = slices.Clone(c.Security.PrincipalKeys)
	if t := c.Security.TLS; t != nil {
		t2 := *t
		t2.AllowedClients = Identities{URIs: slices.Clone(t.AllowedClients.URIs), DNS: slices.Clone(t.AllowedClients.DNS)}
		out.Security.TLS = &t2
	}
	out.Pricing = maps.Clone(c.Pricing)
	out.Orgs = slices.Clone(c.Orgs)
	for i := range out.Orgs {
		out.Orgs[i].Limits = out.Orgs[i].Limits.clone()
	}
	out.Teams = slices.Clone(c.Teams)
	for i := range out.Teams {
		out.Teams[i].Models = slices.Clone(out.Teams[i].Models)
		out.Teams[i].Limits = out.Teams[i].Limits.clone()
	}
	out.Keys = slices.Clone(c.Keys)
	for i := range out.Keys {
		out.Keys[i].Models = slices.Clone(out.Keys[i].Models)
		out.Keys[i].Limits = out.Keys[i].Limits.clone()
		if t := out.Keys[i].ExpiresAt; t != nil {
			t2 := *t
			out.Keys[i].ExpiresAt = &t2
		}
	}
	return &out
}

// configVersion hashes a canonical encoding of every field of c, secrets
// included (they are hashed, never shown), and returns the first 16 hex
// characters.
func configVersion(c *Config) string {
	h := &hasher{h: sha256.New(), buf: make([]byte, 0, 32<<10)}
	h.buf = append(h.buf, "sluice policies v2\n"...)
	h.value(reflect.ValueOf(c).Elem())
	h.flush()
	return hex.EncodeToString(h.h.Sum(nil))[:16]
}

// hasher writes an unambiguous encoding of a value into h: integers as
// varints, strings and collections length-prefixed, map entries sorted by
// key, struct fields in order (the type says which comes next, so their
// names need not be written), and times as UTC instants. It does not use any
// marshaling method, so a type that redacts itself when printed is still
// hashed by its value. The bytes go through buf, so that a config of
// many keys costs a hash of its bytes rather than a call per field.
type hasher struct {
	h   hash.Hash
	buf []byte
	// reflective leaves out the shortcut for zero structs (which writes
	// the same bytes): for tests.
	reflective bool
}

// zeroStructs caches, by struct type, what value writes for the type's
// zero value: most of a declared key's limits are zero, and a config of
// many keys writes them once per key.
var zeroStructs sync.Map // reflect.Type → []byte

// zeroStruct writes the zero value of the struct type t, encoded once.
func (h *hasher) zeroStruct(t reflect.Type) {
	enc, ok := zeroStructs.Load(t)
	if !ok {
		z := &hasher{h: sha256.New(), buf: make([]byte, 0, 1024), reflective: true}
		z.value(reflect.New(t).Elem())
		enc, _ = zeroStructs.LoadOrStore(t, slices.Clone(z.buf))
	}
	b := enc.([]byte)
	if len(b) > cap(h.buf)-len(h.buf) {
		h.flush()
	}
	h.buf = append(h.buf, b...)
}

func (h *hasher) flush() {
	h.h.Write(h.buf)
	h.buf = h.buf[:0]
}

func (h *hasher) int(n int64) {
	h.buf = binary.AppendVarint(h.buf, n)
	if len(h.buf) >= cap(h.buf)-binary.MaxVarintLen64 {
		h.flush()
	}
}

func (h *hasher) string(s string) {
	h.int(int64(len(s)))
	if len(s) > cap(h.buf)-len(h.buf) {
		h.flush()
		h.h.Write([]byte(s))
		return
	}
	h.buf = append(h.buf, s...)
}

func (h *hasher) value(v reflect.Value) {
	if !h.reflective && v.Kind() == reflect.Struct && v.IsZero() {
		h.zeroStruct(v.Type())
		return
	}
	if v.Type() == timeType {
		h.string(v.Interface().(time.Time).UTC().Format(time.RFC3339Nano))
		return
	}
	switch v.Kind() {
	case reflect.String:
		h.string(v.String())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		h.int(v.Int())
	case reflect.Bool:
		if v.Bool() {
			h.int(1)
		} else {
			h.int(0)
		}
	case reflect.Pointer:
		if v.IsNil() {
			h.int(0)
			return
		}
		h.int(1)
		h.value(v.Elem())
	case reflect.Slice:
		h.int(int64(v.Len()))
		for i := range v.Len() {
			h.value(v.Index(i))
		}
	case reflect.Map:
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		h.int(int64(len(keys)))
		for _, k := range keys {
			h.value(k)
			h.value(v.MapIndex(k))
		}
	case reflect.Struct:
		for _, i := range hashedFields(v.Type()) {
			h.value(v.Field(i))
		}
	default:
		// Programmer error: a Config field of a kind not handled above.
		panic(fmt.Sprintf("policies: cannot hash %s", v.Type()))
	}
}

// structFields caches hashedFields by struct type.
var structFields sync.Map // reflect.Type → []int

// hashedFields are the indexes of t's fields in order, but for those
// tagged yaml:"-", which are not configuration.
func hashedFields(t reflect.Type) []int {
	if fs, ok := structFields.Load(t); ok {
		return fs.([]int)
	}
	var fs []int
	for i := range t.NumField() {
		if f := t.Field(i); f.Tag.Get("yaml") != "-" {
			fs = append(fs, i)
		}
	}
	structFields.Store(t, fs)
	return fs
}

// Provider defaults.
const (
	DefaultConnectTimeout   = 5 * time.Second
	DefaultIdleTimeout      = 5 * time.Minute
	DefaultRetries          = 1
	DefaultConsecutive5xx   = 5
	DefaultBaseEjectionTime = 30 * time.Second
)

// DefaultRetryOn is what Envoy retries on when retries.on is not set.
var DefaultRetryOn = []string{"connect-failure", "reset", "5xx"}

// settings are the provider's kind-specific fields, for its kind to check
// and complete.
func (p *Provider) settings() providerkind.Settings {
	return providerkind.Settings{HasAPIKey: p.APIKey != "", APIVersion: p.APIVersion, AnthropicVersion: p.AnthropicVersion,
		ForwardClientHeaders: p.ForwardClientHeaders}
}

func (p *Provider) applyDefaults() {
	if p.ConnectTimeout == 0 {
		p.ConnectTimeout = DefaultConnectTimeout
	}
	if p.IdleTimeout == 0 {
		p.IdleTimeout = DefaultIdleTimeout
	}
	if p.Retries.Max == nil {
		n := int64(DefaultRetries)
		p.Retries.Max = &n
	}
	if len(p.Retries.On) == 0 {
		p.Retries.On = slices.Clone(DefaultRetryOn)
	}
	if p.OutlierDetection.Consecutive5xx == 0 {
		p.OutlierDetection.Consecutive5xx = DefaultConsecutive5xx
	}
	if p.OutlierDetection.BaseEjectionTime == 0 {
		p.OutlierDetection.BaseEjectionTime = DefaultBaseEjectionTime
	}
	if p.Usage.TotalExcess == "" {
		p.Usage.TotalExcess = TotalExcessOutput
	}
}

// Dialable turns a listen address into one a client can dial: an
// unspecified host (0.0.0.0, ::, empty) becomes the loopback address.
func Dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}

func (l Limits) clone() Limits {
	l.Budgets = slices.Clone(l.Budgets)
	if l.Models != nil {
		m := make(map[string]Limits, len(l.Models))
		for k, v := range l.Models {
			m[k] = v.clone()
		}
		l.Models = m
	}
	return l
}

// clonePtr returns a pointer to a copy of *p, or nil.
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
