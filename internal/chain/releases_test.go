package chain

import (
	"strings"
	"testing"
)

// TestPinExtProcStatus: on the local reply config of an Envoy without
// status_on_error, exactly the mappers of ext_proc's failure replies — in
// both dialects — set the status a current Envoy gives them (503 for a
// gRPC error, 504 for a message timeout), and they match on the details
// alone, so that they match the 500 such an Envoy sends. Nothing else
// changes.
func TestPinExtProcStatus(t *testing.T) {
	cfg := LocalReply(4 << 20)
	PinExtProcStatus(cfg)
	if err := cfg.ValidateAll(); err != nil {
		t.Fatalf("ValidateAll: %v", err)
	}
	want := map[string]uint32{
		extProcGRPCErrorDetails: 503,
		extProcTimeoutDetails:   504,
	}
	pinned := map[string]int{}
	for i, m := range cfg.GetMappers() {
		expr := celExpression(m.GetFilter())
		if expr == "" {
			t.Fatalf("mapper %d: no CEL details filter found", i)
		}
		var details string
		for d := range want {
			if strings.Contains(expr, "'"+d+"'") {
				details = d
			}
		}
		switch {
		case details == "" && m.GetStatusCode() != nil:
			t.Errorf("mapper %d (%s) got status_code %d", i, expr, m.GetStatusCode().GetValue())
		case details != "" && m.GetStatusCode().GetValue() != want[details]:
			t.Errorf("mapper %d (%s): status_code %v, want %d", i, expr, m.GetStatusCode(), want[details])
		case details != "" && strings.Contains(expr, "response.code =="):
			t.Errorf("mapper %d (%s) matches the status: it would miss the 500 an old Envoy sends", i, expr)
		case details != "":
			pinned[details]++
		}
	}
	for d := range want {
		if pinned[d] != 2 {
			t.Errorf("%s: %d mappers pinned, want 2 (Anthropic's and OpenAI's)", d, pinned[d])
		}
	}
	// The unpinned config sets no status anywhere.
	for i, m := range LocalReply(4 << 20).GetMappers() {
		if m.GetStatusCode() != nil {
			t.Errorf("LocalReply mapper %d sets status_code %v", i, m.GetStatusCode())
		}
	}
}

// TestExtProcReleaseOptions: NoStatusOnError leaves status_on_error out of
// both ext_proc filters; NoFallback marks the downstream ext_proc's stream
// (and only it) with FallbackMetadataKey.
func TestExtProcReleaseOptions(t *testing.T) {
	for _, o := range []Options{{Cluster: "c"}, {Cluster: "c", NoStatusOnError: true}, {Cluster: "c", NoFallback: true}} {
		down, up := ExtProc(o), UpstreamExtProc(o)
		for _, c := range []struct {
			name string
			has  bool
		}{{"downstream", down.GetStatusOnError() != nil}, {"upstream", up.GetStatusOnError() != nil}} {
			if c.has == o.NoStatusOnError {
				t.Errorf("%+v: %s ext_proc has status_on_error %v", o, c.name, c.has)
			}
		}
		if o.NoStatusOnError {
			continue
		}
		if down.GetStatusOnError().GetCode() != 503 {
			t.Errorf("%+v: status_on_error %v, want 503", o, down.GetStatusOnError())
		}
		var marked bool
		for _, h := range down.GetGrpcService().GetInitialMetadata() {
			marked = marked || h.GetKey() == FallbackMetadataKey && h.GetValue() == FallbackMetadataWithheld
		}
		if marked != o.NoFallback {
			t.Errorf("%+v: downstream stream marked fallback-withheld %v", o, marked)
		}
		for _, h := range up.GetGrpcService().GetInitialMetadata() {
			if h.GetKey() == FallbackMetadataKey {
				t.Errorf("%+v: the upstream ext_proc carries %s", o, FallbackMetadataKey)
			}
		}
	}
}
