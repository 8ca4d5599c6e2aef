package supervisor

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/corral-llm/corral/supervisor/agent"
	"github.com/corral-llm/corral/wire"
)

// The tests in this file put a fake upstream in front of the Worker: an
// HTTP server in the test process on the worker's port, while the worker
// supervises a stand-in child process (its CPU time is what the liveness
// rules sample). They are for situations a real server cannot be made to
// produce on demand: one stream stuck while the other slots decode, a
// server that never sends response headers. Everything on the worker's
// side (submission, streaming, the supervision loop, the timeout checks)
// is the real code.

// spinningChild is a child that burns CPU until it is stopped, as a server
// decoding on its other slots does: its CPU time always advances.
var spinningChild = []string{"sh", "-c", "while :; do :; done"}

// sleepingChild is a child that uses no CPU.
var sleepingChild = []string{"sleep", "3600"}

// fakeUpstreamWorker returns a started, READY worker whose child is child
// and whose HTTP upstream is chat (POST /v1/chat/completions), served from
// the test process; GET /v1/models answers the readiness probe. The server and the
// worker are stopped at the end of the test, the worker first (which ends
// its streams, so chat must return when its request's context ends).
func fakeUpstreamWorker(t *testing.T, slots int, child []string, chat http.HandlerFunc, mutate func(*WorkerConfig)) *Worker {
	t.Helper()
	return startReady(t, fakeUpstreamConfig(t, "fake", slots, child, chat), mutate)
}

// fakeUpstreamConfig serves chat (POST /v1/chat/completions) and the
// readiness probe (GET /v1/models) from the test process, and returns the
// configuration of a worker called name whose upstream that server is and
// whose child is child. The server is closed at the end of the test.
func fakeUpstreamConfig(t *testing.T, name string, slots int, child []string, chat http.HandlerFunc) WorkerConfig {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{}})
	})
	mux.HandleFunc("POST /v1/chat/completions", chat)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return WorkerConfig{
		Name: name, Command: child, Port: ln.Addr().(*net.TCPAddr).Port, Slots: slots,
		Timeouts: fastTimeouts(), StopTimeout: 5 * time.Second, ToolFormat: agent.ToolFormatJSON,
	}
}

// chatPrompt reads a chat completion request and returns the content
// of its last message. It reads the body to its end: only then does the
// server watch the connection, ending the request's context when the
// worker hangs up.
func chatPrompt(r *http.Request) (string, error) {
	req, err := readChat(r)
	if err != nil {
		return "", err
	}
	return req.prompt(), nil
}

// chatRequest is what the fake upstreams read of a chat completion
// request.
type chatRequest struct {
	Messages      []wire.Message
	StreamOptions wire.StreamOptions `json:"stream_options"`
}

// prompt is the content of the request's last message.
func (c chatRequest) prompt() string { return c.Messages[len(c.Messages)-1].Content }

// readChat reads a chat completion request to its end (see chatPrompt);
// it has at least one message.
func readChat(r *http.Request) (chatRequest, error) {
	var body chatRequest
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return body, fmt.Errorf("read chat request: %w", err)
	}
	if err := json.Unmarshal(data, &body); err != nil {
		return body, fmt.Errorf("decode chat request: %w", err)
	}
	if len(body.Messages) == 0 {
		return body, fmt.Errorf("chat request without messages")
	}
	return body, nil
}

// sseStub writes chat completion chunks as server-sent events, flushing
// each.
type sseStub struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func newSSEStub(w http.ResponseWriter) sseStub {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	return sseStub{w, http.NewResponseController(w)}
}

func (s sseStub) event(data string) error {
	if _, err := fmt.Fprintf(s.w, "data: %s\n\n", data); err != nil {
		return fmt.Errorf("write event: %w", err)
	}
	if err := s.rc.Flush(); err != nil {
		return fmt.Errorf("flush event: %w", err)
	}
	return nil
}

func (s sseStub) token(text string) error {
	var c wire.ChatCompletionChunk
	c.Choices = []wire.ChatChunkChoice{{}}
	c.Choices[0].Delta.Content = &text
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode chunk: %w", err)
	}
	return s.event(string(b))
}

func (s sseStub) done() error {
	if err := s.event(`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`); err != nil {
		return err
	}
	return s.event("[DONE]")
}

// recvWithin waits for a value from ch, failing the test after jobTimeout.
func recvWithin[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(jobTimeout):
		t.Fatalf("timed out after %s waiting for %s", jobTimeout, what)
		panic("unreachable")
	}
}

