package envoytest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
)

// Options configure an Emulator.
type Options struct {
	// Logger receives the emulator's own logs; nil discards them.
	Logger *slog.Logger
	// AccessLog receives the emulator's own summary line per request (not
	// Envoy's format); nil writes none. The listener's configured
	// access_log (envoy.access_loggers.file / stdout) is written as
	// Envoy writes it regardless (accesslog.go).
	AccessLog io.Writer
	// AccessLogMetadata lists dynamic metadata to print in access log
	// lines, as "namespace:key".
	AccessLogMetadata []string
	// KeepExchanges is how many finished exchanges Exchanges keeps (the
	// newest); 0 means 10,000.
	KeepExchanges int
	// EnvoyVersion is the Envoy release the emulator plays,
	// MAJOR.MINOR.PATCH[-LABEL]: what its node reports over ADS
	// (user_agent_build_version, unless the bootstrap's node sets one, as
	// Envoy does) and the behaviours that differ between releases
	// (version.go). Empty: DefaultEnvoyVersion.
	EnvoyVersion string
}

// Banner is printed by `sluice-dev envoy` and logged at start-up: the
// emulator must never be mistaken for a proxy.
const Banner = "envoytest: an Envoy EMULATOR for tests and demos — not a production proxy"

// Emulator plays Envoy's role on the wire for one listener: an HTTP front,
// the ext_authz and ext_proc filters, and the router. See the package
// documentation and README.md for what is and is not emulated.
type Emulator struct {
	opts    Options
	version envoyVersion // Options.EnvoyVersion
	log     *slog.Logger
	conns   *connPool
	// health holds the clusters' active health checkers.
	health healthRegistry
	logs   logFiles               // access-log files, one per path (accesslog.go)
	cfg    atomic.Pointer[config] // nil until ADS gives a complete one
	xds    *adsClient             // nil for a static bootstrap
	tls    clusterTLS             // the clusters' TLS contexts and the bootstrap's static secrets
	// overload is the bootstrap's overload_manager (overload.go); nil: none.
	overload *overloadManager

	nextID atomic.Uint64

	mu        sync.Mutex
	exchanges []*Exchange
}

// New builds an emulator from a bootstrap's static resources (exactly one
// listener whose only network filter is an http_connection_manager, and
// the clusters it names), or, when the bootstrap has dynamic_resources,
// prepares to subscribe over ADS (see Run). It starts nothing.
func New(b *bootstrapv3.Bootstrap, opts Options) (*Emulator, error) {
	e := &Emulator{opts: opts, conns: newConnPool()}
	e.log = opts.Logger
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	e.log = e.log.With("component", "envoytest")
	if e.opts.KeepExchanges <= 0 {
		e.opts.KeepExchanges = 10000
	}
	if e.opts.EnvoyVersion == "" {
		e.opts.EnvoyVersion = DefaultEnvoyVersion
	}
	v, err := parseEnvoyVersion(e.opts.EnvoyVersion)
	if err != nil {
		return nil, fmt.Errorf("envoytest: Options.EnvoyVersion: %w", err)
	}
	e.version = v
	om, err := newOverloadManager(b.GetOverloadManager())
	if err != nil {
		e.conns.close()
		return nil, err
	}
	e.overload = om
	cfg, err := e.buildConfig(b)
	cfg, err = e.withBootstrapRules(b, cfg, err)
	if err != nil {
		e.health.retain(nil)
		e.conns.close()
		e.logs.close()
		return nil, err
	}
	if cfg != nil {
		e.cfg.Store(cfg)
	}
	return e, nil
}

// ListenAddr is the listener address of the configuration in force; ""
// while none is (ADS).
func (e *Emulator) ListenAddr() string {
	if cfg := e.cfg.Load(); cfg != nil {
		return cfg.listenAddr
	}
	return ""
}

// Listen opens the configured listener address. Configured over ADS, it
// first waits for a complete configuration (Run must be running) or for
// ctx to end.
func (e *Emulator) Listen(ctx context.Context) (net.Listener, error) {
	if err := e.waitConfig(ctx); err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	return lc.Listen(ctx, "tcp", e.ListenAddr())
}

// Serve serves HTTP/1.1 and cleartext HTTP/2 on ln until ctx ends, then
// shuts down (in-flight requests get 5 s) and closes its gRPC connections.
// Configured over ADS, it serves once a configuration is in force.
func (e *Emulator) Serve(ctx context.Context, ln net.Listener) error {
	if e.waitConfig(ctx) != nil {
		ln.Close()
		e.health.retain(nil)
		e.conns.close()
		e.logs.close()
		return nil
	}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Handler:           http.HandlerFunc(e.serveHTTP),
		Protocols:         &protos,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(e.log.Handler(), slog.LevelDebug),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
	}
	e.log.Info(Banner, "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err = srv.Shutdown(sctx)
		cancel()
		if e := <-errc; !errors.Is(e, http.ErrServerClosed) && err == nil {
			err = e
		}
	}
	for _, c := range e.cfg.Load().clusters {
		c.close()
	}
	e.health.retain(nil)
	e.conns.close()
	e.logs.close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

