package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/testenv/pgtest"
)

// fleetPolicy: keys in PostgreSQL, shared by every replica; each replica
// has its own ledger file (beside its config). Envoy reaches the replicas
// by one name (xds.sluice_addresses), as a fleet's Envoys must: without
// it each replica would point Envoy at itself, and their configurations
// would differ. Arguments: the database URL, the admin token.
const fleetPolicy = `
listen: {envoy: "127.0.0.1:0"}
store: {postgres: "%[1]s"}
ledger: {sqlite: ledger.db}
admin: {token: %[2]s}
xds: {sluice_addresses: ["sluice.fleet.internal:9001"]}
providers:
  - {name: local, kind: openai-compatible, base_url: "http://127.0.0.1:8000"}
models:
  - {name: m, provider: local}
teams:
  - name: t
`

const fleetAdminToken = "fleet-admin-token-0123456789"

// TestFleetSharesKeys: two replicas on one PostgreSQL store. A key
// created through one replica's admin API is accepted by the other's
// ext_authz, and a key revoked by the CLI is refused by both, each within
// a second (the store's NOTIFY wakes every replica's key ring; its poll
// is the backstop). A team made through one replica's admin API reaches
// the other's key ring. Both replicas serve the same xDS version.
func TestFleetSharesKeys(t *testing.T) {
	url := pgtest.Database(t)
	cfg := fmt.Sprintf(fleetPolicy, url, fleetAdminToken)
	a := startSluiceMigrated(t, cfg)
	b := startSluice(t, cfg)

	// Created on a, through the admin API.
	body, _ := json.Marshal(map[string]any{"team": "t", "name": "fleet"})
	req, _ := http.NewRequest("POST", "http://"+a.adminAddr+"/v1/keys", bytes.NewReader(body))
	req.Header.Set("authorization", "Bearer "+fleetAdminToken)
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var created struct{ ID, Secret string }
	err = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated || created.Secret == "" {
		t.Fatalf("POST /v1/keys on a: %d %+v %v", resp.StatusCode, created, err)
	}
	took := awaitCheck(t, b.grpcAddr, created.Secret, true)
	t.Logf("a key created on replica a was accepted by replica b after %v", took)
	if took > time.Second {
		t.Errorf("replica b accepted the key after %v; want within 1 s", took)
	}

	// Revoked by the CLI (a third process, neither replica).
	var out, errb bytes.Buffer
	if err := app.Run(t.Context(), []string{"keys", "revoke", "--config", a.config, created.ID}, &out, &errb, noEnv); err != nil {
		t.Fatalf("keys revoke: %v %s", err, errb.String())
	}
	start := time.Now()
	for _, r := range []*sluiceProcess{a, b} {
		awaitCheck(t, r.grpcAddr, created.Secret, false)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("both replicas refused the revoked key after %v; want within 1 s", took)
	} else {
		t.Logf("both replicas refused the revoked key after %v", took)
	}

	// A team made through b's admin API, and a key of it made by the CLI:
	// both replicas accept the key (createKey waits for a's ext_authz), so
	// the team reached a's key ring as well as b's.
	treq, _ := http.NewRequest("PUT", "http://"+b.adminAddr+"/v1/teams/newcomers", strings.NewReader(`{"limits":{"requests":{"per_minute":100}}}`))
	treq.Header.Set("authorization", "Bearer "+fleetAdminToken)
	treq.Header.Set("content-type", "application/json")
	tresp, err := http.DefaultClient.Do(treq)
	if err != nil {
		t.Fatal(err)
	}
	tresp.Body.Close()
	if tresp.StatusCode/100 != 2 {
		t.Fatalf("PUT /v1/teams/newcomers on b: %d", tresp.StatusCode)
	}
	_, newcomer := a.createKey(t, "newcomers")
	if took := awaitCheck(t, b.grpcAddr, newcomer, true); took > time.Second {
		t.Errorf("replica b accepted the new team's key after %v; want within 1 s", took)
	}

	if va, vb := xdsVersion(t, a), xdsVersion(t, b); va == "" || va != vb {
		t.Errorf("xDS versions: replica a %q, b %q; want one", va, vb)
	}
}

// startSluiceMigrated serves configYAML with --migrate: its PostgreSQL
// schema brought up to date first.
func startSluiceMigrated(t *testing.T, configYAML string) *sluiceProcess {
	t.Helper()
	return startSluiceCtx(t, context.Background(), configYAML, "--migrate")
}

// awaitCheck asks ext_authz at addr, every 5 ms, until it accepts secret
// (allowed) or refuses it, and returns how long that took; it fails the
// test after 10 s.
func awaitCheck(t *testing.T, addr, secret string, allowed bool) time.Duration {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := authv3.NewAuthorizationClient(conn)
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
		Path: "/v1/chat/completions", Headers: map[string]string{":path": "/v1/chat/completions", "authorization": "Bearer " + secret, "x-request-id": "fleet"},
	}}}}
	start := time.Now()
	for {
		resp, err := c.Check(t.Context(), req)
		if err == nil && (resp.GetStatus().GetCode() == 0) == allowed {
			return time.Since(start)
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("ext_authz at %s never %s the key: %v %v", addr, map[bool]string{true: "accepted", false: "refused"}[allowed], resp, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// xdsVersion is the xDS snapshot version a replica serves
// (sluice_xds_snapshot_info's label).
func xdsVersion(t *testing.T, p *sluiceProcess) string {
	t.Helper()
	for _, line := range strings.Split(p.metrics(t), "\n") {
		if v, ok := strings.CutPrefix(line, `sluice_xds_snapshot_info{version="`); ok {
			v, _, _ = strings.Cut(v, `"`)
			return v
		}
	}
	return ""
}
