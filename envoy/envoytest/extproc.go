package envoytest

// The ext_proc client (envoy-protocol.md §1 and §4): one bidi
// /envoy.service.ext_proc.v3.ExternalProcessor/Process stream per HTTP
// stream, driven by a per-stream state machine (extproc_state.go) that
// follows Envoy's Filter and ProcessorState (source/extensions/filters/http/
// ext_proc/ext_proc.cc, processor_state.cc) step by step: the same callback
// states, the same decisions on each reply, the same close points.
//
// What is left out or approximated, and why, is listed in README.md.

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
)

// ExtProcAttributesKey is the key of ProcessingRequest.attributes under
// which Envoy puts the requested attributes (EPC FilterName).
const ExtProcAttributesKey = "envoy.filters.http.ext_proc"

// Envoy's ext_proc defaults (EP/config.h, EP/ext_proc.h).
const (
	defaultExtProcMessageTimeout = 200 * time.Millisecond
	defaultExtProcDeferredClose  = 5000 * time.Millisecond
	defaultExtProcStatusOnError  = 500
	// Envoy's HCM defaults for max_headers_count and max_request_headers_kb.
	extProcMaxHeaders      = 100
	extProcMaxHeadersBytes = 60 * 1024
)

// extProcFilter is one configured ext_proc filter: everything derived from
// its ExternalProcessor config, parsed once.
type extProcFilter struct {
	name string

	svc *grpcService
	md  metadata.MD // grpc_service.initial_metadata

	mode                   *extprocv3.ProcessingMode // filter-level processing_mode
	failureModeAllow       bool
	observability          bool
	sendBodyWithoutWaiting bool
	allowModeOverride      bool
	allowedOverrideModes   []*extprocv3.ProcessingMode
	disableImmediate       bool
	allowContentLength     bool
	routeCacheAction       extprocv3.ExternalProcessor_RouteCacheAction
	messageTimeout         time.Duration
	maxMessageTimeout      time.Duration
	deferredClose          time.Duration
	statusOnError          int
	timeoutStatus          int // the message timeout's reply: 504 (500 before 1.31)

	allowed, disallowed []stringMatcher // forward_rules
	checker             *mutationChecker
	fwdNS, recvNS       []string // metadata_options untyped namespaces
	reqAttrs, respAttrs []string
	attrs               map[string]attrEval // every attribute named, compiled

	// perRoute holds every ExtProcPerRoute of the route table naming this
	// filter, parsed at config time, by the Any that carries it.
	perRoute map[*anypb.Any]*extProcPerRoute

	// rejected is Envoy's rejected_header_mutations counter.
	rejected atomic.Int64

	mu   sync.Mutex
	live map[uint64]*epInstance // instances by stream id, for tests
}

// extProcPerRoute is a parsed ExtProcPerRoute.
type extProcPerRoute struct {
	disabled         bool
	mode             *extprocv3.ProcessingMode
	failureModeAllow *bool
	fwdNS, recvNS    *[]string
}

