package envoytest

import (
	"errors"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
)

// newExtProcFilter refuses ext_proc until the client lands.
func (e *Emulator) newExtProcFilter(name string, c *extprocv3.ExternalProcessor, cfg *config) (httpFilter, error) {
	return nil, errors.New("ext_proc: not implemented yet in the emulator")
}
