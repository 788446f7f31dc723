package policies

import (
	"encoding/hex"
	"time"

	// Budget time zones resolve on machines without a zoneinfo database.
	_ "time/tzdata"

	"crypto/sha256"
	"fmt"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicegw/sluice/internal/providerkind"
	"github.com/sluicegw/sluice/internal/sat"
	"github.com/sluicegw/sluice/internal/tokens"
)

// Validate checks the configuration and returns every problem it finds,
// each addressed by its path ("providers[2].base_url"). The problems have
// no positions; Parse adds them. A valid configuration returns nil.
func (c *Config) Validate() Problems {
	var ps Problems
	for _, is := range c.check() {
		ps = append(ps, is.Problem)
	}
	ps.sort()
	return ps
}

// issue is a problem found by Validate and, for a problem about a
// reference (an unknown provider, model, org or team), the list it refers
// to. When that list could not be decoded, Parse drops the issue: it is a
// consequence of the decoding problem, not a problem of its own.
type issue struct {
	Problem
	refersTo string
}

// check finds every problem of c, unsorted.
func (c *Config) check() []issue {
	v := &validator{}
	v.listen(c.Listen)
	v.store(c.Store)
	v.ledgerAndGateway(c.Ledger, c.Gateway)
	c.Admission.validate(v)
	v.runtime(c.Runtime)
	providers := v.providers(c.Providers)
	_, passIssues := passTargets(c)
	v.issues = append(v.issues, passIssues...)
	kinds := make(map[string]providerkind.Kind, len(c.Providers))
	for _, p := range c.Providers {
		kinds[p.Name] = p.Kind
	}
	owners, known := v.models(c.Models, providers, kinds)
	v.owners, v.modelList = owners, c.Models
	v.pricing(c.Pricing, c.Models, owners)
	orgs := v.names("orgs", len(c.Orgs), func(i int) string { return c.Orgs[i].Name })
	for i, o := range c.Orgs {
		v.limits(indexPath("orgs", i)+".limits", o.Limits)
	}
	teams := v.teams(c, orgs, owners, known)
	v.keys(c, teams, owners, known)
	v.xds(c.XDS)
	v.extensionTLS(c.XDS.ExtensionTLS)
	v.proxyless(c.XDS.Proxyless)
	v.security(c.Security)
	if t := c.Admin.Token.Reveal(); t != "" && len(t) < 16 {
		v.add("admin.token", "must be at least 16 characters (use a random token, e.g. openssl rand -hex 24)")
	}
	if c.Admin.PProf && c.Admin.Token.Reveal() == "" {
		v.add("admin.pprof", "requires admin.token: profiles are served only with the admin token (set token: ${SLUICE_ADMIN_TOKEN})")
	}
	return v.issues
}

type validator struct {
	issues []issue
	// The models, for per-model limits: the index of each name and alias.
	owners    map[string]int
	modelList []Model
}

// maxBodyLimit bounds gateway.max_request_body_bytes: bodies are buffered
// whole in Envoy and in Sluice.
const maxBodyLimit = 64 << 20

// Bounds of runtime's settings: a percentage as GOGC takes it, and a
// memory limit no smaller than an idle Sluice needs.
const (
	maxGOGC        = 100000
	minMemoryLimit = 32 << 20
	maxMemoryLimit = 1 << 50
)

func (v *validator) runtime(r Runtime) {
	if r.GOGC < 0 || r.GOGC > maxGOGC {
		v.add("runtime.gogc", "must be between 1 and %d (0 or unset: serve paces the collector itself), got %d", maxGOGC, r.GOGC)
	}
	if r.MemoryLimitBytes != 0 && (r.MemoryLimitBytes < minMemoryLimit || r.MemoryLimitBytes > maxMemoryLimit) {
		v.add("runtime.memory_limit_bytes", "must be between %d (32 MiB) and %d, or 0 for none, got %d", minMemoryLimit, int64(maxMemoryLimit), r.MemoryLimitBytes)
	}
}

// The bounds of ledger.spool_max_bytes: the spool grows by 1 MiB at a
// time.
const (
	minSpoolMax = 1 << 20
	maxSpoolMax = 1 << 40
)

