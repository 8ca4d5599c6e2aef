package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"go.uber.org/goleak"

	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/internal/testsynth"
	"github.com/corral-llm/corral/wire"
)

func TestMain(m *testing.M) {
	testsynth.PinGoldenCPU()
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		testmodel.RemoveBinary()
		os.Exit(code)
	}))
}

// patience bounds every wait of these tests: a failure deadline, never a
// way to synchronize.
const patience = time.Minute

// statsLine matches the dim line of an answer's tokens and speed.
var statsLine = regexp.MustCompile(`\((\d+) tokens?(, [0-9.]+ tokens/s)?\)`)

// TestRunChatsWithServer chats with a corral serve child: each line gets a
// streamed answer and the tokens line, then the prompt again; /bye exits.
func TestRunChatsWithServer(t *testing.T) {
	url := startServe(t)
	p := startRun(t, "--url", url, "--max-tokens", "24", "--seed", "1", testmodel.Path(t, testmodel.TinyStories656K))
	p.expect(replPrompt)
	for _, line := range []string{"Tell me a story", "And then?"} {
		p.send(line + "\r")
		p.expect(line + "\r\n") // the terminal's echo
		answer := p.expect(replPrompt)
		m := statsLine.FindStringSubmatchIndex(answer)
		if m == nil {
			t.Fatalf("answer without its tokens line: %q", answer)
		}
		if n, _ := strconv.Atoi(answer[m[2]:m[3]]); n < 1 || n > 24 {
			t.Errorf("tokens line %q: want 1 to 24 tokens", answer[m[0]:m[1]])
		}
		if strings.TrimSpace(answer[:m[0]]) == "" {
			t.Errorf("no answer text before the tokens line: %q", answer)
		}
	}
	p.send("/bye\r")
	p.exitsWith(0)
}

// TestRunCtrlCCancelsAnswer presses Ctrl-C while an answer streams: the
// prompt comes back at once, and the server frees the slot.
func TestRunCtrlCCancelsAnswer(t *testing.T) {
	// One slot with a context far beyond what the answer reaches before
	// Ctrl-C: the answer cannot end by itself first.
	url := startServe(t, "-c", "32768")
	p := startRun(t, "--url", url, testmodel.Path(t, testmodel.TinyStories656K))
	p.expect(replPrompt)
	for _, set := range []string{"num_predict 100000", "ignore_eos true", "temperature 1.5"} {
		name, _, _ := strings.Cut(set, " ")
		p.send("/set parameter " + set + "\r")
		p.expect("Set parameter '" + name + "'")
		p.expect(replPrompt)
	}
	p.send("Once upon a time\r")
	p.expect("Once upon a time\r\n")
	p.expectMore() // the first bytes of the answer
	p.send("\x03")
	answer := p.expect(replPrompt)
	if statsLine.MatchString(answer) || strings.Contains(answer, "Use Ctrl + d") {
		t.Fatalf("Ctrl-C did not land mid-answer: %q", answer)
	}
	waitSlotsIdle(t, url)
	p.send("/bye\r")
	p.exitsWith(0)
}

// TestRunInProcess runs the model in process when nothing listens at
// --url: one answer to the prompt argument, or to stdin, then exit 0.
func TestRunInProcess(t *testing.T) {
	url := "http://" + closedAddr(t)
	model := testmodel.Path(t, testmodel.TinyStories656K)
	for _, tc := range []struct {
		name, stdin string
		args        []string
	}{
		{"argument", "", []string{model, "Once upon a time"}},
		{"stdin", "Tell me a story", []string{model}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			args := append([]string{"run", "--url", url, "--max-tokens", "16"}, tc.args...)
			cmd := exec.CommandContext(ctx, testmodel.Binary(t), args...)
			cmd.Stdin = strings.NewReader(tc.stdin)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("corral run: %v\n%s", err, stderr.Bytes())
			}
			if strings.TrimSpace(string(out)) == "" || !strings.HasSuffix(string(out), "\n") {
				t.Errorf("stdout %q: want text and a final newline", out)
			}
		})
	}
}

// TestRunCommands checks the chat's commands on an in-process model, and
// that Ctrl-C at the prompt does not exit but Ctrl-D does.
func TestRunCommands(t *testing.T) {
	p := startRun(t, "--url", closedAddr(t), "--system", "Be brief.", testmodel.Path(t, testmodel.TinyStories656K))
	p.expect(replPrompt)
	for _, step := range []struct{ send, want string }{
		{"/set parameter top_k 5", "Set parameter 'top_k' to '5'"},
		{"/set parameter top_k five", `parameter top_k: strconv.ParseInt: parsing "five"`},
		{"/set parameter bogus 1", `unknown parameter "bogus"`},
		{"/show", "System: Be brief."},
		{"/clear", "Cleared session context."},
		{"/nope", "Unknown command '/nope'. Type /? for help"},
		{"/?", "/set parameter NAME VALUE"},
	} {
		p.send(step.send + "\r")
		p.expect(step.want)
		p.expect(replPrompt)
	}
	p.send("\x03")
	p.expect("Use Ctrl + d or /bye to exit.")
	p.expect(replPrompt)
	p.send("\x04")
	p.exitsWith(0)
}

