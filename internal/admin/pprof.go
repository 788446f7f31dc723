package admin

import (
	"bufio"
	"bytes"
	"fmt"
	"html"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"time"
)

// The profiles are served from runtime/pprof and runtime/trace directly.
// net/http/pprof is not imported: its init registers its handlers on
// http.DefaultServeMux, unauthenticated, in every binary that links it.
// The paths, parameters and formats are the ones `go tool pprof` and
// `go tool trace` read (net/http/pprof's), so a profile fetched with the
// token opens in either tool.

// MaxProfileSeconds bounds the seconds parameter of /debug/pprof/profile
// and /debug/pprof/trace: a longer recording holds a request (and the
// process's only CPU profiler or tracer) for too long.
const MaxProfileSeconds = 60

// namedProfiles are the runtime/pprof profiles served by name, with what
// the index says of each.
var namedProfiles = []struct{ name, about string }{
	{"allocs", "a sampling of all past memory allocations"},
	{"block", "stack traces that led to blocking on synchronization primitives (empty unless the runtime's block profile rate is set)"},
	{"goroutine", "stack traces of all current goroutines (debug=2 for the format of an unrecovered panic)"},
	{"heap", "a sampling of memory allocations of live objects (gc=1 runs a garbage collection first)"},
	{"mutex", "stack traces of holders of contended mutexes (empty unless the runtime's mutex profile fraction is set)"},
	{"threadcreate", "stack traces that led to the creation of new OS threads"},
}

// pprofRoutes are the routes under /debug/pprof/;
// docs/admin-api.openapi.yaml describes each (TestOpenAPIMatchesRoutes).
func (s *Server) pprofRoutes() []route {
	return []route{
		{"GET /debug/pprof/{$}", s.pprofIndex},
		{"GET /debug/pprof/cmdline", pprofCmdline},
		{"GET /debug/pprof/profile", s.pprofCPU},
		{"GET /debug/pprof/symbol", pprofSymbol},
		{"POST /debug/pprof/symbol", pprofSymbol},
		{"GET /debug/pprof/trace", s.pprofTrace},
		{"GET /debug/pprof/{profile}", pprofNamed},
	}
}

// pprofGate serves the profiles only while admin.pprof is set in the
// current config (read on every request, as the token is), and then only
// with the admin token. While it is off the paths are answered as paths
// that are not served: 404.
func (s *Server) pprofGate(routes *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if snap := s.deps.Policy(); snap == nil || !snap.Config().Admin.PProf {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("cache-control", "no-store")
		if !s.checkToken(w, r) {
			return
		}
		if _, pattern := routes.Handler(r); pattern == "" {
			writeError(w, noRoute(routes, r, w.Header()))
			return
		}
		routes.ServeHTTP(w, r)
	})
}

func (s *Server) pprofIndex(w http.ResponseWriter, _ *http.Request) {
	var b bytes.Buffer
	b.WriteString("<!DOCTYPE html>\n<html><head><title>/debug/pprof/</title></head><body>\n<h1>/debug/pprof/</h1>\n<table>\n<tr><th>count</th><th>profile</th><th></th></tr>\n")
	for _, p := range namedProfiles {
		n := 0
		if prof := pprof.Lookup(p.name); prof != nil {
			n = prof.Count()
		}
		fmt.Fprintf(&b, "<tr><td>%d</td><td><a href=\"%s?debug=1\">%s</a></td><td>%s</td></tr>\n", n, p.name, p.name, html.EscapeString(p.about))
	}
	fmt.Fprintf(&b, `</table>
<ul>
<li><a href="cmdline">cmdline</a>: the command line of this process</li>
<li><a href="profile">profile</a>: a CPU profile (seconds=N, default 30, at most %d)</li>
<li><a href="symbol">symbol</a>: program counters to function names (go tool pprof's symbolizer)</li>
<li><a href="trace?seconds=1">trace</a>: an execution trace (seconds=N, default 1, at most %d)</li>
</ul>
<p>Every path needs Authorization: Bearer &lt;admin.token&gt;: fetch a profile with curl, then open the file with go tool pprof (or go tool trace).</p>
</body></html>
`, MaxProfileSeconds, MaxProfileSeconds)
	w.Header().Set("content-type", "text/html; charset=utf-8")
	w.Header().Set("x-content-type-options", "nosniff")
	w.Write(b.Bytes())
}

// pprofCmdline answers the process's arguments, separated by NUL bytes.
func pprofCmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("content-type", "text/plain; charset=utf-8")
	w.Header().Set("x-content-type-options", "nosniff")
	io.WriteString(w, strings.Join(os.Args, "\x00"))
}

