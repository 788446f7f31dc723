package xds

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicegw/sluice/policies"
)

// historySize is how many versions of each resource type are kept for
// rolling a node back after a NACK.
const historySize = 8

// Options configure a Server.
type Options struct {
	Log     *slog.Logger
	Metrics *Metrics
	// SluiceAddresses, when set, replace the default of
	// xds.sluice_addresses (listen.grpc) for groups whose config does not
	// name addresses: serve sets it to the address it actually bound.
	SluiceAddresses []string
}

// Server is Sluice's xDS control plane: go-control-plane's ADS server
// (state-of-the-world and delta) over a SnapshotCache with one entry per
// node, all entries of a group sharing one snapshot. Sluice's callbacks
// see every request: they place new nodes in their group, detect NACKs
// and roll the node back. It is safe for concurrent use.
type Server struct {
	log    *slog.Logger
	m      *Metrics
	cache  cachev3.SnapshotCache
	sluice []string // Options.SluiceAddresses
	// build is BuildFor; tests replace it to produce what no config can.
	build func(*policies.Snapshot, Group, Flavour, Features) (*Resources, error)

	mu      sync.Mutex
	policy  *policies.Snapshot
	groups  []policies.NodeGroup
	snaps   [][]*cachev3.Snapshot // by group index, then variant
	version string
	nodes   map[string]*node
	streams map[int64]*xdsStream
	history [types.UnknownType]*history
	// refused is when each refused node id was last warned about
	// (refuseTooOld), so that an Envoy retrying every few seconds is not
	// a warning each time; bounded by maxRefusedRemembered.
	refused map[string]time.Time
}

// variant is one kind of node a group's config is built for: its flavour
// and, for an Envoy, the features its release runs. Nodes of a group share
// the snapshot of their variant, so a group has a snapshot per variant,
// whatever the releases in its fleet.
type variant struct {
	flavour  Flavour
	features Features
}

func (v variant) String() string {
	if v.flavour == FlavourGRPC || v.features == AllFeatures {
		return v.flavour.String()
	}
	return v.flavour.String() + " without " + strings.Join((AllFeatures&^v.features).List(), ", ")
}

// variants are the variants every group is built for: every feature for
// Envoy and for proxyless gRPC clients (indexes 0 and 1: FlavourEnvoy and
// FlavourGRPC), then one per older Envoy feature level (envoyLevels).
var variants = func() []variant {
	vs := []variant{{FlavourEnvoy, AllFeatures}, {FlavourGRPC, AllFeatures}}
	for _, l := range envoyLevels[1:] {
		vs = append(vs, variant{FlavourEnvoy, l})
	}
	return vs
}()

// variantOf is the index in variants of a node of flavour f running the
// features fs (a gRPC client's features do not matter).
func variantOf(f Flavour, fs Features) int {
	if f == FlavourGRPC {
		return 1
	}
	for i, v := range variants {
		if v.flavour == FlavourEnvoy && v.features == fs {
			return i
		}
	}
	return 0 // not a level: unreachable, features come from envoyLevels
}

// maxRefusedRemembered bounds Server.refused; refusedQuiet is how long a
// refused node id is not warned about again.
const (
	maxRefusedRemembered = 4096
	refusedQuiet         = 10 * time.Minute
)

// node is one xDS client, by node id; several streams (ADS and its
// reconnections) may share it.
type node struct {
	id      string
	md      *corev3.Node
	streams int
	group   int
	flavour Flavour
	// key is the node's cache key (nodeKey): its id, and the features it
	// runs when it runs fewer than all. release is the Envoy version its
	// latest stream reported, for logs ("" for a proxyless gRPC client);
	// features what it is served.
	key      string
	release  string
	features Features
	pinned   bool
	// warned: the node was told (logged, counted) that it is served no
	// provider routes (a proxyless gRPC client, xds.proxyless off);
	// warnedFeatures: which withheld features it was told about.
	warned         bool
	warnedFeatures Features
	acked          map[string]string // type URL → version last ACKed
	nacked         map[string]string // type URL → version last rejected
	lastErr        string
}

// xdsStream remembers, per type, the version of each response sent, to
// name the version a NACK rejects and the one a delta ACK accepts.
type xdsStream struct {
	node   string            // the node's key (nodeKey)
	sent   map[string]string // nonce → version
	byType map[string]string // type URL → last nonce sent
}

// history holds the last versions of one resource type.
type history struct {
	order []string
	res   map[string]cachev3.Resources
}

