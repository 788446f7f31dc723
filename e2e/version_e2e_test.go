package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/envoy/envoytest"
	"github.com/sluicegw/sluice/xds"
)

// TestEnvoyReleasesE2E: one Sluice serves Envoys of three releases at
// once, each reporting its own (the emulator's Options.EnvoyVersion, in
// user_agent_build_version as Envoy sends it):
//
//   - a current Envoy gets the fallback cluster: a fallback model's request
//     that its first provider refuses with 503 is answered by the second;
//   - a 1.36 Envoy, too old for fallback (1.37.0: envoy/README.md), gets
//     the config without it — which it loads — and a plain model works
//     there as anywhere; the fallback model goes to its first provider
//     only (with that provider's own retry), so the client gets that
//     provider's 503 and the second provider sees nothing; Sluice logs
//     and counts what it withheld from that node;
//   - a 1.20 Envoy, older than the oldest release served (1.30.0), is
//     refused: its ADS stream ends with a message naming both releases,
//     which the Envoy logs, it is served nothing, and Sluice logs and
//     counts the refusal.
func TestEnvoyReleasesE2E(t *testing.T) {
	downMock, downAddr := mockProvider(t, mockllm.Options{Status: 503})
	upMock, upAddr := mockProvider(t, mockllm.Options{})
	s := startSluice(t, fmt.Sprintf(xdsPolicy, downAddr, upAddr, "{name: down}, {name: up}"))
	_, key := s.createKey(t, "t")

	nodeID := func(release string) string {
		return "e2e-" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + release
	}
	newURL, newEmu := startReleaseNode(t, s, nodeID("new"), "", nil)
	oldURL, oldEmu := startReleaseNode(t, s, nodeID("old"), "1.36.4", nil)
	if got := newEmu.EnvoyVersion(); got != envoytest.DefaultEnvoyVersion {
		t.Fatalf("the new node plays Envoy %s", got)
	}

	chat := func(url, model, rid string) (int, string, string) {
		t.Helper()
		st, h, body := call{path: "/v1/chat/completions", body: `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`,
			headers: map[string]string{"x-request-id": rid}}.do(t, url, key)
		return st, h.Get("x-sluice-request-id"), body
	}

	// A plain model works on both.
	for _, n := range []struct{ name, url string }{{"new", newURL}, {"old", oldURL}} {
		up0 := upMock.Requests()
		if st, _, body := chat(n.url, "m-up", n.name+"-up"); st != 200 || upMock.Requests()-up0 != 1 {
			t.Errorf("%s node, m-up: %d %s, the up provider saw %d requests; want 200 from it", n.name, st, body, upMock.Requests()-up0)
		}
	}

	// The current Envoy falls back from down to up within one request.
	down0, up0 := downMock.Requests(), upMock.Requests()
	st, id, body := chat(newURL, "m-ha", "new-ha")
	if st != 200 || downMock.Requests()-down0 != 1 || upMock.Requests()-up0 != 1 {
		t.Fatalf("new node, m-ha: %d %s; down saw %d, up %d requests; want 200 after one attempt on each", st, body, downMock.Requests()-down0, upMock.Requests()-up0)
	}
	if rec := s.awaitRecord(t, id); rec.Provider != "up" || rec.Model != "m-ha" {
		t.Errorf("new node, m-ha spend record %+v; want provider up", rec)
	}
	if got := attemptsOf(t, newEmu, id); got != "sluice.fallback.m-ha: down.fallback:503 up.fallback:200" {
		t.Errorf("new node, m-ha: %s; want the fallback cluster, down then up", got)
	}

	// The 1.36 Envoy sends it to its first provider only: down, with down's
	// own retry (retries.max 1), and the client gets down's 503.
	down0, up0 = downMock.Requests(), upMock.Requests()
	st, id, body = chat(oldURL, "m-ha", "old-ha")
	if st != 503 || downMock.Requests()-down0 != 2 || upMock.Requests()-up0 != 0 {
		t.Errorf("old node, m-ha: %d %s; down saw %d, up %d requests; want down's 503 after its one retry, nothing to up", st, body, downMock.Requests()-down0, upMock.Requests()-up0)
	}
	if rec := s.awaitRecord(t, id); rec.Provider != "down" || rec.Model != "m-ha" || rec.Status != 503 {
		t.Errorf("old node, m-ha spend record %+v; want provider down, 503", rec)
	}
	if got := attemptsOf(t, oldEmu, id); got != "down: down:503 down:503" {
		t.Errorf("old node, m-ha: %s; want the down provider's own cluster, twice", got)
	}
	if st := oldEmu.XDSStatus(); st.Rejected != 0 || st.Accepted.Clusters == "" {
		t.Errorf("old node's xDS status %+v: it must have accepted everything it was served", st)
	}

	// What was withheld, from whom, is logged and counted.
	withheld := fmt.Sprintf("node=%s cluster=%s envoy_version=1.36.4 feature=fallback min_envoy_version=1.37.0", nodeID("old"), "sluice")
	waitFor(t, "the withheld-fallback warning", func() bool { return strings.Contains(s.log.String(), withheld) })
	if strings.Contains(s.log.String(), "node="+nodeID("new")+" cluster=sluice envoy_version=") {
		t.Errorf("a warning names the current node:\n%s", s.log)
	}
	if got := metricValue(s.metrics(t), `sluice_xds_features_withheld_total{feature="fallback"}`); got != 1 {
		t.Errorf(`sluice_xds_features_withheld_total{feature="fallback"} = %v, want 1`, got)
	}

	// The 1.20 Envoy is refused and served nothing.
	var ancientLog syncBuf
	ancient := startRefusedNode(t, s, nodeID("ancient"), "1.20.0", &ancientLog)
	refusal := fmt.Sprintf(`msg="xDS node refused: its Envoy is older than the oldest release Sluice serves; it is served nothing" component=xds node=%s cluster=sluice envoy_version=1.20.0 min_envoy_version=1.30.0`, nodeID("ancient"))
	waitFor(t, "the refusal in Sluice's log", func() bool { return strings.Contains(s.log.String(), refusal) })
	waitFor(t, "the refusal in the Envoy's log", func() bool {
		return strings.Contains(ancientLog.String(), "Envoy 1.20.0 is older than 1.30.0, the oldest release Sluice serves")
	})
	if got := metricValue(s.metrics(t), `sluice_xds_nodes_refused_total{reason="envoy_too_old"}`); got < 1 {
		t.Errorf(`sluice_xds_nodes_refused_total{reason="envoy_too_old"} = %v, want at least 1`, got)
	}
	if st := ancient.XDSStatus(); st.Accepted != (envoytest.XDSVersions{}) || ancient.ListenAddr() != "" {
		t.Errorf("the refused Envoy holds configuration: %+v, listener %q", st, ancient.ListenAddr())
	}
}

