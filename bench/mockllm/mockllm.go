package mockllm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults that New applies to zero Options fields.
const (
	DefaultWords           = 13
	DefaultDimensions      = 8
	DefaultMaxBodyBytes    = 32 << 20
	DefaultRecordLimit     = 10_000
	DefaultShutdownTimeout = 5 * time.Second
	DefaultAddr            = "127.0.0.1:8081"
)

// Limits on sizes a control may ask for, so that a typo cannot make the
// mock build a gigabyte reply.
const (
	maxWords      = 1_000_000
	maxDimensions = 65_536
)

// Options are the server-wide defaults. Every behaviour field can be
// overridden for one request by the matching x-mock-* header (see
// README.md). The zero value is a usable server: 13-word
// replies, no delays, no credentials required.
type Options struct {
	// Words is the reply size in words; each word is one output token.
	// Zero means DefaultWords, or Chunks when only Chunks is set.
	Words int
	// Chunks is the number of content chunks a stream carries; the words
	// are spread over them. Zero means one chunk per word. A stream never
	// carries more content chunks than words.
	Chunks int
	// Latency delays the response headers.
	Latency time.Duration
	// FirstByte delays the first body byte; the headers are sent and
	// flushed first.
	FirstByte time.Duration
	// Interval pauses before every stream event after the first.
	Interval time.Duration
	// Split, when positive, writes every body in pieces that end at
	// multiples of Split bytes (and at the end of every stream event),
	// each written and flushed on its own.
	Split int
	// Gzip compresses every body (content-encoding: gzip), flushing the
	// compressor at every piece so streams stay incremental.
	Gzip bool
	// CRLF ends synthesised SSE lines with "\r\n" instead of "\n".
	CRLF bool
	// OmitUsage leaves usage out of every synthesised reply, even when
	// the request asks for it.
	OmitUsage bool
	// Status, when set (400–599), answers every request with that error
	// status, as x-mock-status does for one request: a provider that is
	// down, for fallback tests.
	Status int
	// ResponseHeaders are added to every response but /healthz's, as a
	// provider adds its own (x-request-id, openai-organization, …).
	ResponseHeaders http.Header
	// CachedTokens is the part of the prompt reported as read from the
	// provider's prompt cache (capped at the prompt size).
	CachedTokens int64
	// CacheWriteTokens is the part of the prompt an Anthropic reply
	// reports as written to the cache (cache_creation_input_tokens).
	CacheWriteTokens int64
	// ReasoningTokens are added to the output tokens and reported as
	// reasoning tokens where the dialect has a field for them.
	ReasoningTokens int64
	// InputTokens, when positive, is the prompt size every reply reports
	// instead of the count of the request's prompt, as x-mock-input-tokens
	// does for one request: a prompt the provider reads from elsewhere (a
	// file id, a stored response) that the request body does not show.
	InputTokens int64
	// Dimensions is the embedding length when neither the request nor a
	// header names one. Zero means DefaultDimensions.
	Dimensions int

	// APIKey, when set, is required as "authorization: Bearer <key>" on
	// the OpenAI paths (/v1/chat/completions, /v1/completions,
	// /v1/embeddings, /v1/responses).
	APIKey string
	// AzureAPIKey, when set, is required as "api-key: <key>" on the Azure
	// OpenAI paths (/openai/deployments/{deployment}/…).
	AzureAPIKey string
	// AnthropicAPIKey, when set, is required as "x-api-key: <key>" on
	// /v1/messages, together with an anthropic-version header.
	AnthropicAPIKey string

	// Cassettes are recorded exchanges replayed instead of synthesised
	// replies when a request matches one (see Cassette).
	Cassettes []*Cassette

	// MaxBodyBytes bounds request bodies; larger ones get 413. Zero
	// means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// RecordLimit is how many requests Received keeps (the most recent
	// ones). Zero means DefaultRecordLimit; negative keeps none.
	RecordLimit int
	// ShutdownTimeout bounds the graceful part of Serve's shutdown. Zero
	// means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Logger receives debug lines per request (method, path, outcome;
	// never headers or bodies). Nil discards.
	Logger *slog.Logger
}

