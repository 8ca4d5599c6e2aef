package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/responses"
	"github.com/corral-llm/corral/server"
)

// TestMain checks for leaked goroutines, and deletes the corral binary
// the subprocess tests built if they built one (plain go test). With a
// Cleanup option goleak leaves the exit to it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		testmodel.RemoveBinary()
		os.Exit(code)
	}))
}

// do serves one request with h and returns the response.
func do(t *testing.T, h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(body)))
	return w
}

func TestLoading(t *testing.T) {
	log, _ := e2etest.NewLogger()
	h := server.New(server.Config{Logger: log}).Handler()

	w := do(t, h, http.MethodGet, "/health", "")
	if w.Code != 503 || strings.TrimSpace(w.Body.String()) != `{"status":"loading"}` {
		t.Errorf("/health while loading: %d %q", w.Code, w.Body)
	}
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/completion", "/tokenize"} {
		w := do(t, h, http.MethodPost, path, `{}`)
		if w.Code != 503 || w.Header().Get("Retry-After") == "" {
			t.Errorf("%s while loading: status %d, Retry-After %q", path, w.Code, w.Header().Get("Retry-After"))
		}
		if typ, code := e2etest.ErrorOf(t, w.Header().Get("Content-Type"), w.Body.Bytes()); typ != "server_error" || code != "model_loading" {
			t.Errorf("%s while loading: type %q code %q", path, typ, code)
		}
	}
}

func TestRouting(t *testing.T) {
	log, _ := e2etest.NewLogger()
	h := server.New(server.Config{Logger: log}).Handler()

	w := do(t, h, http.MethodGet, "/v1/nothing", "")
	if w.Code != 404 {
		t.Errorf("unknown route: status %d", w.Code)
	}
	if typ, code := e2etest.ErrorOf(t, w.Header().Get("Content-Type"), w.Body.Bytes()); typ != "invalid_request_error" || code != "not_found" {
		t.Errorf("unknown route: type %q code %q", typ, code)
	}

	for _, method := range []string{http.MethodGet, http.MethodHead} {
		if w := do(t, h, method, "/", ""); w.Code != 200 {
			t.Errorf("%s /: status %d, want 200 (a liveness check)", method, w.Code)
		}
	}

	for path, allow := range map[string]string{"/v1/chat/completions": "POST", "/v1/models": "GET", "/health": "GET", "/completion": "POST", "/api/chat": "POST", "/api/tags": "GET"} {
		method := http.MethodGet
		if allow == "GET" {
			method = http.MethodPost
		}
		w := do(t, h, method, path, "")
		if w.Code != 405 || w.Header().Get("Allow") != allow {
			t.Errorf("%s %s: status %d, Allow %q; want 405, %q", method, path, w.Code, w.Header().Get("Allow"), allow)
		}
		if typ, code := e2etest.ErrorOf(t, w.Header().Get("Content-Type"), w.Body.Bytes()); typ != "invalid_request_error" || code != "method_not_allowed" {
			t.Errorf("%s %s: type %q code %q", method, path, typ, code)
		}
	}
}

func TestRequestID(t *testing.T) {
	log, logs := e2etest.NewLogger()
	s := server.New(server.Config{Logger: log})
	var seen []string
	h := s.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, server.RequestID(r.Context()))
	}))
	for _, in := range []string{"", "client-id-7", "bad id with spaces", strings.Repeat("x", 200)} {
		r := httptest.NewRequest(http.MethodGet, "/x", nil)
		if in != "" {
			r.Header.Set(server.RequestIDHeader, in)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		got := w.Header().Get(server.RequestIDHeader)
		if got == "" || got != seen[len(seen)-1] {
			t.Errorf("in %q: header %q, handler saw %q", in, got, seen[len(seen)-1])
		}
		if valid := in == "client-id-7"; valid != (got == in) {
			t.Errorf("in %q: got id %q", in, got)
		}
	}
	if seen[0] == seen[2] {
		t.Errorf("generated ids repeat: %q", seen)
	}
	recs := logs.Records(t, "request")
	if len(recs) != 4 || recs[1]["id"] != "client-id-7" || recs[1]["status"] != float64(200) || recs[1]["path"] != "/x" {
		t.Errorf("request logs %v", recs)
	}
}