type connKey struct{}

// Exchanges returns the finished exchanges, oldest first.
func (e *Emulator) Exchanges() []*Exchange {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*Exchange(nil), e.exchanges...)
}

// ResetExchanges forgets every finished exchange.
func (e *Emulator) ResetExchanges() {
	e.mu.Lock()
	e.exchanges = nil
	e.mu.Unlock()
}

func (e *Emulator) keep(x *Exchange) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.exchanges = append(e.exchanges, x)
	if n := len(e.exchanges) - e.opts.KeepExchanges; n > 0 {
		e.exchanges = append([]*Exchange(nil), e.exchanges[n:]...)
	}
}

// serveHTTP runs one request through the filter chain. Every filter stage
// runs in its own goroutine, joined by channels, so that body data keeps
// arriving while a filter waits on its server, as in Envoy; the handler
// goroutine writes the response and waits for every stage to finish.
func (e *Emulator) serveHTTP(w http.ResponseWriter, r *http.Request) {
	cfg, done := e.useConfig()
	defer done()
	ctx, cancel := context.WithCancel(r.Context())
	s := &stream{
		id:         e.nextID.Add(1),
		e:          e,
		cfg:        cfg,
		start:      time.Now(),
		ctx:        ctx,
		clientCtx:  r.Context(),
		cancel:     cancel,
		replies:    make(chan localReply, 1),
		chainReply: make(chan localReply, 1),
	}
	s.downstream = peerOf(r)
	s.reqHeaders = fromRequest(r, s.downstream.scheme)
	s.rec = &Exchange{StreamID: s.id, Method: r.Method, Path: s.reqHeaders.Value(":path")}
	// The codec's and the connection manager's refusals before any filter
	// exists (hcm.go).
	if e.refuseEarly(s, w, r) {
		return
	}
	// The connection manager normalizes :path before it builds the filter
	// chain (path.go): a rejected path gets its 400 from no filter at all,
	// before the request headers are mutated (decodeHeaders calls
	// maybeNormalizePath before mutateRequestHeaders).
	if !cfg.path.apply(s.reqHeaders) {
		e.rejectPath(s, w)
		return
	}
	// What Envoy's connection manager adds before any filter runs.
	cfg.requestID.apply(s.reqHeaders, s.downstream.remoteIP)
	s.reqHeaders.Set("x-forwarded-proto", s.downstream.scheme)
	// The stream's timers (hcm.go), and its route as decodeHeaders first
	// chooses it (refreshCachedRoute), whose idle_timeout the idle timer
	// takes.
	e.startTimers(s)
	s.currentRoute()

	var wg sync.WaitGroup
	run := func(st stage, in <-chan frame, out chan<- frame) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st(s, in, out)
		}()
	}
	// Decode: source → filters → router; encode: router → the encode
	// chain's head (where local replies sent before any response headers
	// join: encodeHead) → filters reversed → downstream writer.
	decIn, fromCodec := make(chan frame, 16), make(chan frame, 16)
	run((*stream).fromClient, decIn, fromCodec)
	next := fromCodec
	instances := make([]filterInstance, len(cfg.filters))
	for i, f := range cfg.filters {
		instances[i] = f.instance(s)
		out := make(chan frame, 16)
		st := instances[i].decode
		if st == nil {
			st = passThrough
		}
		run(st, next, out)
		next = out
	}
	routerOut, encIn := make(chan frame, 16), make(chan frame, 16)
	run(e.routerStage, next, routerOut)
	run((*stream).encodeHead, routerOut, encIn)
	enc := encIn
	for i := len(instances) - 1; i >= 0; i-- {
		out := make(chan frame, 16)
		st := instances[i].encode
		if st == nil {
			st = passThrough
		}
		run(st, enc, out)
		enc = out
	}

	// Envoy sends end_of_stream on headers with no body (requestHasBody).
	hasBody := requestHasBody(r)
	if s.refuseUpgrade() {
		close(decIn) // no decoder filter sees the request
	} else {
		go e.readDownstream(s, r, decIn, hasBody) // not waited for: a blocked body read ends when the handler returns
	}

	e.writeDownstream(s, w, enc)
	cancel()
	wg.Wait()
	s.rec.Duration = time.Since(s.start)
	s.rec.Metadata = s.allMetadata()
	e.accessLog(s) // before keep: an exchange that is visible has its log line
	e.keep(s.rec)
	if s.rec.Reset {
		// Abort the response so the client sees a reset, not a clean end.
		panic(http.ErrAbortHandler)
	}
}