// Validate reports every problem with o at once, each prefixed with the
// field it concerns. New does not call it (a test double should not make
// its callers handle errors); it clamps instead. Run calls it.
func (o Options) Validate() error {
	var errs []error
	neg := func(field string, bad bool) {
		if bad {
			errs = append(errs, fmt.Errorf("%s: must not be negative", field))
		}
	}
	neg("words", o.Words < 0)
	neg("chunks", o.Chunks < 0)
	neg("latency", o.Latency < 0)
	neg("first_byte", o.FirstByte < 0)
	neg("interval", o.Interval < 0)
	neg("split", o.Split < 0)
	neg("cached_tokens", o.CachedTokens < 0)
	neg("cache_write_tokens", o.CacheWriteTokens < 0)
	neg("reasoning_tokens", o.ReasoningTokens < 0)
	neg("dimensions", o.Dimensions < 0)
	neg("max_body_bytes", o.MaxBodyBytes < 0)
	neg("shutdown_timeout", o.ShutdownTimeout < 0)
	if o.Words > maxWords {
		errs = append(errs, fmt.Errorf("words: at most %d", maxWords))
	}
	if o.Chunks > maxWords {
		errs = append(errs, fmt.Errorf("chunks: at most %d", maxWords))
	}
	if o.Dimensions > maxDimensions {
		errs = append(errs, fmt.Errorf("dimensions: at most %d", maxDimensions))
	}
	for i, c := range o.Cassettes {
		if c == nil {
			errs = append(errs, fmt.Errorf("cassettes[%d]: nil", i))
		}
	}
	return errors.Join(errs...)
}

// LogValue keeps the credentials out of logs: it reports only whether
// each is set.
func (o Options) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int("words", o.Words),
		slog.Int("chunks", o.Chunks),
		slog.Duration("latency", o.Latency),
		slog.Duration("first_byte", o.FirstByte),
		slog.Duration("interval", o.Interval),
		slog.Int("split", o.Split),
		slog.Bool("gzip", o.Gzip),
		slog.Bool("api_key_set", o.APIKey != ""),
		slog.Bool("azure_api_key_set", o.AzureAPIKey != ""),
		slog.Bool("anthropic_api_key_set", o.AnthropicAPIKey != ""),
		slog.Int("cassettes", len(o.Cassettes)),
	)
}

// Request is one request as the mock received it.
type Request struct {
	Method   string
	Path     string
	RawQuery string
	Host     string
	Header   http.Header
	Body     []byte
}

// Server is the mock provider. It is an http.Handler; Serve runs it on a
// listener. All methods are safe for concurrent use.
type Server struct {
	opts   Options
	log    *slog.Logger
	replay []replayEntry

	requests atomic.Int64
	rejected atomic.Int64
	ids      atomic.Uint64 // response ids; never reset, so ids stay unique

	mu       sync.Mutex
	received []Request
}

var _ http.Handler = (*Server)(nil)

// New returns a server with opts; it starts nothing. Zero fields take the
// defaults documented on Options; negative numbers are treated as zero
// (use Options.Validate to reject them instead).
func New(opts Options) *Server {
	opts.Words = max(opts.Words, 0)
	opts.Chunks = max(opts.Chunks, 0)
	opts.Latency = max(opts.Latency, 0)
	opts.FirstByte = max(opts.FirstByte, 0)
	opts.Interval = max(opts.Interval, 0)
	opts.Split = max(opts.Split, 0)
	opts.CachedTokens = max(opts.CachedTokens, 0)
	opts.CacheWriteTokens = max(opts.CacheWriteTokens, 0)
	opts.ReasoningTokens = max(opts.ReasoningTokens, 0)
	opts.Words = min(opts.Words, maxWords)
	opts.Chunks = min(opts.Chunks, maxWords)
	if opts.Dimensions <= 0 {
		opts.Dimensions = DefaultDimensions
	}
	opts.Dimensions = min(opts.Dimensions, maxDimensions)
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.RecordLimit == 0 {
		opts.RecordLimit = DefaultRecordLimit
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts.Cassettes = slices.Clone(opts.Cassettes)
	return &Server{
		opts:   opts,
		log:    log.With("component", "mockllm"),
		replay: compileCassettes(opts.Cassettes),
	}
}

// Handler returns the server as an http.Handler (for httptest or a mux).
func (s *Server) Handler() http.Handler { return s }

// Requests is the number of requests that reached the handler (health
// checks on /healthz excluded), including rejected ones.
func (s *Server) Requests() int64 { return s.requests.Load() }

// Rejected is the number of requests refused by the credential check
// (401, or 400 for a missing anthropic-version when a key is required).
func (s *Server) Rejected() int64 { return s.rejected.Load() }

// Received returns a copy of the recorded requests, oldest first (at most
// Options.RecordLimit of the most recent). Header and Body are shared
// with the server's record: do not modify them.
func (s *Server) Received() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := max(s.opts.RecordLimit, 0)
	return slices.Clone(s.received[max(len(s.received)-n, 0):])
}

