package policies

import "time"

// Config is the source form of sluice.yaml, exactly as an operator writes it.
// It is produced by Load (which expands ${ENV}, rejects unknown fields and
// reports syntax errors with line and column), checked by Validate, and
// turned into an immutable Snapshot by Compile. The hot path never reads a
// Config; it reads the Snapshot.
type Config struct {
	Listen    Listen           `yaml:"listen"`
	Store     Store            `yaml:"store"`
	Ledger    Ledger           `yaml:"ledger"`
	Gateway   Gateway          `yaml:"gateway"`
	Providers []Provider       `yaml:"providers"`
	Models    []Model          `yaml:"models"`
	Pricing   map[string]Price `yaml:"pricing"`
	Orgs      []Org            `yaml:"orgs"`
	Teams     []Team           `yaml:"teams"`
	Keys      []DeclaredKey    `yaml:"keys"`
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
	// Postgres is a PostgreSQL connection URL (usually "${SLUICE_PG_URL}").
	Postgres Secret `yaml:"postgres"`
}

// Ledger selects where spend records are written.
type Ledger struct {
	// SQLite is the path of the embedded spend ledger. A relative path is
	// resolved against the directory of the config file.
	SQLite string `yaml:"sqlite"`
}

// Gateway holds request-path settings of the ext_proc service.
type Gateway struct {
	// MaxRequestBodyBytes refuses larger request bodies with 413 before
	// parsing them. Envoy's listener buffer must be at least as large.
	MaxRequestBodyBytes int64 `yaml:"max_request_body_bytes"`
	// UnknownPaths says what happens to requests for paths that are not
	// an LLM API Sluice meters: "deny" (404 with a clear error) or "pass"
	// (forwarded untouched, unmetered).
	UnknownPaths string `yaml:"unknown_paths"`
}

// Provider kinds.
const (
	KindOpenAI           = "openai"
	KindAnthropic        = "anthropic"
	KindAzureOpenAI      = "azure-openai"
	KindOpenAICompatible = "openai-compatible"
)

// Provider is an upstream LLM API.
type Provider struct {
	Name    string `yaml:"name"`
	Kind    string `yaml:"kind"`
	BaseURL string `yaml:"base_url"`
	// APIKey is the provider credential, normally "${SOME_ENV_VAR}". Required
	// for every kind but openai-compatible.
	APIKey Secret `yaml:"api_key"`
	// APIVersion is Azure OpenAI's api-version query parameter (required for
	// azure-openai, refused elsewhere).
	APIVersion string `yaml:"api_version"`
	// AnthropicVersion is the anthropic-version header sent when the client
	// sent none (anthropic only; default DefaultAnthropicVersion).
	AnthropicVersion string `yaml:"anthropic_version"`
}

// DefaultAnthropicVersion is sent to Anthropic when neither the client nor
// the provider configuration names one.
const DefaultAnthropicVersion = "2023-06-01"

// Model is a public model name (and its aliases) that clients ask for, and
// where requests for it go.
type Model struct {
	Name     string   `yaml:"name"`
	Aliases  []string `yaml:"aliases"`
	Provider string   `yaml:"provider"`
	// Upstream is the model name sent to the provider (the deployment name
	// for Azure OpenAI). Default: Name.
	Upstream string `yaml:"upstream"`
}

// Price is what a model costs, in integer micro-dollars per one million
// tokens ($2.50 per 1M tokens is 2500000).
type Price struct {
	Input       int64 `yaml:"input"`
	CachedInput int64 `yaml:"cached_input"`
	Output      int64 `yaml:"output"`
}

// Org groups teams.
type Org struct {
	Name string `yaml:"name"`
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

// Limits are the limits that apply to a key or a team. A zero value means
// "no limit" for that window.
type Limits struct {
	Requests RateLimits `yaml:"requests" json:"requests"`
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
