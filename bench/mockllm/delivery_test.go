package mockllm

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

const streamChat = `{"model":"gpt-test","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Say hi in one word 🙂"}]}`

// rawChunks sends one HTTP/1.1 request over a plain TCP connection and
// returns the response head and the payload of every chunk of its
// chunked body, as framed on the wire.
func rawChunks(t *testing.T, base, path, body string, headers ...string) (head string, chunks [][]byte) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var req strings.Builder
	fmt.Fprintf(&req, "POST %s HTTP/1.1\r\nHost: mock\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n", path, len(body))
	for i := 0; i+1 < len(headers); i += 2 {
		fmt.Fprintf(&req, "%s: %s\r\n", headers[i], headers[i+1])
	}
	req.WriteString("\r\n" + body)
	if _, err := io.WriteString(conn, req.String()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	var h strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading head: %v", err)
		}
		if line == "\r\n" {
			break
		}
		h.WriteString(line)
	}
	head = h.String()
	if !strings.Contains(strings.ToLower(head), "transfer-encoding: chunked") {
		t.Fatalf("response is not chunked:\n%s", head)
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading chunk size: %v", err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(line), 16, 64)
		if err != nil {
			t.Fatalf("chunk size %q: %v", line, err)
		}
		if n == 0 {
			return head, chunks
		}
		p := make([]byte, n+2)
		if _, err := io.ReadFull(br, p); err != nil || !bytes.HasSuffix(p, []byte("\r\n")) {
			t.Fatalf("chunk of %d: %v", n, err)
		}
		chunks = append(chunks, p[:n])
	}
}

func TestSplit(t *testing.T) {
	_, base := start(t, Options{})
	c := client(t, false)
	for _, tc := range []struct {
		name string
		crlf string
	}{{"lf", "0"}, {"crlf", "1"}} {
		t.Run(tc.name, func(t *testing.T) {
			const split = 3
			whole := post(t, c, base+"/v1/chat/completions", streamChat, "x-mock-crlf", tc.crlf).body
			_, chunks := rawChunks(t, base, "/v1/chat/completions", streamChat, "X-Mock-Split", strconv.Itoa(split), "X-Mock-Crlf", tc.crlf)
			payload := bytes.Join(chunks, nil)
			t.Logf("%d pieces for %d bytes", len(chunks), len(payload))
			if normalise(payload) != normalise(whole) {
				t.Fatalf("split body differs from the unsplit one:\n%s\n---\n%s", payload, whole)
			}
			eventEnd := []byte("\n\n")
			if tc.crlf == "1" {
				eventEnd = []byte("\r\n\r\n")
			}
			var off, midRune, midEvent, midCRLF int
			for i, ch := range chunks[:len(chunks)-1] {
				off += len(ch)
				atEventEnd := bytes.HasSuffix(payload[:off], eventEnd)
				if len(ch) > split || (off%split != 0 && !atEventEnd) {
					t.Fatalf("chunk %d (%d bytes) ends at %d: neither a multiple of %d nor an event end", i, len(ch), off, split)
				}
				if !utf8.RuneStart(payload[off]) {
					midRune++
				}
				if !atEventEnd {
					midEvent++
				}
				if payload[off-1] == '\r' && payload[off] == '\n' {
					midCRLF++
				}
			}
			if midRune == 0 || midEvent == 0 {
				t.Errorf("no piece boundary inside a rune (%d) or an event (%d)", midRune, midEvent)
			}
			if tc.crlf == "1" && midCRLF == 0 {
				t.Error("no piece boundary between CR and LF")
			}
			if tc.crlf == "1" && bytes.Count(payload, []byte("\r\n")) != 2*bytes.Count(payload, []byte("data: ")) {
				t.Error("CRLF stream has bare LFs")
			}
		})
	}

	// JSON bodies split too (HTTP/1.1 with a content-length: pieces are
	// separate writes, checked here by their sum).
	r := post(t, c, base+"/v1/messages", `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"x"}]}`, "x-mock-split", "7")
	if r.status != 200 || obj(t, r.body)["type"] != "message" {
		t.Errorf("split JSON: %d %s", r.status, r.body)
	}
}

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("gzip: %v", err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("gunzip: %v", err)
	}
	return out
}

