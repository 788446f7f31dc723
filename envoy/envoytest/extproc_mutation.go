package envoytest

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"

	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Header conversion, header mutation (EP/mutation_utils.cc and
// filters/common/mutation_rules/mutation_rules.cc) and attributes
// (EP/matching_utils.cc).

// headersToProto converts h as MutationUtils::headersToProto does: key and
// raw_value only, in map order, filtered by forward_rules.
func (f *extProcFilter) headersToProto(h *Headers) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{}
	for _, e := range h.Entries() {
		if f.canForward(e.Key) {
			hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: e.Key, RawValue: []byte(e.Value)})
		}
	}
	return hm
}

// canForward is MutationUtils::headerCanBeForwarded.
func (f *extProcFilter) canForward(key string) bool {
	in := func(ms []stringMatcher) bool {
		for _, m := range ms {
			if m(key) {
				return true
			}
		}
		return false
	}
	if len(f.disallowed) > 0 && in(f.disallowed) {
		return false
	}
	return len(f.allowed) == 0 || in(f.allowed)
}

// mutationChecker is Filters::Common::MutationRules::Checker.
type mutationChecker struct {
	rules             *mutationrulesv3.HeaderMutationRules
	allowRe, disallow *regexp.Regexp
}

type checkOp int

const (
	opSet checkOp = iota
	opAppend
	opRemove
)

type checkResult int

const (
	checkOK checkResult = iota
	checkIgnore
	checkFail
)

func newMutationChecker(r *mutationrulesv3.HeaderMutationRules) (*mutationChecker, error) {
	c := &mutationChecker{rules: r}
	var err error
	if e := r.GetAllowExpression(); e != nil {
		if c.allowRe, err = regexp.Compile(`^(?:` + e.GetRegex() + `)$`); err != nil {
			return nil, fmt.Errorf("allow_expression: %w", err)
		}
	}
	if e := r.GetDisallowExpression(); e != nil {
		if c.disallow, err = regexp.Compile(`^(?:` + e.GetRegex() + `)$`); err != nil {
			return nil, fmt.Errorf("disallow_expression: %w", err)
		}
	}
	return c, nil
}

func (c *mutationChecker) check(op checkOp, name, value string) checkResult {
	if c.allowed(op, name) && (op == opRemove || validMutationValue(name, value)) {
		return checkOK
	}
	if c.rules.GetDisallowIsError().GetValue() {
		return checkFail
	}
	return checkIgnore
}

func (c *mutationChecker) allowed(op checkOp, name string) bool {
	r := c.rules
	if op == opRemove && (strings.HasPrefix(name, ":") || name == "host") {
		return false // never: HeaderUtility::isModifiableHeader
	}
	if c.disallow != nil && c.disallow.MatchString(name) {
		return false
	}
	if c.allowRe != nil && c.allowRe.MatchString(name) {
		return true
	}
	if r.GetDisallowAll().GetValue() {
		return false
	}
	if !r.GetAllowAllRouting().GetValue() {
		switch name {
		case "host", ":authority", ":method", ":scheme":
			return false
		}
	}
	if strings.HasPrefix(name, ":") && (op == opAppend || r.GetDisallowSystem().GetValue()) {
		return false
	}
	if !r.GetAllowEnvoy().GetValue() && strings.HasPrefix(name, "x-envoy") {
		return false
	}
	return true
}

// validMutationValue is Checker::isValidValue.
func validMutationValue(name, value string) bool {
	if !strings.HasPrefix(name, ":") && !validHeaderValue(value) {
		return false
	}
	switch name {
	case "host", ":authority":
		return validAuthority(value)
	case ":scheme":
		return strings.EqualFold(value, "http") || strings.EqualFold(value, "https")
	case ":status":
		n, err := strconv.ParseUint(value, 10, 32)
		return err == nil && n >= 200
	}
	return true
}

