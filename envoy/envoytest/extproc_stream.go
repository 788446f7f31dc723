package envoytest

import (
	"context"
	"sync"
	"time"

	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/metadata"
)

// closeGrace bounds how long a close waits for a Send blocked on flow
// control before the stream is cancelled anyway; flushGrace how long it
// lets the last frames reach the server before the reset.
const (
	closeGrace = time.Second
	flushGrace = 100 * time.Millisecond
)

// sidestream is one Process stream to the external processor, as Envoy's
// async gRPC client holds it: sends never block the filter (they are
// queued here and written by the sender goroutine), replies and the end of
// the stream are delivered to the instance by the receiver goroutine.
type sidestream struct {
	x      *epInstance
	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{}
	done   chan struct{} // closed when both goroutines have returned

	// remoteDone is set, under x.mu, once the server ended the stream (or
	// it failed to open): closing it then sends nothing.
	remoteDone bool

	mu          sync.Mutex
	queue       []*extprocsvc.ProcessingRequest
	closing     bool
	established bool
	graceTimer  *time.Timer
}

func newSidestream(x *epInstance) *sidestream {
	ctx, cancel := context.WithCancel(context.WithoutCancel(x.s.ctx))
	if x.f.md != nil {
		ctx = metadata.NewOutgoingContext(ctx, x.f.md)
	}
	return &sidestream{x: x, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

func (ss *sidestream) enqueue(m *extprocsvc.ProcessingRequest) {
	ss.mu.Lock()
	ss.queue = append(ss.queue, m)
	ss.mu.Unlock()
	ss.signal()
}

func (ss *sidestream) signal() {
	select {
	case ss.wake <- struct{}{}:
	default:
	}
}

// close half-closes the stream after the queued messages, then cancels
// it (Envoy's close(): END_STREAM then RST_STREAM, without waiting for the
// server's status).
func (ss *sidestream) close() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closing {
		return
	}
	ss.closing = true
	if !ss.established {
		ss.cancel() // still opening: nothing to half-close
	} else {
		ss.graceTimer = time.AfterFunc(closeGrace, ss.cancel)
	}
	ss.signal()
}

func (ss *sidestream) run() {
	defer close(ss.done)
	defer ss.cancel()
	svc := ss.x.f.svc
	conn, h, err := svc.pick()
	if err != nil {
		ss.x.onStreamEnd(ss, err)
		return
	}
	stream, err := extprocsvc.NewExternalProcessorClient(conn).Process(ss.ctx)
	if err != nil {
		svc.report(h, err, false, ss.ctx)
		ss.x.onStreamEnd(ss, err)
		return
	}
	ss.mu.Lock()
	ss.established = true
	ss.mu.Unlock()
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		answered := false
		for {
			resp, err := stream.Recv()
			if err != nil {
				if !answered {
					svc.report(h, err, false, ss.ctx)
				}
				ss.x.onStreamEnd(ss, err)
				return
			}
			if !answered {
				answered = true
				svc.report(h, nil, true, ss.ctx)
			}
			ss.x.onMessage(ss, resp)
		}
	}()
	defer func() {
		ss.cancel()
		<-recvDone
		ss.mu.Lock()
		if ss.graceTimer != nil {
			ss.graceTimer.Stop()
		}
		ss.mu.Unlock()
	}()
	sendable := true
	for {
		select {
		case <-ss.wake:
		case <-recvDone:
			return // the stream is over: nothing more can be sent
		case <-ss.ctx.Done():
			return
		}
		ss.mu.Lock()
		q := ss.queue
		ss.queue = nil
		closing := ss.closing
		ss.mu.Unlock()
		for _, m := range q {
			if sendable && stream.Send(m) != nil {
				sendable = false // the status comes from Recv
			}
		}
		if closing {
			if sendable {
				_ = stream.CloseSend() // the reset follows regardless
			}
			// Envoy writes its frames into the connection before it resets
			// the stream, so the server always sees them; grpc-go drops
			// frames still queued when a stream is cancelled. Give them a
			// moment to reach the server (which normally ends the stream on
			// the half-close) before the reset.
			select {
			case <-recvDone:
			case <-time.After(flushGrace):
			}
			return
		}
	}
}