func (v *validator) ledgerAndGateway(l Ledger, g Gateway) {
	sqlite, postgres := l.SQLite != "", l.Postgres.set()
	switch {
	case !sqlite && !postgres:
		v.add("ledger.sqlite", "required (a file path), unless ledger.postgres is set")
	case sqlite && postgres:
		v.add("ledger", "set exactly one of sqlite (a file path) or postgres (a connection URL)")
	case sqlite && l.Spool != "":
		v.add("ledger.spool", "only with ledger.postgres: the SQLite ledger's spool is its file's path plus -spool")
	case sqlite && l.Retention != 0:
		v.add("ledger.retention", "only with ledger.postgres (the SQLite ledger keeps every record)")
	}
	if postgres {
		l.Postgres.validate(v, "ledger.postgres")
	}
	if l.Retention < 0 || (l.Retention > 0 && l.Retention < 31*24*time.Hour) {
		v.add("ledger.retention", "must be 0 (keep everything) or at least 744h (31 days: records are dropped a whole month at a time), got %v", l.Retention)
	}
	if l.SpoolMaxBytes < minSpoolMax || l.SpoolMaxBytes > maxSpoolMax {
		v.add("ledger.spool_max_bytes", "must be between %d (1 MiB) and %d (1 TiB), got %d", minSpoolMax, maxSpoolMax, l.SpoolMaxBytes)
	}
	if g.MaxRequestBodyBytes <= 0 || g.MaxRequestBodyBytes > maxBodyLimit {
		v.add("gateway.max_request_body_bytes", "must be between 1 and %d, got %d", maxBodyLimit, g.MaxRequestBodyBytes)
	}
	if g.UnknownPaths != "deny" && g.UnknownPaths != "pass" {
		v.add("gateway.unknown_paths", "must be deny or pass, got %q", g.UnknownPaths)
	}
	if g.UnpricedModels != "deny" && g.UnpricedModels != "allow" {
		v.add("gateway.unpriced_models", "must be deny or allow, got %q", g.UnpricedModels)
	}
	if _, err := time.LoadLocation(g.BudgetTimeZone); err != nil || g.BudgetTimeZone == "" {
		v.add("gateway.budget_time_zone", "must be an IANA time zone such as UTC or Europe/Berlin, got %q", g.BudgetTimeZone)
	}
	if g.DefaultMaxOutputTokens <= 0 {
		v.add("gateway.default_max_output_tokens", "must be more than 0, got %d", g.DefaultMaxOutputTokens)
	}
	if g.Background != "" && g.Background != BackgroundDeny && g.Background != BackgroundChargeReservation {
		v.add("gateway.background", "must be deny or charge_reservation, got %q", g.Background)
	}
	if g.ReservationTTL < time.Minute {
		v.add("gateway.reservation_ttl", "must be at least 1m (longer than your longest stream), got %v", g.ReservationTTL)
	}
	if g.RequestTimeout < 0 {
		v.add("gateway.request_timeout", "must be 0 (none) or more, got %v", g.RequestTimeout)
	}
	if g.StreamIdleTimeout < 0 {
		v.add("gateway.stream_idle_timeout", "must be 0 (none) or more, got %v", g.StreamIdleTimeout)
	}
}

func (v *validator) add(path, format string, args ...any) {
	v.issues = append(v.issues, issue{Problem: Problem{Path: path, Msg: fmt.Sprintf(format, args...)}})
}

// addRef adds a problem with a reference to the list named list.
func (v *validator) addRef(list, path, format string, args ...any) {
	v.add(path, format, args...)
	v.issues[len(v.issues)-1].refersTo = list
}

func (v *validator) listen(l Listen) {
	for _, a := range []struct{ name, addr string }{
		{"grpc", l.GRPC}, {"xds", l.XDS}, {"admin", l.Admin}, {"envoy", l.Envoy},
	} {
		path := "listen." + a.name
		if a.addr == "" {
			v.add(path, "required (host:port)")
			continue
		}
		_, port, err := net.SplitHostPort(a.addr)
		if err != nil {
			v.add(path, "must be host:port, got %q", a.addr)
			continue
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			v.add(path, "port must be a number from 0 to 65535, got %q", port)
		}
	}
}

func (v *validator) store(s Store) {
	sqlite, postgres := s.SQLite != "", s.Postgres.set()
	if sqlite == postgres {
		v.add("store", "set exactly one of sqlite or postgres")
	}
	if postgres {
		s.Postgres.validate(v, "store.postgres")
	}
}