func (h *history) add(r cachev3.Resources) {
	if _, ok := h.res[r.Version]; ok {
		return
	}
	h.res[r.Version] = r
	h.order = append(h.order, r.Version)
	if len(h.order) > historySize {
		delete(h.res, h.order[0])
		h.order = h.order[1:]
	}
}

// New returns a server with no configuration; Update gives it one.
func New(opts Options) *Server {
	s := &Server{log: opts.Log, m: opts.Metrics, sluice: opts.SluiceAddresses, build: BuildFor, nodes: map[string]*node{}, streams: map[int64]*xdsStream{}, refused: map[string]time.Time{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("component", "xds")
	if s.m == nil {
		s.m = NewMetrics(nil)
	}
	for i := range s.history {
		s.history[i] = &history{res: map[string]cachev3.Resources{}}
	}
	s.cache = cachev3.NewSnapshotCache(true, nodeHash{}, cacheLogger{s.log})
	return s
}

// Register serves ADS (state-of-the-world and delta) on g until ctx ends.
// State-of-the-world responses go through one ordered channel, so Envoy
// receives clusters before the listeners and routes that use them.
func (s *Server) Register(ctx context.Context, g *grpc.Server) {
	cb := serverv3.CallbackFuncs{
		StreamClosedFunc:      func(id int64, _ *corev3.Node) { s.closed(id) },
		DeltaStreamClosedFunc: func(id int64, _ *corev3.Node) { s.closed(id) },
		StreamRequestFunc:     s.onRequest,
		StreamResponseFunc: func(_ context.Context, id int64, _ *discoverygrpc.DiscoveryRequest, r *discoverygrpc.DiscoveryResponse) {
			s.sent(id, r.GetTypeUrl(), r.GetNonce(), r.GetVersionInfo())
		},
		StreamDeltaRequestFunc: s.onDeltaRequest,
		StreamDeltaResponseFunc: func(id int64, _ *discoverygrpc.DeltaDiscoveryRequest, r *discoverygrpc.DeltaDiscoveryResponse) {
			s.sent(id, r.GetTypeUrl(), r.GetNonce(), r.GetSystemVersionInfo())
		},
	}
	srv := serverv3.NewServer(ctx, reconnected{s.cache}, cb, sotw.WithOrderedADS(), sotw.WithLogger(cacheLogger{s.log}))
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, srv)
}

// Update builds, validates and serves the resources of a new policy
// snapshot. An invalid result is not served: the error is returned,
// logged and counted, and the previous configuration stays. Resources
// equal to those served push nothing. A node stays pinned to what it
// accepted only while the version it rejected is still the one served.
func (s *Server) Update(p *policies.Snapshot) (changed bool, err error) {
	groups := Groups(p)
	if len(s.sluice) > 0 && len(p.Config().XDS.SluiceAddresses) == 0 {
		for i := range groups {
			if i == 0 || len(p.XDS().NodeGroups[i-1].SluiceAddresses) == 0 {
				groups[i].SluiceAddresses = s.sluice
			}
		}
	}
	snaps := make([][]*cachev3.Snapshot, len(groups))
	versions := make([]string, 0, len(variants)*len(groups))
	for i, g := range groups {
		snaps[i] = make([]*cachev3.Snapshot, len(variants))
		for vi, v := range variants {
			r, err := s.build(p, g, v.flavour, v.features)
			if err == nil {
				snaps[i][vi], _, err = Snapshot(r)
			}
			if err != nil {
				s.m.snapshotErrors.Inc()
				err = fmt.Errorf("xds: config %s: group %q, %s clients: %w", p.Version(), g.Name, v, err)
				s.log.Error("invalid xDS snapshot not served; the previous one stays", "config_version", p.Version(), "err", err)
				return false, err
			}
			for _, typ := range typeOrder {
				versions = append(versions, snaps[i][vi].GetVersion(typ))
			}
		}
	}
	version := hashStrings(versions)

	s.mu.Lock()
	defer s.mu.Unlock()
	s.policy = p
	s.groups = p.XDS().NodeGroups
	if version == s.version {
		return false, nil
	}
	s.snaps, s.version = snaps, version
	for _, gs := range snaps {
		for _, snap := range gs {
			for i, r := range snap.Resources {
				if r.Items != nil || r.Version != "" {
					s.history[i].add(r)
				}
			}
		}
	}
	for _, n := range s.nodes {
		n.group = s.groupOf(n.md)
		s.setSnapshot(n)
	}
	s.m.version.Reset()
	s.m.version.WithLabelValues(version).Set(1)
	s.m.updates.Inc()
	s.log.Info("xDS snapshot served", "version", version, "config_version", p.Version(), "nodes", len(s.nodes))
	return true, nil
}

// Version is the version of the resources served ("" before Update).
func (s *Server) Version() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// setSnapshot gives node n its group's snapshot, except that a type whose
// current version the node rejected stays at the version the node
// accepted (from the history; if too old to remember, an empty set under
// the accepted version, which sends nothing). A type whose version has
// moved on is unpinned. s.mu is held.
func (s *Server) setSnapshot(n *node) {
	if s.snaps == nil {
		return // no config yet: the node's watches wait
	}
	s.warnWithheld(n)
	snap := s.snaps[n.group][n.variant()]
	var pinned *cachev3.Snapshot
	for typ, rejected := range n.nacked {
		if snap.GetVersion(typ) != rejected {
			delete(n.nacked, typ)
			continue
		}
		if pinned == nil {
			pinned = &cachev3.Snapshot{Resources: snap.Resources}
		}
		i := cachev3.GetResponseType(typ)
		if old, ok := s.history[i].res[n.acked[typ]]; ok {
			pinned.Resources[i] = old
		} else {
			pinned.Resources[i] = cachev3.Resources{Version: n.acked[typ], Items: map[string]types.ResourceWithTTL{}}
		}
	}
	n.pinned = pinned != nil
	if pinned != nil {
		if err := pinned.ConstructVersionMap(); err != nil {
			s.log.Error("pin node", "node", n.id, "err", err)
			return
		}
		snap = pinned
	}
	if err := s.cache.SetSnapshot(context.Background(), n.key, snap); err != nil {
		s.log.Error("set snapshot", "node", n.id, "err", err)
	}
}

// warnWithheld logs at warn level and counts, once per connected node, a
// proxyless gRPC client that the policy serves no provider routes
// (Build, buildWithheld): its RPCs fail, and the operator should know why.
// It runs whenever the node is given a snapshot, so a node that connected
// before the first config, or while xds.proxyless was routing_only, is
// told when that changes. s.mu is held.
func (s *Server) warnWithheld(n *node) {
	s.warnFeatures(n)
	if n.warned || n.flavour != FlavourGRPC || !withholdsProxyless(s.policy) {
		return
	}
	n.warned = true
	s.m.withheld.Inc()
	s.log.Warn("proxyless gRPC client served no routes: its RPCs fail; proxyless clients run neither ext_authz nor ext_proc, so they get provider routes only with xds.proxyless: routing_only",
		"node", n.id, "cluster", n.md.GetCluster(), "user_agent", n.md.GetUserAgentName())
}

// groupOf returns the index in s.snaps of the group a node belongs to:
// the first node group that matches, or 0.
func (s *Server) groupOf(md *corev3.Node) int {
	for i, g := range s.groups {
		if g.Cluster != "" && !globMatch(g.Cluster, md.GetCluster()) {
			continue
		}
		ok := true
		for k, v := range g.Metadata {
			if md.GetMetadata().GetFields()[k].GetStringValue() != v {
				ok = false
				break
			}
		}
		if ok {
			return i + 1
		}
	}
	return 0
}

// globMatch matches s against a pattern where '*' matches any run of
// characters.
func globMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return strings.HasSuffix(s, parts[len(parts)-1])
}

