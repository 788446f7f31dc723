package policies

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// LookupEnv looks up an environment variable, like os.LookupEnv. The
// package never reads the environment itself: the caller passes
// os.LookupEnv, tests pass a map. A nil LookupEnv has no variables.
type LookupEnv func(name string) (string, bool)

// Default returns the configuration that a file is decoded over: every
// listener on loopback and the embedded SQLite store next to the file.
func Default() *Config {
	return &Config{
		Listen: Listen{
			GRPC:  "127.0.0.1:9001",
			XDS:   "127.0.0.1:18000",
			Admin: "127.0.0.1:9090",
			Envoy: "127.0.0.1:10000",
		},
		Store:  Store{SQLite: "sluice.db"},
		Ledger: Ledger{SQLite: "sluice-ledger.db", SpoolMaxBytes: 1 << 30},
		Gateway: Gateway{MaxRequestBodyBytes: 4 << 20, UnknownPaths: "deny", UnpricedModels: "allow", BudgetTimeZone: "UTC",
			DefaultMaxOutputTokens: 4096, ReservationTTL: 15 * time.Minute, DrainTimeout: 10 * time.Minute, RequestTimeout: 5 * time.Minute, StreamIdleTimeout: 5 * time.Minute},
		XDS: XDS{AccessLog: "/dev/stdout", GRPCListener: "sluice-grpc", UpstreamCAFile: DefaultUpstreamCAFile, Proxyless: ProxylessOff,
			ExtensionHealthCheck: HealthCheck{Interval: 2 * time.Second, Timeout: time.Second, UnhealthyThreshold: 2, HealthyThreshold: 2}},
		Security: Security{PrincipalMaxAge: 30 * time.Second},
	}
}

// Load reads and parses the config file at path; see Parse.
func Load(path string, env LookupEnv) (*Config, error) {
	return load(path, env, false)
}

// LoadWithoutProviderKeys is Load for a command that never calls a
// provider (sluice spend reads the ledger): the providers' api_key values
// are neither read nor checked, so a key that refers to an unset
// environment variable — not exported where the command runs — is no
// problem. Every api_key of the result is empty; everything else is
// decoded and validated as Load does.
func LoadWithoutProviderKeys(path string, env LookupEnv) (*Config, error) {
	return load(path, env, true)
}

func load(path string, env LookupEnv, skipProviderKeys bool) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load policies: %w", err)
	}
	return parseDoc(data, path, env, maxDecodeSteps, skipProviderKeys)
}

// Parse decodes a sluice.yaml document over Default() and validates it.
// file names the document in problems.
//
// ${NAME} in any scalar value (never in a key) is replaced with the value
// of the environment variable NAME, after the YAML is parsed, so a value
// may hold any characters; $$ stands for a literal $. Unknown fields,
// duplicate keys, values of the wrong type, unset variables and everything
// Validate rejects are returned together as Problems, each with its path
// and position. A YAML syntax error stops parsing and is the only problem.
func Parse(data []byte, file string, env LookupEnv) (*Config, error) {
	return parse(data, file, env, maxDecodeSteps)
}

// parse is Parse with a bound on the values decoded (see maxDecodeSteps).
func parse(data []byte, file string, env LookupEnv, maxSteps int) (*Config, error) {
	return parseDoc(data, file, env, maxSteps, false)
}