// postgresURL reports whether s is a PostgreSQL connection URL with a
// host: postgres:// or postgresql://, as libpq and pgx take them.
//
// An '@' after the host means a password with an unencoded '/', '?' or
// '#' cut the URL short (postgres://u:2024/Summer!@db/x): the driver
// would take the password's tail for the database's name, and show it
// in its errors. Such a URL is refused; its password must be
// percent-encoded.
func postgresURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") && (u.Host != "" || u.Query().Get("host") != "") &&
		!strings.Contains(u.EscapedPath(), "@") && !strings.Contains(u.Fragment, "@")
}

var providerName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// kinds are the provider kinds, as strings for messages and suggestions.
var kinds = func() []string {
	var ks []string
	for _, k := range providerkind.Kinds() {
		ks = append(ks, string(k))
	}
	return ks
}()

// names checks that the n items of a list have a name and that names are
// unique, and returns the index of the first item of each name.
func (v *validator) names(list string, n int, name func(i int) string) map[string]int {
	first := make(map[string]int, n)
	for i := range n {
		s := name(i)
		j, dup := first[s]
		switch {
		case s == "":
			v.add(indexPath(list, i)+".name", "required")
		case dup:
			v.add(indexPath(list, i)+".name", "duplicate name %q (first at %s)", s, indexPath(list, j))
		default:
			first[s] = i
		}
	}
	return first
}

func hasKey[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}

// providers checks the providers and returns the index of each name.
func (v *validator) providers(ps []Provider) map[string]int {
	if len(ps) == 0 {
		v.add("providers", "at least one provider is required")
	}
	names := v.names("providers", len(ps), func(i int) string { return ps[i].Name })
	for i, p := range ps {
		path := indexPath("providers", i)
		if p.Name != "" && !providerName.MatchString(p.Name) {
			v.add(path+".name", "must match %s (it becomes an Envoy cluster name), got %q", providerName, p.Name)
		}
		v.baseURL(path+".base_url", p.BaseURL)
		switch {
		case p.Kind == "":
			v.add(path+".kind", "required (one of %s)", strings.Join(kinds, ", "))
			continue
		case !p.Kind.Known():
			hint := didYouMean(string(p.Kind), kinds)
			if hint == "" {
				hint = " (must be one of " + strings.Join(kinds, ", ") + ")"
			}
			v.add(path+".kind", "unknown kind %q%s", p.Kind, hint)
			continue
		}
		// The kind checks its own fields (api_key, api_version,
		// anthropic_version).
		_, problems := p.Kind.Configure(p.settings())
		for _, pr := range problems {
			v.add(path+"."+pr.Field, "%s", pr.Message)
		}
		v.upstreamSettings(path, p)
	}
	return names
}

// upstreamSettings checks what becomes the provider's Envoy cluster and
// route.
func (v *validator) upstreamSettings(path string, p Provider) {
	for i, e := range p.Endpoints {
		v.hostPort(indexPath(path+".endpoints", i), e, false)
	}
	if p.CAFile != nil {
		v.caFile(path+".ca_file", *p.CAFile)
		if u, err := url.Parse(p.BaseURL); err == nil && u.Scheme == "http" {
			v.add(path+".ca_file", "only for an https base_url: over http Envoy verifies no certificate")
		}
	}
	if p.Retries.Max != nil && (*p.Retries.Max < 0 || *p.Retries.Max > 10) {
		v.add(path+".retries.max", "must be between 0 and 10, got %d", *p.Retries.Max)
	}
	for i, on := range p.Retries.On {
		if !slices.Contains(RetryConditions, on) {
			v.add(indexPath(path+".retries.on", i), "unknown retry condition %q (one of %s)%s", on, strings.Join(RetryConditions, ", "), didYouMean(on, RetryConditions))
		}
	}
	cb := p.CircuitBreaker
	v.nonNegative(path+".circuit_breaker.max_connections", cb.MaxConnections)
	v.nonNegative(path+".circuit_breaker.max_pending_requests", cb.MaxPendingRequests)
	v.nonNegative(path+".circuit_breaker.max_requests", cb.MaxRequests)
	if n := p.OutlierDetection.Consecutive5xx; n < -1 {
		v.add(path+".outlier_detection.consecutive_5xx", "must be -1 (off), 0 (default 5) or more, got %d", n)
	}
	switch te := p.Usage.TotalExcess; te {
	case "", TotalExcessOutput, TotalExcessIgnore:
	default:
		v.add(path+".usage.total_excess", "must be %s or %s, got %q%s", TotalExcessOutput, TotalExcessIgnore, te,
			didYouMean(te, []string{TotalExcessOutput, TotalExcessIgnore}))
	}
}