// startReleaseNode runs an emulator playing Envoy release (default: the
// current one) against s's xDS server as node id, until the test ends, and
// returns its URL once its first configuration is in force.
func startReleaseNode(t *testing.T, s *sluiceProcess, id, release string, log *syncBuf) (string, *envoytest.Emulator) {
	t.Helper()
	e, ctx, stop := newReleaseNode(t, s, id, release, log)
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	ln, err := e.Listen(lctx)
	cancel()
	if err != nil {
		t.Fatalf("node %s (Envoy %s): %v (xDS status %+v)", id, e.EnvoyVersion(), err, e.XDSStatus())
	}
	done := make(chan error, 1)
	go func() { done <- e.Serve(ctx, ln) }()
	t.Cleanup(func() {
		stop() // Serve ends with the context; Run's cleanup, registered first, runs after this one
		if err := <-done; err != nil {
			t.Errorf("node %s: Serve: %v", id, err)
		}
	})
	return "http://" + ln.Addr().String(), e
}

// startRefusedNode runs an emulator that is not expected to get any
// configuration, logging to log.
func startRefusedNode(t *testing.T, s *sluiceProcess, id, release string, log *syncBuf) *envoytest.Emulator {
	t.Helper()
	e, _, _ := newReleaseNode(t, s, id, release, log)
	return e
}

// newReleaseNode creates the emulator and runs its ADS client until the
// test ends or stop is called, with the context both run under.
func newReleaseNode(t *testing.T, s *sluiceProcess, id, release string, log *syncBuf) (e *envoytest.Emulator, ctx context.Context, stop context.CancelFunc) {
	t.Helper()
	b, err := xds.Bootstrap(xds.BootstrapOptions{NodeID: id, XDSAddress: s.xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	opts := envoytest.Options{EnvoyVersion: release}
	if log != nil {
		opts.Logger = slog.New(slog.NewTextHandler(log, nil))
	}
	e, err = envoytest.New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop = context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- e.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-runDone; err != nil {
			t.Errorf("node %s: Run: %v", id, err)
		}
	})
	return e, ctx, stop
}

// attemptsOf is "<route cluster>: <attempt cluster>:<status> …" of the
// emulator's exchange for the request Envoy gave the id gatewayID.
func attemptsOf(t *testing.T, e *envoytest.Emulator, gatewayID string) string {
	t.Helper()
	x := exchangeOf(t, e, gatewayID)
	var as []string
	for _, a := range x.Attempts {
		as = append(as, fmt.Sprintf("%s:%d", a.Cluster, a.Status))
	}
	return x.Cluster + ": " + strings.Join(as, " ")
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