// isProviderKey reports whether path is a provider's api_key
// ("providers[2].api_key").
func isProviderKey(path string) bool {
	rest, ok := strings.CutPrefix(path, "providers[")
	if !ok {
		return false
	}
	i, ok := strings.CutSuffix(rest, "].api_key")
	if !ok || i == "" {
		return false
	}
	for _, c := range i {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// parseDoc is parse, leaving the providers' api_key values out when
// skipProviderKeys is set (LoadWithoutProviderKeys).
func parseDoc(data []byte, file string, env LookupEnv, maxSteps int, skipProviderKeys bool) (*Config, error) {
	docs, err := parseDocuments(data)
	if err != nil {
		msg := syntaxMessage(err)
		line, col := locateSyntaxError(data, msg)
		return nil, Problems{{File: file, Line: line, Column: col, Msg: "invalid YAML: " + msg}}
	}
	cfg := Default()
	d := newDecoder(env, maxSteps)
	var root *yaml.Node
	if len(docs) > 0 && len(docs[0].Content) > 0 {
		root = docs[0].Content[0]
		d.decode(nil, root, reflect.ValueOf(cfg).Elem())
	}
	problems := d.problems
	if skipProviderKeys {
		problems = dropProviderKeys(cfg, problems)
	}
	decoded := make([]string, 0, len(problems))
	for _, p := range problems {
		decoded = append(decoded, p.Path)
	}
	if len(docs) > 1 {
		problems = append(problems, Problem{Line: docs[1].Line, Column: docs[1].Column,
			Msg: fmt.Sprintf("the file must hold one YAML document, found %d", len(docs))})
	}
	var issues []issue
	if d.steps <= d.maxSteps {
		issues = cfg.check()
	}
	for _, is := range issues {
		// Leave out what follows from a decoding problem: a field that did
		// not decode is also empty, and a list whose names did not decode
		// makes references to them dangle.
		if coveredBy(is.Path, decoded) ||
			is.refersTo != "" && slices.ContainsFunc(decoded, func(p string) bool { return namesIn(p, is.refersTo) }) ||
			skipProviderKeys && isProviderKey(is.Path) {
			continue
		}
		p := is.Problem
		p.Line, p.Column = d.locate(root, p.Path)
		p.Msg = d.scrub(root, p.Path, p.Msg)
		problems = append(problems, p)
	}
	if len(problems) == 0 {
		return cfg, nil
	}
	for i := range problems {
		problems[i].File = file
	}
	problems.sort()
	return nil, problems
}

// dropProviderKeys empties the providers' api_key values of cfg and
// leaves out the problems about them (LoadWithoutProviderKeys).
func dropProviderKeys(cfg *Config, problems Problems) Problems {
	for i := range cfg.Providers {
		cfg.Providers[i].APIKey = ""
	}
	return slices.DeleteFunc(problems, func(p Problem) bool { return isProviderKey(p.Path) })
}

// coveredBy reports whether path is one of paths or lies under one of them.
func coveredBy(path string, paths []string) bool {
	for _, p := range paths {
		if under(path, p) {
			return true
		}
	}
	return false
}

// namesIn reports whether path is list, one of its entries, or the name or
// aliases of one: whether a problem at path loses names that references
// to list need.
func namesIn(path, list string) bool {
	rest, ok := strings.CutPrefix(path, list)
	if !ok {
		return false
	}
	if rest == "" {
		return true
	}
	if !strings.HasPrefix(rest, "[") {
		return false
	}
	_, rest, _ = strings.Cut(rest, "]")
	return rest == "" || rest == ".name" || rest == ".aliases" || strings.HasPrefix(rest, ".aliases[")
}

// under reports whether path is parent or lies under it.
func under(path, parent string) bool {
	return parent == "" || path == parent || strings.HasPrefix(path, parent+".") || strings.HasPrefix(path, parent+"[")
}

// scrub keeps expanded environment values out of a Validate message about
// the value at path: each expanded value quoted in msg is replaced by the
// reference it came from, and so is a bare number at the end ("got -5")
// when the value at path itself was expanded.
func (d *decoder) scrub(root *yaml.Node, path, msg string) string {
	v, _, found := d.find(root, path)
	for _, n := range d.order {
		e := d.expanded[n]
		if e.failed || e.value == e.orig {
			continue
		}
		msg = strings.ReplaceAll(msg, strconv.Quote(e.value), "the expansion of "+strconv.Quote(e.orig))
		if found && n == v && strings.HasSuffix(msg, "got "+e.value) {
			msg = strings.TrimSuffix(msg, e.value) + "the expansion of " + strconv.Quote(e.orig)
		}
	}
	return msg
}
