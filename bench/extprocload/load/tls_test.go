package load

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestWriteCerts checks the throwaway certificates of `extprocload certs`:
// both leaves chain to the CA for their usage, the server's names are
// what the driver verifies and Sluice's allowed_clients would see, and the
// keys are not world-readable.
func TestWriteCerts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs") // made by the command
	var out bytes.Buffer
	if err := Main(t.Context(), []string{"certs", "--dir", dir}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	f := CertFilesIn(dir)
	for _, p := range []string{f.CA, f.ServerCert, f.ServerKey, f.ClientCert, f.ClientKey} {
		if !strings.Contains(out.String(), p) {
			t.Errorf("output %q does not name %s", out.String(), p)
		}
	}
	for _, k := range []string{f.ServerKey, f.ClientKey} {
		st, err := os.Stat(k)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", k, st.Mode().Perm())
		}
	}
	pool, err := caPool(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, c := range []struct {
		cert, key string
		usage     x509.ExtKeyUsage
		dns       string // verified as the server name; "" for none
		uri       string
		ips       []string
		usages    []x509.ExtKeyUsage
	}{
		{cert: f.ServerCert, key: f.ServerKey, usage: x509.ExtKeyUsageServerAuth, dns: BenchServerName, uri: BenchServerURI, ips: []string{"127.0.0.1"},
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}},
		{cert: f.ClientCert, key: f.ClientKey, usage: x509.ExtKeyUsageClientAuth, uri: BenchClientURI,
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
	} {
		pair, err := tls.LoadX509KeyPair(c.cert, c.key) // the key matches the certificate
		if err != nil {
			t.Fatalf("%s: %v", c.cert, err)
		}
		leaf := pair.Leaf
		opts := x509.VerifyOptions{Roots: pool, DNSName: c.dns, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{c.usage}}
		if _, err := leaf.Verify(opts); err != nil {
			t.Errorf("%s: %v", c.cert, err)
		}
		if len(c.ips) > 0 {
			opts.DNSName = c.ips[0] // an IP SAN verifies an address
			if _, err := leaf.Verify(opts); err != nil {
				t.Errorf("%s for %s: %v", c.cert, c.ips[0], err)
			}
		}
		var uris, ips []string
		for _, u := range leaf.URIs {
			uris = append(uris, u.String())
		}
		for _, ip := range leaf.IPAddresses {
			ips = append(ips, ip.String())
		}
		if !slices.Equal(uris, []string{c.uri}) || !slices.Equal(ips, c.ips) || !slices.Equal(leaf.ExtKeyUsage, c.usages) {
			t.Errorf("%s: URIs %v IPs %v usages %v; want %v %v %v", c.cert, uris, ips, leaf.ExtKeyUsage, c.uri, c.ips, c.usages)
		}
		if c.dns == "" && len(leaf.DNSNames) > 0 {
			t.Errorf("%s: DNS names %v, want none", c.cert, leaf.DNSNames)
		}
		if leaf.NotBefore.After(now) || leaf.NotAfter.Before(now.Add(24*time.Hour)) {
			t.Errorf("%s: valid %v to %v", c.cert, leaf.NotBefore, leaf.NotAfter)
		}
	}
	// The CA's key is not written: only the five files.
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 5 {
		t.Errorf("%d files in %s, want 5", len(ents), dir)
	}
	b, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	if blk, rest := pem.Decode(b); blk == nil || blk.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) > 0 {
		t.Errorf("%s is not one PEM certificate", f.CA)
	}

	for _, args := range [][]string{{"certs"}, {"certs", "--dir", dir, "extra"}} {
		if err := Main(t.Context(), args, io.Discard, io.Discard); !errors.Is(err, ErrUsage) {
			t.Errorf("%v: err = %v, want ErrUsage", args, err)
		}
	}
}

// startFloorCLI runs `extprocload floor args...` in this process and
// returns its address, from the ready file.
func startFloorCLI(t *testing.T, args ...string) string {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready.json")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Main(ctx, append([]string{"floor", "--addr", "127.0.0.1:0", "--ready-file", ready}, args...), io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("floor: %v", err)
		}
	})
	return pollReady(t, ready, done)
}

// pollReady polls a ready file for its gRPC address, bounded, failing
// if the server ends first.
func pollReady(t *testing.T, path string, done <-chan error) string {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("server ended before ready: %v", err)
		case <-deadline:
			t.Fatal("server not ready after 10s")
		case <-tick.C:
		}
		b, err := os.ReadFile(path)
		if err != nil || len(b) == 0 {
			continue
		}
		var r struct {
			GRPC string `json:"grpc"`
		}
		if err := json.Unmarshal(b, &r); err == nil && r.GRPC != "" {
			return r.GRPC
		}
	}
}

// mtlsFlags are the driver's flags for the certificates in f.
func mtlsFlags(f CertFiles) []string {
	return []string{"--tls-ca", f.CA, "--tls-cert", f.ClientCert, "--tls-key", f.ClientKey, "--tls-server-name", BenchServerName}
}

