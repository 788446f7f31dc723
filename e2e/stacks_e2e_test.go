package e2e

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/internal/testenv"
)

// TestOpenStreamsKeepSmallStacks: a request's handling fits in the 8 KiB
// stack a goroutine starts with, so each open ext_proc stream's handler
// goroutine (and each Check's) keeps that much, not the 16 KiB the next
// growth makes — with 2,000 open streams that is 16 MB.
//
// The server runs with stack shrinking off (GODEBUG=gcshrinkstackoff=1),
// so a stack that grew at any point of a request stays grown; 128
// streaming requests are held open mid-stream through the emulator (the
// mock waits between chunks) while the server's stack memory is read.
// It is checked without the race detector, whose instrumentation makes
// every frame larger.
func TestOpenStreamsKeepSmallStacks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a sluice subprocess; not in -short")
	}
	if testenv.Race {
		t.Skip("the race detector enlarges every stack frame; make test runs this test without it")
	}
	_, s := startLimitsChild(t, mockllm.Options{Words: 100}, "GODEBUG=gcshrinkstackoff=1")
	_, key := s.createKey(t, "t")
	url := emulatorFor(t, s, "stacks-1")

	stream := func(interval string) (*http.Response, error) {
		req, _ := http.NewRequest("POST", url+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"go"}]}`))
		req.Header.Set("authorization", "Bearer "+key)
		req.Header.Set("x-mock-chunks", "4")
		req.Header.Set("x-mock-words", "20")
		req.Header.Set("x-mock-interval", interval)
		return http.DefaultClient.Do(req)
	}
	// One whole request first, so that what is read below is the open
	// streams' alone.
	resp, err := stream("1ms")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	before := metricValue(s.metrics(t), "go_memstats_stack_inuse_bytes")
	if before <= 0 {
		t.Fatalf("/metrics has no go_memstats_stack_inuse_bytes")
	}

	const open = 128
	var wg sync.WaitGroup
	errs := make(chan error, open)
	for range open {
		wg.Go(func() {
			resp, err := stream("1500ms")
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				errs <- err
			}
		})
	}
	deadline := time.Now().Add(20 * time.Second)
	for metricValue(s.metrics(t), "sluice_extproc_streams") < open {
		if time.Now().After(deadline) {
			t.Fatalf("%v of %d streams open after 20 s", metricValue(s.metrics(t), "sluice_extproc_streams"), open)
		}
		time.Sleep(20 * time.Millisecond)
	}
	during := metricValue(s.metrics(t), "go_memstats_stack_inuse_bytes")
	perStream := (during - before) / open
	t.Logf("stacks: %.0f KiB before, %.0f KiB with %d streams open: %.1f KiB a stream", before/1024, during/1024, open, perStream/1024)
	// 8 KiB a stream, and a little for the server's own goroutines; a
	// handler that outgrew its 8 KiB once would count 16.
	if perStream > 11<<10 {
		t.Errorf("%.1f KiB of stack per open stream, want about 8: something on the request path needs more than a goroutine's first 8 KiB (find it with debug.SetMaxStack)", perStream/1024)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
