package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/policies"
)

// KeyStore is where the API creates, lists, revokes and limits keys
// (store.Store). Semantics are store.Store's.
type KeyStore interface {
	CreateKey(ctx context.Context, k store.Key) error
	ListKeys(ctx context.Context) ([]store.Key, error)
	RevokeKey(ctx context.Context, id string, at time.Time) (store.Key, error)
	SetKeyLimits(ctx context.Context, id string, l policies.Limits) (store.Key, error)
}

// GroupStore is where the API writes teams and orgs (store.Store). It
// reads them back with Changes(ctx, 0), which returns every record.
type GroupStore interface {
	PutTeam(ctx context.Context, t store.Team) error
	PutOrg(ctx context.Context, o store.Org) error
	Changes(ctx context.Context, since int64) (store.Changes, error)
}

// Principals resolves a key id, a team or an org to the principal whose
// limits cover it, as the running server sees it (*keyring.Ring): a store
// write shows here once the keyring has followed it (within a second).
// Each returns nil for one it does not know.
type Principals interface {
	ByID(id string) *keyring.Principal
	Team(name string) *keyring.Principal
	Org(name string) *keyring.Principal
}

// Budgets reports every budget that covers a principal, as this process
// counts it, without reserving anything (*admission.Local).
type Budgets interface {
	Budgets(p *keyring.Principal, at time.Time) []admission.BudgetStatus
}

// Spend sums the spend ledger (ledger.Reader's Totals).
type Spend interface {
	Totals(ctx context.Context, f ledger.Filter, by ledger.GroupBy) ([]ledger.Total, error)
}

var (
	_ KeyStore   = store.Store(nil)
	_ GroupStore = store.Store(nil)
	_ Principals = (*keyring.Ring)(nil)
	_ Budgets    = (*admission.Local)(nil)
	_ Spend      = ledger.Reader(nil)
)

// endpoint handles one API route: the status and body to send, or an
// error.
type endpoint func(w http.ResponseWriter, r *http.Request) (int, any, *apiError)

type route struct {
	pattern string
	handler http.HandlerFunc
}

// routes are the API's routes; docs/admin-api.openapi.yaml describes each
// (TestOpenAPIMatchesRoutes).
func (s *Server) routes() []route {
	rs := []struct {
		pattern string
		ep      endpoint
	}{
		{"GET /v1/keys", s.listKeys},
		{"POST /v1/keys", s.createKey},
		{"GET /v1/keys/{id}", s.getKey},
		{"POST /v1/keys/{id}/revoke", s.revokeKey},
		{"PUT /v1/keys/{id}/limits", s.setKeyLimits},
		{"GET /v1/keys/{id}/budgets", s.keyBudgets},
		{"GET /v1/teams", s.listTeams},
		{"GET /v1/teams/{name}", s.getTeam},
		{"PUT /v1/teams/{name}", s.putTeam},
		{"GET /v1/teams/{name}/budgets", s.teamBudgets},
		{"GET /v1/orgs", s.listOrgs},
		{"GET /v1/orgs/{name}", s.getOrg},
		{"PUT /v1/orgs/{name}", s.putOrg},
		{"GET /v1/orgs/{name}/budgets", s.orgBudgets},
		{"GET /v1/spend", s.spend},
	}
	out := make([]route, len(rs))
	for i, rt := range rs {
		ep := rt.ep
		out[i] = route{rt.pattern, func(w http.ResponseWriter, r *http.Request) {
			status, body, e := ep(w, r)
			if e != nil {
				writeError(w, e)
				return
			}
			writeJSON(w, status, body)
		}}
	}
	return out
}

// guard lets a request reach the API only with the admin token, and
// answers unknown routes in JSON.
func (s *Server) guard(api *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("cache-control", "no-store")
		if !s.checkToken(w, r) {
			return
		}
		if _, pattern := api.Handler(r); pattern == "" {
			writeError(w, noRoute(api, r, w.Header()))
			return
		}
		api.ServeHTTP(w, r)
	})
}

// checkToken reports whether r carries the admin token; if not, it has
// answered the request (401, 403 or 503, as authorize decides).
func (s *Server) checkToken(w http.ResponseWriter, r *http.Request) bool {
	e := s.authorize(r)
	if e == nil {
		return true
	}
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("www-authenticate", `Bearer realm="sluice-admin"`)
	}
	writeError(w, e)
	return false
}

