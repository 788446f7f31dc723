package xds

import (
	"time"

	overloadv3 "github.com/envoyproxy/go-control-plane/envoy/config/overload/v3"
	fixedheapv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/fixed_heap/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The overload manager a bootstrap gets with BootstrapOptions.MaxHeapBytes:
// Envoy's recommendation for an edge proxy
// (docs/root/configuration/best_practices/edge.rst, _include/edge.yaml).
// The fixed_heap monitor reports the heap Envoy holds (tcmalloc's heap less
// what it returned to the system) as a share of max_heap_size_bytes; at 95%
// Envoy gives free memory back (shrink_heap), at 98% it answers every new
// request 503 "envoy overloaded", details overload, before any filter
// (ConnectionManagerImpl::ActiveStream::decodeHeaders), which the
// listener's local_reply_config turns into the API's JSON error
// (chain.LocalReply, code gateway_overloaded) — instead of growing until
// the kernel or the container kills it and every open stream with it.
// Only the operator knows the memory Envoy may use (a container limit less
// a margin), so there is no default: without MaxHeapBytes the bootstrap has
// no overload manager.
const (
	overloadRefresh      = 250 * time.Millisecond
	shrinkHeapAt         = 0.95
	stopAcceptingAt      = 0.98
	fixedHeapMonitorName = "envoy.resource_monitors.fixed_heap"
)

// overloadManager is the bootstrap's overload_manager for a heap limit of
// maxHeap bytes; nil for 0.
func overloadManager(maxHeap uint64) *overloadv3.OverloadManager {
	if maxHeap == 0 {
		return nil
	}
	trigger := func(at float64) []*overloadv3.Trigger {
		return []*overloadv3.Trigger{{Name: fixedHeapMonitorName, TriggerOneof: &overloadv3.Trigger_Threshold{Threshold: &overloadv3.ThresholdTrigger{Value: at}}}}
	}
	return &overloadv3.OverloadManager{
		RefreshInterval: durationpb.New(overloadRefresh),
		ResourceMonitors: []*overloadv3.ResourceMonitor{{
			Name:       fixedHeapMonitorName,
			ConfigType: &overloadv3.ResourceMonitor_TypedConfig{TypedConfig: mustAny(&fixedheapv3.FixedHeapConfig{MaxHeapSizeBytes: maxHeap})},
		}},
		Actions: []*overloadv3.OverloadAction{
			{Name: "envoy.overload_actions.shrink_heap", Triggers: trigger(shrinkHeapAt)},
			{Name: "envoy.overload_actions.stop_accepting_requests", Triggers: trigger(stopAcceptingAt)},
		},
	}
}
