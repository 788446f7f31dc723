package envoytest

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// cluster is an upstream cluster: its endpoints and how to talk to them.
type cluster struct {
	name      string
	endpoints []string // host:port, in load_assignment order
	http2     bool
	tls       bool // the cluster asks for TLS, which the emulator does not speak
	client    *http.Client
	next      atomic.Uint32
}

// Envoy's connect_timeout default.
const defaultConnectTimeout = 5 * time.Second

func newCluster(c *clusterv3.Cluster, eds map[string]*endpointv3.ClusterLoadAssignment) (*cluster, error) {
	cl := &cluster{name: c.GetName()}
	var la *endpointv3.ClusterLoadAssignment
	switch t := c.GetType(); t {
	case clusterv3.Cluster_STATIC, clusterv3.Cluster_STRICT_DNS, clusterv3.Cluster_LOGICAL_DNS:
		la = c.GetLoadAssignment()
	case clusterv3.Cluster_EDS:
		name := c.GetEdsClusterConfig().GetServiceName()
		if name == "" {
			name = c.GetName()
		}
		la = eds[name]
		if la == nil && eds == nil {
			return nil, fmt.Errorf("cluster %q: type EDS needs endpoints from an xDS server; the static emulator has none", c.GetName())
		}
	default:
		return nil, fmt.Errorf("cluster %q: type %s is not supported by the emulator (STATIC, STRICT_DNS, LOGICAL_DNS, EDS)", c.GetName(), t)
	}
	for _, lle := range la.GetEndpoints() {
		for _, lb := range lle.GetLbEndpoints() {
			addr, err := socketAddr(lb.GetEndpoint().GetAddress())
			if err != nil {
				return nil, fmt.Errorf("cluster %q: %w", c.GetName(), err)
			}
			cl.endpoints = append(cl.endpoints, addr)
		}
	}
	if o := c.GetTypedExtensionProtocolOptions()[typeHTTPProtoOpt]; o != nil {
		opts := &upstreamhttpv3.HttpProtocolOptions{}
		if err := o.UnmarshalTo(opts); err != nil {
			return nil, fmt.Errorf("cluster %q: typed_extension_protocol_options: %w", c.GetName(), err)
		}
		cl.http2 = opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil
	}
	if c.GetHttp2ProtocolOptions() != nil { //nolint:staticcheck // the deprecated form is still accepted by Envoy
		cl.http2 = true
	}
	cl.tls = c.GetTransportSocket() != nil
	connect := durationOr(c.GetConnectTimeout(), defaultConnectTimeout)
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: connect}).DialContext,
		MaxIdleConnsPerHost: 64,
		DisableCompression:  true, // bytes pass through exactly as the upstream sent them
	}
	if cl.http2 {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
	}
	cl.client = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return cl, nil
}

// pick returns the next endpoint, round robin.
func (c *cluster) pick() (string, bool) {
	if len(c.endpoints) == 0 {
		return "", false
	}
	return c.endpoints[int(c.next.Add(1)-1)%len(c.endpoints)], true
}

func (c *cluster) close() {
	if tr, ok := c.client.Transport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
}

// random returns a uniformly random integer in [0, n).
func random(n uint64) uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) % n
}
