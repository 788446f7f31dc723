package app

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	admredis "github.com/sluicegw/sluice/internal/admission/redis"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/testenv/redistest"
	"github.com/sluicegw/sluice/internal/testtls"
	"github.com/sluicegw/sluice/policies"
)

// TestRedisTLS: admission.redis over TLS to a real Redis that takes TLS
// only and requires a client certificate: with the CA and a client
// certificate the client verifies the server and is let in; without the
// client certificate, against a server from another CA, or over plain
// redis://, it is refused.
func TestRedisTLS(t *testing.T) {
	ca, other := testtls.NewCA(t, "redis-ca"), testtls.NewCA(t, "other-ca")
	server := ca.Issue(t, "127.0.0.1")
	client := ca.IssueWith(t, func(c *x509.Certificate) {
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}, "sluice")
	s := redistest.OwnTLS(t, redistest.TLS{Cert: testtls.CertPEM(server), Key: testtls.KeyPEM(t, server), ClientCA: ca.PEM()})
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caFile, otherCA := write("ca.pem", ca.PEM()), write("other.pem", other.PEM())
	certFile, keyFile := write("client.pem", testtls.CertPEM(client)), write("client.key", testtls.KeyPEM(t, client))
	url := "rediss://127.0.0.1:" + strconv.Itoa(s.Port) + "/0"
	ping := func(r policies.Redis) error {
		c, err := redisClient(r)
		if err != nil {
			return err
		}
		defer c.Close()
		ctx := testctx.Deadline(t)
		return admredis.New(c, admredis.Options{Timeout: 5 * time.Second}).Ping(ctx)
	}
	if err := ping(policies.Redis{URL: policies.Secret(url), TLS: policies.RedisTLS{CAFile: caFile, CertFile: certFile, KeyFile: keyFile}}); err != nil {
		t.Fatalf("verified server, client certificate: %v", err)
	}
	for name, r := range map[string]policies.Redis{
		"no client certificate": {URL: policies.Secret(url), TLS: policies.RedisTLS{CAFile: caFile}},
		"another CA":            {URL: policies.Secret(url), TLS: policies.RedisTLS{CAFile: otherCA, CertFile: certFile, KeyFile: keyFile}},
		"the system's roots":    {URL: policies.Secret(url), TLS: policies.RedisTLS{CertFile: certFile, KeyFile: keyFile}},
		"plain redis://":        {URL: policies.Secret("redis://127.0.0.1:" + strconv.Itoa(s.Port) + "/0")},
	} {
		if err := ping(r); err == nil {
			t.Errorf("%s: admitted; want refused", name)
		}
	}
}
