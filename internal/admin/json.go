package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/policies"
)

// The API's JSON shapes. Field names follow sluice.yaml where the same
// thing is written there (limits); money is integer micro-dollars (what
// is configured exactly, what is counted rounded: costs and what is spent
// up, what is left down) beside the exact amount in integer pico-dollars
// (*_pico_usd, a JSON integer that may exceed 2^63), times are RFC 3339 in
// UTC, durations Go durations ("24h").

// LimitsJSON is policies.Limits as sluice.yaml writes it: the same fields,
// and a budget's window as a duration string, not nanoseconds. The admin
// API and `sluice keys import` read and write limits in this shape.
type LimitsJSON struct {
	Requests policies.RateLimits   `json:"requests,omitzero"`
	Tokens   policies.TokenLimits  `json:"tokens,omitzero"`
	Budgets  []BudgetJSON          `json:"budgets,omitempty"`
	Models   map[string]LimitsJSON `json:"models,omitempty"`
}

// BudgetJSON is a policies.Budget in LimitsJSON.
type BudgetJSON struct {
	MicroUSD int64  `json:"micro_usd"`
	Period   string `json:"period"`
	Window   string `json:"window,omitempty"`
}

func toLimitsJSON(l policies.Limits) LimitsJSON {
	j := LimitsJSON{Requests: l.Requests, Tokens: l.Tokens}
	for _, b := range l.Budgets {
		bj := BudgetJSON{MicroUSD: b.MicroUSD, Period: b.Period}
		if b.Window != 0 {
			bj.Window = duration(b.Window)
		}
		j.Budgets = append(j.Budgets, bj)
	}
	if len(l.Models) > 0 {
		j.Models = make(map[string]LimitsJSON, len(l.Models))
		for m, ml := range l.Models {
			j.Models[m] = toLimitsJSON(ml)
		}
	}
	return j
}

// Limits converts j, reporting each window that is not a duration as
// "path: problem"; everything else is for policies.Snapshot.CheckLimits.
func (j LimitsJSON) Limits(path string) (policies.Limits, []string) {
	l, ps := j.limits(path)
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Path+": "+p.Message)
	}
	return l, out
}

// limits converts j, reporting windows that are not durations; everything
// else is checked by policies.Snapshot.CheckLimits.
func (j LimitsJSON) limits(path string) (policies.Limits, []problem) {
	l := policies.Limits{Requests: j.Requests, Tokens: j.Tokens}
	var ps []problem
	for i, b := range j.Budgets {
		pb := policies.Budget{MicroUSD: b.MicroUSD, Period: b.Period}
		if b.Window != "" {
			d, err := time.ParseDuration(b.Window)
			if err != nil {
				ps = append(ps, problem{fmt.Sprintf("%s.budgets[%d].window", path, i), fmt.Sprintf("want a duration such as 24h or 168h, got %q", b.Window)})
			}
			pb.Window = d
		}
		l.Budgets = append(l.Budgets, pb)
	}
	if len(j.Models) > 0 {
		l.Models = make(map[string]policies.Limits, len(j.Models))
		for m, mj := range j.Models {
			ml, mps := mj.limits(path + ".models." + m)
			l.Models[m] = ml
			ps = append(ps, mps...)
		}
	}
	return l, ps
}

// duration formats d without trailing zero units: 24h, 1h30m, 90s → 1m30s.
func duration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Key sources.
const (
	sourceStore  = "store"  // created at runtime (this API, sluice keys)
	sourceConfig = "config" // declared in sluice.yaml
)

