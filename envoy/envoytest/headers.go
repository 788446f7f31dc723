package envoytest

import (
	"net/http"
	"strings"
)

// HeaderEntry is one header as Envoy holds it: a lower-case key and a
// value. Repeated headers are repeated entries.
type HeaderEntry struct {
	Key, Value string
}

// Headers is an ordered HTTP header map as Envoy holds it: lower-case
// keys, pseudo-headers (:method, :path, :scheme, :authority, :status)
// first. It is not safe for concurrent use; a stream passes it from filter
// to filter.
type Headers struct {
	entries []HeaderEntry
}

// NewHeaders returns a map holding kv pairs in order.
func NewHeaders(kv ...string) *Headers {
	h := &Headers{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// inlineJoined are the request headers Envoy's header map holds "inline"
// (INLINE_REQ_HEADERS and INLINE_REQ_RESP_HEADERS in
// source/common/http/header_map_impl.h): when they repeat, the codec merges
// them into one entry with "," (cookie with "; "). Any other repeated
// header — authorization, accept, x-api-key — stays a repeated entry.
var inlineJoined = map[string]string{
	"content-length": ",", "connection": ",", "content-type": ",", "keep-alive": ",",
	"proxy-connection": ",", "proxy-status": ",", "x-request-id": ",", "transfer-encoding": ",",
	"upgrade": ",", "via": ",", "x-client-trace-id": ",", "expect": ",",
	"x-forwarded-client-cert": ",", "x-forwarded-for": ",", "x-forwarded-host": ",",
	"x-forwarded-proto": ",", "grpc-timeout": ",", "te": ",", "user-agent": ",",
	"cookie": "; ",
}

// fromRequest builds the request header map Envoy's HTTP/1 and HTTP/2
// codecs produce: pseudo-headers, then the rest lower-cased, inline
// headers merged.
func fromRequest(r *http.Request, scheme string) *Headers {
	h := &Headers{}
	h.Add(":method", r.Method)
	h.Add(":scheme", scheme)
	h.Add(":authority", r.Host)
	// The request-target as the client sent it (the :path of HTTP/2):
	// Envoy's codecs hand it over unparsed, so the connection manager's
	// path normalization (path.go) is the only rewrite it gets. Go's
	// URL.RequestURI would re-escape it.
	path := r.RequestURI
	if !strings.HasPrefix(path, "/") {
		path = r.URL.RequestURI()
	}
	h.Add(":path", path)
	for k, vs := range r.Header {
		k = strings.ToLower(k)
		if k == "host" {
			continue
		}
		if sep, ok := inlineJoined[k]; ok || strings.HasPrefix(k, "x-envoy-") {
			if !ok {
				sep = ","
			}
			h.Add(k, strings.Join(vs, sep))
			continue
		}
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	return h
}

// Get returns the first value of key.
func (h *Headers) Get(key string) (string, bool) {
	for _, e := range h.entries {
		if e.Key == key {
			return e.Value, true
		}
	}
	return "", false
}

// Value returns the first value of key, or "".
func (h *Headers) Value(key string) string { v, _ := h.Get(key); return v }

// Values returns every value of key.
func (h *Headers) Values(key string) []string {
	var vs []string
	for _, e := range h.entries {
		if e.Key == key {
			vs = append(vs, e.Value)
		}
	}
	return vs
}

// Joined returns every value of key joined with ",", as Envoy presents a
// repeated header to ext_authz.
func (h *Headers) Joined(key string) (string, bool) {
	vs := h.Values(key)
	if len(vs) == 0 {
		return "", false
	}
	return strings.Join(vs, ","), true
}

// Set replaces every value of key with v (Envoy's setCopy), keeping the
// position of the first entry, or adding at the end.
func (h *Headers) Set(key, v string) {
	key = strings.ToLower(key)
	for i, e := range h.entries {
		if e.Key == key {
			h.entries[i].Value = v
			h.removeFrom(key, i+1)
			return
		}
	}
	h.Add(key, v)
}

// Add appends an entry (Envoy's addCopy). Pseudo-headers go before the
// first regular header.
func (h *Headers) Add(key, v string) {
	key = strings.ToLower(key)
	e := HeaderEntry{key, v}
	if strings.HasPrefix(key, ":") {
		for i, x := range h.entries {
			if !strings.HasPrefix(x.Key, ":") {
				h.entries = append(h.entries[:i], append([]HeaderEntry{e}, h.entries[i:]...)...)
				return
			}
		}
	}
	h.entries = append(h.entries, e)
}

// AppendCopy appends v to the existing value with "," (Envoy's appendCopy);
// it does nothing when key is absent.
func (h *Headers) AppendCopy(key, v string) {
	for i, e := range h.entries {
		if e.Key == key {
			h.entries[i].Value = e.Value + "," + v
			return
		}
	}
}

// Del removes every entry of key.
func (h *Headers) Del(key string) { h.removeFrom(strings.ToLower(key), 0) }

func (h *Headers) removeFrom(key string, from int) {
	out := h.entries[:from]
	for _, e := range h.entries[from:] {
		if e.Key != key {
			out = append(out, e)
		}
	}
	h.entries = out
}

// Entries returns a copy of the entries in order.
func (h *Headers) Entries() []HeaderEntry { return append([]HeaderEntry(nil), h.entries...) }

// Len reports the number of entries.
func (h *Headers) Len() int { return len(h.entries) }

// ByteSize is the sum of key and value lengths, Envoy's header-size measure.
func (h *Headers) ByteSize() int {
	n := 0
	for _, e := range h.entries {
		n += len(e.Key) + len(e.Value)
	}
	return n
}

// Clone returns a deep copy.
func (h *Headers) Clone() *Headers { return &Headers{entries: h.Entries()} }

// toHTTP copies the regular (non-pseudo) headers into hh.
func (h *Headers) toHTTP(hh http.Header) {
	for _, e := range h.entries {
		if !strings.HasPrefix(e.Key, ":") {
			hh[http.CanonicalHeaderKey(e.Key)] = append(hh[http.CanonicalHeaderKey(e.Key)], e.Value)
		}
	}
}
