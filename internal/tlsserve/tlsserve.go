package tlsserve

import (
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
)

// Options configure a Reloader.
type Options struct {
	// CertFile is the PEM certificate chain the server presents, its own
	// certificate first; KeyFile is its PEM private key. Both required;
	// they may name the same file.
	CertFile string
	KeyFile  string
	// ClientCAFile, when set, turns on mTLS: every client must present a
	// certificate that chains to one of the CAs of this PEM bundle, is
	// valid now, and may be used for client authentication (an
	// extended key usage of clientAuth, as SPIFFE and Istio workload
	// certificates carry beside serverAuth, or anyExtendedKeyUsage, or no
	// extended key usage at all; a serverAuth-only certificate is
	// refused).
	ClientCAFile string
	// AllowedURIs and AllowedDNS are the client identities admitted: a
	// certificate is admitted when any of its URI SANs (such as a SPIFFE
	// ID) is in AllowedURIs or any of its DNS SANs is in AllowedDNS.
	// Matching is exact (DNS names ignore case; no wildcards). Both empty:
	// any certificate of the CAs. Set only with ClientCAFile.
	AllowedURIs []string
	AllowedDNS  []string
	// Server labels the server in logs and metrics: "grpc" or "xds".
	Server string
	// Log receives load, reload and refusal lines; nil discards them.
	Log *slog.Logger
	// Metrics are the series to count in, shared by the process's
	// Reloaders; nil counts in unregistered series.
	Metrics *Metrics
	// Interval is how often Run stats the files; 0 means 1s.
	Interval time.Duration
}

// validate returns every problem of o at once.
func (o *Options) validate() error {
	var errs []error
	if o.CertFile == "" {
		errs = append(errs, errors.New("CertFile: required (the PEM certificate chain to serve)"))
	}
	if o.KeyFile == "" {
		errs = append(errs, errors.New("KeyFile: required (the PEM private key of CertFile)"))
	}
	if o.Server == "" {
		errs = append(errs, errors.New(`Server: required (the label of logs and metrics, "grpc" or "xds")`))
	}
	if o.Interval < 0 {
		errs = append(errs, fmt.Errorf("Interval: %v is negative", o.Interval))
	}
	if o.ClientCAFile == "" && (len(o.AllowedURIs) > 0 || len(o.AllowedDNS) > 0) {
		errs = append(errs, errors.New("AllowedURIs, AllowedDNS: client identities need ClientCAFile (without it no client certificate is asked for)"))
	}
	for i, u := range o.AllowedURIs {
		if p, err := url.Parse(u); err != nil || p.Scheme == "" {
			errs = append(errs, fmt.Errorf("AllowedURIs[%d]: %q is not an absolute URI (such as spiffe://example.org/ns/envoy/sa/envoy)", i, u))
		}
	}
	for i, d := range o.AllowedDNS {
		if d == "" || strings.ContainsAny(d, " /:") {
			errs = append(errs, fmt.Errorf("AllowedDNS[%d]: %q is not a DNS name", i, d))
		}
	}
	return errors.Join(errs...)
}

// settleTime is how long after its last modification a file set is read
// again on every poll, and how long a set that does not load may stand
// before the failure is reported. Writers replace the certificate and
// the key one after the other, and file systems keep modification times
// with a coarse clock: a set changed moments ago may still be changing,
// and a pair caught between its two files is retried rather than
// reported.
const settleTime = time.Second

// Reloader keeps a server's certificate, key and client CAs current. New
// loads them; Run polls the files and swaps in a new set whenever their
// content changes and loads; ServerConfig and Credentials read the set in
// force at every handshake.
type Reloader struct {
	server   string
	interval time.Duration
	files    []file // certificate, key, and client CAs when mTLS
	caFile   string
	uris     map[string]bool
	dns      map[string]bool // lower case
	log      *slog.Logger
	m        *Metrics
	cur      atomic.Pointer[bundle]

	mu      sync.Mutex          // guards the poll state below
	seen    []os.FileInfo       // the stats of the content last read; nil: read on the next poll
	sums    [][sha256.Size]byte // the content last loaded or reported
	missing bool                // a file could not be read at the last poll (reported once)
}