// FlavourOf tells a proxyless gRPC client (user agent "gRPC Go", "gRPC
// Java"…) from Envoy.
func FlavourOf(n *corev3.Node) Flavour {
	if strings.HasPrefix(n.GetUserAgentName(), "gRPC") {
		return FlavourGRPC
	}
	return FlavourEnvoy
}

// attach registers the stream's node on its first request. It refuses a
// stream without node.id, and one from an Envoy older than MinEnvoy
// (refuseTooOld): the stream ends with the error, before the node is
// registered or served anything.
func (s *Server) attach(streamID int64, md *corev3.Node) (*node, *xdsStream, error) {
	st := s.streams[streamID]
	if st != nil {
		return s.nodes[st.node], st, nil
	}
	id := md.GetId()
	if id == "" {
		s.m.nodesRefused.WithLabelValues(refusedNoNodeID).Inc()
		return nil, nil, status.Error(codes.InvalidArgument, "xds: the first request of a stream must carry node.id")
	}
	if len(id) > maxNodeIDLen {
		s.m.nodesRefused.WithLabelValues(refusedNodeIDTooLong).Inc()
		return nil, nil, status.Errorf(codes.InvalidArgument, "xds: node.id is %d bytes, more than the %d Sluice accepts; give this Envoy a shorter --service-node / node.id", len(id), maxNodeIDLen)
	}
	flavour := FlavourOf(md)
	release, known := "", true
	if flavour == FlavourEnvoy {
		// Envoy's release decides what it is served. A proxyless gRPC
		// client's version is gRPC's, not Envoy's: no floor applies.
		var v EnvoyVersion
		v, known = NodeVersion(md)
		release = versionLabel(md)
		if known && v.Less(MinEnvoy) {
			return nil, nil, s.refuseTooOld(md, v)
		}
	}
	key := nodeKey(md)
	st = &xdsStream{node: key, sent: map[string]string{}, byType: map[string]string{}}
	s.streams[streamID] = st
	n := s.nodes[key]
	if n == nil {
		n = &node{id: id, key: key, md: md, release: release, features: nodeFeatures(md), acked: map[string]string{}, nacked: map[string]string{}}
		n.group = s.groupOf(md)
		n.flavour = flavour
		s.nodes[key] = n
		s.setSnapshot(n)
		s.log.Info("xDS node connected", "node", id, "cluster", md.GetCluster(), "flavour", n.flavour, "user_agent", md.GetUserAgentName(), "envoy_version", release)
		if !known {
			s.log.Warn("xDS node reports no Envoy version it can read: served every feature; an Envoy older than a feature's floor may reject or misrun that config (envoy/README.md, \"Envoy versions\")",
				"node", id, "user_agent", md.GetUserAgentName(), "user_agent_version", release)
		}
	} else {
		// Another Envoy of the same feature level under the same id (a hot
		// restart, an upgrade within a level): it shares the entry; the
		// label follows the latest.
		n.release = release
	}
	n.streams++
	s.m.nodes.Set(float64(len(s.nodes)))
	return n, st, nil
}

