package extproc_test

import (
	"bytes"
	"testing"
	"time"

	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/principal"
)

// harnessKeys sign what the external tests hand the processor as Envoy
// would: ext_authz's principal and, where a file writes a handoff by hand,
// the downstream processor's handoff.
var harnessKeys = func() *principal.Keys {
	k, err := principal.New([][]byte{bytes.Repeat([]byte("h"), principal.MinSecretBytes)})
	if err != nil {
		panic(err)
	}
	return k
}()

func harnessPrincipals() *principal.Keys { return harnessKeys }

// requestID is the x-request-id of a request-headers message, "" without.
func requestID(m *extprocsvc.ProcessingRequest) string {
	for _, h := range m.GetRequestHeaders().GetHeaders().GetHeaders() {
		if h.GetKey() == "x-request-id" {
			return string(h.GetRawValue())
		}
	}
	return ""
}

// signAsEnvoy signs, at now, what a test message's metadata leaves
// unsigned: ext_authz's principal (a key_id without sig) and a handoff (a
// fallback path without fallback_sig), bound to the message's
// x-request-id. A message that writes its own signature keeps it: that is
// how a file forges one.
func signAsEnvoy(m *extprocsvc.ProcessingRequest, now time.Time) {
	fm := m.GetMetadataContext().GetFilterMetadata()
	rid := requestID(m)
	if a := fm[chain.AuthzNamespace].GetFields(); a != nil && a["key_id"] != nil && a[chain.PrincipalSignatureKey] == nil {
		id, team, org := a["key_id"].GetStringValue(), a["team"].GetStringValue(), a["org"].GetStringValue()
		a[chain.PrincipalSignatureKey] = structpb.NewStringValue(harnessKeys.Sign(principal.ForPrincipal, rid, now, id, team, org))
	}
	if h := fm[chain.UsageNamespace].GetFields(); h != nil && h[chain.FallbackPathKey] != nil && h[chain.FallbackSignatureKey] == nil {
		av := "0"
		if h[chain.FallbackAnthropicVersionKey].GetBoolValue() {
			av = "1"
		}
		h[chain.FallbackSignatureKey] = structpb.NewStringValue(harnessKeys.Sign(principal.ForHandoff, rid, now,
			h[chain.FallbackPathKey].GetStringValue(), av, h[chain.FallbackModelKey].GetStringValue()))
	}
}

// checkHandoffSignature checks that the handoff a reply leaves for the
// attempts is signed for the request rid at now, and takes the signature
// out, so that golden files compare everything else.
func checkHandoffSignature(t *testing.T, label, rid string, resp *extprocsvc.ProcessingResponse, now time.Time) {
	t.Helper()
	h := resp.GetDynamicMetadata().GetFields()[chain.UsageNamespace].GetStructValue().GetFields()
	if h == nil || h[chain.FallbackPathKey] == nil {
		return
	}
	av := "0"
	if h[chain.FallbackAnthropicVersionKey].GetBoolValue() {
		av = "1"
	}
	sig := h[chain.FallbackSignatureKey].GetStringValue()
	if r := harnessKeys.Verify(sig, principal.ForHandoff, rid, now, time.Second,
		h[chain.FallbackPathKey].GetStringValue(), av, h[chain.FallbackModelKey].GetStringValue()); r != principal.OK {
		t.Errorf("%s: the handoff's signature %q does not verify for request %q: %s", label, sig, rid, r)
	}
	delete(h, chain.FallbackSignatureKey)
}
