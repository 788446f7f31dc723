package envoytest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// sluicePaths is the connection manager's path handling on Sluice's
// listener (xds/build.go): RFC 3986 normalization, merged slashes, and an
// escaped slash or backslash refused.
func sluicePaths(h *hcmv3.HttpConnectionManager) {
	h.NormalizePath = wrapperspb.Bool(true)
	h.MergeSlashes = true
	h.PathWithEscapedSlashesAction = hcmv3.HttpConnectionManager_REJECT_REQUEST
}

// What Envoy does to each form of a chat-completions path with Sluice's
// options (conn_manager_utility.cc, maybeNormalizePath; path_utility.cc;
// googleurl's url_canon_path.cc): the path every filter, the router and
// the provider see, or a 400.
var sluicePathCases = []struct {
	in, want string // want "" means rejected (400, path_normalization_failed)
	why      string
}{
	{"/v1/chat%2Fcompletions", "", "unescapeSlashes finds %2F; REJECT_REQUEST → NormalizePathAction::Reject"},
	{"/v1%2Fchat%2Fcompletions", "", "the same, twice"},
	{"/v1/chat%2fcompletions", "", "unescapeSlashes matches %2f too"},
	{"/v1/chat%5Ccompletions", "", "unescapeSlashes matches %5C (and %5c) as it does %2F"},
	{"/v1/chat%5ccompletions", "", "lower-case %5c"},
	{"/v1/chat/completion%73", "/v1/chat/completions", "kPathCharLookup['s'] is UNESCAPE: an escaped unreserved character is decoded"},
	{"/v1/%63hat/completions", "/v1/chat/completions", "likewise"},
	{"//v1//chat/completions", "/v1/chat/completions", "CanonicalizePath keeps '//'; mergeSlashes, after it, merges"},
	{"/v1/./chat/../chat/completions", "/v1/chat/completions", "ClassifyAfterDot: DIRECTORY_CUR and DIRECTORY_UP"},
	{"/v1/chat/%2e%2E/chat/completions", "/v1/chat/completions", "IsDot takes %2e/%2E for '.'"},
	{"/v1/chat/..;x/chat/completions", "/v1/chat/completions", "stripParametersFromDotSegments: '..;x' is '..'"},
	{"/v1/chat/completions/", "/v1/chat/completions/", "a trailing slash stays (mergeSlashes keeps it)"},
	{"/v1/chat/completions;x", "/v1/chat/completions;x", "';' is PASS; a parameter outside a dot segment stays"},
	{"/V1/chat/completions", "/V1/chat/completions", "no case normalization (HCM proto, normalize_path)"},
	{"/v1/chat%252Fcompletions", "/v1/chat%252Fcompletions", "no %2F; %25 decodes to '%', which is ESCAPE: kept as sent"},
	{`/v1/chat\completions`, "/v1/chat/completions", "a raw backslash: DoPartialPath writes '/'"},
	{"/v1/chat/completions?a=%2F//b", "/v1/chat/completions?a=%2F//b", "the query is never touched"},
	{"/v1/x%00y", "", "kPathCharLookup[0] is INVALID: canonicalPath fails"},
	{"/v1/chat/completions#f", "", "a fragment: http_reject_path_with_fragment (on by default)"},
}

func TestPathPolicySluice(t *testing.T) {
	hcm := &hcmv3.HttpConnectionManager{}
	sluicePaths(hcm)
	p, err := newPathPolicy(hcm)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range sluicePathCases {
		got, ok := p.normalizePath(c.in)
		switch {
		case c.want == "" && ok:
			t.Errorf("%q → %q, want rejected (%s)", c.in, got, c.why)
		case c.want != "" && (!ok || got != c.want):
			t.Errorf("%q → %q (ok %v), want %q (%s)", c.in, got, ok, c.want, c.why)
		}
	}
}

// The other options, as Envoy applies them.
func TestPathPolicyOptions(t *testing.T) {
	forward := func(h *hcmv3.HttpConnectionManager) {
		sluicePaths(h)
		h.PathWithEscapedSlashesAction = hcmv3.HttpConnectionManager_UNESCAPE_AND_FORWARD
	}
	cases := []struct {
		name string
		hcm  func(*hcmv3.HttpConnectionManager)
		in   string
		want string // "" rejected
	}{
		// Nothing configured: normalize_path off (runtime default 0%),
		// KEEP_UNCHANGED (runtime default), no merging; only a fragment
		// is refused.
		{"default", nil, "/v1/chat%2Fcompletions", "/v1/chat%2Fcompletions"},
		{"default", nil, "//v1/./chat/../chat/completion%73", "//v1/./chat/../chat/completion%73"},
		{"default", nil, "/v1/chat/completions#f", ""},
		// UNESCAPE_AND_FORWARD unescapes before normalizing, so the
		// unescaped dot segments collapse.
		{"forward", forward, "/v1/chat%2Fcompletions", "/v1/chat/completions"},
		{"forward", forward, "/v1/x%2F..%2Fchat%5Ccompletions", "/v1/chat/completions"},
		// KEEP_UNCHANGED with normalize_path: %2F is not unreserved and
		// stays as sent.
		{"keep", func(h *hcmv3.HttpConnectionManager) {
			sluicePaths(h)
			h.PathWithEscapedSlashesAction = hcmv3.HttpConnectionManager_KEEP_UNCHANGED
		}, "/v1/chat%2Fcompletions", "/v1/chat%2Fcompletions"},
	}
	for _, c := range cases {
		hcm := &hcmv3.HttpConnectionManager{}
		if c.hcm != nil {
			c.hcm(hcm)
		}
		p, err := newPathPolicy(hcm)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := p.normalizePath(c.in)
		if c.want == "" && ok || c.want != "" && (!ok || got != c.want) {
			t.Errorf("%s: %q → %q (ok %v), want %q", c.name, c.in, got, ok, c.want)
		}
	}
}

