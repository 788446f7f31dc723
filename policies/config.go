package policies

import (
	"time"

	"github.com/sluicegw/sluice/internal/providerkind"
)

// Config is the source form of sluice.yaml, exactly as an operator writes it.
// It is produced by Load (which expands ${ENV}, rejects unknown fields and
// reports syntax errors with line and column), checked by Validate, and
// turned into an immutable Snapshot by Compile. The hot path never reads a
// Config; it reads the Snapshot.
type Config struct {
	Listen    Listen           `yaml:"listen"`
	Store     Store            `yaml:"store"`
	Ledger    Ledger           `yaml:"ledger"`
	Admission Admission        `yaml:"admission"`
	Gateway   Gateway          `yaml:"gateway"`
	Providers []Provider       `yaml:"providers"`
	Models    []Model          `yaml:"models"`
	Pricing   map[string]Price `yaml:"pricing"`
	Orgs      []Org            `yaml:"orgs"`
	Teams     []Team           `yaml:"teams"`
	Keys      []DeclaredKey    `yaml:"keys"`
	XDS       XDS              `yaml:"xds"`
	Admin     Admin            `yaml:"admin"`
	Security  Security         `yaml:"security"`
	Runtime   Runtime          `yaml:"runtime"`
}

// Runtime holds the Go runtime's settings for sluice serve, read when it
// starts (a change needs a restart). The environment's GOGC and
// GOMEMLIMIT, where set, win over them.
type Runtime struct {
	// GOGC, when set (above 0), is the collector's percentage, as the GOGC
	// environment variable sets it, in place of serve's own pacing
	// (internal/gcpace).
	GOGC int `yaml:"gogc"`
	// MemoryLimitBytes, when set (above 0), is the runtime's soft memory
	// limit, as GOMEMLIMIT sets it: set it below the container's limit.
	MemoryLimitBytes int64 `yaml:"memory_limit_bytes"`
}

// Admin configures the admin HTTP API on listen.admin (keys, limits,
// spend). /healthz, /readyz and /metrics need no token.
type Admin struct {
	// Token is the bearer token the API requires, normally
	// "${SLUICE_ADMIN_TOKEN}". Empty: the API is off (its routes answer
	// 403 saying so).
	Token Secret `yaml:"token"`
	// PProf serves Go's runtime profiles under /debug/pprof/ on
	// listen.admin, behind Token (which it requires). Default false: the
	// paths answer 404. Read on every request, so a reload turns it on or
	// off at once.
	PProf bool `yaml:"pprof"`
}

// Listen holds the addresses Sluice listens on (host:port). All default to
// loopback.
type Listen struct {
	GRPC  string `yaml:"grpc"`  // ext_authz, ext_proc and gRPC health
	XDS   string `yaml:"xds"`   // the xDS control plane
	Admin string `yaml:"admin"` // /healthz, /readyz, /metrics
	Envoy string `yaml:"envoy"` // the listener Sluice asks Envoy to open
}

// Store selects the backend for runtime-managed keys, teams and orgs.
// Exactly one of SQLite and Postgres is set.
type Store struct {
	// SQLite is the path of the embedded database file. A relative path is
	// resolved against the directory of the config file.
	SQLite string `yaml:"sqlite"`
	// Postgres is the PostgreSQL database (usually "${DATABASE_URL}"):
	// a URL, or a mapping of the URL and its settings.
	Postgres Postgres `yaml:"postgres"`
}

