package envoytest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// EnvoyBinary is the name looked up on PATH for real-Envoy test variants.
const EnvoyBinary = "envoy"

// StartRealEnvoy runs a real Envoy with bootstrap b and returns the base
// URL of its listener. When no envoy binary is on PATH the test is skipped
// with a message saying so; the emulator variant of the same test is what
// runs on machines without Envoy.
//
// The bootstrap is written to a temporary file as JSON, the admin
// interface is put on 127.0.0.1:0, and the listener's real port (the
// bootstrap may ask for port 0) is read back from the admin API.
func StartRealEnvoy(t testing.TB, b *bootstrapv3.Bootstrap) string {
	t.Helper()
	bin, err := exec.LookPath(EnvoyBinary)
	if err != nil {
		t.Skipf("no %q binary on PATH, so the real-Envoy variant is skipped (the emulator variant covers this machine): %v", EnvoyBinary, err)
	}
	b = proto.Clone(b).(*bootstrapv3.Bootstrap)
	if b.Admin == nil {
		b.Admin = &bootstrapv3.Admin{}
	}
	b.Admin.Address = &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 0},
	}}}
	dir := t.TempDir()
	js, err := protojson.MarshalOptions{Multiline: true}.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath, adminPath := filepath.Join(dir, "envoy.json"), filepath.Join(dir, "admin-address")
	if err := os.WriteFile(cfgPath, js, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-c", cfgPath, "--admin-address-path", adminPath,
		"--use-dynamic-base-id", "-l", "warning", "--disable-hot-restart")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start envoy: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		if t.Failed() {
			t.Logf("envoy output:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	admin := ""
	for admin == "" {
		if data, err := os.ReadFile(adminPath); err == nil && len(bytes.TrimSpace(data)) > 0 {
			admin = strings.TrimSpace(string(data))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoy did not write its admin address; output:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		resp, err := http.Get("http://" + admin + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoy not ready; output:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	addr, err := envoyListenerAddr(admin)
	if err != nil {
		t.Fatalf("envoy listener address: %v", err)
	}
	return "http://" + addr
}

// envoyListenerAddr reads the first listener's bound address from the
// admin API (/listeners?format=json).
func envoyListenerAddr(admin string) (string, error) {
	resp, err := http.Get("http://" + admin + "/listeners?format=json")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var v struct {
		ListenerStatuses []struct {
			LocalAddress struct {
				SocketAddress struct {
					Address   string `json:"address"`
					PortValue int    `json:"port_value"`
				} `json:"socket_address"`
			} `json:"local_address"`
		} `json:"listener_statuses"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return "", err
	}
	if len(v.ListenerStatuses) == 0 {
		return "", fmt.Errorf("no listeners")
	}
	sa := v.ListenerStatuses[0].LocalAddress.SocketAddress
	return net.JoinHostPort(sa.Address, strconv.Itoa(sa.PortValue)), nil
}
