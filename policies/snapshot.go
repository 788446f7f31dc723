package policies

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"maps"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Snapshot is a compiled, immutable configuration: everything the hot path
// needs, looked up by name without parsing. It is safe for concurrent use.
// Nothing returned by its methods may be modified.
type Snapshot struct {
	version    string
	cfg        *Config
	sqlitePath string
	ledgerPath string
	providers  map[string]*Provider
	pathPrefix map[string]string      // provider name → base_url path, no trailing slash
	models     map[string]*ModelRoute // by name and by alias
	modelNames []string
	orgs       map[string]struct{}
	teams      []TeamPolicy
	teamIndex  map[string]int
	keys       []KeyPolicy
}

// ModelRoute is where requests for a model go.
type ModelRoute struct {
	Name     string   // the canonical model name
	Aliases  []string // the model's other names
	Upstream string   // the model name sent to the provider
	Provider *Provider
	Price    Price
	Priced   bool // whether the pricing table has the model
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
	if cfg == nil {
		return nil, errors.New("compile policies: nil config")
	}
	if ps := cfg.Validate(); len(ps) > 0 {
		for i := range ps {
			ps[i].File = file
		}
		return nil, ps
	}
	c := cfg.clone()
	sqlitePath, err := resolveSQLite(c.Store.SQLite, file)
	if err != nil {
		return nil, fmt.Errorf("compile policies: store.sqlite: %w", err)
	}
	ledgerPath, err := resolveSQLite(c.Ledger.SQLite, file)
	if err != nil {
		return nil, fmt.Errorf("compile policies: ledger.sqlite: %w", err)
	}
	s := &Snapshot{
		version:    configVersion(c),
		cfg:        c,
		sqlitePath: sqlitePath,
		ledgerPath: ledgerPath,
		providers:  make(map[string]*Provider, len(c.Providers)),
		models:     make(map[string]*ModelRoute),
		orgs:       make(map[string]struct{}, len(c.Orgs)),
		teamIndex:  make(map[string]int, len(c.Teams)),
	}
	for _, p := range c.Providers {
		if p.Kind == KindAnthropic && p.AnthropicVersion == "" {
			p.AnthropicVersion = DefaultAnthropicVersion
		}
		s.providers[p.Name] = &p
		if u, err := url.Parse(p.BaseURL); err == nil { // validated already
			if s.pathPrefix == nil {
				s.pathPrefix = map[string]string{}
			}
			s.pathPrefix[p.Name] = strings.TrimSuffix(u.Path, "/")
		}
	}
	for _, m := range c.Models {
		r := &ModelRoute{
			Name:     m.Name,
			Aliases:  slices.Clone(m.Aliases),
			Upstream: m.Upstream,
			Provider: s.providers[m.Provider],
		}
		if r.Upstream == "" {
			r.Upstream = m.Name
		}
		r.Price, r.Priced = c.Pricing[m.Name]
		s.models[m.Name] = r
		for _, a := range m.Aliases {
			s.models[a] = r
		}
		s.modelNames = append(s.modelNames, m.Name)
	}
	slices.Sort(s.modelNames)
	for _, o := range c.Orgs {
		s.orgs[o.Name] = struct{}{}
	}
	for i, t := range c.Teams {
		set, err := NewModelSet(t.Models)
		if err != nil {
			return nil, fmt.Errorf("compile policies: teams[%d].models: %w", i, err)
		}
		s.teamIndex[t.Name] = len(s.teams)
		s.teams = append(s.teams, TeamPolicy{Name: t.Name, Org: t.Org, Models: set, Limits: t.Limits})
	}
	for i, k := range c.Keys {
		set, err := NewModelSet(k.Models)
		if err != nil {
			return nil, fmt.Errorf("compile policies: keys[%d].models: %w", i, err)
		}
		kp := KeyPolicy{ID: "config:" + k.Name, Name: k.Name, Team: k.Team, Prefix: k.Prefix, Models: set, Limits: k.Limits}
		if _, err := hex.Decode(kp.Hash[:], []byte(k.SHA256)); err != nil {
			return nil, fmt.Errorf("compile policies: keys[%d].sha256: %w", i, err)
		}
		if k.ExpiresAt != nil {
			kp.ExpiresAt = *k.ExpiresAt
		}
		s.keys = append(s.keys, kp)
	}
	return s, nil
}

