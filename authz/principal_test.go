package authz_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/sluicegw/sluice/authz"
	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/principal"
)

func testKeys(t testing.TB) *principal.Keys {
	t.Helper()
	k, err := principal.New([][]byte{bytes.Repeat([]byte("a"), principal.MinSecretBytes)})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// checkSignature checks that an allowed response's principal carries a
// signature over its key id, team and org, bound to the request's
// x-request-id and issued now, and takes it out of got so the rest
// compares as written; a denial carries no metadata at all.
func (f *fixture) checkSignature(t *testing.T, req *authv3.CheckRequest, got *authv3.CheckResponse) {
	t.Helper()
	md := got.GetDynamicMetadata().GetFields()
	if got.GetOkResponse() == nil {
		if len(md) != 0 {
			t.Errorf("a denial carries dynamic metadata: %v", md)
		}
		return
	}
	sig := md[chain.PrincipalSignatureKey].GetStringValue()
	rid := req.GetAttributes().GetRequest().GetHttp().GetHeaders()["x-request-id"]
	fields := []string{md["key_id"].GetStringValue(), md["team"].GetStringValue(), md["org"].GetStringValue()}
	if r := f.keys.Verify(sig, principal.ForPrincipal, rid, *f.now.Load(), time.Millisecond, fields...); r != principal.OK {
		t.Errorf("the principal's signature %q does not verify for request %q and %v: %s", sig, rid, fields, r)
	}
	if r := f.keys.Verify(sig, principal.ForPrincipal, rid+"x", *f.now.Load(), time.Millisecond, fields...); r != principal.BadSignature {
		t.Errorf("the principal's signature verifies for another request id: %s", r)
	}
	delete(md, chain.PrincipalSignatureKey)
}

// TestSigning: a request without x-request-id (a client's empty one
// kept) is bound to the empty id; one ext_authz would allow is refused
// with 503 when there is nothing to sign it with, so that ext_proc never
// sees an unsigned principal from Sluice.
func TestSigning(t *testing.T) {
	f := newFixture(t)
	noID := envoyCheck("POST", chat, "authorization", "Bearer "+keyGood)
	delete(noID.GetAttributes().GetRequest().GetHttp().GetHeaders(), "x-request-id")
	d := f.checker.Check(context.Background(), noID)
	if !d.Allowed() {
		t.Fatalf("without x-request-id: %v", d.Err)
	}
	f.checkSignature(t, noID, authz.Response(&d))
	f.keys = nil
	d = f.checker.Check(context.Background(), envoyCheck("POST", chat, "authorization", "Bearer "+keyGood))
	if d.Allowed() || d.Err.Status != 503 || d.Signature != "" {
		t.Errorf("without keys: %+v, want a 503 and no signature", d.Err)
	}
	if resp := authz.Response(&d); resp.GetOkResponse() != nil || resp.GetDynamicMetadata() != nil {
		t.Errorf("without keys the response allows: %v", resp)
	}
	// A denial is never signed, keys or not.
	f.keys = testKeys(t)
	if d := f.checker.Check(context.Background(), envoyCheck("POST", chat, "authorization", "Bearer "+keyRevoked)); d.Signature != "" {
		t.Errorf("a revoked key's refusal is signed: %q", d.Signature)
	}
	client := f.serve(t)
	resp, err := client.Check(context.Background(), envoyCheck("POST", chat, "authorization", "Bearer "+keyGood))
	if err != nil {
		t.Fatal(err)
	}
	f.checkSignature(t, envoyCheck("POST", chat), resp)
}