// rejectPath answers a request whose path the connection manager rejects
// (ConnectionManagerImpl::ActiveStream::decodeHeaders on
// NormalizePathAction::Reject: sendLocalReply(Code::BadRequest, "", …,
// PathNormalizationFailed) before any filter exists), through
// local_reply_config; a gRPC request gets a trailers-only response,
// grpc-status INTERNAL (13), as the HCM proto's REJECT_REQUEST says.
func (e *Emulator) rejectPath(s *stream, w http.ResponseWriter) {
	lr := localReply{status: http.StatusBadRequest, details: detailsPathNormalizationFailed}
	if strings.HasPrefix(s.reqHeaders.Value("content-type"), "application/grpc") {
		lr.headers = NewHeaders("content-type", "application/grpc", "grpc-status", strconv.FormatUint(uint64(grpcStatusForHTTP(lr.status)), 10))
		lr.status, lr.grpc = http.StatusOK, true
	}
	e.writeLocalReply(s, w, lr)
	s.cancel()
	s.rec.Duration = time.Since(s.start)
	e.accessLog(s)
	e.keep(s.rec)
}

// passThrough is the stage of a filter that does nothing in a direction.
func passThrough(s *stream, in <-chan frame, out chan<- frame) {
	defer close(out)
	pump(s, in, out)
}

// pump forwards frames from in to out until end of stream or reset. It
// does not close out.
func pump(s *stream, in <-chan frame, out chan<- frame) {
	for {
		select {
		case f, ok := <-in:
			if !ok || !s.send(out, f) || f.end {
				return
			}
		case <-s.ctx.Done():
			return
		}
	}
}

// readDownstream turns the client's request into frames.
func (e *Emulator) readDownstream(s *stream, r *http.Request, out chan<- frame, hasBody bool) {
	if !s.send(out, frame{headers: s.reqHeaders, end: !hasBody}) || !hasBody {
		return
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Body.Read(buf)
		if n > 0 {
			atomic.AddInt64(&s.rec.BytesReceived, int64(n))
			chunk := append([]byte(nil), buf[:n]...)
			if err == io.EOF && len(r.Trailer) == 0 {
				s.send(out, frame{data: chunk, end: true})
				return
			}
			if !s.send(out, frame{data: chunk}) {
				return
			}
		}
		if err == io.EOF {
			if len(r.Trailer) > 0 {
				t := &Headers{}
				for k, vs := range r.Trailer {
					for _, v := range vs {
						t.Add(k, v)
					}
				}
				s.send(out, frame{trailers: t, end: true})
				return
			}
			s.send(out, frame{end: true})
			return
		}
		if err != nil {
			// The client went away mid-body: no end of stream.
			s.cancel()
			return
		}
	}
}

// writeDownstream writes what the encode chain produces, or a local reply,
// to the client. It returns when the response is complete or the stream
// was reset.
func (e *Emulator) writeDownstream(s *stream, w http.ResponseWriter, in <-chan frame) {
	dw := &downstreamWriter{s: s, w: w, rc: http.NewResponseController(w)}
	for {
		select {
		case lr := <-s.replies:
			if lr.reset || s.respSent.Load() {
				// A reset decided by a filter that already passed response
				// headers on: what it passed is downstream in Envoy, so
				// deliver what is in flight first, then reset.
				dw.drain(in)
				s.rec.Reset = true
				s.rec.setDetails(or(lr.details, "reset"))
				return
			}
			e.writeLocalReply(s, w, lr)
			return
		case f, ok := <-in:
			if !ok {
				// The chain ended without end of stream: a reset. A pending
				// local reply wins if response headers have not gone yet.
				select {
				case lr := <-s.replies:
					if !lr.reset && !s.respSent.Load() {
						e.writeLocalReply(s, w, lr)
						return
					}
					s.rec.setDetails(or(lr.details, "reset"))
				default:
					s.rec.defaultDetails("upstream_reset_after_response_started")
				}
				s.rec.Reset = true
				return
			}
			if done := dw.write(f); done {
				return
			}
		case <-s.ctx.Done():
			// Client gone, or a filter ended the stream. A local reply
			// that raced with it still wins.
			select {
			case lr := <-s.replies:
				if !lr.reset && !s.respSent.Load() && s.clientCtx.Err() == nil {
					e.writeLocalReply(s, w, lr)
					return
				}
				s.rec.setDetails(or(lr.details, "reset"))
			default:
				s.rec.defaultDetails("downstream_remote_disconnect")
			}
			s.rec.Reset = true
			return
		}
	}
}

// downstreamWriter writes frames to the client.
type downstreamWriter struct {
	s  *stream
	w  http.ResponseWriter
	rc *http.ResponseController
}

