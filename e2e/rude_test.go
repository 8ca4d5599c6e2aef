package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/server"
)

// Tests of clients that misbehave (huge or invalid bodies, stalled
// uploads, readers that stop reading), of streams that wait long before
// their first token, and of draining for shutdown. Each runs the real
// engine behind the real server on a loopback port.

// startWith serves TinyStories656K with the engine config ecfg and the
// server config scfg on 127.0.0.1.
func startWith(t *testing.T, ecfg engine.Config, scfg server.Config) *e2etest.Server {
	t.Helper()
	return e2etest.Start(t, testmodel.TinyStories656K, e2etest.Options{Engine: ecfg, Server: scfg})
}

// errorCode decodes an error envelope and returns its code and message.
func errorCode(t *testing.T, b []byte) (code, msg string) {
	t.Helper()
	var env e2etest.ErrorEnvelope
	if err := json.Unmarshal(b, &env); err != nil || env.Error == nil {
		t.Fatalf("%.300q is not an error envelope: %v", b, err)
	}
	if env.Error.Code != nil {
		code = *env.Error.Code
	}
	return code, env.Error.Message
}

// TestBodyTooLarge sends 20 MB, over the 8 MiB default limit, with and
// without a Content-Length: the client must be able to read the 413
// rather than see its connection reset while it is still sending.
func TestBodyTooLarge(t *testing.T) {
	ts := startWith(t, engine.Config{Parallel: 1}, server.Config{})
	body := make([]byte, 20<<20)
	copy(body, `{"prompt":"`)
	for i := len(`{"prompt":"`); i < len(body)-2; i++ {
		body[i] = 'x'
	}
	copy(body[len(body)-2:], `"}`)
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			var r io.Reader = bytes.NewReader(body)
			if chunked {
				r = struct{ io.Reader }{r} // hides the length: chunked encoding
			}
			req, err := http.NewRequest(http.MethodPost, ts.URL+"/v1/completions", r)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if chunked != (req.ContentLength <= 0) {
				t.Fatalf("ContentLength %d", req.ContentLength)
			}
			resp, err := ts.Client.Do(req)
			if err != nil {
				t.Fatalf("POST 20 MB: %v", err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("read the answer: %v", err)
			}
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("status %d: %.300s", resp.StatusCode, b)
			}
			if code, msg := errorCode(t, b); code != "request_too_large" || !strings.Contains(msg, fmt.Sprint(server.DefaultMaxBody)) {
				t.Errorf("code %q, message %q", code, msg)
			}
		})
	}
	// Many clients send the whole body before they read: the server
	// must take it all, not close on it (a reset, and the 413 lost).
	t.Run("send all then read", func(t *testing.T) {
		conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(2 * time.Minute)) // a hang fails, late
		head := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
		if _, err := conn.Write(append([]byte(head), body...)); err != nil {
			t.Fatalf("send 20 MB: %v", err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("read the answer: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if code, _ := errorCode(t, b); resp.StatusCode != http.StatusRequestEntityTooLarge || code != "request_too_large" {
			t.Errorf("%d %.300s", resp.StatusCode, b)
		}
	})

	// The server serves on.
	resp, b := ts.Post(t, "/tokenize", map[string]any{"content": "Once upon a time"})
	if resp.StatusCode != 200 {
		t.Errorf("after the large bodies: %d %s", resp.StatusCode, b)
	}
}

// TestInvalidUTF8 sends bytes that are not UTF-8 inside a JSON string,
// which encoding/json alone would accept as U+FFFD.
func TestInvalidUTF8(t *testing.T) {
	ts := startWith(t, engine.Config{Parallel: 1}, server.Config{})
	post := func(path, body string) (int, []byte) {
		t.Helper()
		resp, err := ts.Client.Post(ts.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, b
	}
	for _, tc := range []struct {
		path, body string
		offset     int
	}{
		{"/v1/completions", "{\"prompt\":\"Once upon\xff a time\",\"max_tokens\":1}", 20},
		{"/completion", "{\"prompt\":\"caf\xc3\",\"n_predict\":1}", 14},                               // cut short
		{"/tokenize", "{\"content\":\"\xed\xa0\x80\"}", 12},                                           // a surrogate
		{"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"\xc0\xaf\"}]}", 39}, // overlong
	} {
		status, b := post(tc.path, tc.body)
		code, msg := errorCode(t, b)
		want := fmt.Sprintf("at offset %d", tc.offset)
		if status != 400 || code != "" || !strings.Contains(msg, "not valid UTF-8") || !strings.Contains(msg, want) {
			t.Errorf("%s %q: %d %s; want 400 saying not valid UTF-8 %s", tc.path, tc.body, status, b, want)
		}
	}
	// Valid UTF-8 beyond ASCII decodes, and the decode errors are as before.
	if status, b := post("/detokenize", `{"tokens":[],"note":"café 😀"}`); status != 200 {
		t.Errorf("valid UTF-8: %d %s", status, b)
	}
	if status, b := post("/tokenize", `{"content": 5}`); status != 400 || !strings.Contains(string(b), "invalid type for 'content'") {
		t.Errorf("type error: %d %s", status, b)
	}
	if status, b := post("/tokenize", `{"content": "a"`); status != 400 || !strings.Contains(string(b), "unexpected end of input") {
		t.Errorf("truncated JSON: %d %s", status, b)
	}
}

// TestBodyTimeout sends half a body and stalls: the server answers 408
// once the body deadline passes instead of waiting forever.
func TestBodyTimeout(t *testing.T) {
	ts := startWith(t, engine.Config{Parallel: 1}, server.Config{BodyTimeout: 100 * time.Millisecond})
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Minute)) // a hang fails, late
	fmt.Fprintf(conn, "POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"content\":")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if code, _ := errorCode(t, b); resp.StatusCode != http.StatusRequestTimeout || code != "request_timeout" {
		t.Errorf("%d %s; want 408 request_timeout", resp.StatusCode, b)
	}

	// A whole body well within the deadline, and the stream that follows
	// it, are not cut by it.
	g := golden[0]
	text, final := llamaStream(t, ts.OpenStream(t, context.Background(), "/completion",
		map[string]any{"prompt": g.Prompt, "n_predict": g.N, "temperature": 0, "ignore_eos": true, "stream": true}))
	if text != g.Want || final.TokensPredicted != g.N {
		t.Errorf("stream %q, %+v", text, final)
	}
}

