package envoytest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	// Linked so that bootstraps naming them parse.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/aggregate/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/fixed_heap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Extension type names the emulator understands.
const (
	typeHCM          = "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	typeExtAuthz     = "envoy.extensions.filters.http.ext_authz.v3.ExtAuthz"
	typeExtProc      = "envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"
	typeRouter       = "envoy.extensions.filters.http.router.v3.Router"
	typeHTTPProtoOpt = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
)

// defaultBufferLimit is Envoy's per_connection_buffer_limit_bytes default.
const defaultBufferLimit = 1 << 20

// config is everything the emulator built from one Bootstrap. It is
// immutable; a stream keeps the one it started with.
type config struct {
	listenAddr  string
	bufferLimit int
	filters     []httpFilter
	routes      *routeTable
	clusters    map[string]*cluster
	requestID   requestIDPolicy
	path        pathPolicy        // the connection manager's path normalization (path.go)
	hcm         hcmPolicy         // the connection manager's limits and timers (hcm.go)
	localReply  *localReplyConfig // nil: none configured
	accessLogs  []accessLogger    // the connection manager's access_log (accesslog.go)
}

// httpFilter is one configured HTTP filter (the router excluded: it is
// always last).
type httpFilter interface {
	filterName() string
	instance(s *stream) filterInstance
}