// authorize checks the bearer token against admin.token, in constant
// time (both are hashed first, so not even the length shows).
func (s *Server) authorize(r *http.Request) *apiError {
	snap := s.deps.Policy()
	if snap == nil {
		return errorf(http.StatusServiceUnavailable, "not_ready", "the configuration is not loaded yet")
	}
	token := snap.Config().Admin.Token.Reveal()
	if token == "" {
		return errorf(http.StatusForbidden, "admin_api_disabled",
			"the admin API is off: set admin.token in sluice.yaml (e.g. token: ${SLUICE_ADMIN_TOKEN}, a random string of at least 16 characters) and send it as Authorization: Bearer <token>; a config reload applies it without a restart")
	}
	// The scheme ends at the first space or tab, as for gateway keys
	// (apikey.FromHeaders).
	scheme, cred := strings.Trim(r.Header.Get("authorization"), " \t"), ""
	if i := strings.IndexAny(scheme, " \t"); i >= 0 {
		scheme, cred = scheme[:i], strings.TrimLeft(scheme[i:], " \t")
	}
	if !strings.EqualFold(scheme, "bearer") || cred == "" {
		return errorf(http.StatusUnauthorized, "unauthorized", "missing admin token: send Authorization: Bearer <admin.token>")
	}
	got, want := sha256.Sum256([]byte(cred)), sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		s.log.Warn("admin request with a wrong token refused", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
		return errorf(http.StatusUnauthorized, "unauthorized", "wrong admin token")
	}
	return nil
}

// noRoute is 405 (with Allow) for a path served with other methods, else
// 404.
func noRoute(api *http.ServeMux, r *http.Request, h http.Header) *apiError {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, p := api.Handler(probe); p != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		h.Set("allow", strings.Join(allow, ", "))
		return errorf(http.StatusMethodNotAllowed, "method_not_allowed", "%s %s: method not allowed (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", "))
	}
	return errorf(http.StatusNotFound, "not_found", "no such route: %s %s (see docs/admin-api.openapi.yaml)", r.Method, r.URL.Path)
}

