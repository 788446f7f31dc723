package tlsserve

import (
	"context"
	"crypto/x509"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// PeerIdentity names the peer of a gRPC handler's ctx for a log line: the
// client certificate's identity (its first URI SAN, else its first DNS
// SAN, else its subject CN) and the remote address, as
// "spiffe://example.org/envoy (10.0.0.7:41234)"; the address alone for a
// plaintext peer or one without a certificate; "unknown" outside a call.
//
// The certificate is the one crypto/tls recorded. Behind Credentials it
// was verified before the handshake ended; behind other credentials that
// ask for a client certificate without verifying it, the name is only
// what the client claims.
func PeerIdentity(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "unknown"
	}
	addr := "unknown"
	if p.Addr != nil {
		addr = p.Addr.String()
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
		if id := identity(ti.State.PeerCertificates[0]); id != "" {
			return id + " (" + addr + ")"
		}
	}
	return addr
}

// identity is c's first URI SAN, else its first DNS SAN, else its
// subject CN.
func identity(c *x509.Certificate) string {
	switch {
	case len(c.URIs) > 0:
		return c.URIs[0].String()
	case len(c.DNSNames) > 0:
		return c.DNSNames[0]
	}
	return c.Subject.CommonName
}
