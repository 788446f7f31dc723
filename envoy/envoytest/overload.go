package envoytest

// The bootstrap's overload_manager (source/server/overload_manager_impl.cc,
// OverloadManagerImpl): resource monitors report a pressure between 0 and
// 1, each action's triggers turn the pressures of the monitors they name
// into the action's state, and the connection manager reads the state of
// envoy.overload_actions.stop_accepting_requests for every new request
// (ActiveStream::decodeHeaders: bernoulli(state) — shed with that
// probability — answering 503 "envoy overloaded", details overload, before
// any filter exists).

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	overloadv3 "github.com/envoyproxy/go-control-plane/envoy/config/overload/v3"
	fixedheapv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/fixed_heap/v3"
)

// Names of what the emulator implements of the overload manager.
const (
	// FixedHeapMonitor is the fixed_heap resource monitor. Envoy measures
	// its tcmalloc heap against max_heap_size_bytes; the emulator has no
	// such heap, so its pressure is what SetResourcePressure sets (0 until
	// then).
	FixedHeapMonitor = "envoy.resource_monitors.fixed_heap"
	// StopAcceptingRequests sheds new requests with 503.
	StopAcceptingRequests = "envoy.overload_actions.stop_accepting_requests"
	// shrinkHeap returns free heap to the system: accepted, with nothing
	// to do.
	shrinkHeap = "envoy.overload_actions.shrink_heap"

	typeFixedHeap = "envoy.extensions.resource_monitors.fixed_heap.v3.FixedHeapConfig"
)

// overloadManager is the overload manager of one emulator.
type overloadManager struct {
	mu       sync.Mutex
	pressure map[string]float64     // by resource monitor
	actions  map[string][]olTrigger // by action name
	shedding float64                // the state of stop_accepting_requests
}

// olTrigger is one trigger of an action: a threshold (scaling == 0 and
// saturation the threshold) or a scaled trigger.
type olTrigger struct {
	monitor             string
	scaled              bool
	scaling, saturation float64
}

// state is the trigger's state for a pressure: ThresholdTriggerImpl (1 at
// or past the threshold, else 0) and ScaledTriggerImpl (0 up to
// scaling_threshold, 1 from saturation_threshold, linear between).
func (t olTrigger) state(p float64) float64 {
	if !t.scaled {
		if p >= t.saturation {
			return 1
		}
		return 0
	}
	switch {
	case p <= t.scaling:
		return 0
	case p >= t.saturation:
		return 1
	}
	return (p - t.scaling) / (t.saturation - t.scaling)
}