func TestGzip(t *testing.T) {
	_, base := start(t, Options{})
	c := client(t, false)
	url := base + "/v1/chat/completions"

	t.Run("json", func(t *testing.T) {
		plain := post(t, c, url, withStream(chatBody, ""))
		r := post(t, c, url, withStream(chatBody, ""), "x-mock-gzip", "1")
		if cl := r.header.Get("Content-Length"); r.header.Get("Content-Encoding") != "gzip" || (cl != "" && cl != strconv.Itoa(len(r.body))) {
			t.Fatalf("headers: %v", r.header)
		}
		if got := gunzip(t, r.body); normalise(got) != normalise(plain.body) {
			t.Errorf("gunzipped %s, want %s", got, plain.body)
		}
	})
	t.Run("stream split", func(t *testing.T) {
		plain := post(t, c, url, streamChat)
		r := post(t, c, url, streamChat, "x-mock-gzip", "1", "x-mock-split", "5")
		if got := gunzip(t, r.body); normalise(got) != normalise(plain.body) {
			t.Errorf("gunzipped %s, want %s", got, plain.body)
		}
	})
	t.Run("auto", func(t *testing.T) {
		for _, tc := range []struct {
			accept string
			want   string
		}{{"gzip, br", "gzip"}, {"br", ""}, {"gzip;q=0", ""}, {"", ""}} {
			h := []string{"x-mock-gzip", "auto"}
			if tc.accept != "" {
				h = append(h, "Accept-Encoding", tc.accept)
			}
			if got := post(t, c, url, withStream(chatBody, ""), h...).header.Get("Content-Encoding"); got != tc.want {
				t.Errorf("accept-encoding %q: content-encoding %q, want %q", tc.accept, got, tc.want)
			}
		}
	})
	t.Run("stream is flushed per event", func(t *testing.T) {
		// A minute between events: the first event can only be read in
		// time if the compressor was flushed after it.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(streamChat))
		req.Header.Set("X-Mock-Gzip", "1")
		req.Header.Set("X-Mock-Interval", "1m")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(zr).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, `data: {"id":"chatcmpl-mock`) {
			t.Fatalf("first line %q: %v", line, err)
		}
		cancel() // the server's handler ends with the request
	})
}

func TestDelays(t *testing.T) {
	_, base := start(t, Options{})
	c := client(t, false)
	url := base + "/v1/chat/completions"

	t.Run("latency", func(t *testing.T) {
		t0 := time.Now()
		r := post(t, c, url, withStream(chatBody, ""), "x-mock-latency", "150ms")
		if d := time.Since(t0); d < 150*time.Millisecond || r.status != 200 {
			t.Errorf("took %v, status %d", d, r.status)
		}
	})
	t.Run("interval", func(t *testing.T) {
		t0 := time.Now()
		// role, 3 content, finish, usage, [DONE]: 6 pauses
		r := post(t, c, url, streamChat, "x-mock-interval", "30ms", "x-mock-chunks", "3")
		if d := time.Since(t0); d < 180*time.Millisecond || len(parseSSE(t, r.body)) != 7 {
			t.Errorf("took %v for %d events", d, len(parseSSE(t, r.body)))
		}
	})
	t.Run("first byte", func(t *testing.T) {
		t0 := time.Now()
		r := post(t, c, url, withStream(chatBody, ""), "x-mock-first-byte", "150ms")
		if d := time.Since(t0); d < 150*time.Millisecond || r.status != 200 || r.readErr != nil {
			t.Errorf("took %v, status %d, %v", d, r.status, r.readErr)
		}
		// The headers come before the delay: with a one-minute delay the
		// response (headers) still arrives, and the body is pending.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(streamChat))
		req.Header.Set("X-Mock-First-Byte", "1m")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("headers did not arrive before the first-byte delay: %v", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("status %d", resp.StatusCode)
		}
		cancel()
		if _, err := io.ReadAll(resp.Body); err == nil {
			t.Error("body completed despite the delay")
		}
	})
}

