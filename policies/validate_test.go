package policies

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/providerkind"
)

const (
	hashFoo = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae" // sha256("foo")
	hashBar = "fcde2b2edba56bf408601fb721fe9b5c338d10ee429ea04fae5511b68fbf8fb9" // sha256("bar")
)

// validConfig returns a small valid configuration that the table tests
// break one way at a time.
func validConfig() *Config {
	c := Default()
	c.Providers = []Provider{
		{Name: "openai", Kind: providerkind.OpenAI, BaseURL: "https://api.openai.com", APIKey: "sk-x"},
		{Name: "anthropic", Kind: providerkind.Anthropic, BaseURL: "https://api.anthropic.com", APIKey: "sk-ant-x"},
		{Name: "azure", Kind: providerkind.AzureOpenAI, BaseURL: "https://contoso.openai.azure.com", APIKey: "az", APIVersion: "2024-10-21"},
		{Name: "local", Kind: providerkind.OpenAICompatible, BaseURL: "http://127.0.0.1:8000"},
	}
	c.Models = []Model{
		{Name: "gpt-4o", Aliases: []string{"gpt4o"}, Provider: "openai"},
		{Name: "claude-sonnet-4", Aliases: []string{"sonnet"}, Provider: "anthropic"},
		{Name: "llama3.1:8b", Provider: "local"},
	}
	c.Pricing = map[string]Price{"gpt-4o": {Input: 2500000, CachedInput: 1250000, Output: 10000000}}
	c.Orgs = []Org{{Name: "acme"}}
	c.Teams = []Team{{Name: "platform", Org: "acme", Models: []string{"gpt-4o", "claude-*"}}}
	c.Keys = []DeclaredKey{{Name: "ci", Team: "platform", SHA256: hashFoo, Prefix: "sk-sluice-ci", Models: []string{"*"}}}
	return c
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(c *Config)
		want   []string // Problem.String() of each problem
	}{
		{"valid", func(c *Config) {}, nil},
		{"listen on all interfaces and port 0", func(c *Config) {
			c.Listen = Listen{GRPC: ":9001", XDS: "0.0.0.0:0", Admin: "[::1]:9090", Envoy: "localhost:65535"}
		}, nil},
		{"listen", func(c *Config) {
			c.Listen = Listen{GRPC: "", XDS: "127.0.0.1", Admin: "127.0.0.1:-1", Envoy: "[::1:80"}
		}, []string{
			`listen.admin: port must be a number from 0 to 65535, got "-1"`,
			`listen.envoy: must be host:port, got "[::1:80"`,
			`listen.grpc: required (host:port)`,
			`listen.xds: must be host:port, got "127.0.0.1"`,
		}},
		{"extension health check at its bounds", func(c *Config) {
			c.XDS.ExtensionHealthCheck = HealthCheck{Interval: 100 * time.Millisecond, Timeout: 100 * time.Millisecond, UnhealthyThreshold: 10, HealthyThreshold: 1}
		}, nil},
		{"extension health check out of bounds", func(c *Config) {
			c.XDS.ExtensionHealthCheck = HealthCheck{Interval: 99 * time.Millisecond, Timeout: 0, UnhealthyThreshold: 0, HealthyThreshold: 11}
		}, []string{
			"xds.extension_health_check.healthy_threshold: must be from 1 to 10, got 11",
			"xds.extension_health_check.interval: must be from 100ms to 1m, got 99ms",
			"xds.extension_health_check.timeout: must be positive and at most the interval (99ms), got 0s",
			"xds.extension_health_check.unhealthy_threshold: must be from 1 to 10, got 0",
		}},
		{"extension health check timeout past its interval", func(c *Config) {
			c.XDS.ExtensionHealthCheck.Interval, c.XDS.ExtensionHealthCheck.Timeout = 2*time.Minute, 3*time.Minute
		}, []string{
			"xds.extension_health_check.interval: must be from 100ms to 1m, got 2m0s",
			"xds.extension_health_check.timeout: must be positive and at most the interval (2m0s), got 3m0s",
		}},
		{"pprof without an admin token", func(c *Config) { c.Admin = Admin{PProf: true} }, []string{
			"admin.pprof: requires admin.token: profiles are served only with the admin token (set token: ${SLUICE_ADMIN_TOKEN})",
		}},
		{"pprof with an admin token", func(c *Config) {
			c.Admin = Admin{Token: Secret(strings.Repeat("t", 16)), PProf: true}
		}, nil},
		{"spool bound too small", func(c *Config) { c.Ledger.SpoolMaxBytes = 1000 }, []string{
			"ledger.spool_max_bytes: must be between 1048576 (1 MiB) and 1099511627776 (1 TiB), got 1000",
		}},
		{"spool bound negative", func(c *Config) { c.Ledger.SpoolMaxBytes = -1 }, []string{
			"ledger.spool_max_bytes: must be between 1048576 (1 MiB) and 1099511627776 (1 TiB), got -1",
		}},
		{"spool bound at its limits", func(c *Config) { c.Ledger.SpoolMaxBytes = 1 << 20 }, nil},
		{"no store", func(c *Config) { c.Store = Store{} }, []string{
			"store: set exactly one of sqlite or postgres",
		}},
		{"postgres", func(c *Config) { c.Store = Store{Postgres: Postgres{URL: "postgres://db"}} }, nil},
		{"postgresql, host as a parameter", func(c *Config) { c.Store = Store{Postgres: Postgres{URL: "postgresql:///sluice?host=/run/postgresql"}} }, nil},
		{"postgres, not a URL", func(c *Config) { c.Store = Store{Postgres: Postgres{URL: "host=db password=SECRET"}} }, []string{
			"store.postgres: want a PostgreSQL URL, postgres://user:password@host:5432/database, its password percent-encoded (the value is not shown: it may hold a password)",
		}},
		{"postgres, no host", func(c *Config) { c.Store = Store{Postgres: Postgres{URL: "postgres:///x"}} }, []string{
			"store.postgres: want a PostgreSQL URL, postgres://user:password@host:5432/database, its password percent-encoded (the value is not shown: it may hold a password)",
		}},
		{"both stores", func(c *Config) { c.Store.Postgres = Postgres{URL: "postgres://db"} }, []string{
			"store: set exactly one of sqlite or postgres",
		}},
		{"no providers or models", func(c *Config) {
			c.Providers, c.Models, c.Pricing, c.Teams, c.Keys = nil, nil, nil, nil, nil
		}, []string{
			"models: at least one model is required",
			"providers: at least one provider is required",
		}},
		{"provider names", func(c *Config) {
			c.Providers[1].Name = ""
			c.Providers[2].Name = "openai"
			c.Providers[3].Name = "-local"
			c.Models = c.Models[:1]
			c.Teams[0].Models = nil
		}, []string{
			`providers[1].name: required`,
			`providers[2].name: duplicate name "openai" (first at providers[0])`,
			`providers[3].name: must match ^[a-z0-9][a-z0-9_-]*$ (it becomes an Envoy cluster name), got "-local"`,
		}},
		{"provider kinds", func(c *Config) {
			c.Providers[0].Kind = "OpenAI"
			c.Providers[1].Kind = ""
			c.Providers[3].Kind = "ollama"
		}, []string{
			`providers[0].kind: unknown kind "OpenAI" (did you mean "openai"?)`,
			`providers[1].kind: required (one of openai, anthropic, azure-openai, openai-compatible)`,
			`providers[3].kind: unknown kind "ollama" (must be one of openai, anthropic, azure-openai, openai-compatible)`,
		}},
		{"credentials and versions", func(c *Config) {
			c.Providers[0].APIKey = ""
			c.Providers[0].AnthropicVersion = "2023-06-01"
			c.Providers[1].APIKey = ""
			c.Providers[1].APIVersion = "2024-10-21"
			c.Providers[2].APIVersion = ""
			c.Providers[3].APIKey = "" // optional for openai-compatible
		}, []string{
			`providers[0].anthropic_version: only allowed for kind "anthropic"`,
			`providers[0].api_key: required for kind "openai"`,
			`providers[1].api_key: required for kind "anthropic"`,
			`providers[1].api_version: only allowed for kind "azure-openai"`,
			`providers[2].api_version: required for kind "azure-openai"`,
		}},
		{"forward_client_headers", func(c *Config) {
			c.Providers[0].ForwardClientHeaders = []string{"OpenAI-Project", "authorization", "openai-project"}
			c.Providers[1].ForwardClientHeaders = []string{"openai-organization"}
			c.Providers[2].ForwardClientHeaders = []string{"ocp-apim-subscription-key"} // valid for azure-openai
		}, []string{
			`providers[0].forward_client_headers[1]: "authorization" is a credential header: the caller's credential never reaches a provider`,
			`providers[0].forward_client_headers[2]: "openai-project" is listed twice`,
			`providers[1].forward_client_headers[0]: "openai-organization" is not an account header of kind "anthropic" (one of anthropic-organization-id, anthropic-workspace-id); other client headers are forwarded already`,
		}},
		{"base urls", func(c *Config) {
			c.Providers[0].BaseURL = "api.openai.com"
			c.Providers[1].BaseURL = "https://api.anthropic.com/?x=1"
			c.Providers[2].BaseURL = "https://key:secret@contoso.openai.azure.com"
			c.Providers[3].BaseURL = "unix:///var/run/x.sock"
		}, []string{
			`providers[0].base_url: must be an absolute http(s) URL, got "api.openai.com"`,
			`providers[1].base_url: must not have a query or fragment, got "https://api.anthropic.com/?x=1"`,
			`providers[2].base_url: must not contain credentials (put the provider's key in api_key)`,
			`providers[3].base_url: must be an absolute http(s) URL, got "unix:///var/run/x.sock"`,
		}},
		{"https to an IP address", func(c *Config) {
			c.Providers[0].BaseURL = "https://10.0.0.5:8443"
			c.Providers[1].BaseURL = "https://[::1]"
			c.Providers[3].BaseURL = "http://10.0.0.6" // plain http to an IP is fine
		}, []string{
			`providers[0].base_url: an https URL must name its host, not an IP address, got "https://10.0.0.5:8443": Envoy sends the host as SNI and verifies the provider's certificate against it; list the addresses in endpoints`,
			`providers[1].base_url: an https URL must name its host, not an IP address, got "https://[::1]": Envoy sends the host as SNI and verifies the provider's certificate against it; list the addresses in endpoints`,
		}},
		{"CA files", func(c *Config) {
			private, relative, empty, broken := "/etc/sluice/corp-ca.pem", "certs/ca.pem", "", "/etc/ca\n.pem"
			c.Providers[0].CAFile = &private // valid
			c.Providers[1].CAFile = &relative
			c.Providers[2].CAFile = &empty
			c.Providers[3].CAFile = &private // local is plain http
			c.XDS.UpstreamCAFile = ""
			c.XDS.NodeGroups = []NodeGroup{
				{Name: "rhel", Cluster: "rhel-*", UpstreamCAFile: &relative},
				{Name: "odd", Cluster: "odd-*", UpstreamCAFile: &broken},
				{Name: "ok", Cluster: "ok-*", UpstreamCAFile: &private},
			}
		}, []string{
			`providers[1].ca_file: must be an absolute path, got "certs/ca.pem": Envoy opens it on its own machine, where a path relative to this file means nothing`,
			`providers[2].ca_file: must not be empty: the absolute path, on Envoy's machine, of the PEM bundle Envoy verifies https providers' certificates with`,
			`providers[3].ca_file: only for an https base_url: over http Envoy verifies no certificate`,
			`xds.node_groups[0].upstream_ca_file: must be an absolute path, got "certs/ca.pem": Envoy opens it on its own machine, where a path relative to this file means nothing`,
			`xds.node_groups[1].upstream_ca_file: must be a file path, got "/etc/ca\n.pem"`,
			`xds.upstream_ca_file: must not be empty: the absolute path, on Envoy's machine, of the PEM bundle Envoy verifies https providers' certificates with`,
		}},
		{"base url with @ is never echoed", func(c *Config) {
			c.Providers[0].BaseURL = "user:pa@ss@"
		}, []string{
			`providers[0].base_url: must be an absolute http(s) URL, got a value with an @ (not shown: it may hold a credential)`,
		}},
		{"model names", func(c *Config) {
			c.Models[0].Name = ""
			c.Models[1].Name = "claude sonnet"
			c.Models[2].Aliases = []string{"", "llama*", "gpt4o", "llama3.1:8b"}
			c.Pricing = nil
			c.Teams[0].Models = nil
		}, []string{
			`models[0].name: required`,
			`models[1].name: may contain only letters, digits and -_.:/@, got "claude sonnet"`,
			`models[2].aliases[0]: must not be empty`,
			`models[2].aliases[1]: may contain only letters, digits and -_.:/@, got "llama*"`,
			`models[2].aliases[2]: "gpt4o" is already the name or alias of models[0]`,
			`models[2].aliases[3]: "llama3.1:8b" is already the name or alias of models[2]`,
		}},
		{"duplicate model", func(c *Config) {
			c.Models = append(c.Models, Model{Name: "gpt-4o", Provider: "openai"}, Model{Name: "sonnet", Provider: "anthropic"})
		}, []string{
			`models[3].name: duplicate name "gpt-4o" (first at models[0])`,
			`models[4].name: "sonnet" is already the name or alias of models[1]`,
		}},
		{"model providers", func(c *Config) {
			c.Models[0].Provider = "opnai"
			c.Models[1].Provider = ""
			c.Models[2].Provider = "vllm"
		}, []string{
			`models[0].provider: unknown provider "opnai" (did you mean "openai"?)`,
			`models[1].provider: required (or a providers list)`,
			`models[2].provider: unknown provider "vllm"`,
		}},
		{"pricing", func(c *Config) {
			c.Pricing = map[string]Price{
				"gpt4":            {Input: 1},
				"gpt4o":           {Input: 1},
				"sonnet":          {Input: 1},
				"llama3.1:8b":     {Input: -1, CachedInput: -2, Output: -3},
				"claude-sonnet-4": {},
			}
		}, []string{
			`pricing.gpt4: unknown model "gpt4" (did you mean "gpt-4o"?)`,
			`pricing.gpt4o: "gpt4o" is an alias of "gpt-4o"; price the model by its name`,
			`pricing.sonnet: "sonnet" is an alias of "claude-sonnet-4"; price the model by its name`,
			`pricing["llama3.1:8b"].cached_input: must not be negative, got -2`,
			`pricing["llama3.1:8b"].input: must not be negative, got -1`,
			`pricing["llama3.1:8b"].output: must not be negative, got -3`,
		}},
		{"orgs and teams", func(c *Config) {
			c.Orgs = append(c.Orgs, Org{}, Org{Name: "acme"})
			c.Teams = append(c.Teams, Team{Org: "acme"}, Team{Name: "platform", Org: "amce"}, Team{Name: "x", Org: "globex"})
		}, []string{
			`orgs[1].name: required`,
			`orgs[2].name: duplicate name "acme" (first at orgs[0])`,
			`teams[1].name: required`,
			`teams[2].name: duplicate name "platform" (first at teams[0])`,
			`teams[2].org: unknown org "amce" (did you mean "acme"?)`,
			`teams[3].org: unknown org "globex"`,
		}},
		{"teams without org are fine", func(c *Config) { c.Teams[0].Org = ""; c.Orgs = nil }, nil},
		{"allow-lists", func(c *Config) {
			c.Teams[0].Models = []string{"gpt4o", "gtp-4o", "", "gpt-4o?", "mistral-*", "*sonnet*", "**"}
			c.Keys[0].Models = []string{"llama3.1:8b", "llama3.1:70b", "llama 3"}
		}, []string{
			`keys[0].models[1]: "llama3.1:70b" matches no configured model (did you mean "llama3.1:8b"?)`,
			`keys[0].models[2]: may contain only letters, digits, -_.:/@ and the wildcard *, got "llama 3"`,
			`teams[0].models[1]: "gtp-4o" matches no configured model (did you mean "gpt-4o"?)`,
			`teams[0].models[2]: must not be empty`,
			`teams[0].models[3]: may contain only letters, digits, -_.:/@ and the wildcard *, got "gpt-4o?"`,
			`teams[0].models[4]: "mistral-*" matches no configured model`,
		}},
		{"keys", func(c *Config) {
			c.Keys = append(c.Keys,
				DeclaredKey{Team: "platform", SHA256: hashBar},
				DeclaredKey{Name: "ci", Team: "platfrom", SHA256: hashFoo},
				DeclaredKey{Name: "k3"},
				DeclaredKey{Name: "k4", Team: "platform", SHA256: "ABC"},
				DeclaredKey{Name: "k5", Team: "platform", SHA256: "sk-sluice-abc"},
				DeclaredKey{Name: "k6", Team: "platform", SHA256: "FCDE2B2EDBA56BF408601FB721FE9B5C338D10EE429EA04FAE5511B68FBF8FB9"},
				DeclaredKey{Name: "k7", Team: "platform", SHA256: "zz" + hashBar[2:]},
				DeclaredKey{Name: "k8", Team: "platform", SHA256: "baa5a0964d3320fbc0c6a922140453c8513ea24ab8fd0577034804a967248096", Prefix: "pk-1"},
				DeclaredKey{Name: "k9", Team: "platform", SHA256: "09bc4d8bda67b3b13d37c69b0e0bfb2d7c6df1f5b3cd5a2f9c2e3a83e3b80fb2", Prefix: "sk-sluice-a"},
			)
		}, []string{
			`keys[1].name: required`,
			`keys[2].name: duplicate name "ci" (first at keys[0])`,
			`keys[2].sha256: same hash as keys[0]`,
			`keys[2].team: unknown team "platfrom" (did you mean "platform"?)`,
			`keys[3].sha256: required (printf %s "$KEY" | sha256sum)`,
			`keys[3].team: required`,
			`keys[4].sha256: must be 64 lower-case hex characters, got 3 characters`,
			`keys[5].sha256: looks like a key, not its SHA-256 (printf %s "$KEY" | sha256sum)`,
			`keys[6].sha256: must be lower-case`,
			`keys[7].sha256: must be 64 lower-case hex characters (0-9, a-f)`,
			`keys[8].prefix: must start with "sk-sluice-"`,
		}},
		{"prefix that is the whole key", func(c *Config) {
			// The shortest key Sluice takes: 32 characters after sk-sluice-.
			c.Keys[0].Prefix = "sk-sluice-0123456789abcdefghijklmnopqrstuv"
			c.Keys[0].SHA256 = "3240de424cedc6f5b4fb0df38d38d05a5d25fdd4dfdd2f8d779b9e305ab0c4fe"
		}, []string{
			`keys[0].prefix: is the whole key; keep only its first characters`,
		}},
		{"prefix that is a secret too short to be a key", func(c *Config) {
			c.Keys[0].Prefix = "sk-sluice-PLACEHOLDER"
			c.Keys[0].SHA256 = "01fb44a889847d510a85d3c7c8bbb4f15df7cf9c7e27c92c2c1a40ec980d7c10"
		}, nil},
		{"negative limits", func(c *Config) {
			c.Teams[0].Limits.Requests = RateLimits{PerMinute: -1, PerHour: 10, PerDay: -3}
			c.Keys[0].Limits.Requests = RateLimits{PerMinute: -5}
		}, []string{
			`keys[0].limits.requests.per_minute: must not be negative, got -5`,
			`teams[0].limits.requests.per_day: must not be negative, got -3`,
			`teams[0].limits.requests.per_minute: must not be negative, got -1`,
		}},
		{"order is numeric", func(c *Config) {
			for i := range 11 {
				c.Orgs = append(c.Orgs, Org{Name: "acme"})
				_ = i
			}
		}, []string{
			`orgs[1].name: duplicate name "acme" (first at orgs[0])`,
			`orgs[2].name: duplicate name "acme" (first at orgs[0])`,
			`orgs[3].name: duplicate name "acme" (first at orgs[0])`,
			`orgs[4].name: duplicate name "acme" (first at orgs[0])`,
			`orgs[5].name: duplicate name "acme" (first at orgs[0])`,
			`orgs[6].name: duplicate name "acme" (first at orgs[0])`,
			`orgs[7].name: duplicate name "acme" (first at orgs[0])`,
			`orgs[8].name: duplicate name "acme" (first at orgs[0])`,
			`orgs[9].name: duplicate name "acme" (first at orgs[0])`,
			`orgs[10].name: duplicate name "acme" (first at orgs[0])`,
			`orgs[11].name: duplicate name "acme" (first at orgs[0])`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.change(c)
			var got []string
			for _, p := range c.Validate() {
				got = append(got, p.String())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Validate (-want +got):\n%s", diff)
			}
		})
	}
}