type keyJSON struct {
	ID        string     `json:"id"`
	Prefix    string     `json:"prefix"`
	Name      string     `json:"name"`
	Team      string     `json:"team"`
	Source    string     `json:"source"`
	State     string     `json:"state"`
	Models    []string   `json:"models,omitempty"`
	Limits    LimitsJSON `json:"limits"`
	CreatedAt *time.Time `json:"created_at,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

func storedKeyJSON(k store.Key, now time.Time) keyJSON {
	j := keyJSON{
		ID: k.ID, Prefix: k.Prefix, Name: k.Name, Team: k.Team, Source: sourceStore,
		State: state(k.Revoked(), k.Expired(now)), Models: k.Models, Limits: toLimitsJSON(k.Limits),
		CreatedAt: timePtr(k.CreatedAt), ExpiresAt: timePtr(k.ExpiresAt), RevokedAt: timePtr(k.RevokedAt),
	}
	return j
}

func declaredKeyJSON(k policies.KeyPolicy, now time.Time) keyJSON {
	expired := !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt)
	return keyJSON{
		ID: k.ID, Prefix: k.Prefix, Name: k.Name, Team: k.Team, Source: sourceConfig,
		State: state(false, expired), Models: k.Models.Patterns(), Limits: toLimitsJSON(k.Limits),
		ExpiresAt: timePtr(k.ExpiresAt),
	}
}

func state(revoked, expired bool) string {
	switch {
	case revoked:
		return "revoked"
	case expired:
		return "expired"
	}
	return "active"
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// createKeyRequest is POST /v1/keys.
type createKeyRequest struct {
	Team   string     `json:"team"`
	Name   string     `json:"name"`
	Models []string   `json:"models"`
	Limits LimitsJSON `json:"limits"`
	// ExpiresAt is an RFC 3339 time, parsed by the handler so that a bad
	// one is reported at its path.
	ExpiresAt string `json:"expires_at"`
}

type createdKeyJSON struct {
	keyJSON
	// Secret is the key itself, shown once: only its SHA-256 is stored.
	Secret string `json:"secret"`
}

type teamJSON struct {
	Name   string     `json:"name"`
	Org    string     `json:"org,omitempty"`
	Models []string   `json:"models,omitempty"`
	Limits LimitsJSON `json:"limits"`
	Source string     `json:"source"`
}

// putTeamRequest is PUT /v1/teams/{name}.
type putTeamRequest struct {
	Org    string     `json:"org"`
	Models []string   `json:"models"`
	Limits LimitsJSON `json:"limits"`
}

type orgJSON struct {
	Name   string     `json:"name"`
	Limits LimitsJSON `json:"limits"`
	Source string     `json:"source"`
}

// putOrgRequest is PUT /v1/orgs/{name}.
type putOrgRequest struct {
	Limits LimitsJSON `json:"limits"`
}

type budgetStatusJSON struct {
	Scope             string      `json:"scope"`
	ID                string      `json:"id"`
	Model             string      `json:"model,omitempty"`
	Period            string      `json:"period"`
	Window            string      `json:"window,omitempty"`
	LimitMicroUSD     int64       `json:"limit_micro_usd"`
	SpentMicroUSD     int64       `json:"spent_micro_usd"`
	ReservedMicroUSD  int64       `json:"reserved_micro_usd"`
	RemainingMicroUSD int64       `json:"remaining_micro_usd"`
	SpentPicoUSD      json.Number `json:"spent_pico_usd"`
	ReservedPicoUSD   json.Number `json:"reserved_pico_usd"`
	RemainingPicoUSD  json.Number `json:"remaining_pico_usd"`
	ResetsAt          *time.Time  `json:"resets_at,omitempty"`
}

// toBudgetJSON rounds spent and reserved up and what remains down, so
// that the micro-dollars never show more room than there is.
func toBudgetJSON(b admission.BudgetStatus) budgetStatusJSON {
	j := budgetStatusJSON{
		Scope: b.Scope, ID: b.ID, Model: b.Model, Period: b.Period,
		LimitMicroUSD: b.Limit, SpentMicroUSD: b.Spent.MicrosUp(), ReservedMicroUSD: b.Reserved.MicrosUp(),
		RemainingMicroUSD: b.Remaining.MicrosDown(),
		SpentPicoUSD:      pico(b.Spent), ReservedPicoUSD: pico(b.Reserved), RemainingPicoUSD: pico(b.Remaining),
		ResetsAt: timePtr(b.Resets),
	}
	if b.Window != 0 {
		j.Window = duration(b.Window)
	}
	return j
}

// pico is s in pico-dollars as an exact JSON integer.
func pico(s money.Sum) json.Number { return json.Number(s.PicoString()) }

type spendJSON struct {
	By     string         `json:"by"`
	Since  *time.Time     `json:"since,omitempty"`
	Until  *time.Time     `json:"until,omitempty"`
	Totals []ledger.Total `json:"totals"` // in ledger.Total's JSON shape
}

// Errors.

// apiError is an API error: the HTTP status and the body
// {"error": {"code", "message", "problems"}}. Code is stable; message is
// for people.
type apiError struct {
	Status   int       `json:"-"`
	Code     string    `json:"code"`
	Message  string    `json:"message"`
	Problems []problem `json:"problems,omitempty"`
}

// problem is one invalid field of a request, addressed by its path in the
// body ("limits.budgets[0].period") or the query ("query.since").
type problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// invalid is a 400 listing every problem of a request.
func invalid(ps []problem) *apiError {
	msgs := make([]string, len(ps))
	for i, p := range ps {
		msgs[i] = p.Path + ": " + p.Message
		if p.Path == "" {
			msgs[i] = p.Message
		}
	}
	return &apiError{Status: http.StatusBadRequest, Code: "invalid_request", Message: strings.Join(msgs, "; "), Problems: ps}
}

// fromPolicies turns policies.Problems into problems, the path rebased:
// CheckLimits addresses from "limits", a body that is the limits itself
// from the root.
func fromPolicies(ps policies.Problems, trim string) []problem {
	out := make([]problem, len(ps))
	for i, p := range ps {
		path := p.Path
		if trim != "" {
			path = strings.TrimPrefix(strings.TrimPrefix(path, trim), ".")
		}
		out[i] = problem{Path: path, Message: p.Msg}
	}
	return out
}

// maxBody bounds a request body; a limits document is a few KiB.
const maxBody = 1 << 20

// decode reads the body, one JSON value, into v: field names that are not
// exactly one of v's (encoding/json alone matches them case-insensitively),
// a field given twice (encoding/json keeps the last), trailing data and
// wrong types are refused with the field's path.
func decode(w http.ResponseWriter, r *http.Request, v any) *apiError {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
		return errorf(http.StatusRequestEntityTooLarge, "body_too_large", "body: larger than %d bytes", maxBody)
	}
	if err != nil {
		return errorf(http.StatusBadRequest, "invalid_json", "body: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err = dec.Decode(v)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			return errorf(http.StatusBadRequest, "invalid_json", "body: want one JSON object, got more after it")
		}
	}
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
	)
	switch {
	case err == nil, strings.HasPrefix(err.Error(), "json: unknown field "):
		// The JSON is well formed: check every name, with its path.
		if ps := checkNames(json.NewDecoder(bytes.NewReader(data)), reflect.TypeOf(v), ""); len(ps) > 0 {
			return invalid(ps)
		}
		if err == nil {
			return nil
		}
		return invalid([]problem{{"body", strings.TrimPrefix(err.Error(), "json: ")}})
	case errors.Is(err, io.EOF):
		return errorf(http.StatusBadRequest, "invalid_json", "body: required (a JSON object)")
	case errors.As(err, &syn):
		return errorf(http.StatusBadRequest, "invalid_json", "body: invalid JSON at byte %d: %v", syn.Offset, err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(http.StatusBadRequest, "invalid_json", "body: truncated JSON")
	case errors.As(err, &typ):
		path := typ.Field
		if path == "" {
			path = "body"
		}
		return invalid([]problem{{path, fmt.Sprintf("want %s, got %s", jsonKind(typ.Type.Kind()), typ.Value)}})
	}
	return errorf(http.StatusBadRequest, "invalid_json", "body: %v", err)
}

// checkNames walks one well-formed JSON value from dec's token stream
// against t, the Go type it decodes into, and reports at its path every
// object member whose name is not exactly one of the struct's JSON names
// and every name given twice in one object (a map's keys included).
// encoding/json matches names case-insensitively and keeps the last of a
// duplicate, so a body could say one thing to a reader and another to the
// server.
func checkNames(dec *json.Decoder, t reflect.Type, path string) []problem {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		// decode has already checked the JSON is well formed.
		return []problem{{pathOr(path), "invalid JSON"}}
	}
	var ps []problem
	switch tok {
	case json.Delim('['):
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			ps = append(ps, checkNames(dec, elem, fmt.Sprintf("%s[%d]", path, i))...)
		}
	case json.Delim('{'):
		var fields map[string]reflect.Type
		var names []string
		var elem reflect.Type
		switch {
		case t == nil:
		case t.Kind() == reflect.Struct:
			fields, names = jsonFields(t)
		case t.Kind() == reflect.Map:
			elem = t.Elem()
		}
		seen := map[string]bool{}
		for dec.More() {
			keyTok, err := dec.Token()
			if err != nil {
				return append(ps, problem{pathOr(path), "invalid JSON"})
			}
			name, _ := keyTok.(string)
			fieldPath := name
			if path != "" {
				fieldPath = path + "." + name
			}
			if seen[name] {
				ps = append(ps, problem{fieldPath, "given more than once"})
			}
			seen[name] = true
			ft := elem
			if fields != nil {
				var ok bool
				if ft, ok = fields[name]; !ok {
					ps = append(ps, problem{fieldPath, unknownField(name, names)})
				}
			}
			ps = append(ps, checkNames(dec, ft, fieldPath)...)
		}
	default:
		return nil // a scalar
	}
	if _, err := dec.Token(); err != nil { // the closing ] or }
		return append(ps, problem{pathOr(path), "invalid JSON"})
	}
	return ps
}

func pathOr(path string) string {
	if path == "" {
		return "body"
	}
	return path
}

func unknownField(name string, names []string) string {
	for _, n := range names {
		if strings.EqualFold(n, name) {
			return fmt.Sprintf("unknown field (names are case-sensitive: did you mean %q?)", n)
		}
	}
	return "unknown field (fields: " + strings.Join(names, ", ") + ")"
}

// jsonFields is the JSON name of every field encoding/json decodes into a
// struct of type t (embedded structs' fields promoted), with its type, and
// the names in declaration order.
func jsonFields(t reflect.Type) (map[string]reflect.Type, []string) {
	fields := map[string]reflect.Type{}
	var names []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for f := range t.Fields() {
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			ft := f.Type
			if f.Anonymous && name == "" {
				for ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if ft.Kind() == reflect.Struct {
					walk(ft)
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if _, dup := fields[name]; !dup {
				names = append(names, name)
			}
			fields[name] = f.Type
		}
	}
	walk(t)
	return fields, names
}

// jsonKind names a Go kind as JSON calls it.
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("content-type", "application/json")
	w.WriteHeader(status)
	// An error here is the client gone away; there is no one to tell.
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.Status, struct {
		Error *apiError `json:"error"`
	}{e})
}