// internal logs err and answers 500 without its details.
func (s *Server) internal(r *http.Request, err error) *apiError {
	s.log.Error("admin API request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	return errorf(http.StatusInternalServerError, "internal_error", "internal error; the server log has the details")
}

// Keys.

func (s *Server) listKeys(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	q, ps := query(r, "team")
	if len(ps) > 0 {
		return 0, nil, invalid(ps)
	}
	team, now := q.Get("team"), s.deps.Now()
	keys := []keyJSON{}
	for _, k := range s.deps.Policy().DeclaredKeys() {
		if team == "" || k.Team == team {
			keys = append(keys, declaredKeyJSON(k, now))
		}
	}
	stored, err := s.deps.Keys.ListKeys(r.Context())
	if err != nil {
		return 0, nil, s.internal(r, err)
	}
	for _, k := range stored {
		if team == "" || k.Team == team {
			keys = append(keys, storedKeyJSON(k, now))
		}
	}
	return http.StatusOK, map[string]any{"keys": keys}, nil
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	var req createKeyRequest
	if e := decode(w, r, &req); e != nil {
		return 0, nil, e
	}
	snap, now := s.deps.Policy(), s.deps.Now().UTC()
	var ps []problem
	if req.Team == "" {
		ps = append(ps, problem{"team", "required"})
	} else if msg := checkName(req.Team); msg != "" {
		ps = append(ps, problem{"team", msg})
	} else {
		_, ok, err := s.team(r.Context(), snap, req.Team)
		if err != nil {
			return 0, nil, s.internal(r, err)
		}
		if !ok {
			ps = append(ps, problem{"team", fmt.Sprintf("unknown team %q (see GET /v1/teams)", req.Team)})
		}
	}
	if msg := checkName(req.Name); req.Name != "" && msg != "" {
		ps = append(ps, problem{"name", msg})
	}
	ps = append(ps, fromPolicies(snap.CheckModels("models", req.Models), "")...)
	limits, lps := s.limits(snap, req.Limits, "limits")
	ps = append(ps, lps...)
	var expires time.Time
	if req.ExpiresAt != "" {
		t, err := time.Parse(time.RFC3339, req.ExpiresAt)
		switch {
		case err != nil:
			ps = append(ps, problem{"expires_at", fmt.Sprintf("want an RFC 3339 time such as 2027-01-31T00:00:00Z, got %q", req.ExpiresAt)})
		case !t.After(now):
			ps = append(ps, problem{"expires_at", fmt.Sprintf("%s is not in the future", req.ExpiresAt)})
		case t.After(store.LatestTime()):
			ps = append(ps, problem{"expires_at", fmt.Sprintf("must be no later than %s (the latest time the key store holds), got %s",
				store.LatestTime().Format(time.RFC3339), req.ExpiresAt)})
		default:
			expires = t.UTC()
		}
	}
	if len(ps) > 0 {
		return 0, nil, invalid(ps)
	}

	secret, err := apikey.Generate(nil)
	if err != nil {
		return 0, nil, s.internal(r, err)
	}
	id, err := apikey.NewID(nil)
	if err != nil {
		return 0, nil, s.internal(r, err)
	}
	k := store.Key{
		ID: id, Prefix: apikey.PublicPrefix(secret.Reveal()), Hash: apikey.Hash(secret.Reveal()),
		Team: req.Team, Name: req.Name, Limits: limits, CreatedAt: now, ExpiresAt: expires,
	}
	if len(req.Models) > 0 {
		k.Models = req.Models
	}
	if err := s.deps.Keys.CreateKey(r.Context(), k); err != nil {
		if errors.Is(err, store.ErrExists) {
			// 32 random bytes and 12 for the id: not expected in practice.
			return 0, nil, errorf(http.StatusConflict, "conflict", "the generated key collided with an existing one; retry")
		}
		return 0, nil, s.internal(r, err)
	}
	s.log.Info("key created", "key_id", k.ID, "key_prefix", k.Prefix, "team", k.Team)
	w.Header().Set("location", "/v1/keys/"+url.PathEscape(k.ID))
	return http.StatusCreated, createdKeyJSON{storedKeyJSON(k, now), secret.Reveal()}, nil
}

func (s *Server) getKey(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	id, now := r.PathValue("id"), s.deps.Now()
	if k, ok := declaredKey(s.deps.Policy(), id); ok {
		return http.StatusOK, declaredKeyJSON(k, now), nil
	}
	keys, err := s.deps.Keys.ListKeys(r.Context())
	if err != nil {
		return 0, nil, s.internal(r, err)
	}
	for _, k := range keys {
		if k.ID == id {
			return http.StatusOK, storedKeyJSON(k, now), nil
		}
	}
	return 0, nil, noKey(id)
}

func (s *Server) revokeKey(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	id, now := r.PathValue("id"), s.deps.Now().UTC()
	if _, ok := declaredKey(s.deps.Policy(), id); ok {
		return 0, nil, declaredInConfig("key "+id, "remove it from the file to revoke it")
	}
	k, err := s.deps.Keys.RevokeKey(r.Context(), id, now)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, noKey(id)
	}
	if err != nil {
		return 0, nil, s.internal(r, err)
	}
	s.log.Info("key revoked", "key_id", k.ID, "key_prefix", k.Prefix, "team", k.Team)
	return http.StatusOK, storedKeyJSON(k, now), nil
}

func (s *Server) setKeyLimits(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	id, snap := r.PathValue("id"), s.deps.Policy()
	if _, ok := declaredKey(snap, id); ok {
		return 0, nil, declaredInConfig("key "+id, "edit its limits there")
	}
	var body LimitsJSON
	if e := decode(w, r, &body); e != nil {
		return 0, nil, e
	}
	// The body is the limits themselves: problems are addressed from its
	// root ("budgets[0].period").
	limits, ps := s.limits(snap, body, "limits")
	if len(ps) > 0 {
		for i := range ps {
			ps[i].Path = strings.TrimPrefix(ps[i].Path, "limits.")
		}
		return 0, nil, invalid(ps)
	}
	k, err := s.deps.Keys.SetKeyLimits(r.Context(), id, limits)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, noKey(id)
	}
	if err != nil {
		return 0, nil, s.internal(r, err)
	}
	s.log.Info("key limits set", "key_id", k.ID, "key_prefix", k.Prefix, "team", k.Team)
	return http.StatusOK, storedKeyJSON(k, s.deps.Now()), nil
}

