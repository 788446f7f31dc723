package envoytest

import (
	"errors"
	"strings"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// pathPolicy is what the connection manager does to :path before routing
// and before any HTTP filter sees the request — ext_authz's CheckRequest
// and ext_proc's request headers carry the result, and so does the
// request sent upstream: ConnectionManagerUtility::maybeNormalizePath
// (source/common/http/conn_manager_utility.cc), which
// ConnectionManagerImpl::ActiveStream::decodeHeaders
// (source/common/http/conn_manager_impl.cc) calls before it builds the
// filter chain, answering NormalizePathAction::Reject with a 400 local reply
// whose details are "path_normalization_failed"
// (StreamInfo::ResponseCodeDetails::PathNormalizationFailed). In order:
//
//  1. a '#' in :path rejects the request (runtime guard
//     envoy.reloadable_features.http_reject_path_with_fragment, on by
//     default);
//  2. unless path_with_escaped_slashes_action is KEEP_UNCHANGED,
//     PathUtil::unescapeSlashes (source/common/http/path_utility.cc)
//     replaces %2F, %2f, %5C and %5c in the path (not the query) by '/'
//     and '\'; if it found one, REJECT_REQUEST rejects (the path stays
//     unescaped: a local_reply_config header filter on :path sees that)
//     and UNESCAPE_AND_FORWARD goes on with the unescaped path;
//  3. with normalize_path, PathUtil::canonicalPath: parameters are cut
//     from dot segments ("/..;x" → "/..", stripParametersFromDotSegments,
//     runtime guard envoy.reloadable_features.strip_dotdot_segments_with_parameters,
//     on by default since Envoy 1.39.1/1.38.4, CVE-2026-73551), then the
//     part before '?' is canonicalized by Chromium's url::CanonicalizePath
//     (canonicalPath below); its failure rejects;
//  4. with merge_slashes, PathUtil::mergeSlashes.
//
// Unset, normalize_path takes the runtime key
// http_connection_manager.normalize_path, off (0%) unless Envoy was built
// with ENVOY_NORMALIZE_PATH_BY_DEFAULT (HttpConnectionManagerConfig's
// constructor, source/extensions/filters/network/http_connection_manager/config.cc),
// and IMPLEMENTATION_SPECIFIC_DEFAULT takes the runtime key
// http_connection_manager.path_with_escaped_slashes_action, KEEP_UNCHANGED
// when unset (getPathWithEscapedSlashesActionRuntimeOverride, same file).
// The emulator has no runtime: both take those defaults.
//
// Nothing here touches case ("/V1" stays "/V1": the HCM proto's
// normalize_path says Envoy does no case normalization) or a ';' path
// parameter outside a dot segment ("/a;x" stays, ';' passes
// url::CanonicalizePath). path_normalization_options is
// [#not-implemented-hide:] and never read (envoyrules warns of it). Not
// implemented, so refused when the configuration loads: the
// UNESCAPE_AND_REDIRECT action (a 307 to the unescaped path). A header
// validator (typed_header_validation_config), with which Envoy would
// ignore these three fields, is refused by envoyrules.
type pathPolicy struct {
	normalize, mergeSlashes bool
	escapedSlashes          hcmv3.HttpConnectionManager_PathWithEscapedSlashesAction
}

// detailsPathNormalizationFailed is StreamInfo::ResponseCodeDetails::
// PathNormalizationFailed (envoy/stream_info/stream_info.h).
const detailsPathNormalizationFailed = "path_normalization_failed"

func newPathPolicy(hcm *hcmv3.HttpConnectionManager) (pathPolicy, error) {
	p := pathPolicy{
		normalize:      hcm.GetNormalizePath().GetValue(),
		mergeSlashes:   hcm.GetMergeSlashes(),
		escapedSlashes: hcm.GetPathWithEscapedSlashesAction(),
	}
	switch p.escapedSlashes {
	case hcmv3.HttpConnectionManager_IMPLEMENTATION_SPECIFIC_DEFAULT:
		p.escapedSlashes = hcmv3.HttpConnectionManager_KEEP_UNCHANGED
	case hcmv3.HttpConnectionManager_KEEP_UNCHANGED,
		hcmv3.HttpConnectionManager_REJECT_REQUEST,
		hcmv3.HttpConnectionManager_UNESCAPE_AND_FORWARD:
	default:
		return p, errors.New("path_with_escaped_slashes_action " + p.escapedSlashes.String() + " is not supported by the emulator")
	}
	return p, nil
}

// apply normalizes h's :path in place; false means Envoy rejects the
// request (400, path_normalization_failed).
func (p pathPolicy) apply(h *Headers) bool {
	path, ok := h.Get(":path")
	if !ok {
		return true
	}
	out, ok := p.normalizePath(path)
	h.Set(":path", out)
	return ok
}

// normalizePath is maybeNormalizePath on one :path value: the path it
// leaves, and false for NormalizePathAction::Reject.
func (p pathPolicy) normalizePath(path string) (string, bool) {
	if strings.Contains(path, "#") {
		return path, false
	}
	if p.escapedSlashes != hcmv3.HttpConnectionManager_KEEP_UNCHANGED {
		unescaped, found := unescapeSlashes(path)
		path = unescaped
		if found && p.escapedSlashes == hcmv3.HttpConnectionManager_REJECT_REQUEST {
			return path, false
		}
	}
	if p.normalize {
		canon, ok := canonicalPath(path)
		if !ok {
			return path, false
		}
		path = canon
	}
	if p.mergeSlashes {
		path = mergeSlashes(path)
	}
	return path, true
}

var slashUnescaper = strings.NewReplacer("%2F", "/", "%2f", "/", "%5C", `\`, "%5c", `\`)

// unescapeSlashes is PathUtil::unescapeSlashes: the path before '?' with
// %2F/%2f → '/' and %5C/%5c → '\', and whether it changed.
func unescapeSlashes(path string) (string, bool) {
	p, q := splitQuery(path)
	if !strings.Contains(p, "%") {
		return path, false
	}
	u := slashUnescaper.Replace(p) + q
	return u, len(u) != len(path)
}

// mergeSlashes is PathUtil::mergeSlashes: runs of '/' in the path before
// '?' become one, a leading and a trailing slash kept.
func mergeSlashes(path string) string {
	p, q := splitQuery(path)
	if !strings.Contains(p, "//") {
		return path
	}
	var b strings.Builder
	if strings.HasPrefix(p, "/") {
		b.WriteByte('/')
	}
	var segs []string
	for s := range strings.SplitSeq(p, "/") {
		if s != "" {
			segs = append(segs, s)
		}
	}
	b.WriteString(strings.Join(segs, "/"))
	if strings.HasSuffix(p, "/") {
		b.WriteByte('/')
	}
	return b.String() + q
}

// canonicalPath is PathUtil::canonicalPath: parameters cut from dot
// segments, then the path before '?' canonicalized, the query appended
// unchanged.
func canonicalPath(path string) (string, bool) {
	path = stripParametersFromDotSegments(path)
	p, q := splitQuery(path)
	c, ok := canonicalizePath(p)
	if !ok {
		return path, false
	}
	return c + q, true
}

// stripParametersFromDotSegments is PathUtil::stripParametersFromDotSegments:
// in the path before '?' or '#', a segment starting "..;" becomes ".." and
// one starting ".;" becomes ".".
func stripParametersFromDotSegments(path string) string {
	end := strings.IndexAny(path, "?#")
	if end < 0 {
		end = len(path)
	}
	p, rest := path[:end], path[end:]
	if !strings.Contains(p, ".;") {
		return path
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		switch {
		case strings.HasPrefix(s, "..;"):
			segs[i] = ".."
		case strings.HasPrefix(s, ".;"):
			segs[i] = "."
		}
	}
	return strings.Join(segs, "/") + rest
}

func splitQuery(path string) (p, q string) {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		return path[:i], path[i:]
	}
	return path, ""
}

// Chromium's path canonicalizer, which Envoy links from googleurl
// (url/url_canon_path.cc, DoPath and DoPartialPath, 8-bit input; the
// helpers IsDot, DecodeEscaped and IsURLSlash are in url_parse_internal.h
// and url_canon_internal.h) and calls as url::CanonicalizePath in
// path_utility.cc's canonicalizePath.
const (
	pcPass     = 0
	pcSpecial  = 1
	pcEscape   = 2 | pcSpecial // ESCAPE_BIT | SPECIAL
	pcUnescape = 4
	pcInvalid  = 8 | pcSpecial // INVALID_BIT | SPECIAL
)

// pathCharLookup is kPathCharLookup: how each byte is canonicalized.
var pathCharLookup = func() (t [256]byte) {
	for c := range t {
		t[c] = pcEscape // control characters and every byte from 0x80
	}
	t[0] = pcInvalid
	for c := '0'; c <= '9'; c++ {
		t[c] = pcUnescape
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c], t[c+'a'-'A'] = pcUnescape, pcUnescape
	}
	for _, c := range "-_~" {
		t[c] = pcUnescape
	}
	t['.'] = pcSpecial
	for _, c := range "!$&'()*+,/:;=@[]" {
		t[c] = pcPass
	}
	// ' ', '"', '#', '%', '<', '>', '?', '\\', '^', '`', '{', '|', '}',
	// DEL keep pcEscape; '%' and '\\' are handled before the flag is.
	return t
}()

// isDot is IsDot: the length of a '.' or "%2e"/"%2E" at i, or 0.
func isDot(s string, i int) int {
	if s[i] == '.' {
		return 1
	}
	if s[i] == '%' && i+3 <= len(s) && s[i+1] == '2' && (s[i+2] == 'e' || s[i+2] == 'E') {
		return 3
	}
	return 0
}

func isURLSlash(c byte) bool { return c == '/' || c == '\\' }

// classifyAfterDot is ClassifyAfterDot: what the dot before after is —
// 0 a name, 1 the current directory, 2 the parent — and how many bytes
// after it belong to it.
func classifyAfterDot(s string, after int) (kind, consumed int) {
	if after == len(s) {
		return 1, 0
	}
	if isURLSlash(s[after]) {
		return 1, 1
	}
	if n := isDot(s, after); n > 0 {
		if after+n == len(s) {
			return 2, n
		}
		if isURLSlash(s[after+n]) {
			return 2, n + 1
		}
	}
	return 0, 0
}

// canonicalizePath is url::CanonicalizePath over a whole path: false when
// it meets an invalid character (NUL, raw or escaped), which Envoy answers
// with 400.
func canonicalizePath(p string) (string, bool) {
	out := make([]byte, 0, len(p)+1)
	if p == "" || !isURLSlash(p[0]) {
		out = append(out, '/')
		if p == "" {
			return string(out), true
		}
	}
	const begin = 0 // path_begin_in_output
	ok := true
	for i := 0; i < len(p); i++ {
		c := p[i]
		flags := pathCharLookup[c]
		if flags&pcSpecial == 0 {
			out = append(out, c)
			continue
		}
		if n := isDot(p, i); n > 0 {
			if len(out) > begin && out[len(out)-1] == '/' {
				kind, consumed := classifyAfterDot(p, i+n)
				switch kind {
				case 0:
					out = append(out, '.')
					i += n - 1
				case 1:
					i += n + consumed - 1
				case 2:
					out = backUpToPreviousSlash(out, begin)
					i += n + consumed - 1
				}
			} else {
				out = append(out, '.')
				i += n - 1
			}
			continue
		}
		switch {
		case c == '\\':
			out = append(out, '/')
		case c == '%':
			if v, good := decodeEscaped(p, i); good {
				switch uf := pathCharLookup[v]; {
				case uf&pcUnescape != 0:
					out = append(out, v)
				case uf&pcInvalid == pcInvalid:
					out = append(out, p[i:i+3]...)
					ok = false
				default:
					// Kept escaped, its hex digits' case unchanged.
					out = append(out, p[i:i+3]...)
				}
				i += 2
			} else {
				out = append(out, '%')
			}
		case flags&pcInvalid == pcInvalid:
			out = appendEscaped(out, c)
			ok = false
		case flags&pcEscape == pcEscape:
			out = appendEscaped(out, c)
		}
	}
	return string(out), ok
}

// decodeEscaped is DecodeEscaped: the byte "%XY" at i stands for.
func decodeEscaped(s string, i int) (byte, bool) {
	if i+3 > len(s) {
		return 0, false
	}
	hi, ok1 := unhex(s[i+1])
	lo, ok2 := unhex(s[i+2])
	if !ok1 || !ok2 {
		return 0, false
	}
	return hi<<4 | lo, true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// appendEscaped is AppendEscapedChar: "%XY", upper-case hex.
func appendEscaped(out []byte, c byte) []byte {
	const hex = "0123456789ABCDEF"
	return append(out, '%', hex[c>>4], hex[c&0xf])
}

// backUpToPreviousSlash is BackUpToPreviousSlash: out ends in '/'; drop
// the last segment, never past the path's first slash.
func backUpToPreviousSlash(out []byte, begin int) []byte {
	i := len(out) - 1
	if i == begin {
		return out
	}
	i--
	for out[i] != '/' && i > begin {
		i--
	}
	return out[:i+1]
}