func (e *Emulator) newExtProcFilter(name string, c *extprocv3.ExternalProcessor, cfg *config) (httpFilter, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.GetHttpService() != nil {
		bad("http_service is not supported by the emulator; use grpc_service")
	}
	if c.GetGrpcService() == nil {
		bad("grpc_service is required")
	}
	if c.GetProcessingRequestModifier() != nil {
		bad("processing_request_modifier is not supported by the emulator")
	}
	if c.GetOnProcessingResponse() != nil {
		bad("on_processing_response is not supported by the emulator")
	}
	if c.GetDisableClearRouteCache() && c.GetRouteCacheAction() != extprocv3.ExternalProcessor_DEFAULT {
		bad("only one of disable_clear_route_cache and route_cache_action can be set")
	}
	if err := checkExtProcMode("processing_mode", c.GetProcessingMode()); err != nil {
		errs = append(errs, err)
	}
	if len(c.GetMetadataOptions().GetClusterMetadataForwardingNamespaces().GetUntyped()) > 0 ||
		len(c.GetMetadataOptions().GetClusterMetadataForwardingNamespaces().GetTyped()) > 0 {
		bad("metadata_options.cluster_metadata_forwarding_namespaces is not supported by the emulator")
	}
	f := &extProcFilter{
		name:                   name,
		mode:                   c.GetProcessingMode(),
		failureModeAllow:       c.GetFailureModeAllow(),
		observability:          c.GetObservabilityMode(),
		sendBodyWithoutWaiting: c.GetSendBodyWithoutWaitingForHeaderResponse(),
		allowModeOverride:      c.GetAllowModeOverride(),
		allowedOverrideModes:   c.GetAllowedOverrideModes(),
		disableImmediate:       c.GetDisableImmediateResponse(),
		allowContentLength:     c.GetAllowContentLengthHeader(),
		routeCacheAction:       c.GetRouteCacheAction(),
		messageTimeout:         durationOr(c.GetMessageTimeout(), defaultExtProcMessageTimeout),
		maxMessageTimeout:      durationOr(c.GetMaxMessageTimeout(), 0),
		deferredClose:          durationOr(c.GetDeferredCloseTimeout(), defaultExtProcDeferredClose),
		statusOnError:          defaultExtProcStatusOnError,
		fwdNS:                  c.GetMetadataOptions().GetForwardingNamespaces().GetUntyped(),
		recvNS:                 c.GetMetadataOptions().GetReceivingNamespaces().GetUntyped(),
		reqAttrs:               dedupe(c.GetRequestAttributes()),
		respAttrs:              dedupe(c.GetResponseAttributes()),
		perRoute:               map[*anypb.Any]*extProcPerRoute{},
		live:                   map[uint64]*epInstance{},
	}
	if f.mode == nil {
		f.mode = &extprocv3.ProcessingMode{}
	}
	f.attrs = map[string]attrEval{}
	for field, names := range map[string][]string{"request_attributes": f.reqAttrs, "response_attributes": f.respAttrs} {
		for _, n := range names {
			ev, ok := compileAttribute(n)
			if !ok {
				bad("%s: %q is not an attribute the emulator evaluates (see compileAttribute)", field, n)
				continue
			}
			f.attrs[n] = ev
		}
	}
	if c.GetDisableClearRouteCache() {
		f.routeCacheAction = extprocv3.ExternalProcessor_RETAIN
	}
	if s, ok := e.extProcStatusOnError(c.GetStatusOnError()); ok && s >= 400 && s <= 599 {
		f.statusOnError = s
	}
	f.timeoutStatus = e.extProcTimeoutStatus()
	var err error
	if f.allowed, err = compileMatchers(c.GetForwardRules().GetAllowedHeaders()); err != nil {
		bad("forward_rules.allowed_headers: %v", err)
	}
	if f.disallowed, err = compileMatchers(c.GetForwardRules().GetDisallowedHeaders()); err != nil {
		bad("forward_rules.disallowed_headers: %v", err)
	}
	if f.checker, err = newMutationChecker(c.GetMutationRules()); err != nil {
		bad("mutation_rules: %v", err)
	}
	if cfg.routes != nil {
		for _, vh := range cfg.routes.vhosts {
			if a := vh.perFilter[name]; a != nil {
				if err := f.addPerRoute(a); err != nil {
					bad("virtual_host %q typed_per_filter_config[%s]: %v", vh.name, name, err)
				}
			}
			for i, r := range vh.routes {
				if a := r.GetTypedPerFilterConfig()[name]; a != nil {
					if err := f.addPerRoute(a); err != nil {
						bad("virtual_host %q routes[%d] typed_per_filter_config[%s]: %v", vh.name, i, name, err)
					}
				}
			}
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("ext_proc: %w", errors.Join(errs...))
	}
	svc, err := e.dialService(c.GetGrpcService(), cfg)
	if err != nil {
		return nil, fmt.Errorf("ext_proc: %w", err)
	}
	f.svc = svc
	if im := c.GetGrpcService().GetInitialMetadata(); len(im) > 0 {
		f.md = metadata.MD{}
		for _, hv := range im {
			v := hv.GetValue()
			if v == "" {
				v = string(hv.GetRawValue())
			}
			f.md.Append(strings.ToLower(hv.GetKey()), v)
		}
	}
	return f, nil
}

func (f *extProcFilter) filterName() string { return f.name }

// addPerRoute parses and checks one ExtProcPerRoute.
func (f *extProcFilter) addPerRoute(a *anypb.Any) error {
	pr := &extprocv3.ExtProcPerRoute{}
	if err := anyTo(a, "envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute", pr); err != nil {
		return err
	}
	p := &extProcPerRoute{disabled: pr.GetDisabled()}
	if o := pr.GetOverrides(); o != nil {
		switch {
		case o.GetGrpcService() != nil:
			return errors.New("overrides.grpc_service is not supported by the emulator")
		case len(o.GetGrpcInitialMetadata()) > 0:
			return errors.New("overrides.grpc_initial_metadata is not supported by the emulator")
		case o.GetProcessingRequestModifier() != nil:
			return errors.New("overrides.processing_request_modifier is not supported by the emulator")
		}
		if err := checkExtProcMode("overrides.processing_mode", o.GetProcessingMode()); err != nil {
			return err
		}
		p.mode = o.GetProcessingMode()
		if v := o.GetFailureModeAllow(); v != nil {
			b := v.GetValue()
			p.failureModeAllow = &b
		}
		if mo := o.GetMetadataOptions(); mo != nil {
			if fn := mo.GetForwardingNamespaces(); fn != nil {
				ns := fn.GetUntyped()
				p.fwdNS = &ns
			}
			if rn := mo.GetReceivingNamespaces(); rn != nil {
				ns := rn.GetUntyped()
				p.recvNS = &ns
			}
		}
		// request_attributes / response_attributes overrides are not
		// implemented by Envoy either (§1.10); async_mode is deprecated.
	}
	f.perRoute[a] = p
	return nil
}

// perRouteConfig returns the parsed per-route config carried by a.
func (f *extProcFilter) perRouteConfig(a *anypb.Any) *extProcPerRoute {
	if p := f.perRoute[a]; p != nil {
		return p
	}
	return nil // not seen at config time: ignore rather than parse on the hot path
}

// checkExtProcMode refuses the body modes the emulator does not implement.
func checkExtProcMode(field string, m *extprocv3.ProcessingMode) error {
	for _, b := range []struct {
		name string
		mode extprocv3.ProcessingMode_BodySendMode
	}{{"request_body_mode", m.GetRequestBodyMode()}, {"response_body_mode", m.GetResponseBodyMode()}} {
		switch b.mode {
		case extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED:
			return fmt.Errorf("%s.%s FULL_DUPLEX_STREAMED is not supported by the emulator (it needs streamed_response bodies and has no message timer or fail-open; see envoy-protocol.md §1.2)", field, b.name)
		case extprocv3.ProcessingMode_GRPC:
			return fmt.Errorf("%s.%s GRPC is not supported by the emulator", field, b.name)
		}
	}
	return nil
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// stringMatcher is a compiled envoy.type.matcher.v3.StringMatcher.
type stringMatcher func(string) bool

func compileMatchers(l *matcherv3.ListStringMatcher) ([]stringMatcher, error) {
	var out []stringMatcher
	for i, p := range l.GetPatterns() {
		m, err := compileStringMatcher(p)
		if err != nil {
			return nil, fmt.Errorf("patterns[%d]: %w", i, err)
		}
		out = append(out, m)
	}
	return out, nil
}

func compileStringMatcher(p *matcherv3.StringMatcher) (stringMatcher, error) {
	ic := p.GetIgnoreCase()
	norm := func(s string) string {
		if ic {
			return strings.ToLower(s)
		}
		return s
	}
	switch m := p.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		want := norm(m.Exact)
		return func(s string) bool { return norm(s) == want }, nil
	case *matcherv3.StringMatcher_Prefix:
		want := norm(m.Prefix)
		return func(s string) bool { return strings.HasPrefix(norm(s), want) }, nil
	case *matcherv3.StringMatcher_Suffix:
		want := norm(m.Suffix)
		return func(s string) bool { return strings.HasSuffix(norm(s), want) }, nil
	case *matcherv3.StringMatcher_Contains:
		want := norm(m.Contains)
		return func(s string) bool { return strings.Contains(norm(s), want) }, nil
	case *matcherv3.StringMatcher_SafeRegex:
		re, err := regexp.Compile(`^(?:` + m.SafeRegex.GetRegex() + `)$`)
		if err != nil {
			return nil, fmt.Errorf("safe_regex: %w", err)
		}
		return re.MatchString, nil
	}
	return nil, fmt.Errorf("only exact, prefix, suffix, contains and safe_regex matchers are supported by the emulator")
}

// instance creates the per-stream state machine.
func (f *extProcFilter) instance(s *stream) filterInstance {
	x := newEPInstance(f, s)
	f.mu.Lock()
	f.live[s.id] = x
	f.mu.Unlock()
	return filterInstance{
		decode: func(s *stream, in <-chan frame, out chan<- frame) { x.runStage(x.dec, in, out) },
		encode: func(s *stream, in <-chan frame, out chan<- frame) { x.runStage(x.enc, in, out) },
	}
}

// inspect calls fn, under the instance lock, with the live instance of
// stream id (for tests that must wait for a state Envoy has no signal for,
// such as "the whole body arrived before the headers reply").
func (f *extProcFilter) inspect(id uint64, fn func(*epInstance) bool) bool {
	f.mu.Lock()
	x := f.live[id]
	f.mu.Unlock()
	if x == nil {
		return false
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return fn(x)
}

// liveIDs lists the stream ids of live instances.
func (f *extProcFilter) liveIDs() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []uint64
	for id := range f.live {
		ids = append(ids, id)
	}
	return ids
}

// forget drops the live instance of stream id if it is still x (an
// upstream filter's instances of successive attempts share the id).
func (f *extProcFilter) forget(id uint64, x *epInstance) {
	f.mu.Lock()
	if f.live[id] == x {
		delete(f.live, id)
	}
	f.mu.Unlock()
}