// Ledger selects where spend records are written. Exactly one of SQLite
// and Postgres is set.
type Ledger struct {
	// SQLite is the path of the embedded spend ledger. A relative path is
	// resolved against the directory of the config file.
	SQLite string `yaml:"sqlite"`
	// Postgres is a PostgreSQL connection URL (usually "${DATABASE_URL}"):
	// the ledger every replica shares. Records are durable first in this
	// replica's spool (Spool), then moved into PostgreSQL.
	Postgres Postgres `yaml:"postgres"`
	// Spool is the path of the spool in front of PostgreSQL (with
	// Postgres): a file on this replica's own disk, which must outlive a
	// restart (a volume, not a temporary directory). A relative path is
	// resolved against the directory of the config file. Default
	// "sluice-ledger-spool". With SQLite the spool is the file's path
	// plus "-spool", and Spool must be empty.
	Spool string `yaml:"spool"`
	// Retention, with Postgres, is how long spend records are kept: every
	// hour, serve drops the monthly partitions that end before now minus
	// Retention (whole partitions, under a lock timeout; never a DELETE
	// of the records). 0, the default, keeps everything.
	Retention time.Duration `yaml:"retention"`
	// SpoolMaxBytes bounds the records the spool holds that the database
	// does not have yet (it is behind: slow, failing, down): past it, the
	// ledger takes the records of requests already answered and no new
	// requests (503 ledger_unavailable, /readyz not ready) until the
	// database catches up. Default 1 GiB.
	SpoolMaxBytes int64 `yaml:"spool_max_bytes"`
}

// Gateway holds request-path settings of the ext_proc service.
type Gateway struct {
	// MaxRequestBodyBytes refuses larger request bodies with 413 before
	// parsing them. Envoy's listener buffer must be at least as large.
	MaxRequestBodyBytes int64 `yaml:"max_request_body_bytes"`
	// UnknownPaths says what happens to requests for paths that are not
	// an API Sluice serves: "deny" (404 with a clear error) or "pass"
	// (authenticated, sent to the provider PassTo names for the request's
	// API with that provider's credential, unmetered).
	UnknownPaths string `yaml:"unknown_paths"`
	// PassTo names, per API, the provider that takes unknown paths under
	// unknown_paths: pass. An API left unset goes to its only provider
	// when exactly one speaks it (azure-openai never: its paths are its
	// own).
	PassTo PassTo `yaml:"pass_to"`
	// UnpricedModels says what happens to a request for a model the
	// pricing table does not list: "allow" (served, recorded as unpriced
	// at cost 0, counted in sluice_unpriced_requests_total; budgets cannot
	// see it) or "deny" (403).
	UnpricedModels string `yaml:"unpriced_models"`
	// BudgetTimeZone is the IANA time zone of calendar budget periods
	// (day, week, month). Default UTC.
	BudgetTimeZone string `yaml:"budget_time_zone"`
	// DefaultMaxOutputTokens is reserved for a reply whose request sets no
	// max_tokens, for models without max_output_tokens. Default 4096.
	DefaultMaxOutputTokens int64 `yaml:"default_max_output_tokens"`
	// ReservationTTL releases a reservation that was never settled (a
	// stream Sluice lost track of) after this long. Default 15m.
	ReservationTTL time.Duration `yaml:"reservation_ttl"`
	// DrainTimeout is how long a replica told to stop (SIGTERM) lets its
	// open streams finish after it stopped taking new ones: long enough
	// for a long generation. Streams still open then are settled as
	// cancelled — charged what they delivered, recorded — and the process
	// exits. Default 10m; read when serve starts.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// Background says what happens to work Sluice cannot meter — a
	// responses request with "background": true, which the provider
	// answers at once without usage and runs later: "deny" (the default,
	// also when unset: 400 background_not_metered) or "charge_reservation" (served, and
	// charged its whole reservation when the reply arrives).
	Background string `yaml:"background"`
	// RequestTimeout bounds how long Envoy waits for a whole request: from
	// its first byte until the router has it all, or a response started
	// (the listener's request_timeout; a streamed response is not
	// bounded by it). Past it the client gets 408 (504 if it had sent the
	// whole request). Default 5m; 0 disables it.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// StreamIdleTimeout ends a request that sent or received nothing for
	// this long before it is routed to a provider (the listener's
	// stream_idle_timeout; once routed, the provider's idle_timeout
	// applies): 408 while the request is incomplete, 504 after. Default
	// 5m; 0 disables it.
	StreamIdleTimeout time.Duration `yaml:"stream_idle_timeout"`
}

// gateway.background values.
const (
	BackgroundDeny              = "deny"
	BackgroundChargeReservation = "charge_reservation"
)