// Reset zeroes the counters and forgets the recorded requests.
func (s *Server) Reset() {
	s.mu.Lock()
	s.received = nil
	s.requests.Store(0)
	s.rejected.Store(0)
	s.mu.Unlock()
}

func (s *Server) record(r *http.Request, body []byte) {
	limit := s.opts.RecordLimit
	if limit < 0 {
		return
	}
	req := Request{
		Method:   r.Method,
		Path:     r.URL.Path,
		RawQuery: r.URL.RawQuery,
		Host:     r.Host,
		Header:   r.Header.Clone(),
		Body:     body,
	}
	s.mu.Lock()
	s.received = append(s.received, req)
	if len(s.received) > 2*limit {
		// Trim in batches so recording stays amortised O(1).
		n := copy(s.received, s.received[len(s.received)-limit:])
		clear(s.received[n:])
		s.received = s.received[:n]
	}
	s.mu.Unlock()
}

// Serve answers HTTP/1.1 and cleartext HTTP/2 (h2c with prior knowledge)
// on ln until ctx ends, then shuts down: in-flight requests get
// Options.ShutdownTimeout to finish, after which their contexts are
// cancelled and the connections closed. It returns once every handler
// has returned; nil after a shutdown caused by ctx, otherwise the error
// that stopped serving. Serve closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)

	// Request contexts descend from hctx, so cancelling it stops every
	// pending delay once the graceful period is over.
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var active handlers
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !active.enter() {
				w.Header().Set("Connection", "close")
				http.Error(w, "mockllm: shutting down", http.StatusServiceUnavailable)
				return
			}
			defer active.leave()
			s.ServeHTTP(w, r)
		}),
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return hctx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	var serveErr error
	select {
	case err := <-errc:
		serveErr = fmt.Errorf("mockllm: serve: %w", err)
		cancel()
		_ = srv.Close() // already failed; Close only releases what is left
	case <-ctx.Done():
		sctx, scancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
		err := srv.Shutdown(sctx)
		scancel()
		if err != nil {
			s.log.Debug("graceful shutdown timed out; closing", "err", err)
			cancel()
			_ = srv.Close() // the error that matters (the timeout) is logged
		}
		<-errc // http.ErrServerClosed
	}
	active.closeAndWait()
	return serveErr
}

// handlers counts running handlers so Serve can wait for the last one;
// once closed it admits no more (unlike a WaitGroup, entering after the
// wait began is not a misuse).
type handlers struct {
	mu     sync.Mutex
	n      int
	closed bool
	idle   chan struct{} // closed when closed && n == 0
}

func (h *handlers) enter() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.n++
	return true
}

func (h *handlers) leave() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n--
	if h.closed && h.n == 0 {
		close(h.idle)
	}
}

func (h *handlers) closeAndWait() {
	h.mu.Lock()
	h.closed = true
	h.idle = make(chan struct{})
	if h.n == 0 {
		h.mu.Unlock()
		return
	}
	idle := h.idle
	h.mu.Unlock()
	<-idle
}
