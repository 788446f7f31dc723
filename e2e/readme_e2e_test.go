package e2e

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/envoy/envoytest"
)

// readmeListener is the listener address the README's snippets name; the
// test points them at its own proxy instead.
const readmeListener = "http://127.0.0.1:10000"

// snippetRun bounds one snippet's run: `go run` may compile the OpenAI
// SDK first.
const snippetRun = 3 * time.Minute

// TestREADMESnippets runs the README's JavaScript and Go snippets as
// written there — the fenced js and go blocks, saved under the file name
// each one's first line gives and run as that line says (node FILE; go
// mod init, go get, go run .) with KEY exported — against Sluice serving
// the quickstart's configuration behind the proxy, the listener address
// being the only change. A README edit that breaks a snippet fails here.
func TestREADMESnippets(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	js, goSrc := fencedBlock(t, readme, "js"), fencedBlock(t, readme, "go")
	for lang, src := range map[string]string{"js": js, "go": goSrc} {
		if !strings.Contains(src, readmeListener) {
			t.Fatalf("the README's %s snippet does not name the quickstart listener %s:\n%s", lang, readmeListener, src)
		}
		if !strings.Contains(src, "KEY") {
			t.Fatalf("the README's %s snippet does not read KEY, which the quickstart tells the user to export:\n%s", lang, src)
		}
	}

	cfg, err := os.ReadFile("../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, providerAddr := mockProvider(t, mockllm.Options{})
	s := startSluice(t, string(cfg))
	_, key := s.createKey(t, "demo")
	b := quickstartBootstrap(t, s.grpcAddr, providerAddr)

	eachProxy(t, b, func(t *testing.T, p proxy) {
		t.Run("js", func(t *testing.T) {
			node, err := exec.LookPath("node")
			if err != nil {
				t.Skip("no node on PATH, so the README's JavaScript snippet cannot run here (CI has Node.js; make jsclients installs the SDK)")
			}
			sdk, err := filepath.Abs(filepath.Join("jsclients", "node_modules"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(sdk, "openai")); err != nil {
				t.Fatalf("node is on PATH but the openai SDK is not in e2e/jsclients/node_modules: run make jsclients (%v)", err)
			}
			// A directory of its own, as a user's after npm init -y and
			// npm install openai: the package.json npm writes says
			// "type": "commonjs", so the file runs as its name makes it
			// (import and top-level await need .mjs), with the SDK in
			// node_modules.
			dir := t.TempDir()
			if err := os.Symlink(sdk, filepath.Join(dir, "node_modules")); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name": "hello", "version": "1.0.0", "type": "commonjs"}`+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			name := snippetFile(t, js, `[\w.-]+\.[cm]?js`)
			out := runSnippet(t, dir, name, js, p.url, key, nil, node, name)
			if strings.TrimSpace(out) == "" {
				t.Errorf("node %s printed nothing; want the reply", name)
			}
		})
		t.Run("go", func(t *testing.T) {
			goBin := goCommand(t)
			dir := t.TempDir()
			name := snippetFile(t, goSrc, `[\w.-]+\.go`)
			// The README's go mod init and go get, without the network:
			// a module of its own whose requirements are Sluice's (so the
			// same openai-go/v3 and a module graph this machine's module
			// cache holds), then go run . as the README says.
			writeSnippetModule(t, dir)
			out := runSnippet(t, dir, name, goSrc, p.url, key, goSnippetEnv(t, goBin), goBin, "run", ".")
			if strings.TrimSpace(out) == "" {
				t.Errorf("go run printed nothing; want the reply")
			}
		})
	})
}

// fencedBlock returns the body of the one ```lang block in md.
func fencedBlock(t *testing.T, md []byte, lang string) string {
	t.Helper()
	re := regexp.MustCompile("(?ms)^```" + regexp.QuoteMeta(lang) + "[ \t]*\n(.*?)^```[ \t]*$")
	m := re.FindAllSubmatch(md, -1)
	if len(m) != 1 {
		t.Fatalf("README.md has %d ```%s blocks, want one", len(m), lang)
	}
	return string(m[0][1])
}

// snippetFile is the file name a snippet's first line says to save it as.
func snippetFile(t *testing.T, src, pattern string) string {
	t.Helper()
	first, _, _ := strings.Cut(src, "\n")
	name := regexp.MustCompile(`\b` + pattern + `\b`).FindString(first)
	if name == "" {
		t.Fatalf("the snippet's first line names no file to save it as (%s): %q", pattern, first)
	}
	return name
}

// runSnippet writes src (the listener address replaced by base) to
// dir/name unless name is empty, runs the command in dir with KEY set,
// and returns its stdout; a failure ends the test with its output.
func runSnippet(t *testing.T, dir, name, src, base, key string, env []string, command string, args ...string) string {
	t.Helper()
	if name != "" {
		src = strings.ReplaceAll(src, readmeListener, base)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), snippetRun)
	defer cancel()
	cmd := exec.CommandContext(ctx, command, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), env...), "KEY="+key)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s\nsnippet:\n%s", filepath.Base(command), strings.Join(args, " "), err, stdout.String(), stderr.String(), src)
	}
	return stdout.String()
}

// goCommand is the go command: the one on PATH, else this toolchain's.
func goCommand(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no go command on PATH nor in GOROOT (%v)", err)
	}
	return p
}

// goSnippetEnv makes go get and go run take modules from this machine's
// module cache (the standard file:// proxy layout under
// GOMODCACHE/cache/download), as already verified by Sluice's go.sum, and
// nothing from the network.
func goSnippetEnv(t *testing.T, goBin string) []string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), goBin, "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOMODCACHE: %v", err)
	}
	cache := filepath.Join(strings.TrimSpace(string(out)), "cache", "download")
	return []string{"GOPROXY=file://" + filepath.ToSlash(cache), "GOSUMDB=off", "GOFLAGS=-mod=mod", "GOWORK=off"}
}

// writeSnippetModule writes dir/go.mod and dir/go.sum: module hello,
// requiring what Sluice's go.mod requires, openai-go/v3 among them, with
// Sluice's checksums.
func writeSnippetModule(t *testing.T, dir string) {
	t.Helper()
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(gomod, []byte("github.com/openai/openai-go/v3 ")) {
		t.Fatal("go.mod does not require github.com/openai/openai-go/v3, which the README's Go snippet imports")
	}
	gomod = regexp.MustCompile(`(?m)^module .*$`).ReplaceAll(gomod, []byte("module hello"))
	gosum, err := os.ReadFile("../go.sum")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), gomod, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), gosum, 0o600); err != nil {
		t.Fatal(err)
	}
}

// quickstartBootstrap is examples/envoy-quickstart.yaml, the quickstart's
// static Envoy bootstrap, with the listener on a free port and its
// clusters pointed at this test's Sluice and mock provider.
func quickstartBootstrap(t *testing.T, sluiceAddr, providerAddr string) *bootstrapv3.Bootstrap {
	t.Helper()
	b, err := envoytest.LoadBootstrap("../examples/envoy-quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b.StaticResources.Listeners[0].Address.GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: 0}
	for _, c := range b.StaticResources.Clusters {
		addr := map[string]string{"sluice": sluiceAddr, "mock": providerAddr}[c.GetName()]
		if addr == "" {
			t.Fatalf("unexpected cluster %q in the quickstart bootstrap", c.GetName())
		}
		_, port, _ := net.SplitHostPort(addr)
		n, _ := strconv.Atoi(port)
		c.LoadAssignment.Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: uint32(n)}
	}
	b.Admin = nil
	return b
}