// TestStalledStreamAmongFlowingOnes runs two streams on one worker with two
// slots: one gets its first token and then nothing, the other keeps
// receiving tokens, and the child's CPU time keeps advancing throughout. A
// real server cannot be made to stall one of its streams while it serves
// the others, hence the fake upstream. The stuck stream must fail with
// stall_timeout on its own bytes alone, without a restart, and the other
// one must go on to complete.
func TestStalledStreamAmongFlowingOnes(t *testing.T) {
	release := make(chan struct{})  // ends the flowing stream
	stuck := make(chan struct{}, 1) // the stalled stream sent its token
	chat := func(w http.ResponseWriter, r *http.Request) {
		prompt, err := chatPrompt(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s := newSSEStub(w)
		if s.token("Once ") != nil {
			return
		}
		if prompt == "stall" {
			stuck <- struct{}{}
			<-r.Context().Done()
			return
		}
		// The flowing stream: a token per tick, as a decoding slot sends
		// them, until the test lets it finish.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				if s.token("upon ") != nil {
					return
				}
			case <-release:
				_ = s.done() // the worker's side reports a failure
				return
			case <-r.Context().Done():
				return
			}
		}
	}
	w := fakeUpstreamWorker(t, 2, spinningChild, chat, func(c *WorkerConfig) {
		c.Timeouts.IdleStream = 300 * time.Millisecond
	})
	flowing, err := w.Submit(Job{Name: "flow", UserPrompt: "flow"})
	if err != nil {
		t.Fatal(err)
	}
	stalled, err := w.Submit(Job{Name: "stall", UserPrompt: "stall"})
	if err != nil {
		t.Fatal(err)
	}
	recvWithin(t, stuck, "the stalled stream's first token")
	st := waitTerminal(t, w, stalled, jobTimeout)
	if st.State != RequestFailed || st.FailReason != FailStallTimeout || !strings.Contains(st.FailDetail, "other streams") {
		t.Fatalf("stalled stream: %+v", st)
	}
	// The scenario was exercised: the child's CPU time advanced after the
	// stuck stream's last byte, so the child-wide rule (no bytes and no
	// CPU) could not have caught it.
	w.mu.Lock()
	liveness := w.liveness
	w.mu.Unlock()
	if !liveness.After(st.FirstTokenAt) {
		t.Fatalf("the child's CPU time did not advance during the stall (last seen %v, stream's last byte %v)", liveness, st.FirstTokenAt)
	}
	// Only the stuck request failed: the other one still streams and the
	// child was not restarted.
	if fs, err := w.Status(flowing); err != nil || fs.State != RequestRunning {
		t.Fatalf("flowing stream after the other stalled: %+v, %v", fs, err)
	}
	if ws := w.WorkerStatus(); ws.RestartCount != 0 || ws.State != WorkerReady {
		t.Fatalf("worker after one stream stalled: %+v", ws)
	}
	close(release)
	fs, res := finish(t, w, flowing)
	if res.State != RequestCompleted || res.FinishReason != FinishStop || !strings.HasPrefix(res.Text, "Once upon ") {
		t.Fatalf("flowing stream: %+v / %+v", fs, res)
	}
	if res, err := w.Result(stalled); err != nil || res.Text != "Once " {
		t.Fatalf("stalled stream's result: %+v, %v (want its partial text)", res, err)
	}
}

// TestTTFTBeforeHeaders runs a request against an upstream that never
// sends response headers, as corral and llama-server do while they
// prefill (a real server cannot be made to withhold them on demand, hence
// the fake upstream): the TTFT timeout, counted from dispatch, fails the
// request with ttft_timeout, and only the request.
func TestTTFTBeforeHeaders(t *testing.T) {
	entered := make(chan struct{}, 1)
	chat := func(w http.ResponseWriter, r *http.Request) {
		if _, err := chatPrompt(r); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		entered <- struct{}{}
		<-r.Context().Done()
	}
	w := fakeUpstreamWorker(t, 1, sleepingChild, chat, func(c *WorkerConfig) {
		// Headers and the liveness timeouts stay at fastTimeouts' 30s:
		// only TTFT can end the request first.
		c.Timeouts.TTFT = 200 * time.Millisecond
	})
	id, err := w.Submit(Job{UserPrompt: "Once upon a time"})
	if err != nil {
		t.Fatal(err)
	}
	recvWithin(t, entered, "the request at the upstream")
	st, res := finish(t, w, id)
	if res.State != RequestFailed || res.FailReason != FailTTFTTimeout || !st.FirstTokenAt.IsZero() {
		t.Fatalf("request without headers: %+v / %+v", st, res)
	}
	if ws := w.WorkerStatus(); ws.RestartCount != 0 || ws.State != WorkerReady || ws.SlotsUsed != 0 {
		t.Fatalf("worker after a ttft timeout: %+v", ws)
	}
}

