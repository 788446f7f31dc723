package tlsserve

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/testtls"
)

// TestNewErrors: New refuses options and files that cannot serve, with
// an error that names the file (a *FileError) and what is wrong.
func TestNewErrors(t *testing.T) {
	ca := testtls.NewCA(t, "CA")
	certPEM, keyPEM := pemOf(t, ca.Issue(t, serverName))
	_, otherKeyPEM := pemOf(t, ca.Issue(t, serverName))
	expiredPEM, expiredKeyPEM := pemOf(t, ca.IssueWith(t, func(c *x509.Certificate) { c.NotAfter = c.NotBefore.Add(time.Minute) }, serverName))
	chainPEM := append(append([]byte(nil), certPEM...), ca.PEM()...)
	tests := []struct {
		name          string
		cert, key, ca []byte // nil: no such file
		edit          func(o *Options)
		file          string // the FileError's file: "cert", "key", "ca", or "" for none
		want          []string
	}{
		{name: "missing certificate", key: keyPEM, file: "cert", want: []string{"certificate file", "no such file or directory", "mounted"}},
		{name: "missing key", cert: certPEM, file: "key", want: []string{"key file", "no such file or directory"}},
		{name: "missing client CA file", cert: certPEM, key: keyPEM, edit: withCA, file: "ca", want: []string{"client CA file", "no such file or directory"}},
		{name: "key of another certificate", cert: certPEM, key: otherKeyPEM, file: "key", want: []string{"private key does not match public key", "issued for"}},
		{name: "certificate as key", cert: certPEM, key: certPEM, file: "key", want: []string{"found a certificate rather than a key"}},
		{name: "truncated certificate", cert: certPEM[:len(certPEM)-40], key: keyPEM, file: "cert", want: []string{"cut short"}},
		{name: "truncated intermediate", cert: chainPEM[:len(chainPEM)-40], key: keyPEM, file: "cert", want: []string{"1 of its 2 PEM blocks"}},
		{name: "truncated key", cert: certPEM, key: keyPEM[:len(keyPEM)/2], file: "key", want: []string{"cut short"}},
		{name: "empty certificate", cert: []byte{}, key: keyPEM, file: "cert", want: []string{"no PEM CERTIFICATE block"}},
		{name: "client CA file without certificates", cert: certPEM, key: keyPEM, ca: keyPEM, edit: withCA, file: "ca", want: []string{"no PEM CERTIFICATE block"}},
		{name: "expired certificate", cert: expiredPEM, key: expiredKeyPEM, file: "cert", want: []string{"expired at", "renew"}},
		{name: "no options", edit: func(o *Options) { *o = Options{} }, want: []string{
			"CertFile: required", "KeyFile: required", "Server: required"}},
		{name: "identities without client CA", cert: certPEM, key: keyPEM, edit: func(o *Options) {
			o.AllowedURIs, o.AllowedDNS = []string{allowedURI}, []string{allowedDNS}
		}, want: []string{"need ClientCAFile"}},
		{name: "bad identities", cert: certPEM, key: keyPEM, ca: ca.PEM(), edit: func(o *Options) {
			withCA(o)
			o.AllowedURIs, o.AllowedDNS = []string{"envoy"}, []string{"", "a b"}
		}, want: []string{`AllowedURIs[0]: "envoy" is not an absolute URI`, `AllowedDNS[0]: "" is not a DNS name`, `AllowedDNS[1]`}},
		{name: "negative interval", cert: certPEM, key: keyPEM, edit: func(o *Options) { o.Interval = -time.Second }, want: []string{"Interval"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			paths := map[string]string{"cert": filepath.Join(dir, "tls.crt"), "key": filepath.Join(dir, "tls.key"), "ca": filepath.Join(dir, "ca.crt")}
			for name, data := range map[string][]byte{"cert": tt.cert, "key": tt.key, "ca": tt.ca} {
				if data != nil {
					must(t, os.WriteFile(paths[name], data, 0o600))
				}
			}
			o := Options{CertFile: paths["cert"], KeyFile: paths["key"], Server: "grpc"}
			if tt.edit != nil {
				tt.edit(&o)
			}
			if o.ClientCAFile != "" {
				o.ClientCAFile = paths["ca"]
			}
			r, err := New(o)
			if err == nil {
				t.Fatalf("New = %v, want an error", r)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			var fe *FileError
			switch {
			case tt.file == "" && errors.As(err, &fe):
				t.Errorf("error %q is a FileError, want an options error", err)
			case tt.file != "" && (!errors.As(err, &fe) || fe.Path != paths[tt.file]):
				t.Errorf("error %q, want a FileError of %s", err, paths[tt.file])
			case tt.file != "" && !strings.Contains(err.Error(), paths[tt.file]):
				t.Errorf("error %q does not name %s", err, paths[tt.file])
			}
		})
	}
}

func withCA(o *Options) { o.ClientCAFile = "set" }

// TestNewDefaults: New starts nothing, polls every second by default,
// and accepts a certificate and key in one file.
func TestNewDefaults(t *testing.T) {
	ca := testtls.NewCA(t, "CA")
	certPEM, keyPEM := pemOf(t, ca.Issue(t, serverName))
	path := filepath.Join(t.TempDir(), "tls.pem")
	must(t, os.WriteFile(path, append(append([]byte(nil), certPEM...), keyPEM...), 0o600))
	r, err := New(Options{CertFile: path, KeyFile: path, Server: "grpc"})
	if err != nil {
		t.Fatal(err)
	}
	if r.interval != time.Second {
		t.Errorf("interval %v, want 1s", r.interval)
	}
}
