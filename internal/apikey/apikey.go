package apikey

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"strings"
)

// Prefix starts every Sluice API key.
const Prefix = "sk-sluice-"

const (
	// secretLen is the base62 length of a generated key's random part:
	// 32 random bytes need 43 base62 digits.
	secretLen = 43
	// MinSecretLen and MaxSecretLen bound the random part of any key that
	// is accepted (declared keys may come from other generators).
	MinSecretLen = 32
	MaxSecretLen = 128
	// PrefixLen is how much of the key is public: Prefix plus this many
	// characters of the random part.
	publicChars = 6
	idLen       = 16
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// Secret is a presented or generated API key. It prints as its public
// prefix only, so it cannot leak through fmt or slog by accident.
type Secret string

// Reveal returns the whole secret.
func (s Secret) Reveal() string { return string(s) }

// String implements fmt.Stringer: only the public prefix.
func (s Secret) String() string { return PublicPrefix(string(s)) + "…" }

// GoString implements fmt.GoStringer.
func (s Secret) GoString() string { return s.String() }

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// Generate returns a new secret: Prefix followed by 43 base62 characters
// encoding 32 bytes read from r (crypto/rand.Reader when r is nil).
func Generate(r io.Reader) (Secret, error) {
	s, err := randomBase62(r, 32, secretLen)
	if err != nil {
		return "", fmt.Errorf("generate key: %w", err)
	}
	return Secret(Prefix + s), nil
}

// NewID returns a new key id, "key_" followed by 16 base62 characters.
// Ids are public: they appear in logs, metrics and `sluice keys list`.
func NewID(r io.Reader) (string, error) {
	s, err := randomBase62(r, 12, idLen)
	if err != nil {
		return "", fmt.Errorf("generate key id: %w", err)
	}
	return "key_" + s, nil
}

// Hash returns the SHA-256 of the whole secret: the only form stored.
func Hash(secret string) [32]byte { return sha256.Sum256([]byte(secret)) }

// HashHex is Hash in lower-case hex, the form used in sluice.yaml.
func HashHex(secret string) string {
	h := Hash(secret)
	return hex.EncodeToString(h[:])
}

// PublicPrefix returns the part of a key that may be shown and logged:
// Prefix plus the first 6 characters of the random part. For a string that
// is not a well-formed key it returns "" so nothing of it leaks.
func PublicPrefix(secret string) string {
	if Validate(secret) != nil {
		return ""
	}
	return secret[:len(Prefix)+publicChars]
}

// Redacted is a well-formed key as OpenAI echoes a key it does not know
// ("Incorrect API key provided: sk-XG6GW****…****wlmi."): its first 8 and
// last 4 characters with a '*' for each one between — no more of it. For
// a string that is not a well-formed key it returns "" so nothing leaks.
func Redacted(secret string) string {
	if Validate(secret) != nil {
		return ""
	}
	const head, tail = 8, 4
	return secret[:head] + strings.Repeat("*", len(secret)-head-tail) + secret[len(secret)-tail:]
}

// Validate checks a secret's format: Prefix, then 32–128 base62
// characters. Its errors never quote the secret.
func Validate(secret string) error {
	if len(secret) < len(Prefix) || secret[:len(Prefix)] != Prefix {
		return malformed("the API key must start with %q", Prefix)
	}
	rest := secret[len(Prefix):]
	if len(rest) < MinSecretLen {
		return malformed("the API key is too short: %d characters after %q, need at least %d", len(rest), Prefix, MinSecretLen)
	}
	if len(rest) > MaxSecretLen {
		return malformed("the API key is too long: %d characters after %q, at most %d", len(rest), Prefix, MaxSecretLen)
	}
	for i := 0; i < len(rest); i++ {
		if !isBase62(rest[i]) {
			return malformed("the API key contains a character outside [0-9A-Za-z] at position %d", len(Prefix)+i+1)
		}
	}
	return nil
}

func isBase62(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
}

// randomBase62 reads n random bytes and encodes them as exactly width
// base62 digits (left-padded with '0').
func randomBase62(r io.Reader, n, width int) (string, error) {
	if r == nil {
		r = rand.Reader
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", err
	}
	v := new(big.Int).SetBytes(buf)
	out := make([]byte, width)
	base := big.NewInt(62)
	mod := new(big.Int)
	for i := width - 1; i >= 0; i-- {
		v.DivMod(v, base, mod)
		out[i] = base62[mod.Int64()]
	}
	return string(out), nil
}

// Scrub returns s with every run that looks like a key — Prefix, in any
// letter case, and more base62 characters after it than a public prefix
// has — replaced by its Redacted form, or, where the run is not a
// well-formed key, by its public prefix and "…". Text that quotes what a user wrote (an import's error about a
// value in the wrong column, say) passes through Scrub before anyone
// sees it, so a key never reaches a terminal or a log whole.
func Scrub(s string) string {
	var b strings.Builder
	rest := s
	for {
		i := indexFold(rest, Prefix)
		if i < 0 {
			if b.Len() == 0 {
				return s
			}
			b.WriteString(rest)
			return b.String()
		}
		end := i + len(Prefix)
		for end < len(rest) && isBase62(rest[end]) {
			end++
		}
		b.WriteString(rest[:i])
		random := rest[i+len(Prefix) : end]
		switch r := Redacted(Prefix + random); {
		case len(random) <= publicChars: // no more than a public prefix shows
			b.WriteString(rest[i:end])
		case r != "":
			b.WriteString(r)
		default: // not a key, but the start of one, or one mistyped
			b.WriteString(Prefix + random[:publicChars] + "…")
		}
		rest = rest[end:]
	}
}

// indexFold is strings.Index of the ASCII pattern p in s, letter case
// ignored.
func indexFold(s, p string) int {
	for i := 0; i+len(p) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(p)], p) {
			return i
		}
	}
	return -1
}
