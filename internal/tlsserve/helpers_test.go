package tlsserve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicegw/sluice/internal/logbuf"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/testtls"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serverName is the DNS name of every server certificate, and the SNI
// the clients send.
const serverName = "sluice.test"

// The client identities the mTLS tests allow.
const (
	allowedURI = "spiffe://sluice.test/ns/gateway/sa/envoy"
	allowedDNS = "envoy.sluice.test"
)

// pemOf is c's chain and key, PEM.
func pemOf(t *testing.T, c tls.Certificate) (certPEM, keyPEM []byte) {
	t.Helper()
	for _, der := range c.Certificate {
		certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	der, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// clientCert is a client certificate of ca with URI SANs uris and DNS
// SANs dns, subject CN "envoy", and the usages of a SPIFFE workload
// certificate (serverAuth and clientAuth); edit, when not nil, changes
// the template last.
func clientCert(t *testing.T, ca *testtls.CA, uris, dns []string, edit func(*x509.Certificate)) tls.Certificate {
	t.Helper()
	return ca.IssueWith(t, func(c *x509.Certificate) {
		c.Subject.CommonName = "envoy"
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		for _, s := range uris {
			u, err := url.Parse(s)
			if err != nil {
				t.Fatal(err)
			}
			c.URIs = append(c.URIs, u)
		}
		c.DNSNames = dns
		if edit != nil {
			edit(c)
		}
	})
}

// clientTLS is a client config trusting serverCA for serverName and
// presenting cert, if any.
func clientTLS(serverCA *testtls.CA, cert *tls.Certificate) *tls.Config {
	cfg := &tls.Config{RootCAs: serverCA.Pool(), ServerName: serverName}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return cfg
}

// layout is how a writer replaces the files on disk.
type layout string

const (
	// renamed files are written beside and renamed over the old ones,
	// one after the other.
	renamed layout = "rename"
	// kube is a Kubernetes secret volume (as cert-manager fills it):
	// tls.crt -> ..data/tls.crt, ..data -> ..<timestamp>, and an update
	// writes a new ..<timestamp> directory and swaps the ..data symlink.
	kube layout = "kube"
)

// tlsFiles are a server's certificate, key and client CA files in a
// temporary directory.
type tlsFiles struct {
	t               *testing.T
	layout          layout
	dir             string
	cert, key, ca   string // the paths Options name
	gen             int
	curCert, curKey []byte
	curCA           []byte
}

func newFiles(t *testing.T, l layout) *tlsFiles {
	t.Helper()
	dir := t.TempDir()
	return &tlsFiles{t: t, layout: l, dir: dir,
		cert: filepath.Join(dir, "tls.crt"), key: filepath.Join(dir, "tls.key"), ca: filepath.Join(dir, "ca.crt")}
}

// write replaces the files with cert's chain and key and, when clientCA
// is not nil, the client CA file with its PEM.
func (f *tlsFiles) write(cert tls.Certificate, clientCA *testtls.CA) {
	f.t.Helper()
	certPEM, keyPEM := pemOf(f.t, cert)
	var caPEM []byte
	if clientCA != nil {
		caPEM = clientCA.PEM()
	}
	f.writeRaw(certPEM, keyPEM, caPEM)
}

// writeRaw replaces the files with the content given; a nil content
// keeps that file's.
func (f *tlsFiles) writeRaw(certPEM, keyPEM, caPEM []byte) {
	f.t.Helper()
	for _, c := range []struct {
		cur  *[]byte
		data []byte
	}{{&f.curCert, certPEM}, {&f.curKey, keyPEM}, {&f.curCA, caPEM}} {
		if c.data != nil {
			*c.cur = c.data
		}
	}
	switch f.layout {
	case renamed:
		for _, c := range []struct {
			path string
			data []byte
		}{{f.cert, certPEM}, {f.key, keyPEM}, {f.ca, caPEM}} {
			if c.data == nil {
				continue
			}
			tmp := filepath.Join(f.dir, "."+filepath.Base(c.path)+".tmp")
			must(f.t, os.WriteFile(tmp, c.data, 0o600))
			must(f.t, os.Rename(tmp, c.path))
		}
	case kube:
		f.gen++
		ts := filepath.Join(f.dir, fmt.Sprintf("..2026_12_07_04_24_36.%04d", f.gen))
		must(f.t, os.Mkdir(ts, 0o755))
		for name, data := range map[string][]byte{"tls.crt": f.curCert, "tls.key": f.curKey, "ca.crt": f.curCA} {
			if data != nil {
				must(f.t, os.WriteFile(filepath.Join(ts, name), data, 0o600))
			}
		}
		data := filepath.Join(f.dir, "..data")
		old, err := os.Readlink(data)
		if err != nil && !os.IsNotExist(err) { // none the first time
			f.t.Fatal(err)
		}
		must(f.t, os.Symlink(filepath.Base(ts), filepath.Join(f.dir, "..data_tmp")))
		must(f.t, os.Rename(filepath.Join(f.dir, "..data_tmp"), data))
		if old != "" {
			must(f.t, os.RemoveAll(filepath.Join(f.dir, old)))
		}
		for _, name := range []string{"tls.crt", "tls.key", "ca.crt"} {
			link := filepath.Join(f.dir, name)
			if _, err := os.Lstat(link); os.IsNotExist(err) {
				must(f.t, os.Symlink(filepath.Join("..data", name), link))
			}
		}
	}
}

// age sets the modification times of the files to an hour ago, so that
// a set that does not load is reported at the next poll rather than
// retried until it settles.
func (f *tlsFiles) age() {
	f.t.Helper()
	then := time.Now().Add(-time.Hour)
	for _, p := range []string{f.cert, f.key, f.ca} {
		if err := os.Chtimes(p, then, then); err != nil && !os.IsNotExist(err) {
			f.t.Fatal(err)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// harness is a Reloader behind a real gRPC server (the health service)
// on 127.0.0.1.
type harness struct {
	t    *testing.T
	r    *Reloader
	m    *Metrics
	reg  *prometheus.Registry
	logs *logbuf.Buffer
	addr string

	mu    sync.Mutex
	peers []string // PeerIdentity of every call served
}

// start makes a Reloader of o (its Server, Log and Metrics filled in)
// and serves it.
func start(t *testing.T, o Options) *harness {
	t.Helper()
	h := &harness{t: t, reg: prometheus.NewRegistry(), logs: &logbuf.Buffer{}}
	h.m = NewMetrics(h.reg)
	o.Server, o.Metrics = "grpc", h.m
	o.Log = slog.New(slog.NewJSONHandler(h.logs, nil))
	if o.Interval == 0 {
		o.Interval = 10 * time.Millisecond
	}
	r, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.r = r
	h.addr = serve(t, r.Credentials(), func(ctx context.Context) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.peers = append(h.peers, PeerIdentity(ctx))
	})
	return h
}

// serve serves the health service with creds on 127.0.0.1:0 until the
// test ends, calling seen with the context of every call, and returns the
// address.
func serve(t *testing.T, creds credentials.TransportCredentials, seen func(context.Context)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(creds), grpc.UnaryInterceptor(
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			seen(ctx)
			return handler(ctx, req)
		}))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	done := make(chan error, 1)
	go func() { done <- gs.Serve(ln) }()
	t.Cleanup(func() {
		gs.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// run runs the Reloader until the test ends.
func (h *harness) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.r.Run(ctx) }()
	h.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			h.t.Errorf("Run: %v", err)
		}
	})
}