// runCLI runs `extprocload run args...` and returns its one JSON line.
func runCLI(t *testing.T, args ...string) (Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	if err := Main(ctx, append([]string{"run"}, args...), &out, &errb); err != nil {
		if msg := strings.TrimSpace(errb.String()); msg != "" {
			err = fmt.Errorf("%w (%s)", err, msg)
		}
		return Result{}, err
	}
	var res Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("run's output %q: %v", out.String(), err)
	}
	return res, nil
}

// TestMTLS runs the driver against the floor over mTLS, as `TLS=1
// scripts/bench-service.sh` starts them, and against a Sluice whose
// bench.yaml has the security.tls the script appends: every request is
// served (Sluice's signed principal verified on every ext_proc stream),
// and a driver without the client certificate, or one that expects
// another server name, gets nothing.
func TestMTLS(t *testing.T) {
	f, err := WriteCerts(t.TempDir(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	floor := startFloorCLI(t, "--tls-cert", f.ServerCert, "--tls-key", f.ServerKey, "--tls-client-ca", f.CA)
	sluice := startSluiceWith(t, fmt.Sprintf(`
security:
  tls:
    cert_file: %s
    key_file: %s
    client_ca_file: %s
    allowed_clients: {uris: [%s]}
`, f.ServerCert, f.ServerKey, f.CA, BenchClientURI))

	for _, srv := range []struct{ name, addr string }{{"floor", floor}, {"sluice", sluice}} {
		for _, sc := range []string{"closed-max", "closed-streams"} {
			t.Run(srv.name+"/"+sc, func(t *testing.T) {
				args := append([]string{"--addr", srv.addr, "--key", benchKey, "--server", srv.name, "--scenario", sc,
					"--concurrency", "4", "--requests", "20", "--chunks", "5", "--conns", "2", "--pid", fmt.Sprint(os.Getpid())}, mtlsFlags(f)...)
				res, err := runCLI(t, args...)
				if err != nil {
					t.Fatal(err)
				}
				if res.Requests != 20 || res.Errors != 0 || res.TLS != "mtls" || res.Conns != 2 {
					t.Fatalf("requests %d, errors %d (%s), tls %q, conns %d", res.Requests, res.Errors, res.FirstError, res.TLS, res.Conns)
				}
			})
		}
		t.Run(srv.name+"/refused", func(t *testing.T) {
			base := []string{"--addr", srv.addr, "--key", benchKey, "--requests", "1", "--concurrency", "1"}
			for name, args := range map[string][]string{
				"no client certificate": {"--tls-ca", f.CA, "--tls-server-name", BenchServerName},
				"another server name":   {"--tls-ca", f.CA, "--tls-cert", f.ClientCert, "--tls-key", f.ClientKey, "--tls-server-name", "other.bench"},
				"plaintext":             nil,
			} {
				_, err := runCLI(t, append(slices.Clone(base), args...)...)
				if err == nil || !strings.Contains(err.Error(), "Unavailable") {
					t.Errorf("%s: err = %v, want the connection refused (Unavailable)", name, err)
				}
			}
		})
	}
}

func TestTLSFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want ClientTLS
		err  bool
	}{
		{args: []string{"--addr", "a:1"}},
		{args: []string{"--addr", "a:1", "--tls-ca", "ca", "--tls-cert", "c", "--tls-key", "k", "--tls-server-name", "n"},
			want: ClientTLS{CA: "ca", Cert: "c", Key: "k", ServerName: "n"}},
		{args: []string{"--addr", "a:1", "--tls-ca", "ca"}, want: ClientTLS{CA: "ca"}},    // TLS without a client certificate
		{args: []string{"--addr", "a:1", "--tls-cert", "c", "--tls-key", "k"}, err: true}, // no CA: the server unverified
		{args: []string{"--addr", "a:1", "--tls-ca", "ca", "--tls-cert", "c"}, err: true}, // a certificate without its key
	} {
		c, err := parseRun(tc.args, io.Discard)
		if tc.err {
			if !errors.Is(err, ErrUsage) {
				t.Errorf("%v: err = %v, want ErrUsage", tc.args, err)
			}
			continue
		}
		if err != nil || c.TLS != tc.want {
			t.Errorf("%v: %+v, %v; want %+v", tc.args, c.TLS, err, tc.want)
		}
	}
	for _, args := range [][]string{
		{"floor", "--tls-cert", "c"},       // no key
		{"floor", "--tls-client-ca", "ca"}, // mTLS without a certificate
	} {
		if err := Main(t.Context(), args, io.Discard, io.Discard); !errors.Is(err, ErrUsage) {
			t.Errorf("%v: err = %v, want ErrUsage", args, err)
		}
	}
	// A floor whose files do not load fails before listening.
	if err := Main(t.Context(), []string{"floor", "--tls-cert", "/nonexistent.crt", "--tls-key", "/nonexistent.key"}, io.Discard, io.Discard); err == nil || errors.Is(err, ErrUsage) {
		t.Errorf("floor with missing files: err = %v", err)
	}
}
