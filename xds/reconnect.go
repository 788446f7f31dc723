package xds

import (
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
)

// reconnected is the snapshot cache as the ADS server sees it, with one
// difference: a stream's first state-of-the-world request of a wildcard
// type (clusters, listeners) whose version_info is the version served is
// taken as holding every resource of that version. go-control-plane knows
// only what it returned on the stream itself, so without this it sends
// the whole type again to an Envoy that reconnected — to this replica, or
// to another, which serves the same version for the same configuration.
// Named types (endpoints, routes) are left alone: a request may name a
// resource the client never received at the version it holds (a cluster
// added just before the stream broke), which only a response gives it;
// Envoy skips a resource resent unchanged.
type reconnected struct {
	cachev3.SnapshotCache
}

func (c reconnected) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, out chan cachev3.Response) (func(), error) {
	if req.GetResponseNonce() == "" && req.GetVersionInfo() != "" && sub.IsWildcard() && len(sub.ReturnedResources()) == 0 {
		if snap, err := c.GetSnapshot(nodeHash{}.ID(req.GetNode())); err == nil && snap.GetVersion(req.GetTypeUrl()) == req.GetVersionInfo() {
			held := map[string]string{}
			for name := range snap.GetResources(req.GetTypeUrl()) {
				held[name] = req.GetVersionInfo()
			}
			sub = holding{sub, held}
		}
	}
	return c.SnapshotCache.CreateWatch(req, sub, out)
}

// holding is a subscription whose client holds the resources given.
type holding struct {
	cachev3.Subscription
	held map[string]string
}

func (h holding) ReturnedResources() map[string]string { return h.held }
