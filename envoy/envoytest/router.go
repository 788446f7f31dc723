package envoytest

import (
	"context"
	"errors"

	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// routerStage is the router filter: the end of the decode chain and the
// start of the encode chain. It forwards the request to the routed
// cluster over plain HTTP/1.1 or HTTP/2 and streams the response back,
// chunk by chunk. Its own local replies (no route, no cluster, connect
// failure, timeout) go through the encode chain, as Envoy's router local
// replies reach ext_proc since v1.37.
func (e *Emulator) routerStage(s *stream, in <-chan frame, out chan<- frame) {
	defer close(out)
	var hf frame
	select {
	case f, ok := <-in:
		if !ok {
			return
		}
		hf = f
	case <-s.ctx.Done():
		return
	}
	rt := s.currentRoute()
	reply := func(status int, body, details string) {
		h := NewHeaders(":status", strconv.Itoa(status), "content-type", "text/plain", "content-length", strconv.Itoa(len(body)))
		s.rec.setDetails(details)
		if s.send(out, frame{headers: h, end: body == ""}) && body != "" {
			s.send(out, frame{data: []byte(body), end: true})
		}
	}
	switch {
	case rt == nil:
		reply(404, "", "route_not_found")
		return
	case rt.direct != nil:
		body := string(rt.direct.GetBody().GetInlineString())
		if body == "" {
			body = string(rt.direct.GetBody().GetInlineBytes())
		}
		h := NewHeaders(":status", strconv.Itoa(int(rt.direct.GetStatus())), "content-length", strconv.Itoa(len(body)))
		if body != "" {
			h.Add("content-type", "text/plain")
		}
		s.rec.setDetails("direct_response")
		if s.send(out, frame{headers: h, end: body == ""}) && body != "" {
			s.send(out, frame{data: []byte(body), end: true})
		}
		return
	}
	cl := s.cfg.clusters[rt.cluster]
	s.rec.Cluster = rt.cluster
	switch {
	case rt.clusterMissing || cl == nil:
		reply(503, "", "cluster_not_found")
		return
	case cl.tls:
		reply(503, "upstream connect error or disconnect/reset before headers. reset reason: TLS is not spoken by the emulator", "upstream_reset_before_response_started{TLS_not_supported_by_emulator}")
		return
	}
	ep, ok := cl.pick()
	if !ok {
		reply(503, "no healthy upstream", "no_healthy_upstream")
		return
	}

	// The route timeout runs from the start of the upstream request to the
	// end of the response; 0 disables it.
	uctx, ucancel := context.WithCancel(s.ctx)
	defer ucancel()
	var timedOut <-chan time.Time
	if rt.timeout > 0 {
		t := time.NewTimer(rt.timeout)
		defer t.Stop()
		timedOut = t.C
	}

	h := hf.headers
	req, err := http.NewRequestWithContext(uctx, h.Value(":method"), "http://"+ep+h.Value(":path"), nil)
	if err != nil {
		reply(400, "", "invalid_request:"+err.Error())
		return
	}
	h.toHTTP(req.Header)
	req.Host = h.Value(":authority")
	req.Header.Set("X-Envoy-Expected-Rq-Timeout-Ms", strconv.FormatInt(rt.timeout.Milliseconds(), 10))
	s.rec.setUpstream(&UpstreamRequest{Cluster: rt.cluster, Endpoint: ep, Method: req.Method, Path: h.Value(":path"), Headers: h.Clone()})
	bodyDone := make(chan struct{})
	if hf.end {
		req.Body = http.NoBody
		req.ContentLength = 0
		close(bodyDone)
	} else {
		pr, pw := io.Pipe()
		req.Body = pr
		req.ContentLength = -1
		if cl, err := strconv.ParseInt(h.Value("content-length"), 10, 64); err == nil {
			req.ContentLength = cl
		}
		go func() {
			defer close(bodyDone)
			for {
				select {
				case f, ok := <-in:
					if !ok {
						pw.CloseWithError(errors.New("downstream reset"))
						return
					}
					if len(f.data) > 0 {
						s.rec.appendUpstreamBody(f.data)
						if _, err := pw.Write(f.data); err != nil {
							return
						}
					}
					if f.end {
						pw.Close()
						return
					}
				case <-uctx.Done():
					pw.CloseWithError(uctx.Err())
					return
				}
			}
		}()
	}

	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := cl.client.Do(req)
		done <- result{resp, err}
	}()
	var resp *http.Response
	select {
	case r := <-done:
		if r.err != nil {
			ucancel()
			<-bodyDone
			if s.ctx.Err() != nil {
				return
			}
			reply(503, "upstream connect error or disconnect/reset before headers. reset reason: connection failure", "upstream_reset_before_response_started{connection_failure}")
			return
		}
		resp = r.resp
	case <-timedOut:
		ucancel()
		<-bodyDone
		if r := <-done; r.resp != nil {
			r.resp.Body.Close()
		}
		reply(504, "upstream request timeout", "upstream_response_timeout")
		return
	case <-s.ctx.Done():
		ucancel()
		<-bodyDone
		if r := <-done; r.resp != nil {
			r.resp.Body.Close()
		}
		return
	}
	defer resp.Body.Close()

	rh := NewHeaders(":status", strconv.Itoa(resp.StatusCode))
	for k, vs := range resp.Header {
		for _, v := range vs {
			rh.Add(strings.ToLower(k), v)
		}
	}
	if resp.ContentLength >= 0 {
		if _, ok := rh.Get("content-length"); !ok && resp.ContentLength > 0 {
			rh.Set("content-length", strconv.FormatInt(resp.ContentLength, 10))
		}
	}
	noBody := resp.ContentLength == 0 && len(resp.Trailer) == 0
	s.respHeaders = rh
	if !s.send(out, frame{headers: rh, end: noBody}) || noBody {
		<-bodyDone
		return
	}

	// Stream the body: one frame per read, as Envoy's codec delivers data.
	chunks := make(chan frame)
	go func() {
		defer close(chunks)
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			f := frame{}
			if n > 0 {
				f.data = append([]byte(nil), buf[:n]...)
			}
			if err == io.EOF {
				if len(resp.Trailer) > 0 {
					if n > 0 {
						select {
						case chunks <- f:
						case <-uctx.Done():
							return
						}
					}
					t := &Headers{}
					for k, vs := range resp.Trailer {
						for _, v := range vs {
							t.Add(strings.ToLower(k), v)
						}
					}
					f = frame{trailers: t}
				}
				f.end = true
			} else if err != nil {
				return // upstream reset mid-body: no end of stream
			}
			if n == 0 && !f.end && f.trailers == nil {
				continue
			}
			select {
			case chunks <- f:
			case <-uctx.Done():
				return
			}
			if f.end {
				return
			}
		}
	}()
	for {
		select {
		case f, ok := <-chunks:
			if !ok {
				s.rec.setDetails("upstream_reset_after_response_started{remote_reset}")
				ucancel()
				<-bodyDone
				return
			}
			if !s.send(out, f) || f.end {
				ucancel()
				<-bodyDone
				return
			}
		case <-timedOut:
			s.rec.setDetails("upstream_response_timeout")
			ucancel()
			<-bodyDone
			return
		case <-s.ctx.Done():
			ucancel()
			<-bodyDone
			return
		}
	}
}