// TestTurn checks the history a turn leaves: a cancelled or failed answer
// stays out of it, with the line that asked for it.
func TestTurn(t *testing.T) {
	var mu sync.Mutex
	var bodies []map[string]any
	started := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Errorf("request body: %v", err)
		}
		mu.Lock()
		bodies = append(bodies, body)
		mu.Unlock()
		msgs := body["messages"].([]any)
		switch last := msgs[len(msgs)-1].(map[string]any)["content"]; last {
		case "hang":
			fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"Once\"}}]}\n\n")
			w.(http.Flusher).Flush()
			started <- struct{}{}
			<-r.Context().Done()
		case "fail":
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error":{"message":"no such model","type":"invalid_request_error"}}`)
		case "fail later":
			fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"Once\"}}]}\n\n")
			fmt.Fprint(w, "data: {\"error\":{\"message\":\"engine failed\"}}\n\ndata: [DONE]\n\n")
		default:
			fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"Hi \"}}]}\n\n")
			fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"there.\"}}]}\n\n")
			fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n")
		}
	}))
	defer srv.Close()
	client := &http.Client{}
	defer client.CloseIdleConnections()
	var out, errOut bytes.Buffer
	c := &chatClient{http: client, base: srv.URL, model: "m", system: "sys", params: chatParams{"num_predict": int64(7)},
		out: &out, errOut: &errOut, stats: true}
	intr := &interrupts{}
	ctx := context.Background()

	c.turn(ctx, "hello", intr)
	want := []wire.Message{{Role: "user", Content: "hello"}, {Role: "assistant", Content: "Hi there."}}
	if !reflect.DeepEqual(c.history, want) {
		t.Fatalf("history %v, want %v", c.history, want)
	}
	if !strings.Contains(out.String(), "Hi there.\n\x1b[2m(3 tokens") {
		t.Errorf("output %q: want the answer, then its tokens line", out.String())
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		c.turn(ctx, "hang", intr)
	}()
	<-started
	intr.mu.Lock()
	intr.action() // Ctrl-C
	intr.mu.Unlock()
	<-done
	for _, line := range []string{"fail", "fail later"} {
		c.turn(ctx, line, intr)
	}
	if !reflect.DeepEqual(c.history, want) {
		t.Errorf("history after a cancelled and two failed answers: %v, want %v", c.history, want)
	}
	if got := errOut.String(); got != "Error: no such model\nError: engine failed\n" {
		t.Errorf("errors printed: %q", got)
	}

	mu.Lock()
	defer mu.Unlock()
	last := bodies[len(bodies)-1]
	msgs, _ := json.Marshal(last["messages"])
	if string(msgs) != `[{"content":"sys","role":"system"},{"content":"hello","role":"user"},{"content":"Hi there.","role":"assistant"},{"content":"fail later","role":"user"}]` {
		t.Errorf("messages sent: %s", msgs)
	}
	if last["model"] != "m" || last["stream"] != true || last["max_tokens"] != float64(7) {
		t.Errorf("request body: %v", last)
	}
}

