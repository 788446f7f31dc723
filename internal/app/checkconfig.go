package app

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/sluicegw/sluice/internal/cli"
	"github.com/sluicegw/sluice/policies"
	"github.com/sluicegw/sluice/xds"
)

func runCheckConfig(args []string, stdout, stderr io.Writer, env Env) error {
	fs := newFlags("check-config", "[FILE]", "Validate a Sluice config file and print every problem with its path, then warn\nabout what it may not mean: CA files missing here, kinds of token a model's\nprovider reports that its price leaves to a default. FILE defaults to --config.\nExit status 1 if there is any problem (warnings do not count).", stderr)
	config := fs.String("config", "sluice.yaml", "config `file`")
	if err := fs.Parse(args); err != nil {
		return cli.FlagErr(err)
	}
	path := *config
	switch fs.NArg() {
	case 0:
	case 1:
		path = fs.Arg(0)
	default:
		fmt.Fprintln(stderr, "check-config takes at most one FILE")
		fs.Usage()
		return errUsage
	}
	snap, err := loadSnapshot(path, env)
	if err != nil {
		var ps policies.Problems
		if errors.As(err, &ps) {
			for _, p := range ps {
				fmt.Fprintln(stderr, p.String())
			}
			fmt.Fprintf(stderr, "%s: %d problem(s)\n", path, len(ps))
			return exitError{1}
		}
		return err
	}
	cfg := snap.Config()
	fmt.Fprintf(stdout, "%s: ok (version %s: %d providers, %d models, %d orgs, %d teams, %d declared keys)\n",
		path, snap.Version(), len(cfg.Providers), len(cfg.Models), len(cfg.Orgs), len(cfg.Teams), snap.DeclaredKeyCount())
	printUpstreamCAs(snap, stdout, stderr)
	// What the pricing table leaves to a default or to nothing, for the
	// tokens the configured providers report: warnings, not problems.
	for _, w := range snap.PricingWarnings() {
		fmt.Fprintln(stderr, "warning: "+w.String())
	}
	for _, w := range snap.ContextWindowWarnings() {
		fmt.Fprintln(stderr, "warning: "+w.String())
	}
	for _, w := range securityWarnings(snap, snap.Listen()) {
		fmt.Fprintln(stderr, "warning: "+w)
	}
	return nil
}

// securityWarnings are what check-config says of a config that leaves
// provider credentials less guarded than a fleet needs: no shared
// principal keys; a gRPC or xDS listener (l, as it is bound) off
// loopback without mTLS.
func securityWarnings(snap *policies.Snapshot, l policies.Listen) []string {
	var ws []string
	if len(snap.PrincipalSecrets()) == 0 {
		ws = append(ws, noPrincipalKeys)
	}
	for _, a := range []struct{ name, addr string }{{"grpc", l.GRPC}, {"xds", l.XDS}} {
		if !snap.ServerTLS().MTLS() && !loopback(a.addr) {
			ws = append(ws, fmt.Sprintf("listen.%s is %s, off loopback, without mTLS (security.tls.client_ca_file): any process that reaches it can ask for provider credentials%s; set security.tls with client_ca_file and allowed_clients, or let a mesh sidecar do the mTLS with an AuthorizationPolicy that admits only your Envoys (envoy/istio)",
				a.name, a.addr, map[bool]string{true: " (through ext_proc with a valid Sluice key)", false: " and the whole topology"}[a.name == "grpc"]))
		}
	}
	return ws
}

// loopback reports whether the host of addr (host:port) is a loopback
// address or localhost; an empty host (every interface) is not.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// printUpstreamCAs says, for each https provider, which CA file Envoy is
// told to verify the provider's certificate with (the cluster's
// trusted_ca; node groups listed where theirs differs), and whether that
// file is on this machine. A missing or unusable file is a warning on
// stderr, not a problem: Envoy may run on another machine, where the path
// is what counts.
func printUpstreamCAs(snap *policies.Snapshot, stdout, stderr io.Writer) {
	groups := xds.Groups(snap)
	checked := map[string]string{} // file → "" if usable here, else why not
	for _, p := range snap.Providers() {
		def := xds.CAFile(p, groups[0])
		if def == "" {
			continue // not https
		}
		host := ""
		if u, err := url.Parse(p.BaseURL); err == nil {
			host = strings.ToLower(u.Hostname()) // as in the SNI
		}
		for _, g := range groups {
			file := xds.CAFile(p, g)
			where := ""
			if g.Name != "" {
				if file == def {
					continue
				}
				where = " (node group " + g.Name + ")"
			}
			why, seen := checked[file]
			if !seen {
				why = caFileProblem(file)
				checked[file] = why
			}
			state := "found here"
			if why != "" {
				state = "not usable here"
				fmt.Fprintf(stderr, "warning: provider %s%s: CA file %s %s on this machine; Envoy reads it on its own machine, so make sure it is there\n", p.Name, where, file, why)
			}
			fmt.Fprintf(stdout, "provider %s%s: Envoy verifies %s against CA file %s (%s)\n", p.Name, where, host, file, state)
		}
	}
}

// caFileProblem says why file could not serve Envoy as a trusted_ca on
// this machine ("" if it could): Envoy refuses a bundle without a PEM
// certificate ("Failed to load trusted CA certificates from …",
// source/common/tls/cert_validator/default_validator.cc).
func caFileProblem(file string) string {
	data, err := os.ReadFile(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "does not exist"
	case err != nil:
		return fmt.Sprintf("cannot be read (%v)", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(data) {
		return "holds no PEM certificate"
	}
	return ""
}

// loadSnapshot loads, validates and compiles a config file.
func loadSnapshot(path string, env Env) (*policies.Snapshot, error) {
	cfg, err := policies.Load(path, env)
	if err != nil {
		return nil, err
	}
	snap, err := policies.Compile(cfg, path)
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", path, err)
	}
	return snap, nil
}

// loadSnapshotWithoutProviderKeys is loadSnapshot for a command that never
// calls a provider: the providers' api_key values are not read, so their
// environment variables need not be set where it runs.
func loadSnapshotWithoutProviderKeys(path string, env Env) (*policies.Snapshot, error) {
	cfg, err := policies.LoadWithoutProviderKeys(path, env)
	if err != nil {
		return nil, err
	}
	snap, err := policies.CompileWithoutProviderKeys(cfg, path)
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", path, err)
	}
	return snap, nil
}