// PassTo is gateway.pass_to: a provider name per API.
type PassTo struct {
	OpenAI    string `yaml:"openai"`
	Anthropic string `yaml:"anthropic"`
}

// Provider is an upstream LLM API.
type Provider struct {
	Name string `yaml:"name"`
	// Kind is the provider's API (providerkind.Kinds lists them).
	Kind    providerkind.Kind `yaml:"kind"`
	BaseURL string            `yaml:"base_url"`
	// APIKey is the provider credential, normally "${SOME_ENV_VAR}". Required
	// for every kind but openai-compatible.
	APIKey Secret `yaml:"api_key"`
	// APIVersion is Azure OpenAI's api-version query parameter (required for
	// azure-openai, refused elsewhere).
	APIVersion string `yaml:"api_version"`
	// AnthropicVersion is the anthropic-version header sent when the client
	// sent none (anthropic only; default providerkind.DefaultAnthropicVersion).
	AnthropicVersion string `yaml:"anthropic_version"`
	// ForwardClientHeaders lists the account headers of the provider's kind
	// (providerkind.AccountHeaders: openai-organization, openai-project, …)
	// that still reach the provider from the client when Sluice injects the
	// provider's credential. Default none: the gateway's credential is
	// never sent with an account the client chose.
	ForwardClientHeaders []string `yaml:"forward_client_headers"`

	// Endpoints lists the provider's addresses (host:port) explicitly, for
	// self-hosted servers: the Envoy cluster is then EDS over these
	// instead of DNS resolution of base_url's host.
	Endpoints []string `yaml:"endpoints"`
	// CAFile is the PEM bundle of the CA certificates Envoy verifies an
	// https provider's certificate with, for a provider behind a private
	// CA: an absolute path on Envoy's machine, the same on every node
	// group. Default (nil): the node group's upstream_ca_file, else
	// xds.upstream_ca_file. Refused for an http base_url.
	CAFile *string `yaml:"ca_file"`
	// HTTP2 makes Envoy speak HTTP/2 to the provider (default HTTP/1.1).
	HTTP2 bool `yaml:"http2"`
	// ConnectTimeout bounds a TCP (and TLS) connect. Default 5s.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// Timeout bounds a whole request, response included. Default 0: none,
	// so that a long generation is never cut; IdleTimeout guards stalls.
	Timeout time.Duration `yaml:"timeout"`
	// IdleTimeout ends a request that sent or received nothing for this
	// long. Default 5m.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	Retries     Retries       `yaml:"retries"`
	// CircuitBreaker bounds what Envoy sends to the provider at once.
	CircuitBreaker CircuitBreaker `yaml:"circuit_breaker"`
	// OutlierDetection ejects an endpoint after consecutive failures.
	OutlierDetection OutlierDetection `yaml:"outlier_detection"`
	// Usage says how the usage the provider reports is read.
	Usage ProviderUsage `yaml:"usage"`
}

// ProviderUsage holds a provider's rules for reading the usage it
// reports (internal/usage applies them).
type ProviderUsage struct {
	// TotalExcess is what is done with an OpenAI-shaped total_tokens
	// above prompt + completion: TotalExcessOutput (the default) charges
	// the difference as output tokens, counted as reasoning (the servers
	// known to send one, Gemini's OpenAI-compatible endpoint, bill their
	// thinking tokens that way); TotalExcessIgnore charges the counts as
	// reported.
	TotalExcess string `yaml:"total_excess"`
}

// The values of ProviderUsage.TotalExcess.
const (
	TotalExcessOutput = "output"
	TotalExcessIgnore = "ignore"
)

// Retries says when Envoy retries a request to a provider. A retry happens
// only before any response byte has reached the client.
type Retries struct {
	// Max is the number of retries on the same provider (default 1; 0
	// disables them). A fallback model adds one retry per further provider.
	Max *int64 `yaml:"max"`
	// On lists the conditions: connect-failure, reset, 5xx, 429.
	// Default: connect-failure, reset, 5xx.
	On []string `yaml:"on"`
}

// RetryConditions are the values Retries.On accepts.
var RetryConditions = []string{"connect-failure", "reset", "5xx", "429"}

