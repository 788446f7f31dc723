package llmapi

import "strings"

// Path canonicalization and classification: what a request path names
// once the ways of spelling one path differently are undone, so that a
// path Sluice does not know as sent (EndpointFor compares the raw path)
// can still be recognised as one it meters, whatever Envoy's own
// normalize_path, merge_slashes and path_with_escaped_slashes_action are
// (envoy-protocol.md §7: all off by default) and whatever a provider's
// router cleans.

// Canonical is path's canonical form and whether it differs from path.
// The part from the first '?' or '#' on (the query) is kept unchanged;
// before it:
//
//   - one round of percent-decoding, of the unreserved characters
//     (RFC 3986 §2.3) and of %2F and %5C, both as '/'; every other escape
//     is kept, its hex digits upper-cased. Decoding is once, as Envoy's
//     normalize_path does: %252F becomes %252F, not '/' (ClassifyPath
//     calls that double encoding suspicious);
//   - a raw '\' read as '/';
//   - each segment's ';' path parameters dropped (";x", as Tomcat and
//     Spring read them);
//   - empty segments dropped (repeated slashes merged, a trailing slash
//     dropped), "." and ".." resolved (RFC 3986 §5.2.4), never above the
//     root;
//   - a first segment "v1" in any case written "v1".
//
// The rest of the path keeps its case: providers' paths are
// case-sensitive. The result always starts with '/' and Canonical of it
// is itself.
func Canonical(path string) (canon string, changed bool) {
	p, rest := splitQuery(path)
	c, _ := canonicalPath(p)
	canon = c + rest
	return canon, canon != path
}

// PathClass is what a request path is after canonicalization.
type PathClass struct {
	// Canonical is Canonical(path): what a path Sluice forwards must be
	// sent as, so that a provider which cleans paths itself cannot make a
	// metered endpoint of it.
	Canonical string
	// Changed reports that Canonical differs from the path as sent.
	Changed bool
	// Endpoint is the endpoint the canonical path names, ASCII case
	// ignored (a provider that cleans paths may also fold case); for an
	// Azure path, the endpoint its operation is (Azure's
	// /openai/deployments/d/chat/completions is ChatCompletions), or
	// Unknown.
	Endpoint Endpoint
	// Azure reports an Azure OpenAI path, ASCII case ignored:
	// /openai/deployments and anything under it, or /openai/v1/ followed
	// by an endpoint's path (Azure's v1 API). Sluice writes these paths
	// itself for an azure-openai provider; a client never sends them.
	Azure bool
	// Suspicious reports a path that has no one canonical form: a double
	// encoding (%25 followed by two hex digits, which a second decoding
	// would turn into another character, '/' or '.' among them), an
	// encoded or raw control character or space, or a '%' not followed by
	// two hex digits (the last two escaped in Canonical).
	Suspicious bool
}

// ClassifyPath canonicalizes path and says what it names.
func ClassifyPath(path string) PathClass {
	p, rest := splitQuery(path)
	canon, suspicious := canonicalPath(p)
	c := PathClass{Canonical: canon + rest, Suspicious: suspicious}
	c.Changed = c.Canonical != path
	folded := asciiLower(canon)
	c.Endpoint = EndpointFor(folded)
	if op, ok := strings.CutPrefix(folded, "/openai/"); ok {
		switch {
		case op == "deployments" || strings.HasPrefix(op, "deployments/"):
			c.Azure = true
			// /openai/deployments/{deployment}/{operation}
			if parts := strings.SplitN(op, "/", 3); len(parts) == 3 {
				c.Endpoint = EndpointFor("/v1/" + parts[2])
			}
		case strings.HasPrefix(op, "v1/") && EndpointFor("/"+op) != Unknown:
			c.Azure = true
			c.Endpoint = EndpointFor("/" + op)
		}
	}
	return c
}

// Reserved reports a path that is an endpoint Sluice serves, or Azure's
// form of one: no request for it may be forwarded unmetered, whatever
// gateway.unknown_paths says.
func (c PathClass) Reserved() bool { return c.Endpoint != Unknown || c.Azure }

// Want is the path a client should send for c's endpoint, for an error
// message: "/v1/chat/completions", or "" when c names none.
func (c PathClass) Want() string {
	if c.Endpoint == ModelGet {
		return modelsPrefix + "{id}"
	}
	if int(c.Endpoint) < len(endpointPaths) {
		return endpointPaths[c.Endpoint]
	}
	return ""
}

// Dialect is the request's dialect (RequestDialect) by its canonical path,
// ASCII case ignored.
func (c PathClass) Dialect(header func(string) (string, bool)) Dialect {
	p, _ := splitQuery(c.Canonical)
	return RequestDialect(asciiLower(p), header)
}

var endpointPaths = [...]string{"", "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens", "/v1/models"}

// splitQuery cuts path before its first '?' or '#'.
func splitQuery(path string) (p, rest string) {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		return path[:i], path[i:]
	}
	return path, ""
}

// canonicalPath is Canonical of a path without a query, and whether it
// is suspicious (PathClass.Suspicious).
func canonicalPath(p string) (string, bool) {
	suspicious := false
	dec := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '%' && i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]):
			v := unhex(p[i+1])<<4 | unhex(p[i+2])
			switch {
			case v == '/' || v == '\\':
				dec = append(dec, '/')
			case isUnreserved(v):
				dec = append(dec, v)
			default:
				// An escaped delimiter (?, #, ;) splits the path
				// differently for whoever decodes it again.
				if v <= ' ' || v == 0x7f || v == '?' || v == '#' || v == ';' {
					suspicious = true
				}
				dec = append(dec, '%', upperHex[v>>4], upperHex[v&15])
			}
			i += 2
		case c == '%' || c <= ' ' || c == 0x7f:
			// A '%' that starts no escape, or a raw control or space
			// (Envoy refuses those): escaped, so that the canonical
			// form is a valid path and its own canonical form.
			suspicious = true
			dec = append(dec, '%', upperHex[c>>4], upperHex[c&15])
		case c == '\\':
			dec = append(dec, '/')
		default:
			dec = append(dec, c)
		}
	}
	// A double encoding, looked for once decoded so that %25%32F (%252F)
	// is one too.
	for i := 0; i+4 < len(dec); i++ {
		if dec[i] == '%' && dec[i+1] == '2' && dec[i+2] == '5' && isHex(dec[i+3]) && isHex(dec[i+4]) {
			suspicious = true
		}
	}
	segs := make([]string, 0, 8)
	for _, s := range strings.Split(string(dec), "/") {
		if i := strings.IndexByte(s, ';'); i >= 0 {
			s = s[:i]
		}
		switch s {
		case "", ".":
		case "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
		default:
			// A segment that ends in a dot ("completions.") is one some
			// servers read without it.
			if strings.HasSuffix(s, ".") {
				suspicious = true
			}
			segs = append(segs, s)
		}
	}
	if len(segs) > 0 && strings.EqualFold(segs[0], "v1") {
		segs[0] = "v1"
	}
	return "/" + strings.Join(segs, "/"), suspicious
}

const upperHex = "0123456789ABCDEF"

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// isUnreserved: RFC 3986 §2.3.
func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// asciiLower lower-cases ASCII letters only.
func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}