func TestRecoverPanic(t *testing.T) {
	log, logs := e2etest.NewLogger()
	s := server.New(server.Config{Logger: log})
	mux := http.NewServeMux()
	mux.HandleFunc("/panic", func(http.ResponseWriter, *http.Request) { panic("boom") })
	mux.HandleFunc("/panic-late", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("partial"))
		panic("late boom")
	})
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("fine")) })
	ts := httptest.NewServer(s.Middleware(mux))
	defer ts.Close()
	client := ts.Client()

	resp, err := client.Get(ts.URL + "/panic")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 500 {
		t.Errorf("panic: status %d", resp.StatusCode)
	}
	if typ, _ := e2etest.ErrorOf(t, resp.Header.Get("Content-Type"), body); typ != "server_error" {
		t.Errorf("panic: type %q", typ)
	}
	recs := logs.Records(t, "handler panic")
	if len(recs) != 1 || recs[0]["panic"] != "boom" || !strings.Contains(recs[0]["stack"].(string), "server_test.go") {
		t.Errorf("panic log %v", recs)
	}

	// A panic after the response began aborts the connection: the client
	// must not take the partial body for a complete one.
	resp, err = client.Get(ts.URL + "/panic-late")
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Error("late panic: response completed normally")
	}

	// The server lives on.
	resp, err = client.Get(ts.URL + "/ok")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "fine" {
		t.Errorf("after panics: %d %q", resp.StatusCode, body)
	}
}

func TestBodyLimit(t *testing.T) {
	log, _ := e2etest.NewLogger()
	s := server.New(server.Config{Logger: log, MaxBody: 10})
	var readErr error
	h := s.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, readErr = io.ReadAll(r.Body)
	}))
	do(t, h, http.MethodPost, "/", "0123456789")
	if readErr != nil {
		t.Errorf("body at the limit: %v", readErr)
	}
	do(t, h, http.MethodPost, "/", "0123456789a")
	var mbe *http.MaxBytesError
	if !errors.As(readErr, &mbe) {
		t.Errorf("body over the limit: err %v, want *http.MaxBytesError", readErr)
	}
}

func TestLogBodies(t *testing.T) {
	log, logs := e2etest.NewLogger()
	s := server.New(server.Config{Logger: log, LogRequests: true, MaxBody: 100})
	var got []byte
	var readErr error
	h := s.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, readErr = io.ReadAll(r.Body)
	}))
	body := `{"prompt": "hi", "n": [1, 2]}`
	do(t, h, http.MethodPost, "/completion", body)
	if string(got) != body || readErr != nil {
		t.Errorf("handler read %q, %v; want the body", got, readErr)
	}
	recs := logs.Records(t, "request body")
	if len(recs) != 1 {
		t.Fatalf("%d body logs, want 1", len(recs))
	}
	want := map[string]any{"prompt": "hi", "n": []any{1.0, 2.0}}
	if b, _ := json.Marshal(recs[0]["body"]); string(b) != `{"n":[1,2],"prompt":"hi"}` {
		t.Errorf("logged body %s, want %v as JSON", b, want)
	}

	// Over the limit, the handler still sees the limit error.
	do(t, h, http.MethodPost, "/completion", strings.Repeat("x", 200))
	var mbe *http.MaxBytesError
	if !errors.As(readErr, &mbe) {
		t.Errorf("over the limit: handler got err %v", readErr)
	}
}

func TestServeShutdown(t *testing.T) {
	log, _ := e2etest.NewLogger()
	s := server.New(server.Config{Logger: log})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()

	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://" + ln.Addr().String() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Errorf("/health while loading: %d", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve after cancel: %v", err)
	}
	if _, err := client.Get("http://" + ln.Addr().String() + "/health"); err == nil {
		t.Error("server still answers after shutdown")
	}
}

// TestServeResponsesDir: a stored-responses directory that the server
// cannot open (another store holds it) fails Serve at once, naming it,
// rather than keeping the responses in memory only; a server that could
// open it lets it go when Serve returns, for the next one.
func TestServeResponsesDir(t *testing.T) {
	log, _ := e2etest.NewLogger()
	dir := t.TempDir()
	held, err := responses.OpenStore(responses.StoreOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ended, end := context.WithCancel(context.Background())
	end() // Serve returns at once either way
	err = server.New(server.Config{Logger: log, ResponsesStore: responses.StoreOptions{Dir: dir}}).Serve(ended, ln)
	if err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Serve with a directory another store holds: %v; want an error naming it", err)
	}
	held.Close()

	if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- server.New(server.Config{Logger: log, ResponsesStore: responses.StoreOptions{Dir: dir}}).Serve(ctx, ln)
	}()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	next, err := responses.OpenStore(responses.StoreOptions{Dir: dir})
	if err != nil {
		t.Fatalf("the directory after Serve returned: %v", err)
	}
	next.Close()
}