// pprofNamed writes one runtime/pprof profile: the gzipped protocol
// buffer (debug=0, the default) or text (debug=1, 2).
func pprofNamed(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("profile")
	known := false
	for _, p := range namedProfiles {
		known = known || p.name == name
	}
	prof := pprof.Lookup(name)
	if !known || prof == nil {
		writeError(w, errorf(http.StatusNotFound, "not_found", "no such profile: %q (profiles: allocs, block, goroutine, heap, mutex, threadcreate; see /debug/pprof/)", name))
		return
	}
	allowed := []string{"debug"}
	if name == "heap" {
		allowed = append(allowed, "gc")
	}
	q, ps := query(r, allowed...)
	debug, p := wholeParam(q, "debug", 0, 0, 2)
	ps = appendProblem(ps, p)
	gc, p := wholeParam(q, "gc", 0, 0, 1)
	ps = appendProblem(ps, p)
	if len(ps) > 0 {
		writeError(w, invalid(ps))
		return
	}
	if gc == 1 {
		runtime.GC()
	}
	w.Header().Set("x-content-type-options", "nosniff")
	if debug == 0 {
		w.Header().Set("content-type", "application/octet-stream")
		w.Header().Set("content-disposition", fmt.Sprintf("attachment; filename=%q", name))
	} else {
		w.Header().Set("content-type", "text/plain; charset=utf-8")
	}
	// An error here is the client gone away; there is no one to tell.
	_ = prof.WriteTo(w, debug)
}

// pprofCPU records a CPU profile for seconds (default 30) and writes it.
func (s *Server) pprofCPU(w http.ResponseWriter, r *http.Request) {
	d, ok := durationParam(w, r, 30)
	if !ok {
		return
	}
	w.Header().Set("content-type", "application/octet-stream")
	w.Header().Set("content-disposition", `attachment; filename="profile"`)
	if err := pprof.StartCPUProfile(w); err != nil {
		w.Header().Del("content-disposition")
		writeError(w, errorf(http.StatusConflict, "profile_in_progress", "cannot start a CPU profile: %v (one is already being recorded; try again when it ends)", err))
		return
	}
	s.record(r, d)
	pprof.StopCPUProfile()
}

// pprofTrace records an execution trace for seconds (default 1) and
// writes it.
func (s *Server) pprofTrace(w http.ResponseWriter, r *http.Request) {
	d, ok := durationParam(w, r, 1)
	if !ok {
		return
	}
	w.Header().Set("content-type", "application/octet-stream")
	w.Header().Set("content-disposition", `attachment; filename="trace"`)
	if err := trace.Start(w); err != nil {
		w.Header().Del("content-disposition")
		writeError(w, errorf(http.StatusConflict, "profile_in_progress", "cannot start a trace: %v (one is already being recorded; try again when it ends)", err))
		return
	}
	s.record(r, d)
	trace.Stop()
}

// record waits while a profile or trace is recorded: d, or less if the
// client goes away or the server shuts down (what was recorded so far is
// then sent, and shutdown is not held up).
func (s *Server) record(r *http.Request, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	case <-s.closing:
	}
}

// durationParam reads the seconds parameter, a whole number from 1 to
// MaxProfileSeconds, or answers 400.
func durationParam(w http.ResponseWriter, r *http.Request, def int) (time.Duration, bool) {
	q, ps := query(r, "seconds")
	n, p := wholeParam(q, "seconds", def, 1, MaxProfileSeconds)
	if ps = appendProblem(ps, p); len(ps) > 0 {
		writeError(w, invalid(ps))
		return 0, false
	}
	return time.Duration(n) * time.Second, true
}

// wholeParam reads the query parameter name, a whole number from lo to
// hi, def when absent.
func wholeParam(q map[string][]string, name string, def, lo, hi int) (int, *problem) {
	vs := q[name]
	if len(vs) == 0 {
		return def, nil
	}
	n, err := strconv.Atoi(vs[0])
	if err != nil || n < lo || n > hi {
		return 0, &problem{"query." + name, fmt.Sprintf("must be a whole number from %d to %d, got %q", lo, hi, vs[0])}
	}
	return n, nil
}

func appendProblem(ps []problem, p *problem) []problem {
	if p != nil {
		ps = append(ps, *p)
	}
	return ps
}

// pprofSymbol is the symbolizer `go tool pprof` calls: a GET without a
// query answers "num_symbols: 1" (symbols are available); a POST body, or
// a GET query, of program counters ("0x4a2b1c+0x4a2c00") is answered with
// one "0x<pc> <function>" line for each counter the binary knows.
func pprofSymbol(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("content-type", "text/plain; charset=utf-8")
	w.Header().Set("x-content-type-options", "nosniff")
	var in []byte
	if r.Method == http.MethodPost {
		var err error
		if in, err = io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody)); err != nil {
			writeError(w, errorf(http.StatusBadRequest, "invalid_request", "reading the body: %v", err))
			return
		}
	} else {
		in = []byte(r.URL.RawQuery)
	}
	var b bytes.Buffer
	b.WriteString("num_symbols: 1\n")
	sc := bufio.NewScanner(bytes.NewReader(in))
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.IndexByte(data, '+'); i >= 0 {
			return i + 1, data[:i], nil
		}
		if atEOF && len(data) > 0 {
			return len(data), data, nil
		}
		return 0, nil, nil
	})
	for sc.Scan() {
		pc, err := strconv.ParseUint(strings.TrimSpace(sc.Text()), 0, 64)
		if err != nil {
			continue
		}
		if fn := runtime.FuncForPC(uintptr(pc)); fn != nil {
			fmt.Fprintf(&b, "%#x %s\n", pc, fn.Name())
		}
	}
	w.Write(b.Bytes())
}
