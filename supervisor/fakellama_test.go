package supervisor

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// The fake llama-server: a real child process (this test binary, started
// through a symlink named llama-server so that DetectKind sees
// llama-server) for the two faults corral serve cannot produce:
//
//   - /v1/models answers 200 with JSON while the model still loads, as
//     llama-server's does (corral's answers 503 until loaded), and /health
//     answers 503 until the file named by $fakeLlamaReadyEnv exists;
//   - with $LLAMA_API_KEY set, the API wants "Authorization: Bearer <key>"
//     and answers 401 otherwise, as llama-server --api-key does, while
//     /health and the models endpoints stay public. corral serve has no API
//     key option.
//
// Its chat completion streams "Hello world" and stops.

// fakeLlamaReadyEnv names the file whose existence ends the fake's load.
const fakeLlamaReadyEnv = "SUPERVISOR_FAKE_LLAMA_READY"

// fakeLlamaBinary returns a path named llama-server that runs the fake.
func fakeLlamaBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "llama-server")
	if err := os.Symlink(self, link); err != nil {
		t.Fatal(err)
	}
	return link
}

// runFakeLlama serves until killed; TestMain calls it in the child.
func runFakeLlama(readyFile string) {
	fs := flag.NewFlagSet("llama-server", flag.ExitOnError)
	host := fs.String("host", "127.0.0.1", "")
	port := fs.Int("port", 8080, "")
	fs.Parse(os.Args[1:])
	key := os.Getenv("LLAMA_API_KEY")
	loaded := func() bool { _, err := os.Stat(readyFile); return err == nil }
	writeErr := func(w http.ResponseWriter, code int, typ, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": msg, "type": typ}})
	}
	mux := http.NewServeMux()
	models := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"object":"list","data":[{"id":"fake","object":"model"}]}`)
	}
	mux.HandleFunc("GET /v1/models", models)
	mux.HandleFunc("GET /models", models)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		if !loaded() {
			fmt.Println("fake llama-server: GET /health 503 loading")
			writeErr(w, http.StatusServiceUnavailable, "unavailable_error", "Loading model")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"status":"ok"}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		if key != "" && r.Header.Get("Authorization") != "Bearer "+key {
			fmt.Println("fake llama-server: POST /v1/chat/completions 401")
			writeErr(w, http.StatusUnauthorized, "authentication_error", "Invalid API Key")
			return
		}
		if !loaded() {
			writeErr(w, http.StatusServiceUnavailable, "unavailable_error", "Loading model")
			return
		}
		var req struct {
			Stream bool `json:"stream"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello world"},"finish_reason":"stop"}]}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []string{`{"content":"Hello"}`, `{"content":" world"}`} {
			fmt.Fprintf(w, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":%s}]}\n\n", c)
		}
		fmt.Fprint(w, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	})
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, fmt.Sprint(*port)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("fake llama-server: listening, loading the model")
	fmt.Fprintln(os.Stderr, http.Serve(ln, mux))
	os.Exit(1)
}