// hostPort checks a host:port address; with dial, the host must not be
// the unspecified address.
func (v *validator) hostPort(path, addr string, dial bool) {
	host, port, err := net.SplitHostPort(addr)
	switch {
	case addr == "":
		v.add(path, "must not be empty (host:port)")
	case err != nil:
		v.add(path, "must be host:port, got %q", addr)
	case host == "":
		v.add(path, "needs a host, got %q", addr)
	default:
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			v.add(path, "port must be a number from 1 to 65535, got %q", port)
		}
		if ip := net.ParseIP(host); dial && ip != nil && ip.IsUnspecified() {
			v.add(path, "%q cannot be dialled: name the address Envoy should connect to", addr)
		}
	}
}

// xds checks the control-plane settings.
func (v *validator) xds(x XDS) {
	for i, a := range x.SluiceAddresses {
		v.hostPort(indexPath("xds.sluice_addresses", i), a, true)
	}
	if x.AccessLog == "" {
		v.add("xds.access_log", `required: a file path, or "off"`)
	}
	if x.GRPCListener == "" {
		v.add("xds.grpc_listener", "required (the name proxyless gRPC clients dial as xds:///<name>)")
	}
	v.caFile("xds.upstream_ca_file", x.UpstreamCAFile)
	v.healthCheck("xds.extension_health_check", x.ExtensionHealthCheck)
	v.names("xds.node_groups", len(x.NodeGroups), func(i int) string { return x.NodeGroups[i].Name })
	for i, g := range x.NodeGroups {
		path := indexPath("xds.node_groups", i)
		if g.Name != "" && !providerName.MatchString(g.Name) {
			v.add(path+".name", "must match %s, got %q", providerName, g.Name)
		}
		if g.Cluster == "" && len(g.Metadata) == 0 {
			v.add(path, "set cluster or metadata: a group that matches every node hides the top-level configuration")
		}
		if g.Envoy != "" {
			v.hostPort(path+".envoy", g.Envoy, false)
		}
		for j, a := range g.SluiceAddresses {
			v.hostPort(indexPath(path+".sluice_addresses", j), a, true)
		}
		if g.UpstreamCAFile != nil {
			v.caFile(path+".upstream_ca_file", *g.UpstreamCAFile)
		}
	}
}

// healthCheck checks the active health check of Sluice's replicas. The
// bounds keep Envoy's checks meaningful: at least 100ms apart (each Envoy
// checks each replica), a timeout within the interval, and a threshold
// small enough that a dead replica is taken out within a minute.
func (v *validator) healthCheck(path string, h HealthCheck) {
	if h.Interval < 100*time.Millisecond || h.Interval > time.Minute {
		v.add(path+".interval", "must be from 100ms to 1m, got %v", h.Interval)
	}
	if h.Timeout <= 0 || h.Timeout > h.Interval {
		v.add(path+".timeout", "must be positive and at most the interval (%v), got %v", h.Interval, h.Timeout)
	}
	if h.UnhealthyThreshold < 1 || h.UnhealthyThreshold > 10 {
		v.add(path+".unhealthy_threshold", "must be from 1 to 10, got %d", h.UnhealthyThreshold)
	}
	if h.HealthyThreshold < 1 || h.HealthyThreshold > 10 {
		v.add(path+".healthy_threshold", "must be from 1 to 10, got %d", h.HealthyThreshold)
	}
}

// caFile checks the path of a CA bundle Envoy reads (a cluster's
// trusted_ca filename). It names a file on Envoy's machine, which Sluice
// never opens, so only its form is checked: sluice check-config reports
// whether it exists where Sluice runs.
func (v *validator) caFile(path, file string) {
	switch {
	case strings.TrimSpace(file) == "":
		v.add(path, "must not be empty: the absolute path, on Envoy's machine, of the PEM bundle Envoy verifies https providers' certificates with")
	case strings.ContainsAny(file, "\x00\r\n"):
		v.add(path, "must be a file path, got %q", file)
	case !strings.HasPrefix(file, "/"):
		v.add(path, "must be an absolute path, got %q: Envoy opens it on its own machine, where a path relative to this file means nothing", file)
	}
}