func (s *Server) keyBudgets(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	id := r.PathValue("id")
	p := s.deps.Principals.ByID(id)
	if p == nil {
		return 0, nil, errorf(http.StatusNotFound, "not_found", "no key with id %q is loaded (a key created less than a second ago may not be yet)", id)
	}
	return s.budgets(p)
}

// limits converts and checks limits as sluice.yaml's are checked, and
// returns every problem: a window that is no duration is reported as such,
// not again as a missing window.
func (s *Server) limits(snap *policies.Snapshot, j LimitsJSON, path string) (policies.Limits, []problem) {
	l, ps := j.limits(path)
	for _, p := range fromPolicies(snap.CheckLimits(path, l), "") {
		if !slices.ContainsFunc(ps, func(q problem) bool { return q.Path == p.Path }) {
			ps = append(ps, p)
		}
	}
	return l, ps
}

func (s *Server) budgets(p *keyring.Principal) (int, any, *apiError) {
	out := []budgetStatusJSON{}
	for _, b := range s.deps.Budgets.Budgets(p, s.deps.Now()) {
		out = append(out, toBudgetJSON(b))
	}
	return http.StatusOK, map[string]any{"budgets": out}, nil
}

func declaredKey(snap *policies.Snapshot, id string) (policies.KeyPolicy, bool) {
	return snap.DeclaredKey(id)
}

func noKey(id string) *apiError {
	return errorf(http.StatusNotFound, "not_found", "no key with id %q (see GET /v1/keys)", id)
}

func declaredInConfig(what, todo string) *apiError {
	return errorf(http.StatusConflict, "declared_in_config", "%s is declared in sluice.yaml, which the API does not edit: %s", what, todo)
}

// Teams and orgs.

// stored returns the teams and orgs in the store, by name.
func (s *Server) stored(ctx context.Context) (map[string]store.Team, map[string]store.Org, error) {
	ch, err := s.deps.Groups.Changes(ctx, 0)
	if err != nil {
		return nil, nil, err
	}
	teams := make(map[string]store.Team, len(ch.Teams))
	for _, t := range ch.Teams {
		teams[t.Name] = t
	}
	orgs := make(map[string]store.Org, len(ch.Orgs))
	for _, o := range ch.Orgs {
		orgs[o.Name] = o
	}
	return teams, orgs, nil
}

// team finds a team in the config first (it wins), then in the store.
func (s *Server) team(ctx context.Context, snap *policies.Snapshot, name string) (teamJSON, bool, error) {
	if t, ok := snap.Team(name); ok {
		return configTeamJSON(t), true, nil
	}
	teams, _, err := s.stored(ctx)
	if err != nil {
		return teamJSON{}, false, err
	}
	t, ok := teams[name]
	return storedTeamJSON(t), ok, nil
}

func configTeamJSON(t policies.TeamPolicy) teamJSON {
	return teamJSON{Name: t.Name, Org: t.Org, Models: t.Models.Patterns(), Limits: toLimitsJSON(t.Limits), Source: sourceConfig}
}

func storedTeamJSON(t store.Team) teamJSON {
	return teamJSON{Name: t.Name, Org: t.Org, Models: t.Models, Limits: toLimitsJSON(t.Limits), Source: sourceStore}
}

func (s *Server) listTeams(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	if _, ps := query(r); len(ps) > 0 {
		return 0, nil, invalid(ps)
	}
	snap := s.deps.Policy()
	teams, _, err := s.stored(r.Context())
	if err != nil {
		return 0, nil, s.internal(r, err)
	}
	out := []teamJSON{}
	for _, t := range snap.Teams() {
		out = append(out, configTeamJSON(t))
	}
	for _, name := range sortedKeys(teams) {
		if _, shadowed := snap.Team(name); !shadowed {
			out = append(out, storedTeamJSON(teams[name]))
		}
	}
	return http.StatusOK, map[string]any{"teams": out}, nil
}