// maxNodeIDLen bounds node.id: Sluice keeps refused ids for a while and
// names nodes in logs, metrics and errors. Envoy's own ids are a host or
// pod name, Istio's a few hundred bytes at most.
const maxNodeIDLen = 1024

// nodeFeatures is what a node is served: for an Envoy whose release it can
// read, the features that release runs; every feature otherwise.
func nodeFeatures(md *corev3.Node) Features {
	if FlavourOf(md) != FlavourEnvoy {
		return AllFeatures
	}
	if v, ok := NodeVersion(md); ok {
		return FeaturesOf(v)
	}
	return AllFeatures
}

// nodeKey is the snapshot cache's key of a node: its id, followed by its
// feature set when it runs fewer than all. Two Envoys of different
// releases under one node id (a rollback, a fleet on the default id) so
// have entries of their own: a newer Envoy is never pushed the older
// one's config, which would take its fallback clusters away while its
// routes still name them.
func nodeKey(md *corev3.Node) string {
	fs := nodeFeatures(md)
	if fs == AllFeatures {
		return md.GetId()
	}
	return md.GetId() + "\x00" + strconv.Itoa(int(fs))
}

// nodeHash keys the snapshot cache by nodeKey.
type nodeHash struct{}

func (nodeHash) ID(md *corev3.Node) string { return nodeKey(md) }

// Reasons a stream is refused, the label of sluice_xds_nodes_refused_total.
const (
	refusedNoNodeID      = "no_node_id"
	refusedNodeIDTooLong = "node_id_too_long"
	refusedEnvoyTooOld   = "envoy_too_old"
)

// refuseTooOld is the error that ends the stream of an Envoy older than
// MinEnvoy, counted and logged at warn (once per node id every
// refusedQuiet: such an Envoy reconnects every few seconds). Ending the
// stream, rather than serving it nothing, is what tells the Envoy's
// operator: Envoy logs a config stream closed with any status but
// Unavailable, DeadlineExceeded and ResourceExhausted at warn at once,
// with the message ("StreamAggregatedResources gRPC config stream to … closed:
// 9, …": GrpcStream::logClose,
// source/extensions/config_subscription/grpc/grpc_stream.h), and keeps
// retrying with backoff, up to 30 s apart. Served an empty snapshot, it
// would wait out initial_fetch_timeout and run without listeners, saying
// nothing. s.mu is held.
func (s *Server) refuseTooOld(md *corev3.Node, v EnvoyVersion) error {
	s.m.nodesRefused.WithLabelValues(refusedEnvoyTooOld).Inc()
	msg := fmt.Sprintf("xds: Envoy %s is older than %s, the oldest release Sluice serves (envoy/README.md, \"Envoy versions\"); no configuration is served to node %q until it runs %s or newer", v, MinEnvoy, md.GetId(), MinEnvoy)
	now := time.Now()
	level := slog.LevelWarn
	if last, ok := s.refused[md.GetId()]; ok && now.Sub(last) < refusedQuiet {
		level = slog.LevelDebug
	} else {
		if len(s.refused) >= maxRefusedRemembered {
			clear(s.refused)
		}
		s.refused[md.GetId()] = now
	}
	s.log.Log(context.Background(), level, "xDS node refused: its Envoy is older than the oldest release Sluice serves; it is served nothing",
		"node", md.GetId(), "cluster", md.GetCluster(), "envoy_version", v.String(), "min_envoy_version", MinEnvoy.String())
	return status.Error(codes.FailedPrecondition, msg)
}

