package policies

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/principal"
)

// TestImportDirection pins the direction configuration flows in: policies
// sits below the packages that serve requests and hold runtime state, and
// imports only leaf value packages (such as money, sat, llmapi,
// providerkind). A package on the request path (the provider adapters,
// the body parser, credential extraction and client error bodies), the
// signing keys, or any package that imports policies must never be among
// its dependencies, direct or not.
func TestImportDirection(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH: cannot list policies' dependencies")
	}
	const module = "github.com/sluicegw/sluice/"
	forbidden := []string{
		"internal/provider", "internal/payload", "internal/apikey", "internal/apierr", // the request path
		"internal/principal", // the signing keys
		"extproc", "authz", "xds", "internal/app", "internal/admin", "internal/keyring",
		"internal/admission", "internal/store", "internal/ledger", // policies' users
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg += ": " + string(ee.Stderr)
		}
		t.Fatalf("go list -deps: %s", msg)
	}
	var ours []string
	for _, p := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(p, module)
		if !ok {
			continue
		}
		ours = append(ours, rel)
		for _, f := range forbidden {
			if rel == f || strings.HasPrefix(rel, f+"/") {
				t.Errorf("policies depends on %s; the configuration model must not reach the request path, runtime state or its own users", rel)
			}
		}
	}
	if len(ours) == 0 || ours[len(ours)-1] != "policies" {
		t.Fatalf("go list -deps listed no policies package: %q", out)
	}
	if t.Failed() {
		t.Logf("policies' dependencies in the module: %s", strings.Join(ours, " "))
	}
}

// TestCopiedConstants: the constants policies keeps rather than imports
// from packages it must not depend on agree with their owners.
func TestCopiedConstants(t *testing.T) {
	if keyPrefix != apikey.Prefix {
		t.Errorf("keyPrefix = %q, apikey.Prefix = %q", keyPrefix, apikey.Prefix)
	}
	if keyMinSecretLen != apikey.MinSecretLen {
		t.Errorf("keyMinSecretLen = %d, apikey.MinSecretLen = %d", keyMinSecretLen, apikey.MinSecretLen)
	}
	if MinPrincipalSecretBytes != principal.MinSecretBytes {
		t.Errorf("MinPrincipalSecretBytes = %d, principal.MinSecretBytes = %d", MinPrincipalSecretBytes, principal.MinSecretBytes)
	}
}