// validHeaderName is HeaderUtility::headerNameIsValid: an RFC 9110 token,
// optionally preceded by ':' for pseudo-headers.
func validHeaderName(k string) bool {
	k = strings.TrimPrefix(k, ":")
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue is HeaderUtility::headerValueIsValid (obs-text allowed):
// no NUL, CR, LF or other control characters except HTAB.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func validAuthority(v string) bool {
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("-._~!$&'()*+,;=:@[]%", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// errMutation is an InvalidArgument/Internal status of Envoy's mutation
// code: it always ends in a status_on_error local reply, never fail-open.
type errMutation string

func (e errMutation) Error() string { return string(e) }

// errSpurious is Envoy's FailedPrecondition "spurious message".
type errSpurious string

func (e errSpurious) Error() string { return string(e) }

// applyHeaderMutations is MutationUtils::applyHeaderMutations. Refused
// mutations are counted in f.rejected (rejected_header_mutations).
func (f *extProcFilter) applyHeaderMutations(m *extprocsvc.HeaderMutation, h *Headers, replacing, removeContentLength bool) error {
	rejected := int64(0)
	defer func() { f.rejected.Add(rejected) }()
	if len(m.GetRemoveHeaders()) > extProcMaxHeaders || len(m.GetSetHeaders()) > extProcMaxHeaders {
		rejected++
		return errMutation(fmt.Sprintf("Header mutation remove header count %d or set header count %d exceed the HCM header countlimit %d",
			len(m.GetRemoveHeaders()), len(m.GetSetHeaders()), extProcMaxHeaders))
	}
	for _, name := range m.GetRemoveHeaders() {
		if !validHeaderName(name) {
			rejected++
			return errMutation("Invalid character in remove_headers mutation.")
		}
		lname := strings.ToLower(name)
		switch f.checker.check(opRemove, lname, "") {
		case checkOK:
			h.Del(lname)
		case checkIgnore:
			rejected++
		case checkFail:
			rejected++
			return errMutation("Invalid attempt to remove " + lname)
		}
	}
	for _, sh := range m.GetSetHeaders() {
		hv := sh.GetHeader()
		if hv == nil {
			continue
		}
		if removeContentLength && strings.EqualFold(hv.GetKey(), "content-length") {
			continue
		}
		if hv.GetValue() != "" && len(hv.GetRawValue()) > 0 {
			rejected++
			return errMutation("Only one of value or raw_value in the HeaderValue message should be set.")
		}
		// Envoy reads raw_value only: a server that sets only value gets an
		// empty header.
		val := string(hv.GetRawValue())
		if !validHeaderName(hv.GetKey()) || !validHeaderValue(val) {
			rejected++
			return errMutation("Invalid character in set_headers mutation.")
		}
		lname := strings.ToLower(hv.GetKey())
		appendIt := sh.GetAppend().GetValue() // append_action is ignored
		op := opSet
		if _, present := h.Get(lname); appendIt && present {
			op = opAppend
		}
		res := f.checker.check(op, lname, val)
		if replacing && lname == ":method" {
			res = checkOK // CONTINUE_AND_REPLACE may change :method
		}
		switch res {
		case checkOK:
			if appendIt {
				addCopy(h, lname, val)
			} else {
				h.Set(lname, val)
			}
		case checkIgnore:
			rejected++
		case checkFail:
			rejected++
			return errMutation("Invalid attempt to modify " + lname)
		}
	}
	if h.ByteSize() > extProcMaxHeadersBytes || h.Len() > extProcMaxHeaders {
		rejected++
		return errMutation(fmt.Sprintf("Header mutation causes end result header count %d or header size %d bytes, exceeding the count limit %d or the size limit %d kilobytes",
			h.Len(), h.ByteSize(), extProcMaxHeaders, extProcMaxHeadersBytes/1024))
	}
	return nil
}

// addCopy is HeaderMapImpl::addCopy: an inline header that exists gets the
// value appended with its delimiter; any other header gets a new entry.
func addCopy(h *Headers, key, value string) {
	if sep, ok := inlineJoined[key]; ok {
		if cur, present := h.Get(key); present {
			if cur != "" {
				value = cur + sep + value
			}
			h.Set(key, value)
			return
		}
	}
	h.Add(key, value)
}

// applyBodyMutation is MutationUtils::applyBodyMutations.
func applyBodyMutation(m *extprocsvc.BodyMutation, body []byte) []byte {
	switch b := m.GetMutation().(type) {
	case *extprocsvc.BodyMutation_ClearBody:
		if b.ClearBody {
			return []byte{}
		}
	case *extprocsvc.BodyMutation_Body:
		return append([]byte{}, b.Body...)
	}
	return body
}

// replaceSpaces is StringUtil::replaceAllEmptySpace, applied to local
// reply details.
func replaceSpaces(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case ' ', '\t', '\f', '\v', '\n', '\r':
			return '_'
		}
		return r
	}, s)
}