// write writes one frame; it reports whether the response is finished
// (end of stream, or the client went away).
func (d *downstreamWriter) write(f frame) bool {
	s, w := d.s, d.w
	if f.headers != nil {
		s.freezeRoute()
		s.respSent.Store(true)
		status, _ := strconv.Atoi(f.headers.Value(":status"))
		s.cfg.requestID.respond(f.headers, s.reqHeaders)
		f.headers.toHTTP(w.Header())
		if _, ok := f.headers.Get("content-length"); !ok && !f.end {
			w.Header().Del("Content-Length")
		}
		if s.closesConnection() {
			w.Header().Set("Connection", "close")
		}
		w.WriteHeader(status)
		s.rec.Status = status
		s.rec.defaultDetails("via_upstream")
		d.rc.Flush()
	}
	if len(f.data) > 0 {
		n, err := w.Write(f.data)
		s.rec.BytesSent += int64(n)
		if err != nil {
			s.rec.Reset = true
			s.rec.setDetails("downstream_remote_disconnect")
			s.cancel()
			return true
		}
		d.rc.Flush()
	}
	if f.trailers != nil {
		for _, t := range f.trailers.Entries() {
			w.Header().Set(http.TrailerPrefix+t.Key, t.Value)
		}
	}
	return f.end
}

// drain writes the frames still in flight towards the client, until the
// chain closes (the filter that reset the stream ends its stage) or the
// stream ends.
func (d *downstreamWriter) drain(in <-chan frame) {
	for {
		select {
		case f, ok := <-in:
			if !ok || d.write(f) {
				return
			}
		case <-d.s.ctx.Done():
			return
		}
	}
}

// writeLocalReply writes a local reply straight to the client: Envoy's
// sendDirectLocalReply, for a reply sent once response headers were in the
// encode chain but none had gone downstream (the encoder filters do not
// see it; local_reply_config still applies).
func (e *Emulator) writeLocalReply(s *stream, w http.ResponseWriter, lr localReply) {
	s.freezeRoute()
	s.respSent.Store(true)
	h := w.Header()
	hd := &Headers{}
	if lr.headers != nil {
		hd = lr.headers.Clone()
	}
	// local_reply_config (localreply.go), and Envoy's content-type rules.
	body := lr.body
	if !lr.grpc {
		body = s.cfg.localReply.rewrite(s.reqHeaders, hd, lr.status, lr.body, lr.details)
	}
	hd.toHTTP(h)
	if id, ok := s.cfg.requestID.inResponse(s.reqHeaders); ok {
		h.Set("X-Request-Id", id)
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	// ActiveStream::onLocalReply: a 400 local reply closes an HTTP/1
	// connection too.
	if s.closesConnection() || (lr.status == http.StatusBadRequest && s.downstream.protocol != "HTTP/2") {
		h.Set("Connection", "close")
	}
	w.WriteHeader(lr.status)
	n, _ := w.Write(body)
	s.rec.Status = lr.status
	s.rec.setDetails(lr.details)
	s.rec.BytesSent += int64(n)
}

func (e *Emulator) accessLog(s *stream) {
	e.writeAccessLogs(s)
	if e.opts.AccessLog == nil {
		return
	}
	x := s.rec
	status := strconv.Itoa(x.Status)
	if x.Reset {
		status += "(reset)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[%s] %q %s %s cluster=%q rx=%d tx=%d %dms",
		s.start.UTC().Format(time.RFC3339Nano), x.Method+" "+x.Path+" "+s.downstream.protocol,
		status, x.Details, x.Cluster, atomic.LoadInt64(&x.BytesReceived), x.BytesSent, x.Duration.Milliseconds())
	for _, nk := range e.opts.AccessLogMetadata {
		ns, key, _ := strings.Cut(nk, ":")
		v := "-"
		if m := x.Metadata[ns]; m != nil {
			if f, ok := m.GetFields()[key]; ok {
				v = metadataString(f.AsInterface())
			}
		}
		fmt.Fprintf(&b, " %s=%s", nk, v)
	}
	b.WriteByte('\n')
	io.WriteString(e.opts.AccessLog, b.String())
}

func metadataString(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

func peerOf(r *http.Request) streamPeer {
	p := streamPeer{protocol: r.Proto, scheme: "http"}
	if r.ProtoMajor == 2 {
		p.protocol = "HTTP/2"
	}
	if h, port, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		n, _ := strconv.Atoi(port)
		p.remoteIP, p.remotePort = h, uint32(n)
	}
	if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
		if h, port, err := net.SplitHostPort(c.LocalAddr().String()); err == nil {
			n, _ := strconv.Atoi(port)
			p.localIP, p.localPort = h, uint32(n)
		}
	}
	return p
}

func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
