package envoytest

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filealv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	streamalv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// The connection manager's access_log, as Envoy writes it when a stream
// ends (ConnectionManagerImpl::ActiveStream's log call on stream
// completion, with the request headers as the filters left them and the
// stream's final StreamInfo):
//
//   - envoy.access_loggers.file (FileAccessLogFactory::createAccessLogInstance,
//     source/extensions/access_loggers/file/config.cc): the path is opened
//     once per path (AccessLogManagerImpl) with Write|Create|Append
//     (AccessLogFileImpl::defaultFlags, source/common/access_log/
//     access_log_manager_impl.cc), mode 0644, and a path that cannot be
//     opened fails the configuration ("unable to open file '…': …");
//     /dev/stdout is such a path. envoy.access_loggers.stdout
//     (source/extensions/access_loggers/stream/) writes to the process's
//     standard output.
//   - log_format.json_format (JsonFormatterImpl,
//     source/common/formatter/substitution_formatter.cc): the keys are
//     sorted at every level (JsonFormatBuilder::formatValueToFormatElements,
//     "Sort the keys to make the output deterministic"), the line is
//     compact JSON ending in "\n"; a string value without '%' is a
//     literal; a value that is exactly one command operator is typed
//     (formatValueWithContext, Json::Utility::appendValueToString): a
//     number stays a number, a missing value is null; a value mixing text
//     and operators is a string in which a missing operator is "-".
//   - the operators (source/common/formatter/stream_info_formatter.cc,
//     getKnownStreamInfoFormatterProviders; http_specific_formatter.cc):
//     START_TIME defaults to AccessLogDateTimeFormatter::fromTime, UTC
//     with milliseconds ("2018-04-03T23:06:09.123Z"); REQ(H?ALT):N is the
//     first value of the request header (lower-cased name), else of ALT,
//     truncated to N, null when absent; RESPONSE_CODE is
//     responseCode().value_or(0), a number; RESPONSE_FLAGS is
//     ResponseFlagUtils::toShortString, the short flags joined by "," or
//     "-" (NONE) when there are none; RESPONSE_CODE_DETAILS is null when
//     unset; UPSTREAM_CLUSTER is the cluster's observabilityName()
//     (alt_stat_name, else its name), null without one — the connection
//     manager sets it whenever it resolves the route
//     (ActiveStream::refreshCachedRoute) and the router again when it
//     picks the cluster; UPSTREAM_REQUEST_ATTEMPT_COUNT is
//     attemptCount().value_or(0), a number; DURATION is currentDuration()
//     in whole milliseconds (duration_cast, truncating), a number;
//     DYNAMIC_METADATA(NS:K1:K2…):N is the value at that path in the
//     stream's dynamic metadata (MetadataFormatter::format): a string
//     (truncated to N), a number, a bool, an object or a list as
//     themselves, null when absent.
//
// Not implemented, so refused when the configuration loads, by name:
// every other command operator (BYTES_RECEIVED and BYTES_SENT, the
// downstream body bytes as numbers, aside), START_TIME with a format, other loggers,
// access-log filters, the file logger's deprecated format fields and its
// default (text) format, text_format, omit_empty_values, formatters, and
// the HCM's access_log_options and deprecated flush fields.
//
// One difference: Envoy buffers file writes and flushes them every
// --file-flush-interval-msec (1 s by default) or when 64 KiB are pending;
// the emulator writes each line when the stream ends.
type accessLogger struct {
	w      io.Writer
	format *jsonFormat
}

const (
	typeFileAccessLog   = "envoy.extensions.access_loggers.file.v3.FileAccessLog"
	typeStdoutAccessLog = "envoy.extensions.access_loggers.stream.v3.StdoutAccessLog"
)

// logFiles are the access-log files an emulator has open, one per path,
// as Envoy's AccessLogManagerImpl keeps them across configurations.
type logFiles struct {
	mu    sync.Mutex
	files map[string]*logFile
}

// logFile serializes whole lines to one file.
type logFile struct {
	mu sync.Mutex
	f  *os.File
}

func (l *logFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Write(p)
}

func (fs *logFiles) open(path string) (*logFile, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f := fs.files[path]; f != nil {
		return f, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("unable to open file '%s': %w", path, err)
	}
	if fs.files == nil {
		fs.files = map[string]*logFile{}
	}
	lf := &logFile{f: f}
	fs.files[path] = lf
	return lf, nil
}