// attrEval evaluates one request or response attribute on a stream; ok
// false when it does not evaluate (an absent header, no upstream host),
// which Envoy skips (ExpressionManager::evaluateAttributes in
// EP/matching_utils.cc).
type attrEval func(x *epInstance) (*structpb.Value, bool)

// compileAttribute is the CEL the emulator evaluates for request_attributes
// and response_attributes, one fixed form per name:
//
//	request.path request.url_path request.host request.scheme
//	request.method request.id request.protocol request.query
//	request.referer request.useragent request.headers['name']
//	response.code response.headers['name']
//	source.address source.port destination.address destination.port
//	xds.route_name xds.virtual_host_name
//	xds.upstream_host_metadata.filter_metadata['ns']['key']
//
// (source/extensions/filters/common/expr/context.cc). Strings stay
// strings, ports and codes become numbers; a metadata value is the
// Struct value's — a string stays a string, a bool a bool, a number is
// printed (EP/matching_utils.cc sends a CEL double through print), a list,
// struct or null does not evaluate here. Any other expression is refused
// when the configuration loads (ok false).
func compileAttribute(name string) (attrEval, bool) {
	str := func(v string) (*structpb.Value, bool) { return structpb.NewStringValue(v), true }
	hdr := func(h *Headers, k string) (*structpb.Value, bool) {
		if h == nil {
			return nil, false
		}
		if v, ok := h.Joined(k); ok {
			return str(v)
		}
		return nil, false
	}
	if k, ok := headerIndex(name, "request.headers"); ok {
		return func(x *epInstance) (*structpb.Value, bool) { return hdr(x.s.reqHeaders, k) }, true
	}
	if k, ok := headerIndex(name, "response.headers"); ok {
		return func(x *epInstance) (*structpb.Value, bool) { return hdr(x.enc.hdr, k) }, true
	}
	if ns, key, ok := hostMetadataIndex(name); ok {
		// UpstreamInfo's upstreamHost()->metadata(): the host the stream's
		// (last) UpstreamRequest was created for; in an upstream filter
		// chain, the attempt's (upstream_request.cc sets it on the stream
		// info before the upstream filters run).
		return func(x *epInstance) (*structpb.Value, bool) {
			h := x.s.currentUpstreamHost()
			if h == nil {
				return nil, false
			}
			v, ok := h.metadata.GetFilterMetadata()[ns].GetFields()[key]
			if !ok {
				return nil, false
			}
			switch k := v.GetKind().(type) {
			case *structpb.Value_StringValue:
				return str(k.StringValue)
			case *structpb.Value_BoolValue:
				return structpb.NewBoolValue(k.BoolValue), true
			case *structpb.Value_NumberValue:
				return str(strconv.FormatFloat(k.NumberValue, 'g', 6, 64))
			}
			return nil, false
		}, true
	}
	path := func(x *epInstance) string { return x.s.reqHeaders.Value(":path") }
	switch name {
	case "request.path":
		return func(x *epInstance) (*structpb.Value, bool) { return str(path(x)) }, true
	case "request.url_path":
		return func(x *epInstance) (*structpb.Value, bool) { p, _, _ := strings.Cut(path(x), "?"); return str(p) }, true
	case "request.query":
		return func(x *epInstance) (*structpb.Value, bool) { _, q, _ := strings.Cut(path(x), "?"); return str(q) }, true
	case "request.host":
		return func(x *epInstance) (*structpb.Value, bool) { return str(x.s.reqHeaders.Value(":authority")) }, true
	case "request.scheme":
		return func(x *epInstance) (*structpb.Value, bool) { return str(x.s.reqHeaders.Value(":scheme")) }, true
	case "request.method":
		return func(x *epInstance) (*structpb.Value, bool) { return str(x.s.reqHeaders.Value(":method")) }, true
	case "request.id":
		return func(x *epInstance) (*structpb.Value, bool) { return hdr(x.s.reqHeaders, "x-request-id") }, true
	case "request.referer":
		return func(x *epInstance) (*structpb.Value, bool) { return hdr(x.s.reqHeaders, "referer") }, true
	case "request.useragent":
		return func(x *epInstance) (*structpb.Value, bool) { return hdr(x.s.reqHeaders, "user-agent") }, true
	case "request.protocol":
		return func(x *epInstance) (*structpb.Value, bool) { return str(x.s.downstream.protocol) }, true
	case "response.code":
		return func(x *epInstance) (*structpb.Value, bool) {
			if x.enc.hdr == nil {
				return nil, false
			}
			n, err := strconv.Atoi(x.enc.hdr.Value(":status"))
			if err != nil {
				return nil, false
			}
			return structpb.NewNumberValue(float64(n)), true
		}, true
	case "source.address":
		return func(x *epInstance) (*structpb.Value, bool) {
			d := x.s.downstream
			return str(net.JoinHostPort(d.remoteIP, strconv.Itoa(int(d.remotePort))))
		}, true
	case "source.port":
		return func(x *epInstance) (*structpb.Value, bool) {
			return structpb.NewNumberValue(float64(x.s.downstream.remotePort)), true
		}, true
	case "destination.address":
		return func(x *epInstance) (*structpb.Value, bool) {
			d := x.s.downstream
			return str(net.JoinHostPort(d.localIP, strconv.Itoa(int(d.localPort))))
		}, true
	case "destination.port":
		return func(x *epInstance) (*structpb.Value, bool) {
			return structpb.NewNumberValue(float64(x.s.downstream.localPort)), true
		}, true
	case "xds.route_name":
		return func(x *epInstance) (*structpb.Value, bool) {
			if rt := x.s.currentRoute(); rt != nil {
				return str(rt.name)
			}
			return nil, false
		}, true
	case "xds.virtual_host_name":
		return func(x *epInstance) (*structpb.Value, bool) {
			if rt := x.s.currentRoute(); rt != nil {
				return str(rt.vhost)
			}
			return nil, false
		}, true
	}
	return nil, false
}