func (s *Server) getTeam(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	name := r.PathValue("name")
	t, ok, err := s.team(r.Context(), s.deps.Policy(), name)
	if err != nil {
		return 0, nil, s.internal(r, err)
	}
	if !ok {
		return 0, nil, errorf(http.StatusNotFound, "not_found", "no team %q (see GET /v1/teams)", name)
	}
	return http.StatusOK, t, nil
}

func (s *Server) putTeam(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	name, snap := r.PathValue("name"), s.deps.Policy()
	if _, ok := snap.Team(name); ok {
		return 0, nil, declaredInConfig("team "+strconv.Quote(name), "edit it there")
	}
	var req putTeamRequest
	if e := decode(w, r, &req); e != nil {
		return 0, nil, e
	}
	var ps []problem
	if msg := checkName(name); msg != "" {
		ps = append(ps, problem{"name", msg})
	}
	if req.Org != "" && !snap.Org(req.Org) {
		_, orgs, err := s.stored(r.Context())
		if err != nil {
			return 0, nil, s.internal(r, err)
		}
		if _, ok := orgs[req.Org]; !ok {
			ps = append(ps, problem{"org", fmt.Sprintf("unknown org %q (see GET /v1/orgs)", req.Org)})
		}
	}
	ps = append(ps, fromPolicies(snap.CheckModels("models", req.Models), "")...)
	limits, lps := s.limits(snap, req.Limits, "limits")
	ps = append(ps, lps...)
	if len(ps) > 0 {
		return 0, nil, invalid(ps)
	}
	t := store.Team{Name: name, Org: req.Org, Limits: limits}
	if len(req.Models) > 0 {
		t.Models = req.Models
	}
	if err := s.deps.Groups.PutTeam(r.Context(), t); err != nil {
		return 0, nil, s.internal(r, err)
	}
	s.log.Info("team put", "team", name, "org", req.Org)
	return http.StatusOK, storedTeamJSON(t), nil
}

func (s *Server) teamBudgets(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	name := r.PathValue("name")
	p := s.deps.Principals.Team(name)
	if p == nil {
		return 0, nil, errorf(http.StatusNotFound, "not_found", "no team %q is loaded (a team put less than a second ago may not be yet)", name)
	}
	return s.budgets(p)
}

func configOrgs(snap *policies.Snapshot) []orgJSON {
	var out []orgJSON
	for _, o := range snap.Config().Orgs {
		out = append(out, orgJSON{Name: o.Name, Limits: toLimitsJSON(o.Limits), Source: sourceConfig})
	}
	return out
}

func storedOrgJSON(o store.Org) orgJSON {
	return orgJSON{Name: o.Name, Limits: toLimitsJSON(o.Limits), Source: sourceStore}
}

func (s *Server) listOrgs(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	if _, ps := query(r); len(ps) > 0 {
		return 0, nil, invalid(ps)
	}
	snap := s.deps.Policy()
	_, orgs, err := s.stored(r.Context())
	if err != nil {
		return 0, nil, s.internal(r, err)
	}
	out := append([]orgJSON{}, configOrgs(snap)...)
	for _, name := range sortedKeys(orgs) {
		if !snap.Org(name) {
			out = append(out, storedOrgJSON(orgs[name]))
		}
	}
	return http.StatusOK, map[string]any{"orgs": out}, nil
}

func (s *Server) getOrg(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	name, snap := r.PathValue("name"), s.deps.Policy()
	for _, o := range configOrgs(snap) {
		if o.Name == name {
			return http.StatusOK, o, nil
		}
	}
	_, orgs, err := s.stored(r.Context())
	if err != nil {
		return 0, nil, s.internal(r, err)
	}
	o, ok := orgs[name]
	if !ok {
		return 0, nil, errorf(http.StatusNotFound, "not_found", "no org %q (see GET /v1/orgs)", name)
	}
	return http.StatusOK, storedOrgJSON(o), nil
}

