package xds

import (
	"log/slog"
	"runtime"
	"strings"
	"testing"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestHugeNodeIDsRefused: a client that reaches the xDS port sends, on
// each of many short streams, one request from a "1.29.0" Envoy with a
// 1 MiB node id (the xDS server takes 4 MiB messages). Refused Envoys are
// remembered by id for a while (refuseTooOld), so an id past
// maxNodeIDLen is refused first, as an invalid argument, and nothing of
// it is kept or echoed back: what a peer can leave behind is bounded in
// bytes, not only in entries.
func TestHugeNodeIDsRefused(t *testing.T) {
	s := New(Options{})
	const n, size = 64, 1 << 20
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var lastMsg int
	for i := range n {
		node := buildVersion(1, 29, 0, "")
		node.Id = strings.Repeat(string(rune('a'+i%26)), size-8) + string(rune('A'+i/26)) + "-" + string(rune('0'+i%10))
		err := s.onRequest(int64(i+1), &discoverygrpc.DiscoveryRequest{Node: node, TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster"})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "node.id is") {
			t.Fatalf("a 1 MiB node id: %v, want InvalidArgument naming node.id", err)
		}
		lastMsg = len(status.Convert(err).Message())
		s.closed(int64(i + 1))
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	s.mu.Lock()
	kept := 0
	for id := range s.refused {
		kept += len(id)
	}
	s.mu.Unlock()
	t.Logf("refused entries %d, id bytes kept %d MiB, heap growth %d MiB, refusal status message %d bytes",
		len(s.refused), kept>>20, (int64(after.HeapInuse)-int64(before.HeapInuse))>>20, lastMsg)
	if kept > 0 {
		t.Errorf("s.refused keeps %d MiB of node ids for %d closed, refused streams (at maxRefusedRemembered=%d and 4 MiB ids: %d GiB); bound or hash the remembered id",
			kept>>20, n, maxRefusedRemembered, maxRefusedRemembered*4)
	}
	if lastMsg > 4096 {
		t.Errorf("the refusal echoes the whole %d-byte node id back", lastMsg)
	}
	if got := metricValue(t, s.m.nodesRefused.WithLabelValues("node_id_too_long")); got != n {
		t.Errorf(`sluice_xds_nodes_refused_total{reason="node_id_too_long"} = %v, want %d`, got, n)
	}
	runtime.KeepAlive(s)
}

// TestSharedNodeIDReleaseLabels: two Envoys share node id edge-1 (a
// rollback, or a fleet on the bootstrap's default id). The warning about
// a withheld feature names the release that lacks it, and once the 1.40
// stream is gone the status names the 1.36 Envoy that is left.
func TestSharedNodeIDReleaseLabels(t *testing.T) {
	var logs syncBuffer
	s := New(Options{Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if _, err := s.Update(compile(t, releasesPolicy)); err != nil {
		t.Fatal(err)
	}
	req := func(id int64, v string) {
		t.Helper()
		if err := s.onRequest(id, &discoverygrpc.DiscoveryRequest{Node: releaseNode(t, "edge-1", v), TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster"}); err != nil {
			t.Fatal(err)
		}
	}
	req(1, "1.40.0")
	req(2, "1.36.0")
	if l := logs.String(); strings.Contains(l, "envoy_version=1.40.0 feature=fallback") || !strings.Contains(l, "envoy_version=1.36.0 feature=fallback") {
		t.Errorf("the withheld-fallback warning should name the 1.36.0 Envoy, only it: %s", l)
	}
	s.closed(1)
	var seen int
	for _, n := range s.Nodes() {
		if n.ID != "edge-1" {
			continue
		}
		seen++
		if n.EnvoyVersion != "1.36.0" {
			t.Errorf("only the 1.36.0 Envoy is connected, status says envoy_version %q (withheld %v)", n.EnvoyVersion, n.Withheld)
		}
	}
	if seen != 1 {
		t.Errorf("%d statuses for edge-1, want the 1.36.0 Envoy's", seen)
	}
}
