package tlsserve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// refusal is why a client certificate was refused: reason is the stable
// label of sluice_tls_refused_total.
type refusal struct {
	reason string
	err    error
}

func (e *refusal) Error() string { return "tls client refused (" + e.reason + "): " + e.err.Error() }

func (e *refusal) Unwrap() error { return e.err }

// verify admits or refuses the client of a handshake from remote against
// the set b, and logs and counts a refusal.
func (r *Reloader) verify(b *bundle, remote string, cs tls.ConnectionState) error {
	ref := r.check(b, cs.PeerCertificates, time.Now())
	if ref == nil {
		return nil
	}
	r.m.refused.WithLabelValues(r.server, ref.reason).Inc()
	attrs := []slog.Attr{slog.String("peer", remote), slog.String("reason", ref.reason)}
	if len(cs.PeerCertificates) > 0 {
		c := cs.PeerCertificates[0]
		attrs = append(attrs, slog.Any("uris", uriStrings(c)), slog.Any("dns", c.DNSNames),
			slog.String("cn", c.Subject.CommonName), slog.String("issuer", c.Issuer.String()))
	}
	attrs = append(attrs, slog.String("error", ref.err.Error()))
	r.log.LogAttrs(context.Background(), slog.LevelWarn, "refused a TLS client", attrs...)
	return ref
}

// check is the mTLS decision on a client's chain (leaf first) at now, nil
// to admit it.
func (r *Reloader) check(b *bundle, chain []*x509.Certificate, now time.Time) *refusal {
	if len(chain) == 0 {
		return &refusal{reasonNoCertificate, fmt.Errorf("the client sent no certificate; one issued by a CA of %s is required", r.caFile)}
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{
		Roots:         b.clientCAs,
		Intermediates: inter,
		CurrentTime:   now,
		// A certificate with no extended key usage, or
		// anyExtendedKeyUsage, passes too.
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return &refusal{reasonUntrusted, fmt.Errorf("verify against the CAs of %s: %w", r.caFile, err)}
	}
	if len(r.uris) == 0 && len(r.dns) == 0 {
		return nil
	}
	if slices.ContainsFunc(uriStrings(chain[0]), func(u string) bool { return r.uris[u] }) ||
		slices.ContainsFunc(chain[0].DNSNames, func(d string) bool { return r.dns[strings.ToLower(d)] }) {
		return nil
	}
	return &refusal{reasonIdentityNotAllowed, errors.New("none of the certificate's URI and DNS SANs is an allowed client identity")}
}

// uriStrings are c's URI SANs.
func uriStrings(c *x509.Certificate) []string {
	s := make([]string, len(c.URIs))
	for i, u := range c.URIs {
		s[i] = u.String()
	}
	return s
}