func (fs *logFiles) close() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for p, f := range fs.files {
		f.mu.Lock()
		f.f.Close()
		f.mu.Unlock()
		delete(fs.files, p)
	}
}

// stdoutWriter is envoy.access_loggers.stdout's destination.
type stdoutWriter struct{ mu sync.Mutex }

func (w *stdoutWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return os.Stdout.Write(p)
}

var processStdout = &stdoutWriter{}

// newAccessLoggers builds the connection manager's access loggers.
func (e *Emulator) newAccessLoggers(hcm *hcmv3.HttpConnectionManager) ([]accessLogger, error) {
	if hcm.GetAccessLogOptions() != nil {
		return nil, errors.New("access_log_options is not supported by the emulator")
	}
	if hcm.GetFlushAccessLogOnNewRequest() || hcm.GetAccessLogFlushInterval() != nil { //nolint:staticcheck // the deprecated fields Envoy still reads
		return nil, errors.New("flush_access_log_on_new_request / access_log_flush_interval are not supported by the emulator")
	}
	var out []accessLogger
	for i, al := range hcm.GetAccessLog() {
		l, err := e.newAccessLogger(al)
		if err != nil {
			return nil, fmt.Errorf("access_log[%d] (%s): %w", i, al.GetName(), err)
		}
		out = append(out, l)
	}
	return out, nil
}

func (e *Emulator) newAccessLogger(al *accesslogv3.AccessLog) (accessLogger, error) {
	if al.GetFilter() != nil {
		return accessLogger{}, errors.New("filter is not supported by the emulator's access log")
	}
	tc := al.GetTypedConfig()
	switch tc.MessageName() {
	case typeFileAccessLog:
		c := &filealv3.FileAccessLog{}
		if err := anyTo(tc, typeFileAccessLog, c); err != nil {
			return accessLogger{}, err
		}
		lf, ok := c.GetAccessLogFormat().(*filealv3.FileAccessLog_LogFormat)
		if !ok {
			return accessLogger{}, errors.New("the emulator implements only log_format (with json_format) of envoy.access_loggers.file; format, json_format, typed_json_format and the default format are not implemented")
		}
		if c.GetPath() == "" {
			return accessLogger{}, errors.New("path: must not be empty")
		}
		f, err := newJSONFormat(lf.LogFormat)
		if err != nil {
			return accessLogger{}, fmt.Errorf("log_format: %w", err)
		}
		w, err := e.logs.open(c.GetPath())
		if err != nil {
			return accessLogger{}, err
		}
		return accessLogger{w: w, format: f}, nil
	case typeStdoutAccessLog:
		c := &streamalv3.StdoutAccessLog{}
		if err := anyTo(tc, typeStdoutAccessLog, c); err != nil {
			return accessLogger{}, err
		}
		if c.GetLogFormat() == nil {
			return accessLogger{}, errors.New("the emulator implements only log_format (with json_format) of envoy.access_loggers.stdout")
		}
		f, err := newJSONFormat(c.GetLogFormat())
		if err != nil {
			return accessLogger{}, fmt.Errorf("log_format: %w", err)
		}
		return accessLogger{w: processStdout, format: f}, nil
	}
	return accessLogger{}, fmt.Errorf("access logger type %q is not implemented by the emulator (it implements %s and %s)", tc.MessageName(), typeFileAccessLog, typeStdoutAccessLog)
}

// jsonFormat is a compiled log_format.json_format.
type jsonFormat struct {
	root *jsonNode
}

// jsonNode is one value of the format: a literal (already JSON), a
// template (operators), an object (keys sorted) or a list.
type jsonNode struct {
	literal string
	tmpl    []logPiece
	keys    []string
	fields  []*jsonNode
	list    []*jsonNode
	isObj   bool
	isList  bool
}

func newJSONFormat(sf *corev3.SubstitutionFormatString) (*jsonFormat, error) {
	switch {
	case sf.GetOmitEmptyValues():
		return nil, errors.New("omit_empty_values is not supported by the emulator")
	case len(sf.GetFormatters()) > 0:
		return nil, errors.New("formatters are not supported by the emulator")
	}
	js, ok := sf.GetFormat().(*corev3.SubstitutionFormatString_JsonFormat)
	if !ok {
		return nil, errors.New("the emulator implements only json_format (text_format and text_format_source are not implemented)")
	}
	root, err := compileStruct(js.JsonFormat)
	if err != nil {
		return nil, err
	}
	return &jsonFormat{root: root}, nil
}