// TestChatProxyForwarding drives the supervisor's chat completion proxy
// against a fake upstream, which can hold a stream open between two
// events, stall, or hang up before the headers on demand (a real server
// cannot). It checks that every event is passed on at once, that proxied
// bytes count as activity of the worker's other streams for the
// per-request stall rule, and that an upstream failure before the headers
// is a 502 upstream_unreachable; the slots are free afterwards.
func TestChatProxyForwarding(t *testing.T) {
	release := map[string]chan struct{}{"hold": make(chan struct{}), "flow": make(chan struct{})}
	stuck := make(chan struct{}, 1)
	chat := func(w http.ResponseWriter, r *http.Request) {
		prompt, err := chatPrompt(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if prompt == "hangup" {
			panic(http.ErrAbortHandler) // close the connection, no response
		}
		s := newSSEStub(w)
		if s.token("Once ") != nil {
			return
		}
		switch prompt {
		case "stall":
			stuck <- struct{}{}
			<-r.Context().Done()
			return
		case "hold": // one event, then nothing until released
			select {
			case <-release["hold"]:
			case <-r.Context().Done():
				return
			}
		case "flow": // a token per tick until released
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
		flow:
			for {
				select {
				case <-tick.C:
					if s.token("upon ") != nil {
						return
					}
				case <-release["flow"]:
					break flow
				case <-r.Context().Done():
					return
				}
			}
		}
		_ = s.done() // a failure shows on the client's side
	}
	w := fakeUpstreamWorker(t, 2, sleepingChild, chat, func(c *WorkerConfig) {
		c.Timeouts.IdleStream = 300 * time.Millisecond
	})
	sup := &Supervisor{workers: []*Worker{w}, byName: map[string]*Worker{w.Name(): w}, maxBody: DefaultMaxBody}
	srv := httptest.NewServer(sup.Handler())
	defer srv.Close()
	defer http.DefaultClient.CloseIdleConnections()
	stream := func(prompt string) (*http.Response, *wire.Reader) {
		t.Helper()
		body := fmt.Sprintf(`{"model":"fake","stream":true,"messages":[{"role":"user","content":%q}]}`, prompt)
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("proxied stream: status %d, type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		return resp, wire.NewReader(resp.Body)
	}
	// readAll reads the rest of a stream, reporting whether [DONE] came
	// and the body then ended cleanly. It reads on to the end of the body
	// after [DONE]: the client gets [DONE] before the proxy's handler has
	// returned and freed its slot, while the body ends (the last chunk of
	// a chunked response) only once the handler has returned.
	readAll := func(sr *wire.Reader) bool {
		done := false
		for {
			ev, err := sr.Next()
			if err != nil {
				return done && err == io.EOF
			}
			done = done || ev.Done
		}
	}

	t.Run("events are not buffered", func(t *testing.T) {
		resp, sr := stream("hold")
		defer resp.Body.Close()
		// The upstream sends its second event only after this one has
		// reached the client: a buffering proxy would hang here.
		if ev, err := sr.Next(); err != nil || !strings.Contains(string(ev.Data), "Once ") {
			t.Fatalf("first event: %q, %v", ev.Data, err)
		}
		close(release["hold"])
		if !readAll(sr) {
			t.Fatal("stream ended without [DONE]")
		}
	})

	t.Run("proxied bytes are stream activity", func(t *testing.T) {
		resp, sr := stream("flow")
		defer resp.Body.Close()
		flowed := make(chan bool, 1)
		go func() { flowed <- readAll(sr) }()
		id, err := w.Submit(Job{UserPrompt: "stall"})
		if err != nil {
			t.Fatal(err)
		}
		recvWithin(t, stuck, "the stalled stream's first token")
		st := waitTerminal(t, w, id, jobTimeout)
		if st.State != RequestFailed || st.FailReason != FailStallTimeout || !strings.Contains(st.FailDetail, "other streams") {
			t.Fatalf("job stalled beside a proxied stream: %+v", st)
		}
		close(release["flow"])
		if !recvWithin(t, flowed, "the proxied stream's end") {
			t.Fatal("proxied stream ended without [DONE]")
		}
		if _, err := w.Result(id); err != nil {
			t.Fatal(err)
		}
		if ws := w.WorkerStatus(); ws.RestartCount != 0 {
			t.Fatalf("worker restarted: %+v", ws)
		}
	})

	t.Run("upstream hangs up before the headers", func(t *testing.T) {
		var oaiErr struct {
			Error struct{ Code, Type, Message string }
		}
		body := map[string]any{"model": "fake", "messages": []map[string]string{{"role": "user", "content": "hangup"}}}
		if code := doJSON(t, "POST", srv.URL+"/v1/chat/completions", body, &oaiErr); code != http.StatusBadGateway ||
			oaiErr.Error.Code != "upstream_unreachable" || !strings.Contains(oaiErr.Error.Message, "worker fake") {
			t.Fatalf("hang-up: %d %+v", code, oaiErr)
		}
	})

	if st := w.WorkerStatus(); st.SlotsUsed != 0 {
		t.Fatalf("proxied requests left slots used: %+v", st)
	}
}