// contentChunks counts the OpenAI chat chunks carrying content.
func contentChunks(body []byte) int {
	return bytes.Count(body, []byte(`"delta":{"content":`))
}

func TestAbort(t *testing.T) {
	_, base := start(t, Options{})
	for _, h2 := range []bool{false, true} {
		c := client(t, h2)
		for _, tc := range []struct {
			name, path, body string
			after            string
			wantContent      int
			wantBytes        int // JSON: bytes before the reset
		}{
			{"stream after 2", "/v1/chat/completions", streamChat, "2", 2, -1},
			{"stream after 0", "/v1/chat/completions", streamChat, "0", 0, -1},
			{"stream past the end", "/v1/chat/completions", streamChat, "99", 13, -1},
			{"json after 10 bytes", "/v1/chat/completions", withStream(chatBody, ""), "10", 0, 10},
		} {
			t.Run(fmt.Sprintf("h2=%v/%s", h2, tc.name), func(t *testing.T) {
				r := post(t, c, base+tc.path, tc.body, "x-mock-abort-after", tc.after)
				if r.proto != map[bool]int{false: 1, true: 2}[h2] {
					t.Errorf("HTTP/%d", r.proto)
				}
				t.Logf("read error: %v", r.readErr)
				if r.readErr == nil || errors.Is(r.readErr, io.EOF) {
					t.Fatalf("read error %v, want a reset (got %d bytes)", r.readErr, len(r.body))
				}
				if tc.wantBytes >= 0 {
					if len(r.body) != tc.wantBytes {
						t.Errorf("%d bytes before the reset, want %d", len(r.body), tc.wantBytes)
					}
					return
				}
				if got := contentChunks(r.body); got != tc.wantContent {
					t.Errorf("%d content chunks before the reset, want %d:\n%s", got, tc.wantContent, r.body)
				}
				if bytes.Contains(r.body, []byte("[DONE]")) || bytes.Contains(r.body, []byte(`"finish_reason":"stop"`)) {
					t.Errorf("the stream was finished before the reset:\n%s", r.body)
				}
			})
		}
	}
}