func compileStruct(s *structpb.Struct) (*jsonNode, error) {
	n := &jsonNode{isObj: true}
	for k := range s.GetFields() {
		n.keys = append(n.keys, k)
	}
	sort.Strings(n.keys) // byte order, as std::sort on string_view
	for _, k := range n.keys {
		c, err := compileValue(s.GetFields()[k])
		if err != nil {
			return nil, fmt.Errorf("json_format.%s: %w", k, err)
		}
		n.fields = append(n.fields, c)
	}
	return n, nil
}

func compileValue(v *structpb.Value) (*jsonNode, error) {
	switch x := v.GetKind().(type) {
	case nil, *structpb.Value_NullValue:
		return &jsonNode{literal: "null"}, nil
	case *structpb.Value_NumberValue:
		return &jsonNode{literal: jsonNumber(x.NumberValue)}, nil
	case *structpb.Value_BoolValue:
		return &jsonNode{literal: strconv.FormatBool(x.BoolValue)}, nil
	case *structpb.Value_StringValue:
		// JsonStringSerializer::addString: only a string holding '%' is
		// a template.
		if !strings.Contains(x.StringValue, "%") {
			return &jsonNode{literal: jsonString(x.StringValue)}, nil
		}
		t, err := parseLogFormat(x.StringValue)
		if err != nil {
			return nil, err
		}
		return &jsonNode{tmpl: t}, nil
	case *structpb.Value_StructValue:
		return compileStruct(x.StructValue)
	case *structpb.Value_ListValue:
		n := &jsonNode{isList: true}
		for i, e := range x.ListValue.GetValues() {
			c, err := compileValue(e)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			n.list = append(n.list, c)
		}
		return n, nil
	}
	return nil, fmt.Errorf("unsupported value %T", v.GetKind())
}

// logPiece is a literal text or one command operator.
type logPiece struct {
	text string
	op   logOperator // nil for text
}

// logOperator yields a typed value: nil (absent), string, int64, uint64,
// float64, bool or *structpb.Value (object, list).
type logOperator func(s *stream) any

// commandRE is SubstitutionFormatParser's commandWithArgsRegex.
var commandRE = regexp.MustCompile(`^%((?:[A-Z]|[0-9]|_)+)(?:\((.*?)\))?(?::([0-9]+))?%`)

// parseLogFormat is SubstitutionFormatParser::parse: '%%' is a '%', every
// other '%' starts a command operator.
func parseLogFormat(format string) ([]logPiece, error) {
	var out []logPiece
	var text strings.Builder
	for pos := 0; pos < len(format); {
		if format[pos] != '%' {
			text.WriteByte(format[pos])
			pos++
			continue
		}
		if pos+1 < len(format) && format[pos+1] == '%' {
			text.WriteByte('%')
			pos += 2
			continue
		}
		if text.Len() > 0 {
			out = append(out, logPiece{text: text.String()})
			text.Reset()
		}
		m := commandRE.FindStringSubmatchIndex(format[pos:])
		if m == nil {
			return nil, fmt.Errorf("Incorrect configuration: %s. Couldn't find valid command at position %d", format, pos) //nolint:staticcheck // Envoy's message
		}
		cmd := format[pos+m[2] : pos+m[3]]
		hasArg, hasLen := m[4] >= 0, m[6] >= 0
		var arg string
		if hasArg {
			arg = format[pos+m[4] : pos+m[5]]
		}
		maxLen := -1
		if hasLen {
			n, err := strconv.Atoi(format[pos+m[6] : pos+m[7]])
			if err != nil {
				return nil, fmt.Errorf("%%%s%%: length: %w", cmd, err)
			}
			maxLen = n
		}
		op, err := newLogOperator(cmd, arg, hasArg, maxLen)
		if err != nil {
			return nil, err
		}
		out = append(out, logPiece{op: op})
		pos += m[1]
	}
	if text.Len() > 0 || len(format) == 0 {
		out = append(out, logPiece{text: text.String()})
	}
	return out, nil
}

