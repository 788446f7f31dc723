package envoyrules

import (
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	aggregatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/aggregate/v3"
	upstreamcodecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

const (
	srcClusterInfo    = "source/common/upstream/upstream_impl.cc, ClusterInfoImpl::ClusterInfoImpl"
	srcClusterManager = "source/common/upstream/cluster_manager_impl.cc, ClusterManagerImpl::loadCluster"
	aggregateName     = "envoy.clusters.aggregate"
)

func clusterRules() []*Rule {
	cluster := nameOf(&clusterv3.Cluster{})
	opts := nameOf(&upstreamhttpv3.HttpProtocolOptions{})
	codec := string(nameOf(&upstreamcodecv3.UpstreamCodec{}))
	return []*Rule{
		{
			Name: "cluster.eds-config-not-eds", Applies: cluster, Source: srcClusterInfo, Severity: Refused,
			Check: on(func(c *clusterv3.Cluster) []Finding {
				// config.type() is the discovery type, STATIC when a
				// cluster_type is set instead.
				if c.GetEdsClusterConfig() == nil || c.GetType() == clusterv3.Cluster_EDS {
					return nil
				}
				return find("eds_cluster_config", "eds_cluster_config set in a non-EDS cluster")
			}),
		},
		{
			Name: "cluster.max-requests-per-connection", Applies: cluster, Source: srcClusterInfo, Severity: Refused,
			Check: on(func(c *clusterv3.Cluster) []Finding {
				if c.GetMaxRequestsPerConnection() == nil { //nolint:staticcheck // the deprecated field is what Envoy checks
					return nil
				}
				for key, a := range c.GetTypedExtensionProtocolOptions() {
					o := &upstreamhttpv3.HttpProtocolOptions{}
					if a.MessageName() != opts || a.UnmarshalTo(o) != nil {
						continue
					}
					if o.GetCommonHttpProtocolOptions().GetMaxRequestsPerConnection() != nil {
						return find(fmt.Sprintf("typed_extension_protocol_options[%q]", key),
							"Only one of max_requests_per_connection from Cluster or HttpProtocolOptions can be specified")
					}
				}
				return nil
			}),
		},
		{
			Name: "cluster.cluster-provided-lb", Applies: cluster, Source: srcClusterManager, Severity: Refused,
			Check: on(func(c *clusterv3.Cluster) []Finding {
				if c.GetLoadBalancingPolicy() != nil || c.GetLbPolicy() == clusterv3.Cluster_LOAD_BALANCING_POLICY_CONFIG {
					return nil // the policy decides, not lb_policy
				}
				provided := c.GetLbPolicy() == clusterv3.Cluster_CLUSTER_PROVIDED
				switch ct := c.GetClusterType(); {
				case ct != nil:
					// Of the custom cluster types only the aggregate is
					// known here: its factory returns a load balancer
					// (ClusterFactory::createClusterWithConfig).
					if ct.GetName() != aggregateName && ct.GetTypedConfig().MessageName() != nameOf(&aggregatev3.ClusterConfig{}) {
						return nil
					}
					if !provided {
						return find("lb_policy", fmt.Sprintf("cluster manager: cluster provided LB not specified but cluster '%s' provided one. Check cluster documentation.", c.GetName()))
					}
				case provided && c.GetType() != clusterv3.Cluster_ORIGINAL_DST:
					// STATIC, STRICT_DNS, LOGICAL_DNS and EDS clusters
					// provide no load balancer.
					return find("lb_policy", fmt.Sprintf("cluster manager: cluster provided LB specified but cluster '%s' did not provide one. Check cluster documentation.", c.GetName()))
				}
				return nil
			}),
		},
		{
			Name: "upstream.codec-last", Applies: opts, Source: srcClusterInfo, Severity: Refused,
			Check: on(func(o *upstreamhttpv3.HttpProtocolOptions) []Finding {
				fs := o.GetHttpFilters()
				if len(fs) == 0 || string(fs[len(fs)-1].GetTypedConfig().MessageName()) == codec {
					return nil
				}
				return find(fmt.Sprintf("http_filters[%d]", len(fs)-1),
					fmt.Sprintf("The codec filter is the only valid terminal upstream HTTP filter, use '%s'", codec))
			}),
		},
		{
			Name: "upstream.terminal-filter", Applies: opts, Source: srcClusterInfo + "; " + srcFilterChain, Severity: Refused,
			Check: on(func(o *upstreamhttpv3.HttpProtocolOptions) []Finding {
				fs := o.GetHttpFilters()
				if len(fs) == 0 {
					return nil
				}
				// The last filter's type is upstream.codec-last's to judge:
				// Envoy checks it before it processes the chain.
				lastPath := fmt.Sprintf("http_filters[%d]", len(fs)-1)
				var out []Finding
				for _, f := range terminalFindings(fs, "http_filters", "upstream http") {
					if f.Path != lastPath {
						out = append(out, f)
					}
				}
				return append(out, lastDisabled(fs, "http_filters")...)
			}),
		},
	}
}
