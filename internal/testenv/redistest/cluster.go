package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Cluster is a running Redis Cluster of three masters, no replicas, the
// 16,384 slots split between them.
type Cluster struct {
	Nodes []*Server
}

// Addrs are the nodes' host:port, what a cluster client starts from.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr()
	}
	return out
}

// Stop stops every node and removes their files.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		n.Stop()
	}
}

// OwnCluster starts a cluster of t's own, stopped when t ends. It skips
// t, or fails it under RequireEnv, where Redis is not installed.
func OwnCluster(t testing.TB) *Cluster {
	t.Helper()
	c, err := StartCluster()
	if err != nil {
		missing(t, err)
	}
	t.Cleanup(c.Stop)
	return c
}

// StartCluster starts three cluster-enabled servers, joins them
// (redis-cli --cluster create) and returns once every node reports the
// cluster ok and knows all three masters. The caller stops it.
func StartCluster() (*Cluster, error) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("%w (redis-cli not found)", errMissing)
	}
	c := &Cluster{}
	for range 3 {
		s, err := start(true, nil)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		c.Stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	// The nodes learn of each other over the bus: wait, polling each
	// node's own account, until all agree the cluster is whole.
	for _, n := range c.Nodes {
		for {
			info, err := n.Do("CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") && strings.Contains(info, "cluster_slots_ok:16384") {
				break
			}
			select {
			case <-ctx.Done():
				c.Stop()
				return nil, errors.Join(fmt.Errorf("redis cluster: node %s not ok within 2 minutes: %s", n.Addr(), info), err)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return c, nil
}
