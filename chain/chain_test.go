package chain

import (
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
)

func TestConfigsValidate(t *testing.T) {
	o := Options{Cluster: "sluice"}
	if err := Authz(o).ValidateAll(); err != nil {
		t.Errorf("ext_authz: %v", err)
	}
	if err := ExtProc(o).ValidateAll(); err != nil {
		t.Errorf("ext_proc: %v", err)
	}
	fs := HTTPFilters(o)
	if len(fs) != 2 || fs[0].GetName() != AuthzFilterName || fs[1].GetName() != ExtProcFilterName {
		t.Fatalf("filters %v", fs)
	}
	for _, f := range fs {
		if err := f.ValidateAll(); err != nil {
			t.Errorf("%s: %v", f.GetName(), err)
		}
	}
	pm := ExtProc(o).GetProcessingMode()
	if pm.GetRequestBodyMode() != extprocv3.ProcessingMode_BUFFERED || pm.GetResponseBodyMode() != extprocv3.ProcessingMode_STREAMED {
		t.Errorf("modes %v", pm)
	}
	if Authz(Options{Cluster: "x", FailOpen: true}).GetFailureModeAllow() != true {
		t.Error("FailOpen")
	}
}
