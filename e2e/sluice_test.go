package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicegw/sluice/internal/app"
)

// sluiceProcess is `sluice serve` run in-process through app.Run — the
// product's own wiring — on random loopback ports.
type sluiceProcess struct {
	config    string
	grpcAddr  string
	adminAddr string
	xdsAddr   string
	// log is what the server wrote to its stdout and stderr.
	log *syncBuf
}

func noEnv(string) (string, bool) { return "", false }

// startSluice writes configYAML to a temp dir and serves it.
func startSluice(t *testing.T, configYAML string) *sluiceProcess {
	t.Helper()
	return startSluiceCtx(t, context.Background(), configYAML)
}

// startSluiceCtx is startSluice, serving under parent (which may carry
// app.WithLedgerFault), with serve's extra flags.
func startSluiceCtx(t *testing.T, parent context.Context, configYAML string, extra ...string) *sluiceProcess {
	t.Helper()
	dir := t.TempDir()
	out := &syncBuf{}
	p := &sluiceProcess{config: filepath.Join(dir, "sluice.yaml"), log: out}
	if err := os.WriteFile(p.config, []byte(configYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(dir, "ready.json")
	ctx, cancel := context.WithCancel(parent)
	done := make(chan error, 1)
	go func() {
		args := []string{"serve", "--config", p.config, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--xds-addr", "127.0.0.1:0", "--ready-file", ready, "--log-level", "warn", "--shutdown-drain", "0"}
		done <- app.Run(ctx, append(args, extra...), out, out, noEnv)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sluice serve: %v\n%s", err, out.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, err := os.ReadFile(ready); err == nil {
			var addrs map[string]string
			if err := json.Unmarshal(b, &addrs); err != nil {
				t.Fatal(err)
			}
			p.grpcAddr, p.adminAddr, p.xdsAddr = addrs["grpc"], addrs["admin"], addrs["xds"]
			return p
		}
		select {
		case err := <-done:
			done <- err // for the cleanup, which waits for the exit
			t.Fatalf("sluice serve exited: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice serve did not become ready:\n%s", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// createKey runs `sluice keys create` against the running server's store
// and returns the secret.
func (p *sluiceProcess) createKey(t *testing.T, team string, extra ...string) (id, secret string) {
	t.Helper()
	var out, errb bytes.Buffer
	args := append([]string{"keys", "create", "--config", p.config, "--team", team, "--json"}, extra...)
	if err := app.Run(context.Background(), args, &out, &errb, noEnv); err != nil {
		t.Fatalf("keys create: %v %s", err, errb.String())
	}
	var k struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal(out.Bytes(), &k); err != nil {
		t.Fatal(err)
	}
	p.waitForKey(t, k.Secret)
	return k.ID, k.Secret
}

// waitForKey polls the running server's ext_authz until it accepts the
// key: a key made by another process arrives through the store's change
// feed within a second.
func (p *sluiceProcess) waitForKey(t *testing.T, secret string) {
	t.Helper()
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := authv3.NewAuthorizationClient(conn)
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
		Path: "/v1/chat/completions", Headers: map[string]string{":path": "/v1/chat/completions", "authorization": "Bearer " + secret, "x-request-id": "wait-for-key"},
	}}}}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := c.Check(context.Background(), req)
		if err == nil && resp.GetStatus().GetCode() == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server never accepted the new key: %v %v", resp, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// run runs a sluice CLI command against p's config and returns stdout.
func (p *sluiceProcess) run(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if err := app.Run(context.Background(), append(args, "--config", p.config), &out, &errb, noEnv); err != nil {
		t.Fatalf("sluice %v: %v %s", args, err, errb.String())
	}
	return out.String()
}