// New loads the files of o. An error names the file and what is wrong
// with it (a *FileError), or every problem of o. It starts nothing: call
// Run to follow changes.
func New(o Options) (*Reloader, error) {
	where := "tls of the " + o.Server + " server"
	if o.Server == "" {
		where = "tls"
	}
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if o.Interval == 0 {
		o.Interval = time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	r := &Reloader{
		server:   o.Server,
		interval: o.Interval,
		files: []file{
			{role: "certificate file", path: o.CertFile},
			{role: "key file", path: o.KeyFile},
		},
		caFile: o.ClientCAFile,
		log:    o.Log.With("component", "tlsserve", "server", o.Server),
		m:      o.Metrics,
	}
	if o.ClientCAFile != "" {
		r.files = append(r.files, file{role: "client CA file", path: o.ClientCAFile})
		r.uris, r.dns = make(map[string]bool), make(map[string]bool)
		for _, u := range o.AllowedURIs {
			r.uris[u] = true
		}
		for _, d := range o.AllowedDNS {
			r.dns[strings.ToLower(d)] = true
		}
	}
	stats, err := stat(r.files)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	s, err := read(r.files, stats)
	if errors.Is(err, errMoved) {
		err = errors.New("the files changed while they were read; start again once they are written")
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	b, err := build(r.files, s, time.Now())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	r.sums = s.sums()
	r.remember(s)
	r.cur.Store(b)
	r.m.zero(r.server, r.mtls())
	r.m.expiry.WithLabelValues(r.server).Set(float64(b.cert.Leaf.NotAfter.Unix()))
	r.log.Info("TLS certificate loaded", r.loadedAttrs(b)...)
	return r, nil
}

func (r *Reloader) mtls() bool { return r.caFile != "" }

// loadedAttrs describe the set b for a log line.
func (r *Reloader) loadedAttrs(b *bundle) []any {
	attrs := append([]any{"cert_file", r.files[0].path}, certSummary(b.cert.Leaf)...)
	if r.mtls() {
		attrs = append(attrs, "client_ca_file", r.caFile, "client_cas", b.caNames)
	}
	return attrs
}

// ServerConfig is a server tls.Config (TLS 1.2 and up, ALPN h2) whose
// every handshake uses the files in force when it starts: a listener made
// with it serves rotated certificates and trusts rotated CAs from the
// next connection on. With mTLS, the client certificate is requested and
// verified by the Reloader (see Options.ClientCAFile), not by crypto/tls,
// so that every refusal is logged and counted with its reason.
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		NextProtos:         []string{"h2"},
		GetConfigForClient: r.configForClient,
	}
}

// Credentials are gRPC transport credentials of ServerConfig, for
// grpc.NewServer(grpc.Creds(...)).
func (r *Reloader) Credentials() credentials.TransportCredentials {
	return credentials.NewTLS(r.ServerConfig())
}

// configForClient is the config of one handshake: the current bundle's
// certificate, and, with mTLS, a verification of the client against the
// bundle's CAs. The bundle is taken once, so one handshake never mixes
// two sets. Session tickets stay with the base config's keys; a resumed
// session is verified again (crypto/tls calls VerifyConnection on
// resumption too) against the CAs current then.
func (r *Reloader) configForClient(hello *tls.ClientHelloInfo) (*tls.Config, error) {
	b := r.cur.Load()
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2"},
		Certificates: []tls.Certificate{*b.cert},
	}
	if b.clientCAs != nil {
		remote := "unknown"
		if hello.Conn != nil && hello.Conn.RemoteAddr() != nil {
			remote = hello.Conn.RemoteAddr().String()
		}
		// RequestClientCert, not RequireAnyClientCert: with the latter
		// crypto/tls ends a handshake without a certificate before
		// VerifyConnection, unlogged and uncounted. verify refuses it.
		cfg.ClientAuth = tls.RequestClientCert
		cfg.VerifyConnection = func(cs tls.ConnectionState) error { return r.verify(b, remote, cs) }
	}
	return cfg, nil
}
