package envoytest

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	celv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/filters/cel/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// The connection manager's local_reply_config, as Envoy applies it to
// every local reply — its own (router, buffer limits), and those ext_authz
// and ext_proc send — before the reply's headers are encoded
// (source/common/local_reply/local_reply.cc, LocalReplyImpl::rewrite;
// source/common/http/utility.cc, Utility::sendLocalReply):
//
//   - the mappers are tried in order; the first whose filter matches
//     (AccessLog::FilterFactory filters, evaluated on the request headers
//     and the stream info, whose response-code details are already set)
//     applies, and no other;
//   - its body_format_override formats the body; when the body changed
//     and no mapper header changed the content-type, the formatter's
//     content type replaces the reply's (its content_type, else
//     text/plain for text_format);
//   - without a match the body is %LOCAL_REPLY_BODY% (unchanged) and a
//     reply with a body and no content-type gets text/plain;
//   - a reply whose body is empty loses content-type and content-length.
//
// The emulator implements the subset Sluice's listener uses
// (chain.LocalReply) and refuses the rest when the configuration loads:
// mappers with a filter and a body_format_override whose text_format has
// no command operator ('%') and whatever content_type; filters and_filter,
// header_filter (a string_match exact, prefix or safe_regex, no inversion)
// and the CEL extension filter with the expressions
// `response.code_details == '…'` and
// `response.code_details.startsWith('…')`, each optionally followed by
// `&& response.code == <status>`. Not implemented, so refused:
// body_format, a mapper's status_code, body and headers_to_add, json_format,
// text_format_source, formatters, every other filter and CEL expression.
type localReplyConfig struct {
	mappers []replyMapper
}

type replyMapper struct {
	match       replyFilter
	body        string
	contentType string
}

// replyFilter is an access-log filter evaluated on a local reply: the
// request's headers, the reply's response-code details and status.
type replyFilter func(req *Headers, details string, status int) bool

const celFilterName = "envoy.access_loggers.extension_filters.cel"

func newLocalReplyConfig(c *hcmv3.LocalReplyConfig) (*localReplyConfig, error) {
	if c == nil {
		return nil, nil
	}
	if c.GetBodyFormat() != nil {
		return nil, errors.New("local_reply_config.body_format is not supported by the emulator")
	}
	lr := &localReplyConfig{}
	for i, m := range c.GetMappers() {
		rm, err := newReplyMapper(m)
		if err != nil {
			return nil, fmt.Errorf("local_reply_config.mappers[%d]: %w", i, err)
		}
		lr.mappers = append(lr.mappers, rm)
	}
	return lr, nil
}

func newReplyMapper(m *hcmv3.ResponseMapper) (replyMapper, error) {
	if m.GetStatusCode() != nil || m.GetBody() != nil || len(m.GetHeadersToAdd()) > 0 {
		return replyMapper{}, errors.New("status_code, body and headers_to_add are not supported by the emulator")
	}
	f, err := newReplyFilter(m.GetFilter())
	if err != nil {
		return replyMapper{}, fmt.Errorf("filter: %w", err)
	}
	bf := m.GetBodyFormatOverride()
	if bf == nil {
		return replyMapper{}, errors.New("the emulator needs body_format_override (a mapper without one changes nothing it implements)")
	}
	if bf.GetOmitEmptyValues() || len(bf.GetFormatters()) > 0 || bf.GetJsonFormatOptions() != nil {
		return replyMapper{}, errors.New("body_format_override: omit_empty_values, formatters and json_format_options are not supported by the emulator")
	}
	tf, ok := bf.GetFormat().(*corev3.SubstitutionFormatString_TextFormat)
	if !ok {
		return replyMapper{}, errors.New("body_format_override: only text_format is supported by the emulator")
	}
	if strings.Contains(tf.TextFormat, "%") {
		return replyMapper{}, errors.New("body_format_override.text_format: command operators ('%') are not supported by the emulator")
	}
	ct := bf.GetContentType()
	if ct == "" {
		ct = "text/plain" // BodyFormatter: text/plain unless json_format
	}
	return replyMapper{match: f, body: tf.TextFormat, contentType: ct}, nil
}

func newReplyFilter(f *accesslogv3.AccessLogFilter) (replyFilter, error) {
	switch s := f.GetFilterSpecifier().(type) {
	case *accesslogv3.AccessLogFilter_AndFilter:
		var fs []replyFilter
		for i, sub := range s.AndFilter.GetFilters() {
			rf, err := newReplyFilter(sub)
			if err != nil {
				return nil, fmt.Errorf("and_filter.filters[%d]: %w", i, err)
			}
			fs = append(fs, rf)
		}
		return func(req *Headers, details string, status int) bool {
			for _, rf := range fs {
				if !rf(req, details, status) {
					return false
				}
			}
			return true
		}, nil
	case *accesslogv3.AccessLogFilter_HeaderFilter:
		return newReplyHeaderFilter(s.HeaderFilter.GetHeader())
	case *accesslogv3.AccessLogFilter_ExtensionFilter:
		return newCELFilter(s.ExtensionFilter)
	case nil:
		return nil, errors.New("missing")
	}
	return nil, fmt.Errorf("%T is not supported by the emulator (and_filter, header_filter and the CEL extension filter are)", f.GetFilterSpecifier())
}