// hostMetadataIndex parses
// xds.upstream_host_metadata.filter_metadata['ns']['key'] (either quote).
func hostMetadataIndex(name string) (ns, key string, ok bool) {
	rest, ok := strings.CutPrefix(name, "xds.upstream_host_metadata.filter_metadata")
	if !ok {
		return "", "", false
	}
	ns, rest, ok = quotedIndex(rest)
	if !ok {
		return "", "", false
	}
	key, rest, ok = quotedIndex(rest)
	if !ok || rest != "" {
		return "", "", false
	}
	return ns, key, true
}

// quotedIndex parses a leading ['x'] or ["x"] (no escapes) and returns x
// and what follows.
func quotedIndex(s string) (string, string, bool) {
	if len(s) < 4 || s[0] != '[' || (s[1] != '\'' && s[1] != '"') {
		return "", "", false
	}
	q := s[1]
	end := strings.IndexByte(s[2:], q)
	if end < 0 || len(s) < 2+end+2 || s[2+end+1] != ']' {
		return "", "", false
	}
	v := s[2 : 2+end]
	if strings.ContainsAny(v, "\\'\"") {
		return "", "", false
	}
	return v, s[2+end+2:], true
}

// headerIndex parses `<prefix>['name']` or `<prefix>["name"]`.
func headerIndex(name, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(name, prefix+"[")
	if !ok || !strings.HasSuffix(rest, "]") || len(rest) < 3 {
		return "", false
	}
	rest = rest[:len(rest)-1]
	q := rest[0]
	if (q != '\'' && q != '"') || rest[len(rest)-1] != q || len(rest) < 2 {
		return "", false
	}
	return strings.ToLower(rest[1 : len(rest)-1]), true
}

// grpcStatusForHTTP is Grpc::Utility::httpToGrpcStatus.
func grpcStatusForHTTP(code int) uint32 {
	switch code {
	case 400:
		return 13
	case 401:
		return 16
	case 403:
		return 7
	case 404:
		return 12
	case 429, 502, 503, 504:
		return 14
	}
	return 2
}

// percentEncode is Grpc::Utility::PercentEncoding::encode for grpc-message.
func percentEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < ' ' || c > '~' || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