func (v *validator) baseURL(path, s string) {
	if s == "" {
		v.add(path, "required")
		return
	}
	got := strconv.Quote(s)
	if strings.Contains(s, "@") {
		got = "a value with an @ (not shown: it may hold a credential)"
	}
	u, err := url.Parse(s)
	switch {
	case err != nil || !u.IsAbs() || u.Scheme != "http" && u.Scheme != "https" || u.Hostname() == "" || u.Opaque != "":
		v.add(path, "must be an absolute http(s) URL, got %s", got)
	case u.User != nil:
		v.add(path, "must not contain credentials (put the provider's key in api_key)")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.HasSuffix(s, "#"):
		v.add(path, "must not have a query or fragment, got %s", got)
	case len(u.Hostname()) > 253:
		// Envoy refuses such an SNI, and DNS such a name.
		v.add(path, "host name is %d characters; at most 253 are allowed", len(u.Hostname()))
	case u.Scheme == "https" && net.ParseIP(u.Hostname()) != nil:
		// The host is the SNI and the DNS name the certificate must
		// carry (xds: the cluster's UpstreamTlsContext).
		v.add(path, "an https URL must name its host, not an IP address, got %s: Envoy sends the host as SNI and verifies the provider's certificate against it; list the addresses in endpoints", got)
	}
}

// models checks the models and returns, for every model name and alias,
// the index of the model that owns it, and the names and aliases in the
// order they are declared.
func (v *validator) models(ms []Model, providers map[string]int, kinds map[string]providerkind.Kind) (owners map[string]int, known []string) {
	if len(ms) == 0 {
		v.add("models", "at least one model is required")
	}
	providerNames := sortedByIndex(providers)
	owners = make(map[string]int)
	claim := func(path, name string, i int, isName bool) {
		j, taken := owners[name]
		switch {
		case taken && isName && ms[j].Name == name:
			v.add(path, "duplicate name %q (first at %s)", name, indexPath("models", j))
		case taken:
			v.add(path, "%q is already the name or alias of %s", name, indexPath("models", j))
		default:
			owners[name] = i
			known = append(known, name)
		}
	}
	for i, m := range ms {
		path := indexPath("models", i)
		switch msg := checkModelName(m.Name); {
		case m.Name == "":
			v.add(path+".name", "required")
		case msg != "":
			v.add(path+".name", "%s", msg)
		default:
			claim(path+".name", m.Name, i, true)
		}
		for k, a := range m.Aliases {
			apath := indexPath(path+".aliases", k)
			switch msg := checkModelName(a); {
			case a == "":
				v.add(apath, "must not be empty")
			case msg != "":
				v.add(apath, "%s", msg)
			default:
				claim(apath, a, i, false)
			}
		}
		v.modelProviders(path, m, providers, providerNames, kinds)
		v.nonNegative(path+".max_output_tokens", m.MaxOutputTokens)
		v.nonNegative(path+".context_window", m.ContextWindow)
	}
	return owners, known
}