// CircuitBreaker holds Envoy circuit-breaker thresholds for a provider
// cluster. Zero keeps Envoy's default (1024 each).
type CircuitBreaker struct {
	MaxConnections     int64 `yaml:"max_connections"`
	MaxPendingRequests int64 `yaml:"max_pending_requests"`
	MaxRequests        int64 `yaml:"max_requests"`
}

// OutlierDetection holds Envoy outlier-detection settings for a provider
// cluster.
type OutlierDetection struct {
	// Consecutive5xx ejects an endpoint after this many 5xx in a row
	// (default 5; 0 keeps the default, -1 disables ejection).
	Consecutive5xx int64 `yaml:"consecutive_5xx"`
	// BaseEjectionTime is how long the first ejection lasts (default 30s).
	BaseEjectionTime time.Duration `yaml:"base_ejection_time"`
}

// XDS configures the control plane Sluice serves to Envoy.
type XDS struct {
	// SluiceAddresses are the host:port addresses of the Sluice replicas
	// that Envoy's ext_authz and ext_proc call. Default: listen.grpc.
	SluiceAddresses []string `yaml:"sluice_addresses"`
	// AccessLog is the file Envoy writes one JSON line per request to,
	// with Sluice's usage metadata. Default /dev/stdout; "off" disables.
	AccessLog string `yaml:"access_log"`
	// GRPCListener names the api_listener served to proxyless gRPC
	// clients (grpc-go dials xds:///<name>). Default "sluice-grpc".
	GRPCListener string `yaml:"grpc_listener"`
	// UpstreamCAFile is the PEM bundle of the CA certificates Envoy
	// verifies https providers' certificates with (the clusters'
	// trusted_ca): an absolute path on Envoy's machine, which Sluice never
	// opens. Default DefaultUpstreamCAFile.
	UpstreamCAFile string `yaml:"upstream_ca_file"`
	// NodeGroups give groups of Envoy nodes their own listener address and
	// Sluice addresses. The first group that matches a node wins; nodes
	// that match none share the top-level configuration.
	NodeGroups []NodeGroup `yaml:"node_groups"`
	// ExtensionTLS is the TLS Envoy speaks to Sluice: on the emitted
	// sluice.extension cluster (ext_authz, ext_proc) and on the xDS
	// cluster of `sluice envoy bootstrap`. Nil: plaintext, for a Sluice
	// on loopback or behind a mesh sidecar that does the mTLS.
	ExtensionTLS *ExtensionTLS `yaml:"extension_tls"`
	// Proxyless says what proxyless gRPC clients (the xDS "gRPC" flavour:
	// grpc-go, grpc-java) are served. They run neither ext_authz nor
	// ext_proc, so nothing checks their requests. "off" (the default):
	// no provider clusters and no routes. ProxylessRoutingOnly: the
	// provider routes and clusters, chosen by the routing header the
	// client sets itself — no key, no allow-list, no limit, no budget,
	// no provider credential, no spend record.
	Proxyless string `yaml:"proxyless"`
	// ExtensionHealthCheck is how each Envoy checks each Sluice replica
	// of the sluice.extension cluster (gRPC health, grpc.health.v1), so
	// that a dead, draining or black-holed replica stops taking requests.
	ExtensionHealthCheck HealthCheck `yaml:"extension_health_check"`
}

// HealthCheck is Envoy's active gRPC health check of Sluice's replicas.
// A replica that answers NOT_SERVING (it is shutting down) is taken out
// at the next check; one that cannot be reached or does not answer within
// Timeout, after UnhealthyThreshold checks in a row; it is put back after
// HealthyThreshold good checks.
type HealthCheck struct {
	Interval           time.Duration `yaml:"interval"`
	Timeout            time.Duration `yaml:"timeout"`
	UnhealthyThreshold int           `yaml:"unhealthy_threshold"`
	HealthyThreshold   int           `yaml:"healthy_threshold"`
}

// The values of XDS.Proxyless.
const (
	ProxylessOff         = "off"
	ProxylessRoutingOnly = "routing_only"
)