func TestProblemString(t *testing.T) {
	tests := []struct {
		p    Problem
		want string
	}{
		{Problem{File: "s.yaml", Path: "a.b", Line: 3, Column: 7, Msg: "bad"}, "s.yaml:3:7: a.b: bad"},
		{Problem{File: "s.yaml", Path: "a.b", Line: 3, Msg: "bad"}, "s.yaml:3: a.b: bad"},
		{Problem{File: "s.yaml", Path: "a.b", Msg: "bad"}, "s.yaml: a.b: bad"},
		{Problem{File: "s.yaml", Line: 3, Column: 7, Msg: "bad"}, "s.yaml:3:7: bad"},
		{Problem{Path: "a.b", Line: 3, Column: 7, Msg: "bad"}, "3:7: a.b: bad"},
		{Problem{Path: "a.b", Msg: "bad"}, "a.b: bad"},
		{Problem{Msg: "bad"}, "bad"},
	}
	for _, tt := range tests {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.p, got, tt.want)
		}
	}
	ps := Problems{{Path: "a", Msg: "x"}, {Path: "b", Msg: "y"}}
	if got, want := ps.Error(), "a: x\nb: y"; got != want {
		t.Errorf("Problems.Error() = %q, want %q", got, want)
	}
}

func TestProblemsSort(t *testing.T) {
	ps := Problems{
		{Path: "models[10].name", Msg: "1"},
		{Path: "models[2].name", Msg: "2"},
		{Path: "b", Line: 2, Column: 1, Msg: "3"},
		{Path: "a", Line: 2, Column: 1, Msg: "4"},
		{Path: "a", Line: 1, Column: 9, Msg: "5"},
		{Path: "a", Line: 2, Column: 1, Msg: "6"},
	}
	ps.sort()
	var got []string
	for _, p := range ps {
		got = append(got, p.Msg)
	}
	if diff := cmp.Diff([]string{"2", "1", "5", "4", "6", "3"}, got); diff != "" {
		t.Errorf("sort (-want +got):\n%s", diff)
	}
}