// Version is a stable hash of the configuration's content (16 hex
// characters): equal configurations have equal versions, and any change,
// a rotated credential included, changes it.
func (s *Snapshot) Version() string { return s.version }

// Config returns the configuration the snapshot was compiled from. It must
// not be modified.
func (s *Snapshot) Config() *Config { return s.cfg }

// Listen returns the listen addresses.
func (s *Snapshot) Listen() Listen { return s.cfg.Listen }

// SQLitePath returns the SQLite database path, resolved against the
// config file's directory; empty when the store is not SQLite.
func (s *Snapshot) SQLitePath() string { return s.sqlitePath }

// LedgerPath is the resolved path of the spend ledger's SQLite file.
func (s *Snapshot) LedgerPath() string { return s.ledgerPath }

// Gateway returns the request-path settings.
func (s *Snapshot) Gateway() Gateway { return s.cfg.Gateway }

// PathPrefix is the path of a provider's base_url (no trailing slash),
// put before the request path: parsed once here, not per request.
func (s *Snapshot) PathPrefix(provider string) string { return s.pathPrefix[provider] }

// Provider returns the provider with the given name, with defaults applied
// (an anthropic provider's AnthropicVersion is never empty).
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

// DeclaredKeys returns the keys declared in the config, in config order.
func (s *Snapshot) DeclaredKeys() []KeyPolicy { return slices.Clone(s.keys) }

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
	out.Models = slices.Clone(c.Models)
	for i := range out.Models {
		out.Models[i].Aliases = slices.Clone(out.Models[i].Aliases)
	}
	out.Pricing = maps.Clone(c.Pricing)
	out.Orgs = slices.Clone(c.Orgs)
	out.Teams = slices.Clone(c.Teams)
	for i := range out.Teams {
		out.Teams[i].Models = slices.Clone(out.Teams[i].Models)
	}
	out.Keys = slices.Clone(c.Keys)
	for i := range out.Keys {
		out.Keys[i].Models = slices.Clone(out.Keys[i].Models)
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
	h := sha256.New()
	h.Write([]byte("sluice policies v1\n"))
	hashValue(h, reflect.ValueOf(c).Elem())
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// hashValue writes an unambiguous encoding of v: strings and collections
// are length-prefixed, map entries sorted by key, struct fields named, and
// times written as UTC instants. It does not use any marshaling method, so
// a type that redacts itself when printed is still hashed by its value.
func hashValue(h hash.Hash, v reflect.Value) {
	writeInt := func(n int64) {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(n))
		h.Write(b[:])
	}
	writeString := func(s string) {
		writeInt(int64(len(s)))
		h.Write([]byte(s))
	}
	if v.Type() == timeType {
		writeString(v.Interface().(time.Time).UTC().Format(time.RFC3339Nano))
		return
	}
	switch v.Kind() {
	case reflect.String:
		writeString(v.String())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		writeInt(v.Int())
	case reflect.Bool:
		writeInt(map[bool]int64{false: 0, true: 1}[v.Bool()])
	case reflect.Pointer:
		if v.IsNil() {
			writeInt(0)
			return
		}
		writeInt(1)
		hashValue(h, v.Elem())
	case reflect.Slice:
		writeInt(int64(v.Len()))
		for i := range v.Len() {
			hashValue(h, v.Index(i))
		}
	case reflect.Map:
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		writeInt(int64(len(keys)))
		for _, k := range keys {
			hashValue(h, k)
			hashValue(h, v.MapIndex(k))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			writeString(v.Type().Field(i).Name)
			hashValue(h, v.Field(i))
		}
	default:
		// Programmer error: a Config field of a kind not handled above.
		panic(fmt.Sprintf("policies: cannot hash %s", v.Type()))
	}
}