func TestErrorAfter(t *testing.T) {
	_, base := start(t, Options{})
	c := client(t, false)
	for _, tc := range []struct {
		name, path, body string
		check            func(t *testing.T, events []sse)
	}{
		{"openai", "/v1/chat/completions", streamChat, func(t *testing.T, events []sse) {
			if len(events) != 3 { // role, 1 content, error
				t.Fatalf("%d events", len(events))
			}
			m := obj(t, []byte(events[2].data))
			if dig(m, "error", "type") != "server_error" {
				t.Errorf("error event %v", m)
			}
		}},
		{"anthropic", "/v1/messages", withStream(messagesBody, `"stream":true,`), func(t *testing.T, events []sse) {
			last := events[len(events)-1]
			m := obj(t, []byte(last.data))
			if len(events) != 5 || last.name != "error" || m["type"] != "error" || dig(m, "error", "type") != "overloaded_error" {
				t.Errorf("%d events, last %+v", len(events), last)
			}
		}},
		{"responses", "/v1/responses", withStream(responsesBody, `"stream":true,`), func(t *testing.T, events []sse) {
			last := events[len(events)-1]
			if len(events) != 6 || last.name != "error" || obj(t, []byte(last.data))["type"] != "error" {
				t.Errorf("%d events, last %+v", len(events), last)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := post(t, c, base+tc.path, tc.body, "x-mock-error-after", "1")
			if r.status != 200 || r.readErr != nil {
				t.Fatalf("status %d, read %v", r.status, r.readErr)
			}
			tc.check(t, parseSSE(t, r.body))
		})
	}
}

func TestInjectedStatus(t *testing.T) {
	_, base := start(t, Options{})
	c := client(t, false)
	openAIType := map[int][2]string{
		400: {"invalid_request_error", ""}, 401: {"invalid_request_error", "invalid_api_key"},
		404: {"invalid_request_error", "model_not_found"}, 429: {"requests", "rate_limit_exceeded"},
		500: {"server_error", ""}, 503: {"server_error", ""},
	}
	anthropicType := map[int]string{
		400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
		429: "rate_limit_error", 500: "api_error", 503: "api_error", 529: "overloaded_error",
	}
	for _, ep := range []struct{ path, body string }{
		{"/v1/chat/completions", streamChat},
		{"/v1/completions", withStream(completionsBody, "")},
		{"/v1/embeddings", `{"model":"e","input":"x"}`},
		{"/v1/responses", withStream(responsesBody, "")},
		{"/v1/messages", withStream(messagesBody, `"stream":true,`)},
	} {
		for _, status := range []int{400, 401, 404, 429, 500, 503, 529} {
			t.Run(fmt.Sprintf("%s/%d", ep.path, status), func(t *testing.T) {
				r := post(t, c, base+ep.path, ep.body, "x-mock-status", strconv.Itoa(status))
				if r.status != status || r.header.Get("Content-Type") != "application/json" {
					t.Fatalf("status %d, content-type %q", r.status, r.header.Get("Content-Type"))
				}
				if got, want := r.header.Get("Retry-After"), map[bool]string{true: "1"}[status == 429]; got != want {
					t.Errorf("retry-after %q, want %q", got, want)
				}
				m := obj(t, r.body)
				if ep.path == "/v1/messages" {
					want := anthropicType[status]
					if want == "" {
						want = "api_error"
					}
					if diff := cmp.Diff(map[string]any{"type": "error", "error": map[string]any{"type": want, "message": dig(m, "error", "message")}}, m); diff != "" {
						t.Errorf("body (-want +got):\n%s", diff)
					}
					return
				}
				want, ok := openAIType[status]
				if !ok {
					want = [2]string{"server_error", ""}
				}
				var code any
				if want[1] != "" {
					code = want[1]
				}
				wantBody := map[string]any{"error": map[string]any{"message": dig(m, "error", "message"), "type": want[0], "param": nil, "code": code}}
				if diff := cmp.Diff(wantBody, m); diff != "" {
					t.Errorf("body (-want +got):\n%s", diff)
				}
			})
		}
	}
	r := post(t, c, base+"/v1/chat/completions", streamChat, "x-mock-status", "503", "x-mock-retry-after", "7")
	if r.status != 503 || r.header.Get("Retry-After") != "7" {
		t.Errorf("x-mock-retry-after: %d, %q", r.status, r.header.Get("Retry-After"))
	}
}

func TestOptionsStatus(t *testing.T) {
	// A provider that is down: every request fails, until a header asks
	// for another error.
	_, base := start(t, Options{Status: 503})
	c := client(t, false)
	if r := post(t, c, base+"/v1/chat/completions", streamChat); r.status != 503 {
		t.Errorf("Options.Status 503: got %d", r.status)
	}
	if r := post(t, c, base+"/v1/chat/completions", streamChat, "x-mock-status", "429"); r.status != 429 {
		t.Errorf("x-mock-status over Options.Status: got %d", r.status)
	}
}

func TestH2C(t *testing.T) {
	_, base := start(t, Options{Chunks: 4})
	r := post(t, client(t, true), base+"/v1/chat/completions", streamChat, "x-mock-split", "3", "x-mock-gzip", "1")
	if r.proto != 2 || r.status != 200 || r.readErr != nil {
		t.Fatalf("HTTP/%d status %d: %v", r.proto, r.status, r.readErr)
	}
	if got := contentChunks(gunzip(t, r.body)); got != 4 {
		t.Errorf("%d content chunks, want 4", got)
	}
}

func TestOptionsDefaults(t *testing.T) {
	// Server-wide options act like the headers; a header still wins.
	_, base := start(t, Options{Words: 5, Chunks: 2, CachedTokens: 3, CacheWriteTokens: 2, ReasoningTokens: 4, CRLF: true, OmitUsage: true})
	c := client(t, false)
	r := post(t, c, base+"/v1/chat/completions", streamChat)
	if got := contentChunks(r.body); got != 2 || bytes.Contains(r.body, []byte(`"usage":{`)) || !bytes.Contains(r.body, []byte("\r\n\r\n")) {
		t.Errorf("options not applied:\n%s", r.body)
	}
	m := obj(t, post(t, c, base+"/v1/messages", withStream(messagesBody, ""), "x-mock-usage", "default").body)
	want := map[string]any{"input_tokens": 6.0, "cache_read_input_tokens": 3.0, "cache_creation_input_tokens": 2.0, "output_tokens": 9.0}
	if diff := cmp.Diff(want, m["usage"]); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	r = post(t, c, base+"/v1/chat/completions", streamChat, "x-mock-chunks", "3")
	if got := contentChunks(r.body); got != 3 {
		t.Errorf("x-mock-chunks over Options: %d chunks", got)
	}
}

func TestShutdown(t *testing.T) {
	s := New(Options{ShutdownTimeout: 100 * time.Millisecond})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	c := client(t, false)
	url := "http://" + ln.Addr().String() + "/v1/chat/completions"

	// A request stuck in a one-hour delay when the shutdown begins: after
	// the grace period its context is cancelled and Serve returns.
	req, _ := http.NewRequest("POST", url, strings.NewReader(streamChat))
	req.Header.Set("X-Mock-First-Byte", "1h")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return after the shutdown timeout")
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("the stuck response completed")
	}
}