// smallSendBuffers gives the server's connections a small send buffer,
// which the kernel would otherwise grow to megabytes: a client that stops
// reading then blocks the server's writes within a few hundred events.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		err = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// TestStalledReader streams an unlimited generation to a client that
// never reads but keeps its connection open. Once the socket buffers are
// full, a write outlives the write timeout: the handler must return and
// cancel the request, freeing the slot long before the context is full.
func TestStalledReader(t *testing.T) {
	ts := e2etest.Start(t, testmodel.TinyStories656K, e2etest.Options{
		Engine: engine.Config{Parallel: 1, CtxSize: 16384},
		Server: server.Config{WriteTimeout: 100 * time.Millisecond},
		Wrap:   func(ln net.Listener) net.Listener { return smallSendBuffers{ln} },
	})
	before := ts.Metrics(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.(*net.TCPConn).SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}
	body := `{"prompt":"Once upon a time","n_predict":-1,"temperature":0,"ignore_eos":true,"stream":true}`
	fmt.Fprintf(conn, "POST /completion HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)

	finished := func() bool { return ts.Metrics(t)["corral_requests_total"] == before["corral_requests_total"]+1 }
	e2etest.WaitFor(t, "the request to finish", finished)
	e2etest.WaitFor(t, "the slot to be released", func() bool { return busySlots(t, ts) == 0 })
	if n := ts.Metrics(t)["corral_tokens_generated_total"] - before["corral_tokens_generated_total"]; n >= float64(ts.Info.CtxPerRequest)/2 {
		t.Errorf("%v tokens generated: the request ran on after its client stopped reading", n)
	}
}

// sseLines reads an event stream line by line, blank lines skipped.
// TestKeepAlive queues a stream behind a long generation in the only
// slot: it must get its headers and ": ping" comments while it waits, as
// a proxy with an idle timeout needs, and then its text as usual. A
// queued stream that times out after its headers ends with an error event.
func TestKeepAlive(t *testing.T) {
	for _, tt := range []struct {
		name    string
		maxWait time.Duration
	}{{"then text", 0}, {"then queue timeout", 300 * time.Millisecond}} {
		t.Run(tt.name, func(t *testing.T) {
			ts := startWith(t, engine.Config{Parallel: 1, CtxSize: 16384, MaxQueueWait: tt.maxWait}, server.Config{KeepAlive: 5 * time.Millisecond})
			runCtx, stopRunning := context.WithCancel(context.Background())
			defer stopRunning()
			running := ts.OpenStream(t, runCtx, "/completion",
				map[string]any{"prompt": "Once upon a time", "n_predict": -1, "temperature": 0, "ignore_eos": true, "stream": true})
			defer running.Body.Close()
			// Once the running stream sent text, it holds the slot (it
			// may ping first, while its prompt is evaluated).
			runningEvents := newSSEEvents(t, running.Body)
			for ev := runningEvents.next(); ev.IsComment; ev = runningEvents.next() {
				if !isPing(ev) {
					t.Fatalf("running stream: %+v", ev)
				}
			}

			g := golden[1]
			path, body := "/completion", map[string]any{"prompt": g.Prompt, "n_predict": g.N, "temperature": 0, "ignore_eos": true, "stream": true}
			if tt.maxWait > 0 {
				path, body = "/v1/completions", map[string]any{"prompt": g.Prompt, "max_tokens": g.N, "stream": true}
			}
			waiting := ts.OpenStream(t, context.Background(), path, body)
			defer waiting.Body.Close()
			events := newSSEEvents(t, waiting.Body)
			for i := range 2 {
				if ev := events.next(); !isPing(ev) {
					t.Fatalf("event %d of a waiting stream: %+v, want \": ping\"", i, ev)
				}
			}

			if tt.maxWait > 0 {
				ev := events.next()
				for isPing(ev) {
					ev = events.next()
				}
				if ev.IsComment {
					t.Fatalf("comment %q", ev.Comment)
				}
				if code, _ := errorCode(t, ev.Data); code != "queue_timeout" {
					t.Errorf("error event %s; want code queue_timeout", ev.Data)
				}
				if ev := events.next(); !ev.Done {
					t.Errorf("after the error event: %+v", ev)
				}
				return
			}

			// Free the slot: the waiting stream runs and ends as usual.
			stopRunning()
			var text strings.Builder
			for {
				ev := events.next()
				if isPing(ev) {
					continue
				}
				if ev.IsComment {
					t.Fatalf("comment %q", ev.Comment)
				}
				data := string(ev.Data)
				var c llamaCompletion
				unmarshal(t, data, &c)
				text.WriteString(c.Content)
				if c.Stop {
					if c.TokensPredicted != g.N {
						t.Errorf("final event %s", data)
					}
					break
				}
			}
			if text.String() != g.Want {
				t.Errorf("text %q, want %q", text.String(), g.Want)
			}
		})
	}
}

// TestDrain drains a server whose only slot runs a stream while another
// request waits: /health turns 503 draining, the waiting and any new
// request fail at once with 503, and the running stream completes.
func TestDrain(t *testing.T) {
	ts := startWith(t, engine.Config{Parallel: 1, CtxSize: 16384}, server.Config{})
	const n = 2000
	running := ts.OpenStream(t, context.Background(), "/completion",
		map[string]any{"prompt": "Once upon a time", "n_predict": n, "temperature": 0, "ignore_eos": true, "stream": true})
	defer running.Body.Close()

	type reply struct {
		status int
		body   []byte
		err    error
	}
	queued := make(chan reply, 1)
	go func() {
		resp, err := ts.Client.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"Hello","max_tokens":4}`))
		if err != nil {
			queued <- reply{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		queued <- reply{resp.StatusCode, b, err}
	}()
	e2etest.WaitFor(t, "a queued request", func() bool { return ts.Metrics(t)["corral_queue_depth"] == 1 })

	ts.Drain()
	resp, b := ts.Do(t, context.Background(), http.MethodGet, "/health", nil)
	if resp.StatusCode != 503 || strings.TrimSpace(string(b)) != `{"status":"draining"}` {
		t.Errorf("/health while draining: %d %s", resp.StatusCode, b)
	}
	r := <-queued
	if r.err != nil {
		t.Fatalf("queued request: %v", r.err)
	}
	if code, _ := errorCode(t, r.body); r.status != 503 || code != "unavailable" {
		t.Errorf("queued request: %d %s; want 503 unavailable", r.status, r.body)
	}
	resp, b = ts.Post(t, "/v1/completions", map[string]any{"prompt": "Hello", "max_tokens": 4})
	if code, _ := errorCode(t, b); resp.StatusCode != 503 || code != "unavailable" {
		t.Errorf("new request: %d %s; want 503 unavailable", resp.StatusCode, b)
	}
	if busySlots(t, ts) != 1 {
		t.Error("the running request stopped with the drain")
	}

	_, final := llamaStream(t, running)
	if final.TokensPredicted != n || final.StopType != "limit" {
		t.Errorf("running stream ended with %+v", final)
	}
}

// TestShutdown ends Serve's context while a stream runs: until the stream
// has completed, the server still accepts connections and /health answers
// 503 draining on them; then Serve returns.
func TestShutdown(t *testing.T) {
	// A grace long enough for the 2000 tokens on a loaded machine: the
	// test is about the running request finishing, not about the grace.
	ts := startWith(t, engine.Config{Parallel: 1, CtxSize: 16384}, server.Config{ShutdownTimeout: 10 * time.Minute})
	const n = 2000
	running := ts.OpenStream(t, context.Background(), "/completion",
		map[string]any{"prompt": "Once upon a time", "n_predict": n, "temperature": 0, "ignore_eos": true, "stream": true})
	defer running.Body.Close()
	stopped := make(chan error, 1)
	go func() { stopped <- ts.Stop() }()

	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}} // a new connection each time
	e2etest.WaitFor(t, "/health to report draining", func() bool {
		resp, err := fresh.Get(ts.URL + "/health")
		if err != nil {
			t.Fatalf("/health while a request runs: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 503 && strings.TrimSpace(string(b)) == `{"status":"draining"}`
	})
	_, final := llamaStream(t, running)
	if final.TokensPredicted != n || final.StopType != "limit" {
		t.Errorf("running stream ended with %+v", final)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