func TestNormalizeURL(t *testing.T) {
	for in, want := range map[string]string{
		"localhost:9000":         "http://localhost:9000",
		"http://127.0.0.1:8080/": "http://127.0.0.1:8080",
		"https://example.com":    "https://example.com",
	} {
		if got := normalizeURL(in); got != want {
			t.Errorf("normalizeURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestChatModelID(t *testing.T) {
	model := testmodel.Path(t, testmodel.TinyStories656K)
	for in, want := range map[string]string{
		model:                        "tinystories-656k-q8_0",
		"tinystories-656k-q8_0.gguf": "tinystories-656k-q8_0", // not a file here
		"meta-llama/Llama-3.2-1B":    "meta-llama/Llama-3.2-1B",
	} {
		if got := chatModelID(in); got != want {
			t.Errorf("chatModelID(%q) = %q, want %q", in, got, want)
		}
	}
}

// ptyRun is corral run in a pseudo-terminal. A goroutine copies what it
// writes into out; expect waits for text in it.
type ptyRun struct {
	t   *testing.T
	pty *os.File

	mu   sync.Mutex
	out  []byte
	at   int           // end of the last match
	grew chan struct{} // closed when out grows, then replaced
	eof  bool          // the terminal is closed

	exited  chan struct{} // closed when the process is waited for
	waitErr error
}

// startRun starts corral run with args in a pseudo-terminal. The process
// is killed, if need be, when the test ends.
func startRun(t *testing.T, args ...string) *ptyRun {
	t.Helper()
	cmd := exec.Command(testmodel.Binary(t), append([]string{"run"}, args...)...)
	f, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	p := &ptyRun{t: t, pty: f, grew: make(chan struct{}), exited: make(chan struct{})}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			p.mu.Lock()
			p.out = append(p.out, buf[:n]...)
			p.eof = err != nil // EIO once the process is gone
			close(p.grew)
			p.grew = make(chan struct{})
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.exited
		<-copied
		f.Close()
		if t.Failed() {
			p.mu.Lock()
			t.Logf("corral run's terminal:\n%s", p.out)
			p.mu.Unlock()
		}
	})
	return p
}

// send types s.
func (p *ptyRun) send(s string) {
	p.t.Helper()
	if _, err := p.pty.Write([]byte(s)); err != nil {
		p.t.Fatalf("type %q: %v", s, err)
	}
}

// expect waits for s in the output after the last match and returns that
// output up to the end of s.
func (p *ptyRun) expect(s string) string {
	p.t.Helper()
	return p.wait(fmt.Sprintf("%q", s), func(b []byte) int {
		if i := bytes.Index(b, []byte(s)); i >= 0 {
			return i + len(s)
		}
		return -1
	})
}

// expectMore waits for any output after the last match.
func (p *ptyRun) expectMore() string {
	p.t.Helper()
	return p.wait("more output", func(b []byte) int {
		if len(b) > 0 {
			return len(b)
		}
		return -1
	})
}

// wait waits until match finds the end of what it wants in the output
// after the last match, and returns that output up to there.
func (p *ptyRun) wait(what string, match func([]byte) int) string {
	p.t.Helper()
	deadline := time.NewTimer(patience)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		if n := match(p.out[p.at:]); n >= 0 {
			got := string(p.out[p.at : p.at+n])
			p.at += n
			p.mu.Unlock()
			return got
		}
		eof, grew, rest := p.eof, p.grew, string(p.out[p.at:])
		p.mu.Unlock()
		if eof {
			p.t.Fatalf("no %s before the terminal closed; output since the last match: %q", what, rest)
		}
		select {
		case <-grew:
		case <-deadline.C:
			p.t.Fatalf("no %s within %v; output since the last match: %q", what, patience, rest)
		}
	}
}

// exitsWith waits for the process to exit with code.
func (p *ptyRun) exitsWith(code int) {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(patience):
		p.t.Fatalf("corral run still runs after %v", patience)
	}
	got := 0
	if p.waitErr != nil {
		var ee *exec.ExitError
		if !errors.As(p.waitErr, &ee) {
			p.t.Fatalf("wait: %v", p.waitErr)
		}
		got = ee.ExitCode()
	}
	if got != code {
		p.t.Fatalf("exit status %d (%v), want %d", got, p.waitErr, code)
	}
}

// startServe starts `corral serve` on TinyStories656K with one slot and
// args, and returns its URL once /health answers 200. The server is
// stopped when the test ends.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	url, _ := serveProcess(t, args...)
	return url
}

// serveProcess is startServe that also returns stop, which stops the
// server (SIGTERM) and waits for it to exit with status 0; the server is
// stopped when the test ends if stop was not called.
func serveProcess(t *testing.T, args ...string) (url string, stop func()) {
	t.Helper()
	addr := closedAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	args = append([]string{"serve", "-m", testmodel.Path(t, testmodel.TinyStories656K), "--port", port, "-np", "1", "-t", "1"}, args...)
	cmd := exec.Command(testmodel.Binary(t), args...)
	logf, err := os.Create(filepath.Join(t.TempDir(), "serve.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(patience):
				cmd.Process.Kill()
				<-exited
				t.Errorf("corral serve did not stop within %v of SIGTERM", patience)
			}
			if code := cmd.ProcessState.ExitCode(); code != 0 {
				t.Errorf("corral serve exited with status %d", code)
			}
			if t.Failed() {
				b, _ := os.ReadFile(logf.Name())
				t.Logf("corral serve's log:\n%s", b)
			}
			logf.Close()
		})
	}
	t.Cleanup(stop)
	url = "http://" + addr
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	poll(t, "corral serve to answer /health", exited, func() bool {
		resp, err := client.Get(url + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return url, stop
}

// waitSlotsIdle waits until GET /slots shows no slot processing.
func waitSlotsIdle(t *testing.T, url string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var last string
	poll(t, "every slot idle", nil, func() bool {
		resp, err := client.Get(url + "/slots")
		if err != nil {
			t.Fatalf("GET /slots: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		last = string(b)
		var slots []struct {
			IsProcessing bool `json:"is_processing"`
		}
		if err := json.Unmarshal(b, &slots); err != nil || len(slots) == 0 {
			t.Fatalf("GET /slots: %d %s", resp.StatusCode, b)
		}
		for _, s := range slots {
			if s.IsProcessing {
				return false
			}
		}
		return true
	})
	t.Logf("slots: %s", last)
}

// poll calls ok until it reports true, failing t after patience or when
// gone (nil: never) is closed.
func poll(t *testing.T, what string, gone <-chan struct{}, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, patience)
		}
		select {
		case <-gone:
			t.Fatalf("the process exited waiting for %s", what)
		case <-tick.C:
		}
	}
}

// closedAddr returns a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