// TestTrailer: x-mock-trailer ends a clean response, JSON or stream, over
// HTTP/1.1 (chunked) and HTTP/2, with the trailer field; a bad one is a
// control error.
func TestTrailer(t *testing.T) {
	_, base := start(t, Options{})
	for _, h2c := range []bool{false, true} {
		c := client(t, h2c)
		for _, tc := range []struct{ name, body, gzip string }{
			{"json", withStream(chatBody, ""), "0"}, {"json-gzip", withStream(chatBody, ""), "1"},
			{"stream", streamChat, "0"}, {"stream-gzip", streamChat, "1"},
		} {
			t.Run(fmt.Sprintf("%s/h2c=%v", tc.name, h2c), func(t *testing.T) {
				req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(tc.body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("x-mock-trailer", "x-upstream-done=ok 1")
				req.Header.Set("x-mock-gzip", tc.gzip)
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if _, err := io.ReadAll(resp.Body); err != nil {
					t.Fatal(err)
				}
				// HTTP/1.1 has trailers only in a chunked body: no length.
				if resp.StatusCode != 200 || resp.Trailer.Get("X-Upstream-Done") != "ok 1" || (!h2c && resp.ContentLength != -1) {
					t.Errorf("status %d, trailer %v, content-length %d", resp.StatusCode, resp.Trailer, resp.ContentLength)
				}
			})
		}
	}
	c := client(t, false)
	for _, bad := range []string{"", "x-t", "=v", "content-length=1", "trailer=x", "x-mock-words=1", "bad name=v"} {
		if r := post(t, c, base+"/v1/chat/completions", withStream(chatBody, ""), "x-mock-trailer", bad); r.status != 400 || !strings.Contains(string(r.body), "x-mock-trailer") {
			t.Errorf("x-mock-trailer %q: %d %s", bad, r.status, r.body)
		}
	}
}
