package xdstest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
)

// Types are the type URLs a fleet client subscribes to, in Envoy's
// make-before-break order.
var Types = []string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType}

// FleetConfig describes a fleet.
type FleetConfig struct {
	// Conns carry the clients' streams, spread round-robin (HTTP/2 streams
	// share a connection as Envoys behind one proxy would not, but it keeps
	// a thousand clients within a test's file descriptors).
	Conns []grpc.ClientConnInterface
	// Nodes is the number of clients.
	Nodes int
	// Node returns the node of client i; it is sent on the stream's first
	// request only, as Envoy does.
	Node func(i int) *corev3.Node
	// Names are the resource names subscribed to, by type URL. A type with
	// no names is a wildcard subscription (clusters and listeners).
	Names map[string][]string
}

// Fleet is a running set of ADS clients. Expect then Wait measures how long
// a configuration takes to reach all of them.
type Fleet struct {
	cfg     FleetConfig
	clients []*client
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	target  atomic.Pointer[target]
	gen     atomic.Int64

	failOnce sync.Once
	failed   chan struct{}
	err      error
}

// client is one node's stream state.
type client struct {
	mu        sync.Mutex
	versions  map[string]string // type URL → version last ACKed
	reached   int64             // generation of the last target reached
	responses int
}

// target is a set of versions every client should reach.
type target struct {
	gen      int64
	versions map[string]string
	reached  atomic.Int64
	done     chan struct{}
}

// Start opens one ADS stream per node and returns at once; the streams
// connect, subscribe and ACK in the background until Close.
func Start(ctx context.Context, cfg FleetConfig) (*Fleet, error) {
	if len(cfg.Conns) == 0 || cfg.Nodes <= 0 || cfg.Node == nil {
		return nil, errors.New("xdstest: a fleet needs connections, a node count and a node function")
	}
	ctx, cancel := context.WithCancel(ctx)
	f := &Fleet{cfg: cfg, cancel: cancel, failed: make(chan struct{})}
	f.clients = make([]*client, cfg.Nodes)
	for i := range f.clients {
		c := &client{versions: map[string]string{}}
		f.clients[i] = c
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.run(ctx, c, cfg.Conns[i%len(cfg.Conns)], cfg.Node(i))
		}()
	}
	return f, nil
}

// Close ends every stream and waits for the clients to stop.
func (f *Fleet) Close() {
	f.cancel()
	f.wg.Wait()
}

// Err is the first stream failure, if any (a stream ended by Close is not
// a failure).
func (f *Fleet) Err() error {
	select {
	case <-f.failed:
		return f.err
	default:
		return nil
	}
}

func (f *Fleet) fail(err error) {
	f.failOnce.Do(func() {
		f.err = err
		close(f.failed)
	})
}

// run is one client: subscribe to every type, then ACK each response with
// its version and nonce.
func (f *Fleet) run(ctx context.Context, c *client, conn grpc.ClientConnInterface, node *corev3.Node) {
	stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		if ctx.Err() == nil {
			f.fail(fmt.Errorf("node %s: open ADS stream: %w", node.GetId(), err))
		}
		return
	}
	for i, typ := range Types {
		req := &discoverygrpc.DiscoveryRequest{TypeUrl: typ, ResourceNames: f.cfg.Names[typ]}
		if i == 0 {
			req.Node = node
		}
		if err := stream.Send(req); err != nil {
			if ctx.Err() == nil {
				f.fail(fmt.Errorf("node %s: subscribe: %w", node.GetId(), err))
			}
			return
		}
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() == nil {
				f.fail(fmt.Errorf("node %s: receive: %w", node.GetId(), err))
			}
			return
		}
		typ := resp.GetTypeUrl()
		ack := &discoverygrpc.DiscoveryRequest{
			TypeUrl: typ, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(), ResourceNames: f.cfg.Names[typ],
		}
		if err := stream.Send(ack); err != nil {
			if ctx.Err() == nil {
				f.fail(fmt.Errorf("node %s: ACK: %w", node.GetId(), err))
			}
			return
		}
		c.mu.Lock()
		c.versions[typ] = resp.GetVersionInfo()
		c.responses++
		f.check(c, f.target.Load())
		c.mu.Unlock()
	}
}

// check counts c as having reached t. c.mu is held.
func (f *Fleet) check(c *client, t *target) {
	if t == nil || c.reached >= t.gen {
		return
	}
	for typ, v := range t.versions {
		if c.versions[typ] != v {
			return
		}
	}
	c.reached = t.gen
	if t.reached.Add(1) == int64(len(f.clients)) {
		close(t.done)
	}
}

// Expect sets the versions, by type URL, that Wait waits for. Call it
// before the change that produces them, then start the clock.
func (f *Fleet) Expect(versions map[string]string) {
	t := &target{gen: f.gen.Add(1), versions: versions, done: make(chan struct{})}
	f.target.Store(t)
	for _, c := range f.clients {
		c.mu.Lock()
		f.check(c, t)
		c.mu.Unlock()
	}
}

// Wait blocks until every client has received and ACKed the expected
// versions, a client fails, or ctx ends. It returns how many clients got
// there.
func (f *Fleet) Wait(ctx context.Context) (int, error) {
	t := f.target.Load()
	if t == nil {
		return 0, errors.New("xdstest: Wait without Expect")
	}
	select {
	case <-t.done:
		return len(f.clients), nil
	case <-f.failed:
		return int(t.reached.Load()), f.err
	case <-ctx.Done():
		return int(t.reached.Load()), fmt.Errorf("%d of %d clients reached the expected versions: %w", t.reached.Load(), len(f.clients), ctx.Err())
	}
}

// Responses is the number of responses the fleet has received.
func (f *Fleet) Responses() int {
	n := 0
	for _, c := range f.clients {
		c.mu.Lock()
		n += c.responses
		c.mu.Unlock()
	}
	return n
}