// newReplyHeaderFilter is HeaderFilter: the request's header matches
// (Http::HeaderUtility::matchHeaders; a safe_regex matches the whole
// value, as RE2::FullMatch).
func newReplyHeaderFilter(hm *routev3.HeaderMatcher) (replyFilter, error) {
	if hm.GetInvertMatch() || hm.GetTreatMissingHeaderAsEmpty() {
		return nil, errors.New("header_filter: invert_match and treat_missing_header_as_empty are not supported by the emulator")
	}
	sm := hm.GetStringMatch()
	if sm == nil || sm.GetIgnoreCase() {
		return nil, errors.New("header_filter: only a case-sensitive string_match is supported by the emulator")
	}
	name := strings.ToLower(hm.GetName())
	var match func(string) bool
	switch p := sm.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		match = func(v string) bool { return v == p.Exact }
	case *matcherv3.StringMatcher_Prefix:
		match = func(v string) bool { return strings.HasPrefix(v, p.Prefix) }
	case *matcherv3.StringMatcher_SafeRegex:
		re, err := regexp.Compile(`^(?:` + p.SafeRegex.GetRegex() + `)$`)
		if err != nil {
			return nil, fmt.Errorf("header_filter: safe_regex: %w", err)
		}
		match = re.MatchString
	default:
		return nil, errors.New("header_filter: only exact, prefix and safe_regex string_match are supported by the emulator")
	}
	return func(req *Headers, _ string, _ int) bool {
		v, ok := req.Joined(name)
		return ok && match(v)
	}, nil
}

// celDetails is the CEL the emulator evaluates: a comparison of
// response.code_details with a string literal, optionally and-ed with a
// comparison of response.code with an integer.
var celDetails = regexp.MustCompile(`^response\.code_details(?: == '([^'\\]*)'|\.startsWith\('([^'\\]*)'\))(?: && response\.code == ([1-9][0-9]{0,2}))?$`)

// newCELFilter is the CEL access-log filter
// (source/extensions/access_loggers/filters/cel/cel.cc): the expression
// must evaluate to true.
func newCELFilter(x *accesslogv3.ExtensionFilter) (replyFilter, error) {
	if x.GetName() != celFilterName {
		return nil, fmt.Errorf("extension_filter %q is not supported by the emulator (only %s)", x.GetName(), celFilterName)
	}
	c := &celv3.ExpressionFilter{}
	if err := anyTo(x.GetTypedConfig(), "envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter", c); err != nil {
		return nil, fmt.Errorf("extension_filter: %w", err)
	}
	if c.GetCelConfig() != nil {
		return nil, errors.New("extension_filter: cel_config is not supported by the emulator")
	}
	m := celDetails.FindStringSubmatch(c.GetExpression())
	if m == nil {
		return nil, fmt.Errorf("extension_filter: CEL expression %q: the emulator evaluates only response.code_details == '…' and response.code_details.startsWith('…'), each optionally followed by && response.code == <status>", c.GetExpression())
	}
	status := 0
	if m[3] != "" {
		status, _ = strconv.Atoi(m[3]) // at most three digits
	}
	// response.code is the reply's status, which LocalReplyImpl::rewrite
	// sets on the stream info before it tries the mappers.
	statusOK := func(code int) bool { return status == 0 || code == status }
	if strings.HasPrefix(c.GetExpression(), "response.code_details ==") {
		lit := m[1]
		return func(_ *Headers, d string, code int) bool { return d == lit && statusOK(code) }, nil
	}
	lit := m[2]
	return func(_ *Headers, d string, code int) bool { return strings.HasPrefix(d, lit) && statusOK(code) }, nil
}

// rewrite applies the configuration to a local reply about to be sent: h
// holds its headers (those its filter set), status its status, body its
// body, details its response-code details, req the request's headers. It
// returns the body to send and sets content-type and content-length in h,
// as Utility::sendLocalReply does after LocalReply::rewrite.
func (c *localReplyConfig) rewrite(req *Headers, h *Headers, status int, body []byte, details string) []byte {
	contentType := "text/plain"
	out := body
	if c != nil {
		for _, m := range c.mappers {
			if m.match(req, details, status) {
				out = []byte(m.body)
				contentType = m.contentType
				break
			}
		}
	}
	if len(out) == 0 {
		h.Del("content-length")
		h.Del("content-type")
		return out
	}
	h.Set("content-length", strconv.Itoa(len(out)))
	// No mapper header can change the content-type here (headers_to_add
	// is refused), so has_custom_content_type is false.
	if _, ok := h.Get("content-type"); !ok || string(out) != string(body) {
		h.Set("content-type", contentType)
	}
	return out
}