// variant is the index in Server.snaps of what n is served.
func (n *node) variant() int { return variantOf(n.flavour, n.features) }

// warnFeatures logs at warn level and counts
// (sluice_xds_features_withheld_total{feature}), once per connected node
// and feature, each feature the policy uses that the node's Envoy is too
// old for and so is served without (BuildFor). s.mu is held.
func (s *Server) warnFeatures(n *node) {
	if n.flavour != FlavourEnvoy {
		return
	}
	missing := AllFeatures &^ n.features &^ n.warnedFeatures
	for f := range numFeatures {
		if !missing.Has(f) || !uses(s.policy, f) {
			continue
		}
		n.warnedFeatures |= 1 << f
		s.m.featuresWithheld.WithLabelValues(f.String()).Inc()
		s.log.Warn("xDS node's Envoy is too old for a feature: served the config without it",
			"node", n.id, "cluster", n.md.GetCluster(), "envoy_version", n.release, "feature", f.String(), "min_envoy_version", f.Floor().String(), "effect", featureTable[f].why)
	}
}

// uses reports whether policy p's config uses feature f: every config has
// ext_proc (status_on_error); fallback only one with a fallback model.
func uses(p *policies.Snapshot, f Feature) bool {
	if f != FeatureFallback {
		return true
	}
	for _, m := range p.Models() {
		if m.Fallback() {
			return true
		}
	}
	return false
}

func (s *Server) closed(streamID int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.streams[streamID]
	if st == nil {
		return
	}
	delete(s.streams, streamID)
	n := s.nodes[st.node]
	if n == nil {
		return
	}
	if n.streams--; n.streams == 0 {
		delete(s.nodes, n.key)
		s.cache.ClearSnapshot(n.key)
		s.m.nodes.Set(float64(len(s.nodes)))
	}
}

// sent records the version of a response, by nonce.
func (s *Server) sent(streamID int64, typeURL, nonce, version string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.streams[streamID]
	if st == nil {
		return
	}
	if old, ok := st.byType[typeURL]; ok {
		delete(st.sent, old)
	}
	st.byType[typeURL] = nonce
	st.sent[nonce] = version
}

// onRequest sees a state-of-the-world request before the cache does.
// go-control-plane ignores error_detail, and its cache would answer a NACK
// (which carries the last accepted version, not the served one) by
// sending the rejected version again, at once, forever. So a NACK pins the
// node to the version it accepted: the watch then sees no difference and
// sends nothing.
func (s *Server) onRequest(streamID int64, req *discoverygrpc.DiscoveryRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, st, err := s.attach(streamID, req.GetNode())
	if err != nil {
		return err
	}
	typ := req.GetTypeUrl()
	switch {
	case req.GetErrorDetail() != nil:
		s.nack(n, typ, st.sent[req.GetResponseNonce()], req.GetVersionInfo(), req.GetErrorDetail().GetMessage())
	case req.GetResponseNonce() != "":
		s.ack(n, typ, req.GetVersionInfo())
	}
	return nil
}

// onDeltaRequest is onRequest for delta streams, where requests carry no
// version: the nonce names the response.
func (s *Server) onDeltaRequest(streamID int64, req *discoverygrpc.DeltaDiscoveryRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, st, err := s.attach(streamID, req.GetNode())
	if err != nil {
		return err
	}
	typ := req.GetTypeUrl()
	switch {
	case req.GetErrorDetail() != nil:
		s.nack(n, typ, st.sent[req.GetResponseNonce()], n.acked[typ], req.GetErrorDetail().GetMessage())
	case req.GetResponseNonce() != "":
		if v, ok := st.sent[req.GetResponseNonce()]; ok {
			s.ack(n, typ, v)
		}
	}
	return nil
}