// ExtensionTLS is the client side of Envoy's TLS to Sluice's gRPC and xDS
// servers. Every path is a file on Envoy's machine, which Sluice never
// opens. The client certificate comes from files (CertFile and KeyFile)
// or from a secret Envoy already has by name (SDSCertificate: a static
// secret of its bootstrap, which can watch its files); the server is
// verified against CAFile (or the secret SDSValidation) and, when set,
// the server's identities.
type ExtensionTLS struct {
	// SNI is the server name Envoy sends (and the default DNS identity it
	// expects of Sluice's certificate when ServerSANs is empty).
	SNI string `yaml:"sni"`
	// CertFile and KeyFile are Envoy's client certificate chain and key,
	// PEM.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// SDSCertificate names a TLS certificate secret in Envoy's bootstrap
	// (static_resources.secrets) instead of CertFile and KeyFile.
	SDSCertificate string `yaml:"sds_certificate"`
	// CAFile is the PEM bundle Envoy verifies Sluice's server certificate
	// with.
	CAFile string `yaml:"ca_file"`
	// SDSValidation names a validation-context secret in Envoy's bootstrap
	// instead of CAFile.
	SDSValidation string `yaml:"sds_validation"`
	// ServerSANs are the identities Sluice's certificate must carry (any
	// one of them): URI SANs such as SPIFFE IDs, DNS SANs.
	ServerSANs Identities `yaml:"server_sans"`
}

// Identities are certificate identities: URI SANs (SPIFFE IDs) and DNS
// SANs, each matched exactly.
type Identities struct {
	URIs []string `yaml:"uris"`
	DNS  []string `yaml:"dns"`
}

// Empty reports whether no identity is listed.
func (i Identities) Empty() bool { return len(i.URIs) == 0 && len(i.DNS) == 0 }

// NodeGroup is a set of Envoy nodes selected by node cluster or metadata.
type NodeGroup struct {
	Name string `yaml:"name"`
	// Cluster matches the node's cluster ("--service-cluster"); '*' is a
	// wildcard. Empty matches any.
	Cluster string `yaml:"cluster"`
	// Metadata matches string fields of the node's metadata exactly; all
	// must match.
	Metadata map[string]string `yaml:"metadata"`
	// Envoy overrides listen.envoy for the group.
	Envoy string `yaml:"envoy"`
	// SluiceAddresses overrides xds.sluice_addresses for the group.
	SluiceAddresses []string `yaml:"sluice_addresses"`
	// UpstreamCAFile overrides xds.upstream_ca_file for the group, whose
	// Envoys run on a distribution that keeps the system bundle elsewhere
	// (RHEL-family: /etc/pki/tls/certs/ca-bundle.crt). A provider's own
	// ca_file still wins.
	UpstreamCAFile *string `yaml:"upstream_ca_file"`
}

// DefaultUpstreamCAFile is the system CA bundle of Debian, Ubuntu, Alpine
// and the official Envoy images (Ubuntu-based), which Envoy verifies https
// providers with unless xds.upstream_ca_file says otherwise.
const DefaultUpstreamCAFile = "/etc/ssl/certs/ca-certificates.crt"

// Model is a public model name (and its aliases) that clients ask for, and
// where requests for it go.
type Model struct {
	Name     string   `yaml:"name"`
	Aliases  []string `yaml:"aliases"`
	Provider string   `yaml:"provider"`
	// Upstream is the model name sent to the provider (the deployment name
	// for Azure OpenAI). Default: Name.
	Upstream string `yaml:"upstream"`
	// Providers lists several providers for the model instead of one
	// Provider: tried in order (Routing "priority", the default) or chosen
	// per request by weight (Routing "weighted"). They must speak the same
	// API dialect (OpenAI-family or Anthropic).
	Providers []ModelProvider `yaml:"providers"`
	Routing   string          `yaml:"routing"`
	// MaxOutputTokens is the most a reply can hold: what admission reserves
	// when the client sets no max_tokens. Default
	// gateway.default_max_output_tokens.
	MaxOutputTokens int64 `yaml:"max_output_tokens"`
	// ContextWindow is the most input the model takes, in tokens: what
	// admission reserves for a prompt that points at content Sluice cannot
	// see (a file id, a document URL, a stored response or conversation).
	// Default: the built-in window of a well-known model (contextwindow.go)
	// by its name or a provider's name for it; with none, such requests
	// are refused (400 input_by_reference).
	ContextWindow int64 `yaml:"context_window"`
}

