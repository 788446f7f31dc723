package admin_test

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestStrictFieldNames: a body's field names are matched exactly, once
// each, at every level the API has: the request's root, limits,
// limits.requests, limits.tokens and its windows, a budget, a per-model
// limit (whose own keys are model names: a repeated one is refused too)
// and the limits inside it. encoding/json alone would take "LIMITS" for
// "limits" and keep the last of two "limits".
func TestStrictFieldNames(t *testing.T) {
	h := start(t, withToken)
	var stored key
	h.do("POST", "/v1/keys", `{"team": "red"}`).want(t, http.StatusCreated, &stored)
	limitsPath := "/v1/keys/" + stored.ID + "/limits"

	for _, tt := range []struct {
		name, method, path, body string
		problems                 []problem
	}{
		{"root: case variant", "POST", "/v1/keys", `{"team": "red", "LIMITS": {}}`,
			[]problem{{"LIMITS", `unknown field (names are case-sensitive: did you mean "limits"?)`}}},
		{"root: duplicate", "POST", "/v1/keys", `{"team": "red", "team": "blue"}`,
			[]problem{{"team", "given more than once"}}},
		{"root: unknown", "POST", "/v1/keys", `{"team": "red", "colour": "blue"}`,
			[]problem{{"colour", "unknown field (fields: team, name, models, limits, expires_at)"}}},
		{"limits: case variant", "POST", "/v1/keys", `{"team": "red", "limits": {"Budgets": []}}`,
			[]problem{{"limits.Budgets", `unknown field (names are case-sensitive: did you mean "budgets"?)`}}},
		{"limits: duplicate", "POST", "/v1/keys", `{"team": "red", "limits": {"budgets": [], "budgets": [{"micro_usd": 1, "period": "day"}]}}`,
			[]problem{{"limits.budgets", "given more than once"}}},
		{"requests: case variant", "POST", "/v1/keys", `{"team": "red", "limits": {"requests": {"Per_Minute": 5}}}`,
			[]problem{{"limits.requests.Per_Minute", `unknown field (names are case-sensitive: did you mean "per_minute"?)`}}},
		{"requests: duplicate", "POST", "/v1/keys", `{"team": "red", "limits": {"requests": {"per_minute": 5, "per_minute": 500}}}`,
			[]problem{{"limits.requests.per_minute", "given more than once"}}},
		{"tokens: case variant", "POST", "/v1/keys", `{"team": "red", "limits": {"tokens": {"INPUT": {}}}}`,
			[]problem{{"limits.tokens.INPUT", `unknown field (names are case-sensitive: did you mean "input"?)`}}},
		{"token window: duplicate", "POST", "/v1/keys", `{"team": "red", "limits": {"tokens": {"output": {"per_day": 1, "per_day": 2}}}}`,
			[]problem{{"limits.tokens.output.per_day", "given more than once"}}},
		{"budget: case variant", "POST", "/v1/keys", `{"team": "red", "limits": {"budgets": [{"micro_usd": 1, "Period": "day"}]}}`,
			[]problem{{"limits.budgets[0].Period", `unknown field (names are case-sensitive: did you mean "period"?)`}}},
		{"second budget: duplicate", "POST", "/v1/keys", `{"team": "red", "limits": {"budgets": [{"micro_usd": 1, "period": "day"}, {"micro_usd": 1, "micro_usd": 2, "period": "week"}]}}`,
			[]problem{{"limits.budgets[1].micro_usd", "given more than once"}}},
		{"model name: duplicate", "POST", "/v1/keys", `{"team": "red", "limits": {"models": {"m1": {}, "m1": {"requests": {"per_minute": 1}}}}}`,
			[]problem{{"limits.models.m1", "given more than once"}}},
		{"per-model limits: case variant", "POST", "/v1/keys", `{"team": "red", "limits": {"models": {"m1": {"Requests": {}}}}}`,
			[]problem{{"limits.models.m1.Requests", `unknown field (names are case-sensitive: did you mean "requests"?)`}}},
		{"per-model window: duplicate", "POST", "/v1/keys", `{"team": "red", "limits": {"models": {"m1": {"tokens": {"total": {"per_hour": 1, "per_hour": 9}}}}}}`,
			[]problem{{"limits.models.m1.tokens.total.per_hour", "given more than once"}}},
		{"every problem at once", "POST", "/v1/keys", `{"Team": "red", "team": "red", "team": "red", "limits": {"requests": {"per_day": 1, "PER_DAY": 2}}}`,
			[]problem{
				{"Team", `unknown field (names are case-sensitive: did you mean "team"?)`},
				{"team", "given more than once"},
				{"limits.requests.PER_DAY", `unknown field (names are case-sensitive: did you mean "per_day"?)`},
			}},

		{"limits body: case variant", "PUT", limitsPath, `{"Requests": {"per_minute": 1}}`,
			[]problem{{"Requests", `unknown field (names are case-sensitive: did you mean "requests"?)`}}},
		{"limits body: duplicate", "PUT", limitsPath, `{"budgets": [], "budgets": []}`,
			[]problem{{"budgets", "given more than once"}}},
		{"team body: case variant", "PUT", "/v1/teams/blue", `{"ORG": "acme"}`,
			[]problem{{"ORG", `unknown field (names are case-sensitive: did you mean "org"?)`}}},
		{"team body: duplicate", "PUT", "/v1/teams/blue", `{"models": ["m1"], "models": ["m2"]}`,
			[]problem{{"models", "given more than once"}}},
		{"org body: case variant", "PUT", "/v1/orgs/beta", `{"Limits": {}}`,
			[]problem{{"Limits", `unknown field (names are case-sensitive: did you mean "limits"?)`}}},
		{"org body: duplicate deep", "PUT", "/v1/orgs/beta", `{"limits": {"budgets": [{"micro_usd": 1, "period": "day", "period": "month"}]}}`,
			[]problem{{"limits.budgets[0].period", "given more than once"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := h.do(tt.method, tt.path, tt.body)
			if res.status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400; body %s", res.status, res.body)
			}
			e := res.apiError(t)
			if e.Error.Code != "invalid_request" {
				t.Errorf("code %q, want invalid_request (%s)", e.Error.Code, e.Error.Message)
			}
			if diff := cmp.Diff(tt.problems, e.Error.Problems); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}

	// Exact names, each once, still pass, with every level filled in.
	h.do("PUT", limitsPath, `{"requests": {"per_minute": 5, "per_hour": 50, "per_day": 500},
		"tokens": {"input": {"per_day": 1}, "output": {"per_day": 2}, "total": {"per_day": 3}},
		"budgets": [{"micro_usd": 1, "period": "day"}, {"micro_usd": 5, "period": "rolling", "window": "24h"}],
		"models": {"m1": {"requests": {"per_minute": 1}}, "m2": {"tokens": {"total": {"per_hour": 9}}}}}`).want(t, http.StatusOK, nil)
}

// TestExpiresAtRange: an expiry the key store cannot hold (past
// 2262-04-11T23:47:16Z, the last second of Unix nanoseconds in an int64)
// is a 400 at expires_at naming the range, never a 500; the last second
// itself is accepted.
func TestExpiresAtRange(t *testing.T) {
	h := start(t, withToken)
	for _, at := range []string{"2262-04-11T23:47:17Z", "2300-01-01T00:00:00Z", "9999-12-31T23:59:59Z"} {
		res := h.do("POST", "/v1/keys", `{"team": "red", "expires_at": "`+at+`"}`)
		if res.status != http.StatusBadRequest {
			t.Fatalf("expires_at %s: status %d, want 400; body %s", at, res.status, res.body)
		}
		want := []problem{{"expires_at", "must be no later than 2262-04-11T23:47:16Z (the latest time the key store holds), got " + at}}
		if diff := cmp.Diff(want, res.apiError(t).Error.Problems); diff != "" {
			t.Errorf("expires_at %s: problems (-want +got):\n%s", at, diff)
		}
	}
	var k key
	h.do("POST", "/v1/keys", `{"team": "red", "expires_at": "2262-04-11T23:47:16Z"}`).want(t, http.StatusCreated, &k)
	if k.ExpiresAt == nil || k.ExpiresAt.Format("2006-01-02T15:04:05Z07:00") != "2262-04-11T23:47:16Z" {
		t.Errorf("expires_at = %v, want 2262-04-11T23:47:16Z", k.ExpiresAt)
	}
}

// TestAuthWhitespace: the admin token may follow "Bearer" after any run of
// spaces and tabs, as a gateway key may; no token after it is "missing".
func TestAuthWhitespace(t *testing.T) {
	h := start(t, withToken)
	for _, auth := range []string{"Bearer " + token, "Bearer\t" + token, "bearer \t " + token} {
		h.doAuth("GET", "/v1/keys", auth, nil).want(t, http.StatusOK, nil)
	}
	for _, tt := range []struct{ auth, msg string }{
		{"Bearer\t", "missing admin token: send Authorization: Bearer <admin.token>"},
		{"Basic\t" + token, "missing admin token: send Authorization: Bearer <admin.token>"},
		{"Bearer\twrong-token-0123456789", "wrong admin token"},
	} {
		res := h.doAuth("GET", "/v1/keys", tt.auth, nil)
		if res.status != http.StatusUnauthorized {
			t.Fatalf("%q: status %d, want 401", tt.auth, res.status)
		}
		if e := res.apiError(t); e.Error.Message != tt.msg {
			t.Errorf("%q: message %q, want %q", tt.auth, e.Error.Message, tt.msg)
		}
	}
}