// newLogOperator builds one operator, checking its syntax the way
// CommandSyntaxChecker::verifySyntax does (COMMAND_ONLY takes neither
// parameters nor a length; PARAMS_REQUIRED needs parameters).
func newLogOperator(cmd, arg string, hasArg bool, maxLen int) (logOperator, error) {
	commandOnly := func() error {
		if hasArg || maxLen >= 0 {
			return fmt.Errorf("%s does not take any parameters or length", cmd)
		}
		return nil
	}
	switch cmd {
	case "START_TIME":
		if hasArg || maxLen >= 0 {
			return nil, fmt.Errorf("%%START_TIME(…)%% with a format is not implemented by the emulator")
		}
		return func(s *stream) any { return s.start.UTC().Format("2006-01-02T15:04:05.000Z") }, nil
	case "REQ":
		if arg == "" {
			return nil, errors.New("REQ requires parameters")
		}
		main, alt, _ := strings.Cut(arg, "?")
		if strings.Contains(alt, "?") {
			return nil, fmt.Errorf("More than 1 alternative header specified in token: %s", arg) //nolint:staticcheck // Envoy's message
		}
		if strings.Contains(arg, "\n") {
			return nil, errors.New("Invalid header configuration. Format string contains newline.") //nolint:staticcheck // Envoy's message
		}
		main, alt = strings.ToLower(main), strings.ToLower(alt)
		return func(s *stream) any {
			v, ok := s.reqHeaders.Get(main)
			if !ok && alt != "" {
				v, ok = s.reqHeaders.Get(alt)
			}
			if !ok {
				return nil
			}
			return truncate(v, maxLen)
		}, nil
	case "DYNAMIC_METADATA":
		if arg == "" {
			return nil, errors.New("DYNAMIC_METADATA requires parameters")
		}
		path := strings.Split(arg, ":")
		ns, keys := path[0], path[1:]
		return func(s *stream) any { return metadataAt(s.rec.Metadata, ns, keys, maxLen) }, nil
	case "RESPONSE_CODE":
		return func(s *stream) any { return uint64(max(s.rec.Status, 0)) }, commandOnly()
	case "RESPONSE_CODE_DETAILS":
		return func(s *stream) any {
			s.rec.mu.Lock()
			defer s.rec.mu.Unlock()
			if s.rec.Details == "" {
				return nil
			}
			return s.rec.Details
		}, commandOnly()
	case "RESPONSE_FLAGS":
		return func(s *stream) any {
			s.rec.mu.Lock()
			defer s.rec.mu.Unlock()
			if s.rec.ResponseFlags == "" {
				return "-" // ResponseFlagUtils::NONE
			}
			return s.rec.ResponseFlags
		}, commandOnly()
	case "UPSTREAM_CLUSTER":
		return func(s *stream) any {
			if n := s.upstreamClusterName(); n != "" {
				return n
			}
			return nil
		}, commandOnly()
	case "UPSTREAM_REQUEST_ATTEMPT_COUNT":
		return func(s *stream) any {
			s.rec.mu.Lock()
			defer s.rec.mu.Unlock()
			return uint64(len(s.rec.Attempts))
		}, commandOnly()
	case "DURATION":
		return func(s *stream) any { return s.rec.Duration.Milliseconds() }, commandOnly()
	case "BYTES_RECEIVED":
		return func(s *stream) any { return uint64(atomic.LoadInt64(&s.rec.BytesReceived)) }, commandOnly()
	case "BYTES_SENT":
		return func(s *stream) any { return uint64(s.rec.BytesSent) }, commandOnly()
	}
	return nil, fmt.Errorf("command operator %%%s%% is not implemented by the emulator's access log", cmd)
}

// upstreamClusterName is %UPSTREAM_CLUSTER%: the cluster of the route the
// stream resolved, or the one the router picked, when it exists; its
// observability name.
func (s *stream) upstreamClusterName() string {
	name := s.rec.Cluster
	if name == "" {
		s.mu.Lock()
		if s.routeValid && s.route != nil {
			name = s.route.cluster
		}
		s.mu.Unlock()
	}
	cl := s.cfg.clusters[name]
	if cl == nil {
		return ""
	}
	return cl.statName
}

func truncate(v string, maxLen int) string {
	if maxLen >= 0 && len(v) > maxLen {
		return v[:maxLen]
	}
	return v
}