// modelProviders checks where a model's requests go: one provider, or a
// list with a routing.
func (v *validator) modelProviders(path string, m Model, providers map[string]int, providerNames []string, kinds map[string]providerkind.Kind) {
	switch {
	case m.Provider != "" && len(m.Providers) > 0:
		v.add(path, "set provider or providers, not both")
		return
	case m.Provider == "" && len(m.Providers) == 0:
		v.add(path+".provider", "required (or a providers list)")
		return
	case m.Provider != "":
		if !hasKey(providers, m.Provider) {
			v.addRef("providers", path+".provider", "unknown provider %q%s", m.Provider, didYouMean(m.Provider, providerNames))
		}
		if m.Routing != "" {
			v.add(path+".routing", "only allowed with a providers list")
		}
		return
	}
	switch m.Routing {
	case "", RoutingPriority, RoutingWeighted:
	default:
		v.add(path+".routing", "must be %s or %s, got %q", RoutingPriority, RoutingWeighted, m.Routing)
	}
	seen := map[string]int{}
	first := ""
	for i, mp := range m.Providers {
		ppath := indexPath(path+".providers", i)
		switch {
		case mp.Name == "":
			v.add(ppath+".name", "required")
			continue
		case !hasKey(providers, mp.Name):
			v.addRef("providers", ppath+".name", "unknown provider %q%s", mp.Name, didYouMean(mp.Name, providerNames))
			continue
		case hasKey(seen, mp.Name):
			v.add(ppath+".name", "provider %q is listed twice (first at %s)", mp.Name, indexPath(path+".providers", seen[mp.Name]))
			continue
		}
		seen[mp.Name] = i
		if m.Routing == RoutingWeighted {
			if mp.Weight < 0 {
				v.add(ppath+".weight", "must not be negative, got %d", mp.Weight)
			}
		} else if mp.Weight != 0 {
			v.add(ppath+".weight", "only allowed with routing: %s", RoutingWeighted)
		}
		if k, ok := kinds[mp.Name]; ok {
			if first == "" {
				first = mp.Name
			} else if k.Dialect() != kinds[first].Dialect() {
				v.add(ppath+".name", "provider %q (%s) speaks another API than %q (%s); one model's providers must all be OpenAI-family or all Anthropic", mp.Name, k, first, kinds[first])
			}
		}
	}
}

// sortedByIndex returns the keys of m ordered by their index values, so that
// suggestions prefer what comes first in the file.
func sortedByIndex(m map[string]int) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int { return m[a] - m[b] })
	return keys
}