func TestSuggest(t *testing.T) {
	candidates := []string{"openai", "anthropic", "azure-openai", "openai-compatible"}
	tests := []struct {
		in, want string
	}{
		{"opnai", "openai"},
		{"OpenAI", "openai"},
		{"antropic", "anthropic"},
		{"azure_openai", "azure-openai"},
		{"openai-compat", "openai-compatible"}, // distance 4, a third of 13 is 4
		{"openai-compatibel", "openai-compatible"},
		{"azure", ""},
		{"x", ""},
		{"ai", ""},
		{"openai", ""}, // an exact match is not a suggestion
	}
	for _, tt := range tests {
		got, _ := suggest(tt.in, candidates)
		if got != tt.want {
			t.Errorf("suggest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestLevenshtein(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"kitten", "sitting", 3}, {"gpt-4o", "gtp-4o", 2}, {"héllo", "hello", 1},
	}
	for _, tt := range tests {
		if got := levenshtein(tt.a, tt.b); got != tt.want {
			t.Errorf("levenshtein(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestPaths(t *testing.T) {
	tests := []struct {
		path string
		want []pathSegment
	}{
		{"providers", []pathSegment{{key: "providers", index: -1}}},
		{"providers[2].base_url", []pathSegment{{key: "providers", index: -1}, {index: 2}, {key: "base_url", index: -1}}},
		{keyPath("pricing", "gpt-4.1") + ".input", []pathSegment{{key: "pricing", index: -1}, {key: "gpt-4.1", index: -1}, {key: "input", index: -1}}},
		{keyPath("pricing", `a"b]`), []pathSegment{{key: "pricing", index: -1}, {key: `a"b]`, index: -1}}},
		{keyPath("pricing", "gpt-4o"), []pathSegment{{key: "pricing", index: -1}, {key: "gpt-4o", index: -1}}},
	}
	for _, tt := range tests {
		got, ok := splitPath(tt.path)
		if !ok || !cmp.Equal(got, tt.want, cmp.AllowUnexported(pathSegment{})) {
			t.Errorf("splitPath(%q) = %v, %v; want %v", tt.path, got, ok, tt.want)
		}
	}
	for _, bad := range []string{"a[", "a[x]", `a["x]`, "a..b", "a[-1]"} {
		if got, ok := splitPath(bad); ok {
			t.Errorf("splitPath(%q) = %v, want failure", bad, got)
		}
	}
}

// TestRuntimeBounds: runtime's settings are optional, and out of range
// they are refused at their path.
func TestRuntimeBounds(t *testing.T) {
	for _, tc := range []struct {
		r    Runtime
		want string // a problem's path, or "" for none
	}{
		{Runtime{}, ""},
		{Runtime{GOGC: 100, MemoryLimitBytes: 512 << 20}, ""},
		{Runtime{GOGC: maxGOGC, MemoryLimitBytes: minMemoryLimit}, ""},
		{Runtime{GOGC: -1}, "runtime.gogc"},
		{Runtime{GOGC: maxGOGC + 1}, "runtime.gogc"},
		{Runtime{MemoryLimitBytes: -1}, "runtime.memory_limit_bytes"},
		{Runtime{MemoryLimitBytes: minMemoryLimit - 1}, "runtime.memory_limit_bytes"},
		{Runtime{MemoryLimitBytes: 1<<63 - 1}, "runtime.memory_limit_bytes"},
	} {
		v := &validator{}
		v.runtime(tc.r)
		var got string
		for _, is := range v.issues {
			got = is.Path
		}
		if got != tc.want || len(v.issues) > 1 {
			t.Errorf("%+v: problems %+v, want one at %q", tc.r, v.issues, tc.want)
		}
	}
}