func (s *Server) ack(n *node, typ, version string) {
	if n.acked[typ] != version {
		s.log.Debug("xDS ACK", "node", n.id, "type", ShortType(typ), "version", version)
	}
	n.acked[typ] = version
	if n.nacked[typ] == version {
		delete(n.nacked, typ)
	}
}

// nack logs and counts a rejection and pins the node: for the rejected
// type it is served the version it last accepted, so the cache sees no
// difference and sends nothing, until a config change gives that type a
// new version. s.mu is held.
func (s *Server) nack(n *node, typ, rejected, accepted, msg string) {
	s.m.nacks.WithLabelValues(ShortType(typ)).Inc()
	n.lastErr = msg
	s.log.Warn("xDS NACK: config rejected; node rolled back to the version it accepted",
		"node", n.id, "type", ShortType(typ), "rejected_version", rejected, "kept_version", accepted, "error", msg)
	if s.snaps == nil || cachev3.GetResponseType(typ) == types.UnknownType {
		return
	}
	if rejected == "" { // a response this stream did not see sent: the current one
		rejected = s.snaps[n.group][n.variant()].GetVersion(typ)
	}
	n.nacked[typ], n.acked[typ] = rejected, accepted
	s.setSnapshot(n)
}

// NodeStatus is what the server knows about one connected node.
type NodeStatus struct {
	ID      string
	Group   string // "" for the default group
	Flavour Flavour
	// EnvoyVersion is the release the node reports ("" for a proxyless
	// gRPC client; quoted when it could not be read), and Withheld the
	// features it is served without, being too old for them.
	EnvoyVersion string
	Withheld     []string
	Streams      int
	// Pinned: the node rejected a version and is held at what it accepted
	// until the next config change.
	Pinned bool
	Acked  map[string]string // short type ("cds") → version last ACKed
	Nacked map[string]string // short type → version last rejected
	// LastError is the error_detail of the node's last NACK.
	LastError string
}

// Nodes reports the connected nodes, sorted by id.
func (s *Server) Nodes() []NodeStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]NodeStatus, 0, len(s.nodes))
	for _, n := range s.nodes {
		ns := NodeStatus{ID: n.id, Flavour: n.flavour, EnvoyVersion: n.release, Streams: n.streams, Pinned: n.pinned, LastError: n.lastErr, Acked: map[string]string{}, Nacked: map[string]string{}}
		if n.flavour == FlavourEnvoy {
			ns.Withheld = (AllFeatures &^ n.features).List()
		}
		if n.group > 0 && n.group <= len(s.groups) {
			ns.Group = s.groups[n.group-1].Name
		}
		for k, v := range n.acked {
			ns.Acked[ShortType(k)] = v
		}
		for k, v := range n.nacked {
			ns.Nacked[ShortType(k)] = v
		}
		out = append(out, ns)
	}
	slices.SortFunc(out, func(a, b NodeStatus) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Served returns the version of each type (short names) that a node of
// the given group index and flavour, running every feature, is served now.
func (s *Server) Served(group int, f Flavour) (map[string]string, error) {
	return s.ServedTo(group, f, AllFeatures)
}

// ServedTo is Served for an Envoy whose release runs the features fs
// (FeaturesOf).
func (s *Server) ServedTo(group int, f Flavour, fs Features) (map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if group < 0 || group >= len(s.snaps) {
		return nil, errors.New("xds: no such group")
	}
	out := map[string]string{}
	for _, typ := range typeOrder {
		out[ShortType(typ)] = s.snaps[group][variantOf(f, fs)].GetVersion(typ)
	}
	return out, nil
}

func hashStrings(ss []string) string {
	h := sha256.New()
	for _, s := range ss {
		h.Write([]byte(s + "\n"))
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// cacheLogger routes go-control-plane's logs to slog: its chatter at
// debug, its warnings and errors as such.
type cacheLogger struct{ l *slog.Logger }

func (c cacheLogger) Debugf(f string, a ...any) { c.l.Debug(fmt.Sprintf(f, a...)) }
func (c cacheLogger) Infof(f string, a ...any)  { c.l.Debug(fmt.Sprintf(f, a...)) }
func (c cacheLogger) Warnf(f string, a ...any)  { c.l.Warn(fmt.Sprintf(f, a...)) }
func (c cacheLogger) Errorf(f string, a ...any) { c.l.Error(fmt.Sprintf(f, a...)) }