// newOverloadManager builds the overload manager, refusing what the
// emulator does not implement and what Envoy refuses
// (OverloadManagerImpl's constructor: a duplicate monitor or action, a
// trigger naming no configured monitor, an unknown action). nil when the
// bootstrap has none.
func newOverloadManager(c *overloadv3.OverloadManager) (*overloadManager, error) {
	if c == nil {
		return nil, nil
	}
	if len(c.GetLoadshedPoints()) > 0 || c.GetBufferFactoryConfig() != nil {
		return nil, errors.New("overload_manager: loadshed_points and buffer_factory_config are not supported by the emulator")
	}
	m := &overloadManager{pressure: map[string]float64{}, actions: map[string][]olTrigger{}}
	for i, rm := range c.GetResourceMonitors() {
		if rm.GetName() != FixedHeapMonitor {
			return nil, fmt.Errorf("overload_manager.resource_monitors[%d]: %q is not supported by the emulator (only %s)", i, rm.GetName(), FixedHeapMonitor)
		}
		fh := &fixedheapv3.FixedHeapConfig{}
		if err := anyTo(rm.GetTypedConfig(), typeFixedHeap, fh); err != nil {
			return nil, fmt.Errorf("overload_manager.resource_monitors[%d]: %w", i, err)
		}
		if err := fh.ValidateAll(); err != nil {
			return nil, fmt.Errorf("overload_manager.resource_monitors[%d]: %w", i, err)
		}
		if fh.GetMaxHeapSizeBytesRuntime() != nil {
			return nil, fmt.Errorf("overload_manager.resource_monitors[%d]: max_heap_size_bytes_runtime is not supported by the emulator", i)
		}
		if _, dup := m.pressure[rm.GetName()]; dup {
			return nil, fmt.Errorf("overload_manager: Duplicate resource monitor %s", rm.GetName())
		}
		m.pressure[rm.GetName()] = 0
	}
	for i, a := range c.GetActions() {
		switch a.GetName() {
		case StopAcceptingRequests, shrinkHeap:
		default:
			return nil, fmt.Errorf("overload_manager.actions[%d]: %q is not supported by the emulator (only %s and %s)", i, a.GetName(), StopAcceptingRequests, shrinkHeap)
		}
		if a.GetTypedConfig() != nil {
			return nil, fmt.Errorf("overload_manager.actions[%d]: typed_config is not supported by the emulator", i)
		}
		if _, dup := m.actions[a.GetName()]; dup {
			return nil, fmt.Errorf("overload_manager: Duplicate overload action %s", a.GetName())
		}
		var ts []olTrigger
		seen := map[string]bool{}
		for j, tr := range a.GetTriggers() {
			if _, ok := m.pressure[tr.GetName()]; !ok {
				return nil, fmt.Errorf("overload_manager.actions[%d].triggers[%d]: Unknown trigger resource %s for overload action %s", i, j, tr.GetName(), a.GetName())
			}
			if seen[tr.GetName()] {
				return nil, fmt.Errorf("overload_manager.actions[%d]: Duplicate trigger resource for overload action %s", i, a.GetName())
			}
			seen[tr.GetName()] = true
			t := olTrigger{monitor: tr.GetName()}
			switch x := tr.GetTriggerOneof().(type) {
			case *overloadv3.Trigger_Threshold:
				t.saturation = x.Threshold.GetValue()
			case *overloadv3.Trigger_Scaled:
				t.scaled, t.scaling, t.saturation = true, x.Scaled.GetScalingThreshold(), x.Scaled.GetSaturationThreshold()
				if t.scaling >= t.saturation {
					return nil, fmt.Errorf("overload_manager.actions[%d].triggers[%d]: scaling_threshold must be less than saturation_threshold", i, j)
				}
			default:
				return nil, fmt.Errorf("overload_manager.actions[%d].triggers[%d]: action not set for trigger %s", i, j, tr.GetName())
			}
			ts = append(ts, t)
		}
		m.actions[a.GetName()] = ts
	}
	return m, nil
}

// set records a monitor's pressure and recomputes the state of
// stop_accepting_requests: the largest state of its triggers
// (OverloadAction::updateResourcePressure).
func (m *overloadManager) set(monitor string, p float64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.pressure[monitor]; !ok {
		return fmt.Errorf("the overload manager has no resource monitor %q", monitor)
	}
	m.pressure[monitor] = p
	m.shedding = 0
	for _, t := range m.actions[StopAcceptingRequests] {
		m.shedding = max(m.shedding, t.state(m.pressure[t.monitor]))
	}
	return nil
}

// shed is the connection manager's check of a new request:
// random_generator_.bernoulli(stop_accepting_requests' state).
func (m *overloadManager) shed() bool {
	m.mu.Lock()
	p := m.shedding
	m.mu.Unlock()
	return p > 0 && (p >= 1 || rand.Float64() < p)
}

// SetResourcePressure sets the pressure (0 to 1) a resource monitor of
// the bootstrap's overload_manager reports — the emulator measures
// nothing itself — and puts its actions' new states in force at once,
// where Envoy would at its next refresh_interval. It fails when the
// bootstrap configures no such monitor.
func (e *Emulator) SetResourcePressure(monitor string, pressure float64) error {
	if e.overload == nil {
		return errors.New("the bootstrap has no overload_manager")
	}
	if pressure < 0 || pressure > 1 {
		return fmt.Errorf("pressure %v: want 0 to 1", pressure)
	}
	return e.overload.set(monitor, pressure)
}
