package xds

import (
	"regexp"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/chain"
)

// TestAccessLogNamesNoSignature: the access log Sluice asks Envoy to
// write reads dynamic metadata only by named field, and none is a
// signature, nor a header that carries a credential: a signature or a key
// must never reach a log line.
func TestAccessLogNamesNoSignature(t *testing.T) {
	named := regexp.MustCompile(`^%DYNAMIC_METADATA\([a-z_.]+:[a-z_]+\)%$`)
	for _, f := range accessLogFields {
		v := f[1]
		if strings.Contains(v, "DYNAMIC_METADATA") && !named.MatchString(v) {
			t.Errorf("%s: %s reads dynamic metadata other than one named field", f[0], v)
		}
		for _, secret := range []string{":" + chain.PrincipalSignatureKey + ")", ":" + chain.FallbackSignatureKey + ")",
			"AUTHORIZATION", "X-API-KEY", "API-KEY"} {
			if strings.Contains(strings.ToUpper(v), strings.ToUpper(secret)) {
				t.Errorf("%s: %s names %s", f[0], v, secret)
			}
		}
	}
}