// Model routings.
const (
	RoutingPriority = "priority"
	RoutingWeighted = "weighted"
)

// ModelProvider is one provider of a model with several.
type ModelProvider struct {
	Name string `yaml:"name"`
	// Upstream overrides the model's upstream name for this provider.
	Upstream string `yaml:"upstream"`
	// Weight is the provider's share with routing "weighted" (default 1).
	Weight int64 `yaml:"weight"`
}

// Price is what a model costs, in integer micro-dollars per one million
// tokens ($2.50 per 1M tokens is 2500000), which is pico-dollars per
// token. Each kind of token the provider reports has its own price; a
// kind left unset is priced as the comment of its field says (Cost, and
// docs/configuration.md, "pricing", give the whole model).
type Price struct {
	// Input is the price of prompt tokens.
	Input int64 `yaml:"input"`
	// CachedInput is the price of prompt tokens read from the prompt
	// cache; 0 (or unset) means Input.
	CachedInput int64 `yaml:"cached_input"`
	// CacheWrite is the price of prompt tokens written to the prompt cache
	// with the 5-minute TTL (Anthropic's default); unset means 1.25 ×
	// Input, rounded up to a whole micro-dollar per 1M.
	CacheWrite *int64 `yaml:"cache_write"`
	// CacheWrite1h is the price of prompt tokens written to the cache with
	// the 1-hour TTL; unset means 2 × Input.
	CacheWrite1h *int64 `yaml:"cache_write_1h"`
	// AudioInput is the price of prompt tokens of audio; unset means
	// Input, the text price (sluice check-config warns where a model's
	// name says it takes audio).
	AudioInput *int64 `yaml:"audio_input"`
	// Output is the price of output tokens.
	Output int64 `yaml:"output"`
	// Reasoning is the price of reasoning (thinking) tokens, a part of the
	// output; unset means Output, as OpenAI and Anthropic bill them.
	Reasoning *int64 `yaml:"reasoning"`
	// AudioOutput is the price of output tokens of audio; unset means
	// Output.
	AudioOutput *int64 `yaml:"audio_output"`
	// LongContext, when set, prices every token of a request whose prompt
	// holds more than AboveInputTokens tokens (cached ones and cache
	// writes included) at its prices instead.
	LongContext *LongContext `yaml:"long_context"`
	// PerRequest is a fee per request, in micro-dollars (not per 1M).
	PerRequest int64 `yaml:"per_request"`
}

// LongContext is a price tier for long prompts (Anthropic's and Gemini's
// above 200K input tokens). Its prices replace the base price's fields of
// the same name; a field it leaves unset keeps the base price's, and the
// kinds neither sets follow from the tier's input and output as they do
// from the base's (cache writes at 1.25 × and 2 × its input, …).
type LongContext struct {
	// AboveInputTokens is the threshold: a request whose InputTokens is
	// more than it is priced at the tier. Required, above 0.
	AboveInputTokens int64  `yaml:"above_input_tokens"`
	Input            *int64 `yaml:"input"`
	CachedInput      *int64 `yaml:"cached_input"`
	CacheWrite       *int64 `yaml:"cache_write"`
	CacheWrite1h     *int64 `yaml:"cache_write_1h"`
	Output           *int64 `yaml:"output"`
}

// Org groups teams.
type Org struct {
	Name string `yaml:"name"`
	// Limits apply to every key of every team of the org, together.
	Limits Limits `yaml:"limits"`
}

// Team owns keys. Its model allow-list and limits apply to every key of the
// team, on top of the key's own.
type Team struct {
	Name string `yaml:"name"`
	Org  string `yaml:"org"`
	// Models is the allow-list: exact names or patterns with '*' wildcards
	// ("gpt-4o*"). Empty means every configured model.
	Models []string `yaml:"models"`
	Limits Limits   `yaml:"limits"`
}