// Envoy's own vectors, test/common/http/path_utility_test.cc.
func TestPathUtilityVectors(t *testing.T) {
	canon := map[string]string{ // NormalizeValidPaths, NormalizeCasePath, AlreadyNormalPaths
		"/xyz": "/xyz", "/x/y/z": "/x/y/z",
		"/a/b/../c": "/a/c", "/a/b/./c": "/a/b/c", "a/b/../c": "/a/c", "/a/b/../../../../c": "/c",
		`/a/..\c`: "/c", "/%c0%af": "/%c0%af", "/%5c%25": "/%5c%25", "/a/b/%2E%2E/c": "/a/c",
		"/xyz/..;foo=bar/abc": "/abc", "/..;foo=bar/abc": "/abc", "/xyz/..;foo=bar": "/",
		"/xyz/.;foo=bar/abc": "/xyz/abc", "/.;foo=bar/abc": "/abc", "/xyz/.;foo=bar": "/xyz/",
		"/xyz/..;foo=bar/.;v1=2,v2=3/abc": "/abc", "/..;foo=bar/abc/.;mmm": "/abc/",
		"/.;aaa/..;foo=bar/abc/.;mmm": "/abc/", "/xyz/..;foo=bar/.;fff=zzz": "/",
		"/xyz/..;foo=bar/.;fff=zzz?blah=woops":             "/?blah=woops",
		"/xyz/..;foo=bar/.;fff=zzz/remain;blah-bluh?query": "/remain;blah-bluh?query",
		"/A/B/C": "/A/B/C", "/a/b/%2e%2e/c": "/a/c", "/a/%2F%2f/c": "/a/%2F%2f/c",
	}
	for in, want := range canon {
		if got, ok := canonicalPath(in); !ok || got != want {
			t.Errorf("canonicalPath(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"/xyz/.%00../abc", "/xyz/%00.%00./abc", "/xyz/AAAAA%%0000/abc"} { // InvalidPaths
		if got, ok := canonicalPath(in); ok {
			t.Errorf("canonicalPath(%q) = %q, want a failure", in, got)
		}
	}
	merge := map[string]string{ // MergeSlashes
		"": "", "a//b/c": "a/b/c", "/a//b/c/": "/a/b/c/", "a//b/c/": "a/b/c/", "/a": "/a",
		"//a/b/c": "/a/b/c", "/a/b/c//": "/a/b/c/", "/a///b/c": "/a/b/c", "/a////b/c": "/a/b/c",
		"/a//b?a=///c": "/a/b?a=///c", "/a//b?": "/a/b?", "//a/?b": "/a/?b",
	}
	for in, want := range merge {
		if got := mergeSlashes(in); got != want {
			t.Errorf("mergeSlashes(%q) = %q, want %q", in, got, want)
		}
	}
	unescape := []struct { // UnescapeSlashes
		in, want string
		found    bool
	}{
		{"", "", false}, {"%2f%2F", "//", true}, {"/a%2Fb%2fc/", "/a/b/c/", true}, {"%2b", "%2b", false},
		{"/a/b/c", "/a/b/c", false}, {"%2", "%2", false}, {"%", "%", false}, {"/abc%2", "/abc%2", false},
		{"foo%", "foo%", false}, {"/a%2F", "/a/", true}, {"%2fa/", "/a/", true}, {"%%2fa/", "%/a/", true},
		{"%2%2fa/", "%2/a/", true}, {"%5c%5C", `\\`, true}, {"/a%5Cb%5cc/", `/a\b\c/`, true},
		{"/x/%2E%2e/z%2f%2Fabc%5C../def", `/x/%2E%2e/z//abc\../def`, true},
		{"%2fa%5Cb%2fc%5c?%2fabcd%5C%%2f%", `/a\b/c\?%2fabcd%5C%%2f%`, true},
	}
	for _, c := range unescape {
		if got, found := unescapeSlashes(c.in); got != c.want || found != c.found {
			t.Errorf("unescapeSlashes(%q) = %q, %v; want %q, %v", c.in, got, found, c.want, c.found)
		}
	}
}

func TestPathPolicyRefused(t *testing.T) {
	hcm := &hcmv3.HttpConnectionManager{PathWithEscapedSlashesAction: hcmv3.HttpConnectionManager_UNESCAPE_AND_REDIRECT}
	if _, err := newPathPolicy(hcm); err == nil || !strings.Contains(err.Error(), "UNESCAPE_AND_REDIRECT") {
		t.Errorf("UNESCAPE_AND_REDIRECT: err %v, want refused", err)
	}
}

// rawGet sends target as the request-target of an HTTP/1.1 GET, byte for
// byte (Go's client would re-escape it).
func rawGet(t *testing.T, base, target string) (*http.Response, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n", target)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s: %v", target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// Through the listener: the connection manager normalizes before any
// filter runs, so ext_authz's CheckRequest, ext_proc's request headers
// and the upstream all carry the same path; a rejected path reaches no
// filter and no upstream, and its 400 goes through local_reply_config,
// whose :path header filter sees the path as unescapeSlashes left it.
func TestPathNormalizationThroughListener(t *testing.T) {
	c := startLRChain(t, lrOpts{
		ep:     epc(),
		script: func(c *procConn) error { return c.continueAll() },
		hcm: func(h *hcmv3.HttpConnectionManager) {
			sluicePaths(h)
			h.LocalReplyConfig = &hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{
				{Filter: &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_AndFilter{AndFilter: &accesslogv3.AndFilter{
					Filters: []*accesslogv3.AccessLogFilter{celFilter(t, "response.code_details == 'path_normalization_failed'"), pathRegexFilter(`/v1/messages`)},
				}}}, BodyFormatOverride: textBody(`{"anthropic":400}`, "application/json")},
				{Filter: celFilter(t, "response.code_details == 'path_normalization_failed'"), BodyFormatOverride: textBody(`{"openai":400}`, "application/json")},
			}}
		},
	})
	n := 0
	for _, tc := range sluicePathCases {
		if tc.in == `/v1/chat\completions` || strings.Contains(tc.in, "#") {
			continue // Go's HTTP server refuses these request-targets before the emulator sees them
		}
		resp, body := rawGet(t, c.base, tc.in)
		n++
		x := waitExchanges(t, c.e, n)[n-1]
		if tc.want == "" {
			if resp.StatusCode != 400 || body != `{"openai":400}` || resp.Header.Get("content-type") != "application/json" {
				t.Errorf("%q: %d %q %q, want 400 with the mapped JSON body", tc.in, resp.StatusCode, resp.Header.Get("content-type"), body)
			}
			if x.Details != detailsPathNormalizationFailed || len(x.Authz) != 0 || len(x.ExtProc) != 0 || x.Upstream != nil {
				t.Errorf("%q: details %q, %d checks, %d ext_proc events, upstream %v; want no filter and no upstream", tc.in, x.Details, len(x.Authz), len(x.ExtProc), x.Upstream)
			}
			continue
		}
		if resp.StatusCode != 200 {
			t.Errorf("%q: status %d, want 200; body %q", tc.in, resp.StatusCode, body)
			continue
		}
		if len(x.Authz) != 1 {
			t.Fatalf("%q: %d checks", tc.in, len(x.Authz))
		}
		if got := x.Authz[0].Request.GetAttributes().GetRequest().GetHttp().GetPath(); got != tc.want {
			t.Errorf("%q: CheckRequest path %q, want %q", tc.in, got, tc.want)
		}
		if got := extProcPath(x); got != tc.want {
			t.Errorf("%q: ext_proc :path %q, want %q", tc.in, got, tc.want)
		}
		if x.Upstream == nil || x.Upstream.Path != tc.want {
			t.Errorf("%q: upstream %+v, want path %q", tc.in, x.Upstream, tc.want)
		}
	}
	// On Anthropic's paths the mapper's :path filter sees the unescaped
	// path: unescapeSlashes rewrote the header before REJECT_REQUEST.
	if resp, body := rawGet(t, c.base, "/v1%2Fmessages"); resp.StatusCode != 400 || body != `{"anthropic":400}` {
		t.Errorf("/v1%%2Fmessages: %d %q, want 400 {\"anthropic\":400}", resp.StatusCode, body)
	}
}

// extProcPath is the :path of the first request-headers message an
// ext_proc server got.
func extProcPath(x *Exchange) string {
	for _, ev := range x.ExtProc {
		for _, h := range ev.Sent.GetRequestHeaders().GetHeaders().GetHeaders() {
			if h.GetKey() == ":path" {
				if h.GetValue() != "" {
					return h.GetValue()
				}
				return string(h.GetRawValue())
			}
		}
	}
	return ""
}