// metadataAt is MetadataFormatter::format over the dynamic metadata.
func metadataAt(md map[string]*structpb.Struct, ns string, keys []string, maxLen int) any {
	st := md[ns]
	if st == nil {
		return nil
	}
	if len(keys) == 0 {
		return structpb.NewStructValue(st)
	}
	var v *structpb.Value
	cur := st
	for i, k := range keys {
		if cur == nil {
			return nil
		}
		v = cur.GetFields()[k]
		if v == nil {
			return nil
		}
		if i < len(keys)-1 {
			cur = v.GetStructValue()
		}
	}
	switch x := v.GetKind().(type) {
	case nil, *structpb.Value_NullValue:
		return nil
	case *structpb.Value_StringValue:
		return truncate(x.StringValue, maxLen)
	case *structpb.Value_BoolValue:
		return x.BoolValue
	case *structpb.Value_NumberValue:
		return x.NumberValue
	}
	return v
}

// line formats one access-log line for a finished stream.
func (f *jsonFormat) line(s *stream) string {
	var b strings.Builder
	f.root.write(&b, s)
	b.WriteByte('\n')
	return b.String()
}

func (n *jsonNode) write(b *strings.Builder, s *stream) {
	switch {
	case n.isObj:
		b.WriteByte('{')
		for i, k := range n.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(jsonString(k))
			b.WriteByte(':')
			n.fields[i].write(b, s)
		}
		b.WriteByte('}')
	case n.isList:
		b.WriteByte('[')
		for i, c := range n.list {
			if i > 0 {
				b.WriteByte(',')
			}
			c.write(b, s)
		}
		b.WriteByte(']')
	case n.tmpl == nil:
		b.WriteString(n.literal)
	case len(n.tmpl) == 1 && n.tmpl[0].op != nil:
		// JsonFormatterImpl::formatSubstitution, one provider: typed.
		b.WriteString(jsonValue(n.tmpl[0].op(s)))
	default:
		// Several providers: a string; a missing value is "-".
		var str strings.Builder
		for _, p := range n.tmpl {
			if p.op == nil {
				str.WriteString(p.text)
				continue
			}
			v := p.op(s)
			if v == nil {
				str.WriteString("-")
				continue
			}
			str.WriteString(textValue(v))
		}
		b.WriteString(jsonString(str.String()))
	}
}

// jsonValue serializes a typed value as Json::Utility::appendValueToString.
func jsonValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return jsonString(x)
	case bool:
		return strconv.FormatBool(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case float64:
		return jsonNumber(x)
	case *structpb.Value:
		return jsonProtoValue(x)
	}
	panic(fmt.Sprintf("envoytest: access log value %T", v))
}

// textValue is a value's string form inside a mixed template.
func textValue(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return jsonValue(v)
}

func jsonProtoValue(v *structpb.Value) string {
	switch x := v.GetKind().(type) {
	case *structpb.Value_StructValue:
		var b strings.Builder
		keys := make([]string, 0, len(x.StructValue.GetFields()))
		for k := range x.StructValue.GetFields() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(jsonString(k))
			b.WriteByte(':')
			b.WriteString(jsonProtoValue(x.StructValue.GetFields()[k]))
		}
		b.WriteByte('}')
		return b.String()
	case *structpb.Value_ListValue:
		parts := make([]string, 0, len(x.ListValue.GetValues()))
		for _, e := range x.ListValue.GetValues() {
			parts = append(parts, jsonProtoValue(e))
		}
		return "[" + strings.Join(parts, ",") + "]"
	case *structpb.Value_StringValue:
		return jsonString(x.StringValue)
	case *structpb.Value_NumberValue:
		return jsonNumber(x.NumberValue)
	case *structpb.Value_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	}
	return "null"
}

// jsonNumber formats a double as fmt's shortest form does: an integral
// value without a fraction ("12", not "12.0"); NaN is null.
func jsonNumber(f float64) string {
	switch {
	case math.IsNaN(f):
		return "null"
	case f == math.Trunc(f) && math.Abs(f) < 1e16:
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// jsonString quotes s as Json::sanitize does: '"', '\\' and control
// characters are escaped; '<', '>', '&' and non-ASCII are not.
func jsonString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if c < 0x20 {
				fmt.Fprintf(&b, `\u%04x`, c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// writeAccessLogs writes the configured access-log lines of a finished
// stream.
func (e *Emulator) writeAccessLogs(s *stream) {
	for _, l := range s.cfg.accessLogs {
		if _, err := io.WriteString(l.w, l.format.line(s)); err != nil {
			e.log.Warn("access log write failed", "err", err)
		}
	}
}