// DeclaredKey is an API key declared in the config by the SHA-256 of its
// secret, for operators who keep keys in Git. The secret itself never
// appears in the config.
type DeclaredKey struct {
	Name string `yaml:"name"`
	Team string `yaml:"team"`
	// SHA256 is the lower-case hex SHA-256 of the whole secret
	// (`printf %s "$KEY" | sha256sum`).
	SHA256 string `yaml:"sha256"`
	// Prefix is the public prefix shown in logs; optional.
	Prefix    string     `yaml:"prefix"`
	Models    []string   `yaml:"models"`
	Limits    Limits     `yaml:"limits"`
	ExpiresAt *time.Time `yaml:"expires_at"`
}

// Limits are the limits that apply to a key, a team or an org. A zero value
// means "no limit" for that window. Every limit that covers a request must
// admit it (docs/limits.md).
type Limits struct {
	Requests RateLimits  `yaml:"requests" json:"requests"`
	Tokens   TokenLimits `yaml:"tokens" json:"tokens,omitzero"`
	Budgets  []Budget    `yaml:"budgets" json:"budgets,omitempty"`
	// Models holds limits that apply only to requests for one model (by
	// its name), on top of the ones above. They cannot nest further.
	Models map[string]Limits `yaml:"models" json:"models,omitempty"`
	// FailureMode is what this key's, team's or org's requests meet when
	// the shared counters (admission.redis) cannot answer: "closed" or
	// "open" (see Admission.FailureMode); "" leaves it to the team, the
	// org, then admission.failure_mode. Not per model.
	FailureMode string `yaml:"failure_mode" json:"failure_mode,omitempty"`
}

// TokenLimits count tokens per sliding window: the prompt (input), the
// reply (output, reasoning included) and both (total).
type TokenLimits struct {
	Input  RateLimits `yaml:"input" json:"input,omitzero"`
	Output RateLimits `yaml:"output" json:"output,omitzero"`
	Total  RateLimits `yaml:"total" json:"total,omitzero"`
}

// IsZero reports whether no token window is limited.
func (t TokenLimits) IsZero() bool { return t == TokenLimits{} }

// Budget periods.
const (
	PeriodDay      = "day"      // calendar day in gateway.budget_time_zone
	PeriodWeek     = "week"     // calendar week, from Monday 00:00
	PeriodMonth    = "month"    // calendar month
	PeriodRolling  = "rolling"  // the last Window, sliding
	PeriodLifetime = "lifetime" // never resets
)

// BudgetPeriods lists the periods a budget may have.
var BudgetPeriods = []string{PeriodDay, PeriodWeek, PeriodMonth, PeriodRolling, PeriodLifetime}

// Budget caps spend, in micro-dollars ($50 is 50000000), over a period.
type Budget struct {
	MicroUSD int64  `yaml:"micro_usd" json:"micro_usd"`
	Period   string `yaml:"period" json:"period"`
	// Window is the length of a rolling budget (e.g. 24h, 168h).
	Window time.Duration `yaml:"window" json:"window,omitempty"`
}

// RateLimits counts events per sliding window. Zero means unlimited.
type RateLimits struct {
	PerMinute int64 `yaml:"per_minute" json:"per_minute,omitempty"`
	PerHour   int64 `yaml:"per_hour" json:"per_hour,omitempty"`
	PerDay    int64 `yaml:"per_day" json:"per_day,omitempty"`
}

// IsZero reports whether no window is limited.
func (r RateLimits) IsZero() bool { return r == RateLimits{} }

// Secret is a string that never prints: fmt, slog and JSON all see
// "[redacted]". Use Reveal to get the value where it is really needed.
type Secret string

// Reveal returns the secret's value.
func (s Secret) Reveal() string { return string(s) }

// String implements fmt.Stringer.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString implements fmt.GoStringer so %#v does not leak either.
func (s Secret) GoString() string { return `"` + s.String() + `"` }