// call makes one health check over a new connection with the client TLS
// config cfg, and returns its error and the local address of the
// connection's first dial.
func (h *harness) call(ctx context.Context, cfg *tls.Config) (local string, err error) {
	return call(ctx, h.addr, credentials.NewTLS(cfg))
}

func call(ctx context.Context, addr string, creds credentials.TransportCredentials) (local string, err error) {
	var mu sync.Mutex
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			mu.Lock()
			if local == "" {
				local = c.LocalAddr().String()
			}
			mu.Unlock()
		}
		return c, err
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds), grpc.WithContextDialer(dial))
	if err != nil {
		return "", err
	}
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	conn.Close()
	mu.Lock()
	defer mu.Unlock()
	return local, err
}

// lastPeer is the PeerIdentity of the newest call served.
func (h *harness) lastPeer() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.peers) == 0 {
		return ""
	}
	return h.peers[len(h.peers)-1]
}

func (h *harness) refused(reason string) float64 {
	return metricValue(h.t, h.m.refused.WithLabelValues("grpc", reason))
}

func (h *harness) reloads(result string) float64 {
	return metricValue(h.t, h.m.reloads.WithLabelValues("grpc", result))
}

func (h *harness) expiry() float64 {
	return metricValue(h.t, h.m.expiry.WithLabelValues("grpc"))
}

// metricValue reads a counter or gauge. (prometheus/testutil would need
// a module go.mod does not list: github.com/kylelemons/godebug.)
func metricValue(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	m := &dto.Metric{}
	if err := c.Write(m); err != nil {
		t.Fatal(err)
	}
	if m.GetCounter() != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// gathered is every series of reg as "name{label=value,…}" → value,
// labels in the order Gather sorts them.
func gathered(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := m.GetCounter().GetValue()
			if mf.GetType() == dto.MetricType_GAUGE {
				v = m.GetGauge().GetValue()
			}
			got[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	return got
}

// logLines are the JSON log lines with message msg.
func (h *harness) logLines(msg string) []map[string]any {
	h.t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(h.logs.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			h.t.Fatalf("log line %q: %v", l, err)
		}
		if m["msg"] == msg {
			lines = append(lines, m)
		}
	}
	return lines
}

// waitFor polls cond until it holds, failing the test when ctx ends
// first.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// deadline is the test's context, bounded.
func deadline(t *testing.T) context.Context { return testctx.Deadline(t) }
