package extproc

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/sluicegw/sluice/authz"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/internal/store/sqlite"
	"github.com/sluicegw/sluice/internal/testctx"
)

// TestExtprocAloneRefusesUnusableKeys: with no ext_authz in the chain the
// processor reads the caller's key from the headers itself
// (authz.Checker.Authenticate), which returns the key's principal beside
// its refusal. A revoked key, an expired one and one whose team is gone
// are refused at the request headers with ext_authz's own status and
// code; none holds a reservation, counts against its team's request
// rate, or leaves a spend record, and a usable key of the same team
// still gets the team's two requests a minute.
func TestExtprocAloneRefusesUnusableKeys(t *testing.T) {
	ctx := testctx.Deadline(t)
	const (
		good    = "sk-sluice-GOODextprocOnly0123456789abcdefghijklmnopqr"
		revoked = "sk-sluice-REVOextprocOnly0123456789abcdefghijklmnopqr"
		expired = "sk-sluice-EXPIextprocOnly0123456789abcdefghijklmnopqr"
		orphan  = "sk-sluice-ORPHextprocOnly0123456789abcdefghijklmnopqr"
		unknown = "sk-sluice-UNKNextprocOnly0123456789abcdefghijklmnopqr"
	)
	_, ring, _ := compileTestPolicy(t, testConfig)
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "keys.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ids := map[string]string{}
	for _, k := range []struct {
		secret, team string
		expires      time.Time
	}{{good, "t", time.Time{}}, {revoked, "t", time.Time{}}, {expired, "t", t0.Add(-time.Second)}, {orphan, "gone", time.Time{}}} {
		id := "key_" + k.secret[len(apikey.Prefix):len(apikey.Prefix)+4]
		if err := st.CreateKey(ctx, store.Key{ID: id, Prefix: apikey.PublicPrefix(k.secret), Hash: apikey.Hash(k.secret), Team: k.team,
			Name: strings.ToLower(id), CreatedAt: t0.Add(-time.Hour), ExpiresAt: k.expires}); err != nil {
			t.Fatal(err)
		}
		ids[k.secret] = id
	}
	if _, err := st.RevokeKey(ctx, ids[revoked], t0.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := ring.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}

	d, led := newDeps(t)
	counters := limits.New(limits.Options{})
	adm := admission.NewLocal(counters, admission.LocalOptions{})
	d.Ring, d.Admitter = ring, adm
	d.Auth = authz.NewChecker(ring, adm, nil, func() time.Time { return t0 })

	// request sends one chat request with secret in the headers and no
	// ext_authz metadata; it returns the immediate response, if any.
	request := func(secret string) *extprocsvc.ImmediateResponse {
		p := NewProcessor(d)
		h := []string{":method", "POST", ":path", "/v1/chat/completions", ":authority", "gw", "x-request-id", "rid-" + secret[10:14]}
		if secret != "" {
			h = append(h, "authorization", "Bearer "+secret)
		}
		resp := p.Handle(ctx, &extprocsvc.ProcessingRequest{Request: &extprocsvc.ProcessingRequest_RequestHeaders{
			RequestHeaders: &extprocsvc.HttpHeaders{Headers: hdrs(h...)}}})
		if ir := resp.GetImmediateResponse(); ir != nil {
			p.Cancel(ctx)
			return ir
		}
		resp = p.Handle(ctx, reqBody(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
		if ir := resp.GetImmediateResponse(); ir != nil {
			p.Cancel(ctx)
			return ir
		}
		p.Handle(ctx, respHeaders("200", "application/json"))
		p.Handle(ctx, respBody(chatJSON, true))
		p.Cancel(ctx)
		return nil
	}

	// The body is OpenAI's error for a key it will not take (code
	// invalid_api_key), with Sluice's reason in the message; Sluice's own
	// code is in the response details (the access log's).
	for _, tc := range []struct {
		name, secret string
		status       int32
		code, says   string
	}{
		{"revoked", revoked, 403, "revoked_key", "was revoked at 2026-11-30T11:59:00Z"},
		{"expired", expired, 403, "expired_key", "expired at 2026-11-30T11:59:59Z"},
		{"team gone", orphan, 403, "unknown_team", `belongs to team "gone", which no longer exists`},
		{"unknown", unknown, 401, "unknown_key", "Incorrect API key provided"},
	} {
		ir := request(tc.secret)
		if ir == nil {
			t.Fatalf("%s key: served, want %d %s", tc.name, tc.status, tc.code)
		}
		if int32(ir.GetStatus().GetCode()) != tc.status || ir.GetDetails() != "sluice_"+tc.code {
			t.Errorf("%s key: %d %s, want %d sluice_%s", tc.name, ir.GetStatus().GetCode(), ir.GetDetails(), tc.status, tc.code)
		}
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal(ir.GetBody(), &body); err != nil || body.Error.Code != "invalid_api_key" || !strings.Contains(body.Error.Message, tc.says) {
			t.Errorf("%s key: body %s, want error.code invalid_api_key saying %q", tc.name, ir.GetBody(), tc.says)
		}
		if adm.Held() != 0 || len(led.records) != 0 {
			t.Errorf("%s key: %d reservations held, %d records; want none", tc.name, adm.Held(), len(led.records))
		}
	}

	// The refused keys of team t counted nothing: the team's two requests
	// a minute are both there for its usable key, and then no more.
	for i := range 2 {
		if ir := request(good); ir != nil {
			t.Fatalf("usable key, request %d: %d %s", i+1, ir.GetStatus().GetCode(), ir.GetBody())
		}
	}
	if ir := request(good); ir == nil || ir.GetStatus().GetCode() != 429 {
		t.Errorf("usable key, third request in the minute: %v, want 429", ir)
	}
	if len(led.records) != 2 || led.records[0].KeyID != ids[good] || adm.Held() != 0 {
		t.Errorf("records %+v, %d held; want the usable key's two", led.records, adm.Held())
	}
}