func (s *Server) putOrg(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	name, snap := r.PathValue("name"), s.deps.Policy()
	if snap.Org(name) {
		return 0, nil, declaredInConfig("org "+strconv.Quote(name), "edit it there")
	}
	var req putOrgRequest
	if e := decode(w, r, &req); e != nil {
		return 0, nil, e
	}
	var ps []problem
	if msg := checkName(name); msg != "" {
		ps = append(ps, problem{"name", msg})
	}
	limits, lps := s.limits(snap, req.Limits, "limits")
	if ps = append(ps, lps...); len(ps) > 0 {
		return 0, nil, invalid(ps)
	}
	o := store.Org{Name: name, Limits: limits}
	if err := s.deps.Groups.PutOrg(r.Context(), o); err != nil {
		return 0, nil, s.internal(r, err)
	}
	s.log.Info("org put", "org", name)
	return http.StatusOK, storedOrgJSON(o), nil
}

func (s *Server) orgBudgets(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	name := r.PathValue("name")
	p := s.deps.Principals.Org(name)
	if p == nil {
		return 0, nil, errorf(http.StatusNotFound, "not_found", "no org %q is loaded (an org put less than a second ago may not be yet)", name)
	}
	return s.budgets(p)
}

// Spend.

// spendGroups are the groupings the API offers (the ledger's bucket
// grouping is internal).
var spendGroups = []ledger.GroupBy{ledger.ByKey, ledger.ByTeam, ledger.ByOrg, ledger.ByModel, ledger.ByDay, ledger.ByNone}

func (s *Server) spend(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	q, ps := query(r, "by", "since", "until", "key", "team", "org", "model", "limit")
	by := ledger.ByKey
	if v := q.Get("by"); v != "" {
		by = ledger.GroupBy(v)
		if !slices.Contains(spendGroups, by) {
			ps = append(ps, problem{"query.by", fmt.Sprintf("want key, team, org, model, day or none, got %q", v)})
		}
	}
	f := ledger.Filter{KeyID: q.Get("key"), Team: q.Get("team"), Org: q.Get("org"), Model: q.Get("model")}
	for _, b := range []struct {
		name string
		t    *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		v := q.Get(b.name)
		if v == "" {
			continue
		}
		t, err := parseWhen(v)
		if err != nil {
			ps = append(ps, problem{"query." + b.name, err.Error()})
		}
		*b.t = t
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			ps = append(ps, problem{"query.limit", fmt.Sprintf("want a whole number, 0 or more (0: no limit), got %q", v)})
		}
		f.Limit = n
	}
	if len(ps) == 0 && f.Validate() != nil {
		ps = append(ps, problem{"query.until", "is before since"})
	}
	if len(ps) > 0 {
		return 0, nil, invalid(ps)
	}
	ts, err := s.deps.Spend.Totals(r.Context(), f, by)
	if errors.Is(err, ledger.ErrInvalid) {
		return 0, nil, invalid([]problem{{"query", err.Error()}})
	}
	if err != nil {
		return 0, nil, s.internal(r, err)
	}
	if ts == nil {
		ts = []ledger.Total{}
	}
	out := spendJSON{By: string(by), Since: timePtr(f.Since), Until: timePtr(f.Until), Totals: ts}
	return http.StatusOK, out, nil
}

// parseWhen reads an RFC 3339 time or a date (midnight UTC).
func parseWhen(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339, "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("want an RFC 3339 time (2026-11-01T00:00:00Z) or a date (2026-11-01), got %q", s)
}

// Helpers.

// query returns the request's query parameters and the problems of
// unknown and repeated ones: a misspelt filter must not silently select
// everything.
func query(r *http.Request, allowed ...string) (url.Values, []problem) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return q, []problem{{"query", err.Error()}}
	}
	var ps []problem
	for _, name := range sortedKeys(q) {
		switch {
		case !slices.Contains(allowed, name):
			want := "none"
			if len(allowed) > 0 {
				want = strings.Join(allowed, ", ")
			}
			ps = append(ps, problem{"query." + name, fmt.Sprintf("unknown parameter (parameters: %s)", want)})
		case len(q[name]) > 1:
			ps = append(ps, problem{"query." + name, "given more than once"})
		}
	}
	return q, ps
}

// maxName bounds names of keys, teams and orgs.
const maxName = 128

// checkName returns what is wrong with a name, or "".
func checkName(s string) string {
	switch {
	case len(s) > maxName:
		return fmt.Sprintf("at most %d bytes, got %d", maxName, len(s))
	case strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }):
		return "must not contain control characters"
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