func (v *validator) pricing(prices map[string]Price, ms []Model, owners map[string]int) {
	var canonical []string
	for _, m := range ms {
		if m.Name != "" {
			canonical = append(canonical, m.Name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(prices)) {
		path := keyPath("pricing", name)
		i, ok := owners[name]
		switch {
		case !ok:
			v.addRef("models", path, "unknown model %q%s", name, didYouMean(name, canonical))
		case ms[i].Name != name:
			v.addRef("models", path, "%q is an alias of %q; price the model by its name", name, ms[i].Name)
		}
		v.price(path, prices[name])
	}
}

// price checks one pricing entry: no price is negative (any int64 above
// is valid: a cost that does not fit saturates), and a long-context tier
// has a threshold and no rate below the base price's, so that a longer
// prompt never costs less.
func (v *validator) price(path string, p Price) {
	for _, f := range []struct {
		name string
		v    *int64
	}{
		{"input", &p.Input}, {"cached_input", &p.CachedInput}, {"cache_write", p.CacheWrite},
		{"cache_write_1h", p.CacheWrite1h}, {"audio_input", p.AudioInput}, {"output", &p.Output},
		{"reasoning", p.Reasoning}, {"audio_output", p.AudioOutput}, {"per_request", &p.PerRequest},
	} {
		if f.v != nil {
			v.nonNegative(fieldPath(path, f.name), *f.v)
		}
	}
	lc := p.LongContext
	if lc == nil {
		return
	}
	lpath := fieldPath(path, "long_context")
	if lc.AboveInputTokens <= 0 {
		v.add(fieldPath(lpath, "above_input_tokens"), "required: the prompt size above which the tier applies, more than 0 (e.g. 200000), got %d", lc.AboveInputTokens)
	}
	tiers := []struct {
		name string
		v    *int64
	}{
		{"input", lc.Input}, {"cached_input", lc.CachedInput}, {"cache_write", lc.CacheWrite},
		{"cache_write_1h", lc.CacheWrite1h}, {"output", lc.Output},
	}
	negative := false
	for _, f := range tiers {
		if f.v != nil && *f.v < 0 {
			v.add(fieldPath(lpath, f.name), "must not be negative, got %d", *f.v)
			negative = true
		}
	}
	if negative || lc.AboveInputTokens <= 0 {
		return
	}
	base, long := p.Rates(lc.AboveInputTokens), p.Rates(sat.Add(lc.AboveInputTokens, 1))
	for _, r := range []struct {
		name       string
		base, long int64
	}{
		{"input", base[tokens.Input], long[tokens.Input]}, {"cached_input", base[tokens.CachedInput], long[tokens.CachedInput]},
		{"cache_write", base[tokens.CacheWrite], long[tokens.CacheWrite]}, {"cache_write_1h", base[tokens.CacheWrite1h], long[tokens.CacheWrite1h]},
		{"output", base[tokens.Output], long[tokens.Output]},
	} {
		if r.long < r.base {
			v.add(fieldPath(lpath, r.name), "the long-context price of %s is %d, below the base price, %d: a longer prompt must not cost less per token", r.name, r.long, r.base)
		}
	}
}

func (v *validator) nonNegative(path string, n int64) {
	if n < 0 {
		v.add(path, "must not be negative, got %d", n)
	}
}

// mayBeWrong reports whether limits could hold anything limits reports:
// a negative window, a budget, or per-model limits.
func (l Limits) mayBeWrong() bool {
	neg := func(r RateLimits) bool { return r.PerMinute < 0 || r.PerHour < 0 || r.PerDay < 0 }
	return neg(l.Requests) || neg(l.Tokens.Input) || neg(l.Tokens.Output) || neg(l.Tokens.Total) || len(l.Budgets) > 0 || len(l.Models) > 0
}

func (v *validator) limits(path string, l Limits) {
	v.limitsAt(path, l, false)
}

func (v *validator) limitsAt(path string, l Limits, nested bool) {
	// Paths are built only for a problem: a config of many keys checks
	// each key's limits without a string made per field.
	rate := func(sub string, r RateLimits) {
		if r.PerMinute >= 0 && r.PerHour >= 0 && r.PerDay >= 0 {
			return
		}
		p := path + sub
		v.nonNegative(p+".per_minute", r.PerMinute)
		v.nonNegative(p+".per_hour", r.PerHour)
		v.nonNegative(p+".per_day", r.PerDay)
	}
	switch {
	case l.FailureMode == "" || (!nested && (l.FailureMode == FailClosed || l.FailureMode == FailOpen)):
	case nested:
		v.add(path+".failure_mode", "not per model: a key's, team's or org's limits declare it")
	default:
		v.add(path+".failure_mode", "must be closed or open, got %q", l.FailureMode)
	}
	rate(".requests", l.Requests)
	rate(".tokens.input", l.Tokens.Input)
	rate(".tokens.output", l.Tokens.Output)
	rate(".tokens.total", l.Tokens.Total)
	var seen map[string]int
	if len(l.Budgets) > 0 {
		seen = make(map[string]int, len(l.Budgets))
	}
	for i, b := range l.Budgets {
		bp := indexPath(path+".budgets", i)
		if b.MicroUSD <= 0 {
			v.add(bp+".micro_usd", "must be more than 0 (micro-dollars: $50 is 50000000), got %d", b.MicroUSD)
		}
		switch {
		case b.Period == "":
			v.add(bp+".period", "required (one of %s)", strings.Join(BudgetPeriods, ", "))
		case !slices.Contains(BudgetPeriods, b.Period):
			v.add(bp+".period", "unknown period %q (one of %s)%s", b.Period, strings.Join(BudgetPeriods, ", "), didYouMean(b.Period, BudgetPeriods))
		case b.Period == PeriodRolling && (b.Window < time.Minute || b.Window%time.Minute != 0):
			v.add(bp+".window", "a rolling budget needs a window of whole minutes, at least 1m (e.g. 24h), got %v", b.Window)
		case b.Period != PeriodRolling && b.Window != 0:
			v.add(bp+".window", "only allowed with period: %s", PeriodRolling)
		}
		id := b.Period + "/" + b.Window.String()
		if j, dup := seen[id]; dup {
			v.add(bp, "a second %s budget (first at %s): one budget per period", b.Period, indexPath(path+".budgets", j))
		}
		seen[id] = i
	}
	if len(l.Models) > 0 && nested {
		v.add(path+".models", "per-model limits cannot nest")
		return
	}
	if len(l.Models) == 0 {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(l.Models)) {
		mp := keyPath(path+".models", name)
		if i, ok := v.owners[name]; !ok {
			v.addRef("models", mp, "unknown model %q", name)
		} else if v.modelList[i].Name != name {
			v.addRef("models", mp, "%q is an alias of %q; limit the model by its name", name, v.modelList[i].Name)
		}
		v.limitsAt(mp, l.Models[name], true)
	}
}

// allowList checks a model allow-list against the configured models.
func (v *validator) allowList(path string, patterns []string, owners map[string]int, known []string) {
	for i, p := range patterns {
		if msg := checkPattern(p); msg != "" {
			v.add(indexPath(path, i), "%s", msg)
			continue
		}
		matches := hasKey(owners, p)
		if !matches && strings.Contains(p, "*") {
			g := compileGlob(p)
			matches = slices.ContainsFunc(known, g.match)
		}
		if !matches {
			v.addRef("models", indexPath(path, i), "%q matches no configured model%s", p, didYouMean(p, known))
		}
	}
}

// teams checks the teams and returns the index of each name.
func (v *validator) teams(c *Config, orgs, owners map[string]int, known []string) map[string]int {
	names := v.names("teams", len(c.Teams), func(i int) string { return c.Teams[i].Name })
	orgNames := sortedByIndex(orgs)
	for i, t := range c.Teams {
		path := indexPath("teams", i)
		if t.Org != "" && !hasKey(orgs, t.Org) {
			v.addRef("orgs", path+".org", "unknown org %q%s", t.Org, didYouMean(t.Org, orgNames))
		}
		v.allowList(path+".models", t.Models, owners, known)
		v.limits(path+".limits", t.Limits)
	}
	return names
}

func (v *validator) keys(c *Config, teams, owners map[string]int, known []string) {
	v.names("keys", len(c.Keys), func(i int) string { return c.Keys[i].Name })
	teamNames := sortedByIndex(teams)
	hashes := make(map[string]int, len(c.Keys))
	for i := range c.Keys {
		k := &c.Keys[i]
		// The key's path is made only for a problem: a config may declare
		// a great many keys.
		path := func(sub string) string { return indexPath("keys", i) + sub }
		switch {
		case k.Team == "":
			v.add(path(".team"), "required")
		case !hasKey(teams, k.Team):
			v.addRef("teams", path(".team"), "unknown team %q%s", k.Team, didYouMean(k.Team, teamNames))
		}
		// Neither the hash field nor the prefix is ever echoed: an operator
		// who pastes the key itself in the wrong place must not see it
		// printed and logged.
		switch {
		case k.SHA256 == "":
			v.add(path(".sha256"), `required (printf %%s "$KEY" | sha256sum)`)
		case strings.HasPrefix(k.SHA256, keyPrefix):
			v.add(path(".sha256"), `looks like a key, not its SHA-256 (printf %%s "$KEY" | sha256sum)`)
		case len(k.SHA256) != 64:
			v.add(path(".sha256"), "must be 64 lower-case hex characters, got %d characters", len(k.SHA256))
		case !isSHA256Hex(k.SHA256):
			if isSHA256Hex(strings.ToLower(k.SHA256)) {
				v.add(path(".sha256"), "must be lower-case")
			} else {
				v.add(path(".sha256"), "must be 64 lower-case hex characters (0-9, a-f)")
			}
		case hasKey(hashes, k.SHA256):
			v.add(path(".sha256"), "same hash as %s", indexPath("keys", hashes[k.SHA256]))
		default:
			hashes[k.SHA256] = i
		}
		switch {
		case k.Prefix == "":
		case !strings.HasPrefix(k.Prefix, keyPrefix):
			v.add(path(".prefix"), "must start with %q", keyPrefix)
		case len(k.Prefix) < len(keyPrefix)+keyMinSecretLen:
			// Shorter than any key Sluice takes (apikey.Validate), so
			// not the whole key.
		case prefixIsKey(k.Prefix, k.SHA256):
			v.add(path(".prefix"), "is the whole key; keep only its first characters")
		}
		if len(k.Models) > 0 {
			v.allowList(path(".models"), k.Models, owners, known)
		}
		if k.Limits.mayBeWrong() {
			v.limits(path(".limits"), k.Limits)
		}
	}
}

// prefixIsKey reports whether prefix is the whole key whose SHA-256 is
// hash, in lower-case hex.
func prefixIsKey(prefix, hash string) bool {
	sum := sha256.Sum256([]byte(prefix))
	var h [64]byte
	hex.Encode(h[:], sum[:])
	return string(h[:]) == hash
}

// The format of Sluice API keys, owned by internal/apikey, which sits on
// the request path: keyPrefix starts every key, and keyMinSecretLen is the
// shortest random part one takes. Kept here rather than imported so that
// the configuration model stays below the request path; a test pins them
// to apikey's.
const (
	keyPrefix       = "sk-sluice-"
	keyMinSecretLen = 32
)

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := range len(s) {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
