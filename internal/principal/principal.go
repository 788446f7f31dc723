package principal

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MinSecretBytes is the shortest secret Keys takes: 256 bits.
const MinSecretBytes = 32

// Purpose tells apart what a signature vouches for, so that one kind of
// signature never verifies as another.
type Purpose byte

// Purposes.
const (
	// ForPrincipal: ext_authz accepted the key (key id, team, org).
	ForPrincipal Purpose = 1
	// ForHandoff: the downstream ext_proc admitted the request and routed
	// it to a fallback model (the client's path, the model).
	ForHandoff Purpose = 2
)

// Reason is why a signature was refused; "" means it verified. Reasons
// are the `reason` label of sluice_principal_refused_total.
type Reason string

// Reasons.
const (
	OK           Reason = ""
	Missing      Reason = "missing"       // no signature, or signed fields without one
	Malformed    Reason = "malformed"     // not a signature this version writes
	BadSignature Reason = "bad_signature" // no key signed these fields for this request
	Expired      Reason = "expired"       // issued longer ago than the bound
	Future       Reason = "future"        // issued further ahead than the bound
)

// version starts every signature; a later format gets a new one.
const version = "v1."

// macLen is the length of an HMAC-SHA256 in bytes.
const macLen = sha256.Size

// Keys signs with its first secret and verifies with any. It is safe for
// concurrent use.
type Keys struct {
	secrets   [][]byte     // in order; the first signs
	macs      []*sync.Pool // one pool of HMAC states per secret, in order
	generated bool
}

// New returns Keys over secrets, the first of which signs. Each must be at
// least MinSecretBytes long.
func New(secrets [][]byte) (*Keys, error) {
	if len(secrets) == 0 {
		return nil, errors.New("principal: no secret")
	}
	k := &Keys{}
	for i, s := range secrets {
		if len(s) < MinSecretBytes {
			return nil, fmt.Errorf("principal: secret %d is %d bytes; at least %d are needed", i, len(s), MinSecretBytes)
		}
		key := append([]byte(nil), s...)
		k.secrets = append(k.secrets, key)
		k.macs = append(k.macs, &sync.Pool{New: func() any { return &macState{h: hmac.New(sha256.New, key)} }})
	}
	return k, nil
}

// Generate returns Keys over one random secret, which only this process
// knows: enough for one process that runs both ext_authz and ext_proc,
// never for a fleet.
func Generate() (*Keys, error) {
	s := make([]byte, MinSecretBytes)
	if _, err := rand.Read(s); err != nil {
		return nil, fmt.Errorf("principal: random secret: %w", err)
	}
	k, err := New([][]byte{s})
	if err != nil {
		return nil, err
	}
	k.generated = true
	return k, nil
}

// AlsoAccepting returns keys that sign as k does and verify with k's
// secrets and then older's: what a process uses for a while after its
// keys changed, so that what the old ones signed just before still
// verifies.
func (k *Keys) AlsoAccepting(older *Keys) *Keys {
	out := &Keys{secrets: k.secrets, macs: k.macs, generated: k.generated}
	out.secrets = append(append([][]byte(nil), k.secrets...), older.secrets...)
	out.macs = append(append([]*sync.Pool(nil), k.macs...), older.macs...)
	return out
}

// Generated reports whether the keys were made by Generate.
func (k *Keys) Generated() bool { return k.generated }

// Sign returns the signature of fields for purpose p, bound to the
// request requestID and issued at iat: "v1.<unix milliseconds>.<MAC,
// base64url without padding>".
func (k *Keys) Sign(p Purpose, requestID string, iat time.Time, fields ...string) string {
	ms := iat.UnixMilli()
	var mac [macLen]byte
	k.mac(0, p, requestID, ms, fields, mac[:0])
	b := make([]byte, 0, len(version)+20+1+base64.RawURLEncoding.EncodedLen(macLen))
	b = append(b, version...)
	b = strconv.AppendInt(b, ms, 10)
	b = append(b, '.')
	b = base64.RawURLEncoding.AppendEncode(b, mac[:])
	return string(b)
}

// Verify checks sig, as Sign wrote it for p, requestID and fields, at now:
// issued no more than maxAge ago and no more than maxAge ahead (the clocks
// of the replica that signed and of this one differ).
func (k *Keys) Verify(sig string, p Purpose, requestID string, now time.Time, maxAge time.Duration, fields ...string) Reason {
	if sig == "" {
		return Missing
	}
	rest, ok := strings.CutPrefix(sig, version)
	if !ok {
		return Malformed
	}
	msText, macText, ok := strings.Cut(rest, ".")
	if !ok || len(msText) == 0 || len(msText) > 19 || base64.RawURLEncoding.DecodedLen(len(macText)) != macLen {
		return Malformed
	}
	if len(msText) > 1 && msText[0] == '0' {
		return Malformed // one spelling of each time
	}
	for i := 0; i < len(msText); i++ {
		if msText[i] < '0' || msText[i] > '9' {
			return Malformed
		}
	}
	ms, err := strconv.ParseInt(msText, 10, 64)
	if err != nil {
		return Malformed
	}
	var got [macLen]byte
	// Strict: one spelling of each MAC (the last character's unused bits
	// zero).
	if n, err := base64.RawURLEncoding.Strict().Decode(got[:], []byte(macText)); err != nil || n != macLen {
		return Malformed
	}
	var want [macLen]byte
	verified := false
	for i := range k.macs {
		if hmac.Equal(k.mac(i, p, requestID, ms, fields, want[:0]), got[:]) {
			verified = true
			break
		}
	}
	if !verified {
		return BadSignature
	}
	// Only a signature that verified says anything about its time.
	switch nowMS, bound := now.UnixMilli(), maxAge.Milliseconds(); {
	case ms < nowMS-bound:
		return Expired
	case ms > nowMS+bound:
		return Future
	}
	return OK
}

// macState is a secret's HMAC and a buffer for the message it signs.
type macState struct {
	h   hash.Hash
	msg []byte
}

// mac appends to dst the MAC under secret i of the signed message: the
// purpose, the issue time and each of the request id and the fields
// prefixed by its length, so that no two lists of fields write the same
// bytes.
func (k *Keys) mac(i int, p Purpose, requestID string, ms int64, fields []string, dst []byte) []byte {
	st := k.macs[i].Get().(*macState)
	m := append(st.msg[:0], byte(p))
	m = binary.BigEndian.AppendUint64(m, uint64(ms))
	m = appendField(m, requestID)
	for _, f := range fields {
		m = appendField(m, f)
	}
	st.h.Reset()
	st.h.Write(m)
	dst = st.h.Sum(dst)
	if cap(m) <= 4<<10 {
		st.msg = m
	}
	k.macs[i].Put(st)
	return dst
}

func appendField(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}
