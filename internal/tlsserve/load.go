package tlsserve

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"time"
)

// bundle is one loaded set of files: what a handshake uses. It is never
// changed once made; a reload swaps in a new one.
type bundle struct {
	cert      *tls.Certificate // the chain and key, Leaf set
	clientCAs *x509.CertPool   // nil: TLS only, no client certificate asked
	caNames   []string         // the client CAs' subjects, for logs
}

// file is one of the files a Reloader watches.
type file struct {
	role string // "certificate file", "key file", "client CA file"
	path string
}

// FileError is a TLS file that could not be read or did not load: Path
// names the file, Err says what is wrong with it.
type FileError struct {
	Role string // "certificate file", "key file" or "client CA file"
	Path string
	Err  error
	Hint string // what to do about it; may be empty
}

func (e *FileError) Error() string {
	msg := e.Role + " " + e.Path + ": " + e.Err.Error()
	if e.Hint != "" {
		msg += " (" + e.Hint + ")"
	}
	return msg
}

func (e *FileError) Unwrap() error { return e.Err }

// set is the content of every file, read together.
type set struct {
	data  [][]byte
	stats []os.FileInfo
}

// errMoved says a file changed while the set was read: read it again.
var errMoved = errors.New("a file changed while it was read")

// stat stats every file (following symlinks, as a Kubernetes volume's
// ..data swap needs).
func stat(files []file) ([]os.FileInfo, error) {
	stats := make([]os.FileInfo, len(files))
	for i, f := range files {
		fi, err := os.Stat(f.path)
		if err != nil {
			return nil, readError(f, err)
		}
		stats[i] = fi
	}
	return stats, nil
}

// read reads every file. The set is consistent when every file has the
// same stat before and after all of them were read, and the size read
// is the size stat saw; if not, read returns errMoved and the caller
// reads again later. before is the stats taken just before.
func read(files []file, before []os.FileInfo) (*set, error) {
	s := &set{data: make([][]byte, len(files)), stats: before}
	for i, f := range files {
		data, err := os.ReadFile(f.path)
		if err != nil {
			return nil, readError(f, err)
		}
		s.data[i] = data
	}
	after, err := stat(files)
	if err != nil {
		return nil, err
	}
	for i := range files {
		if !sameStat(before[i], after[i]) || int64(len(s.data[i])) != after[i].Size() {
			return nil, errMoved
		}
	}
	return s, nil
}

// sums are the content hashes of the set, to tell a changed file from a
// touched one. SHA-256, so that only hashes of the key outlive a read.
func (s *set) sums() [][sha256.Size]byte {
	sums := make([][sha256.Size]byte, len(s.data))
	for i, d := range s.data {
		sums[i] = sha256.Sum256(d)
	}
	return sums
}

// settled reports whether every file was last modified settleTime or
// more before now (or implausibly far after it: a skewed clock on a
// network file system).
func (s *set) settled(now time.Time) bool {
	for _, fi := range s.stats {
		age := now.Sub(fi.ModTime())
		if age < settleTime && age > -settleTime {
			return false
		}
	}
	return true
}

// sameStat reports whether two stats describe the same content: the
// same file (device and inode), modification time and size.
func sameStat(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}

func readError(f file, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = fmt.Errorf("cannot %s: %w", pe.Op, pe.Err)
	}
	return &FileError{Role: f.role, Path: f.path, Err: err, Hint: "check the path, and that the volume holding it is mounted"}
}

// build makes a bundle of s, whose data are the certificate file, the
// key file and, when files has three, the client CA file. now is the
// time the certificate must not have expired at.
func build(files []file, s *set, now time.Time) (*bundle, error) {
	certFile, keyFile := files[0], files[1]
	chain, err := certificates(s.data[0])
	if err != nil {
		return nil, &FileError{Role: certFile.role, Path: certFile.path, Err: err,
			Hint: "want the PEM chain Sluice serves, its own certificate first"}
	}
	if err := wholePEM(s.data[1]); err != nil {
		return nil, &FileError{Role: keyFile.role, Path: keyFile.path, Err: err, Hint: "want the PEM private key of " + certFile.path}
	}
	cert, err := tls.X509KeyPair(s.data[0], s.data[1])
	if err != nil {
		// The chain parsed above: what is wrong is the key, or the pair.
		return nil, &FileError{Role: keyFile.role, Path: keyFile.path, Err: err,
			Hint: "want the PEM private key " + certFile.path + " was issued for; were the two files written by different issuances?"}
	}
	leaf := chain[0]
	cert.Leaf = leaf
	if now.After(leaf.NotAfter) {
		return nil, &FileError{Role: certFile.role, Path: certFile.path,
			Err:  fmt.Errorf("certificate %q expired at %s", leaf.Subject.String(), leaf.NotAfter.UTC().Format(time.RFC3339)),
			Hint: "renew it"}
	}
	b := &bundle{cert: &cert}
	if len(files) > 2 {
		caFile := files[2]
		cas, err := certificates(s.data[2])
		if err != nil {
			return nil, &FileError{Role: caFile.role, Path: caFile.path, Err: err,
				Hint: "want the PEM bundle of the CAs that issue client certificates"}
		}
		b.clientCAs = x509.NewCertPool()
		for _, ca := range cas {
			b.clientCAs.AddCert(ca)
			b.caNames = append(b.caNames, ca.Subject.String())
		}
	}
	return b, nil
}

// certificates parses every CERTIFICATE block of PEM data, in order,
// skipping blocks of other types (a private key in a combined file). It
// refuses data with a block that does not decode, as a file caught
// half-written has.
func certificates(data []byte) ([]*x509.Certificate, error) {
	if err := wholePEM(data); err != nil {
		return nil, err
	}
	var certs []*x509.Certificate
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM CERTIFICATE block")
	}
	return certs, nil
}

// wholePEM checks that every PEM block begun in data decodes: pem.Decode
// skips a malformed or truncated block silently, which would drop an
// intermediate from a chain, or a key from a file.
func wholePEM(data []byte) error {
	begun := bytes.Count(data, []byte("-----BEGIN "))
	decoded := 0
	for rest := data; ; decoded++ {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
	}
	if decoded < begun {
		return fmt.Errorf("%d of its %d PEM blocks are malformed or cut short (a file caught half-written?)", begun-decoded, begun)
	}
	return nil
}

// certSummary is a certificate's identities and validity, for logs: never
// key material.
func certSummary(c *x509.Certificate) []any {
	ips := make([]string, len(c.IPAddresses))
	for i, ip := range c.IPAddresses {
		ips[i] = ip.String()
	}
	return []any{"subject", c.Subject.String(), "uris", uriStrings(c), "dns", slices.Clone(c.DNSNames), "ips", ips,
		"issuer", c.Issuer.String(), "not_after", c.NotAfter.UTC().Format(time.RFC3339)}
}