// LoadBootstrap reads an Envoy bootstrap in YAML or JSON — the same file a
// real Envoy takes with -c — and validates it.
func LoadBootstrap(path string) (*bootstrapv3.Bootstrap, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b, err := ParseBootstrap(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// ParseBootstrap parses a bootstrap in YAML or JSON.
func ParseBootstrap(data []byte) (*bootstrapv3.Bootstrap, error) {
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("parse bootstrap: %w", err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("parse bootstrap: %w", err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(js, b); err != nil {
		return nil, fmt.Errorf("parse bootstrap: %w", err)
	}
	if err := b.ValidateAll(); err != nil {
		return nil, fmt.Errorf("invalid bootstrap: %w", err)
	}
	return b, nil
}

// buildConfig turns a bootstrap's static resources into a config. It
// refuses, with a message naming the field, what the emulator does not
// implement, rather than ignoring it. A bootstrap with dynamic_resources
// gives no config: it is subscribed to over ADS (ads.go) by Run.
func (e *Emulator) buildConfig(b *bootstrapv3.Bootstrap) (*config, error) {
	// Envoy adds the static secrets before it builds any cluster
	// (MainImpl::initialize, source/server/configuration_impl.cc).
	secrets, err := newStaticSecrets(b.GetStaticResources().GetSecrets())
	if err != nil {
		return nil, err
	}
	e.tls.secrets = secrets
	if b.GetDynamicResources() != nil {
		x, err := e.newADSClient(b)
		e.xds = x
		return nil, err
	}
	sr := b.GetStaticResources()
	if len(sr.GetListeners()) != 1 {
		return nil, fmt.Errorf("static_resources.listeners: the emulator runs exactly one listener, got %d", len(sr.GetListeners()))
	}
	return e.build(sr.GetListeners()[0], nil, sr.GetClusters(), nil)
}

// build assembles a config from a listener, an optional separate route
// configuration (RDS), clusters and endpoint assignments (EDS).
func (e *Emulator) build(l *listenerv3.Listener, rds map[string]*routev3.RouteConfiguration, clusters []*clusterv3.Cluster, eds map[string]*endpointv3.ClusterLoadAssignment) (*config, error) {
	cfg := &config{bufferLimit: defaultBufferLimit, clusters: map[string]*cluster{}}
	sa := l.GetAddress().GetSocketAddress()
	if sa == nil {
		return nil, fmt.Errorf("listener %q: address: only socket_address is supported", l.GetName())
	}
	cfg.listenAddr = net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue())))
	if v := l.GetPerConnectionBufferLimitBytes(); v != nil {
		cfg.bufferLimit = int(v.GetValue())
	}
	for _, c := range clusters {
		cl, err := e.newCluster(c, eds)
		if err != nil {
			return nil, err
		}
		cfg.clusters[c.GetName()] = cl
	}
	hcm, err := listenerHCM(l)
	if err != nil {
		return nil, err
	}
	if cfg.requestID, err = newRequestIDPolicy(hcm); err != nil {
		return nil, fmt.Errorf("listener %q: %w", l.GetName(), err)
	}
	if cfg.localReply, err = newLocalReplyConfig(hcm.GetLocalReplyConfig()); err != nil {
		return nil, fmt.Errorf("listener %q: %w", l.GetName(), err)
	}
	if cfg.accessLogs, err = e.newAccessLoggers(hcm); err != nil {
		return nil, fmt.Errorf("listener %q: %w", l.GetName(), err)
	}
	if cfg.path, err = newPathPolicy(hcm); err != nil {
		return nil, fmt.Errorf("listener %q: %w", l.GetName(), err)
	}
	if cfg.hcm, err = newHCMPolicy(hcm); err != nil {
		return nil, fmt.Errorf("listener %q: %w", l.GetName(), err)
	}
	switch rs := hcm.GetRouteSpecifier().(type) {
	case *hcmv3.HttpConnectionManager_RouteConfig:
		cfg.routes, err = newRouteTable(rs.RouteConfig)
	case *hcmv3.HttpConnectionManager_Rds:
		rc := rds[rs.Rds.GetRouteConfigName()]
		if rc == nil {
			return nil, fmt.Errorf("listener %q: rds route_config_name %q: no such RouteConfiguration", l.GetName(), rs.Rds.GetRouteConfigName())
		}
		cfg.routes, err = newRouteTable(rc)
	default:
		return nil, fmt.Errorf("listener %q: http_connection_manager needs route_config or rds", l.GetName())
	}
	if err != nil {
		return nil, err
	}
	for _, c := range cfg.routes.clusterRefs() {
		if _, ok := cfg.clusters[c]; !ok {
			return nil, fmt.Errorf("route_config %q names cluster %q, which is not defined", cfg.routes.name, c)
		}
	}
	if err := e.linkClusters(cfg); err != nil {
		return nil, err
	}
	// A cluster with a new health checker is ready once each of its hosts
	// has had its first check (ClusterImplBase::onPreInitComplete); each
	// check ends within the check's timeout.
	for _, cl := range cfg.clusters {
		if cl.hc == nil || !cl.hcFresh {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*cl.hc.cfg.timeout+cl.connectTimeout)
		err := cl.hc.waitFirst(ctx)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	filters := hcm.GetHttpFilters()
	if len(filters) == 0 || filters[len(filters)-1].GetTypedConfig().MessageName() != typeRouter {
		return nil, errors.New("http_filters: the last filter must be envoy.filters.http.router")
	}
	for i, f := range filters[:len(filters)-1] {
		hf, err := e.newFilter(f, cfg)
		if err != nil {
			return nil, fmt.Errorf("http_filters[%d] (%s): %w", i, f.GetName(), err)
		}
		cfg.filters = append(cfg.filters, hf)
	}
	return cfg, nil
}

func listenerHCM(l *listenerv3.Listener) (*hcmv3.HttpConnectionManager, error) {
	chains := l.GetFilterChains()
	if len(chains) != 1 || len(chains[0].GetFilters()) != 1 {
		return nil, fmt.Errorf("listener %q: want one filter chain holding one http_connection_manager", l.GetName())
	}
	f := chains[0].GetFilters()[0]
	if chains[0].GetTransportSocket() != nil {
		return nil, fmt.Errorf("listener %q: TLS on the listener is not supported by the emulator (plain HTTP/1.1 and h2c only)", l.GetName())
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := anyTo(f.GetTypedConfig(), typeHCM, hcm); err != nil {
		return nil, fmt.Errorf("listener %q: %w", l.GetName(), err)
	}
	return hcm, nil
}

// newFilter builds a configured HTTP filter from its typed_config.
func (e *Emulator) newFilter(f *hcmv3.HttpFilter, cfg *config) (httpFilter, error) {
	if f.GetDisabled() {
		return nil, errors.New("disabled filters are not supported by the emulator")
	}
	tc := f.GetTypedConfig()
	switch tc.MessageName() {
	case typeExtAuthz:
		c := &extauthzv3.ExtAuthz{}
		if err := anyTo(tc, typeExtAuthz, c); err != nil {
			return nil, err
		}
		return e.newAuthzFilter(f.GetName(), c, cfg)
	case typeExtProc:
		c := &extprocv3.ExternalProcessor{}
		if err := anyTo(tc, typeExtProc, c); err != nil {
			return nil, err
		}
		return e.newExtProcFilter(f.GetName(), c, cfg)
	case typeRouter:
		return nil, errors.New("the router must be the last filter")
	}
	return nil, fmt.Errorf("unsupported filter type %q (the emulator implements ext_authz, ext_proc and the router)", tc.MessageName())
}

func anyTo(a *anypb.Any, want string, m proto.Message) error {
	if a == nil {
		return fmt.Errorf("typed_config missing, want %s", want)
	}
	if got := string(a.MessageName()); got != want {
		return fmt.Errorf("typed_config is %s, want %s", got, want)
	}
	return a.UnmarshalTo(m)
}

// durationOr converts a proto duration, or returns def when unset.
func durationOr(d *durationpb.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.AsDuration()
}

// socketAddr formats an Envoy socket address as host:port.
func socketAddr(a *corev3.Address) (string, error) {
	sa := a.GetSocketAddress()
	if sa == nil {
		return "", errors.New("only socket_address endpoints are supported")
	}
	if _, ok := sa.GetPortSpecifier().(*corev3.SocketAddress_PortValue); !ok {
		return "", errors.New("socket_address needs port_value")
	}
	return net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))), nil
}
