package e2e

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
	servedmodel "github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/server"
	"github.com/corral-llm/corral/serving"
)

// BenchmarkDialects measures what one request costs through each dialect
// (the gate, decoding, checks, the lease, the engine request, the
// generation loop, the encoder), against a direct call of the engine, on
// the tiny model generating 4 tokens greedily: the difference is the
// core's and the dialect's per-request overhead.
func BenchmarkDialects(b *testing.B) {
	eng, err := engine.New(context.Background(), engine.Config{
		ModelPath: testmodel.Path(b, testmodel.TinyStories656K), Threads: 1, Parallel: 1})
	if err != nil {
		b.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	core, err := serving.ForEngine(eng, servedmodel.Options{Logger: quiet})
	if err != nil {
		eng.Close()
		b.Fatal(err)
	}
	defer core.Registry().Close()
	s := server.New(server.Config{Logger: quiet})
	s.SetCore(core)
	h := s.Handler()

	b.Run("direct", func(b *testing.B) {
		ctx := context.Background()
		req := engine.Request{Prompt: "Once upon a time", AddSpecial: true, MaxTokens: 4, Sampling: engine.Sampling{Seed: -1, TopK: 1}}
		for b.Loop() {
			st, err := eng.Submit(ctx, req)
			if err != nil {
				b.Fatal(err)
			}
			for {
				if _, err := st.Recv(ctx); err == io.EOF {
					break
				} else if err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	msgs := `"messages":[{"role":"user","content":"Once upon a time"}]`
	for _, d := range []struct{ name, path, body string }{
		{"openai-chat", "/v1/chat/completions", `{` + msgs + `,"max_tokens":4,"temperature":0}`},
		{"openai-chat-stream", "/v1/chat/completions", `{` + msgs + `,"max_tokens":4,"temperature":0,"stream":true}`},
		{"openai-completions", "/v1/completions", `{"prompt":"Once upon a time","max_tokens":4,"temperature":0}`},
		{"ollama-chat", "/api/chat", `{` + msgs + `,"stream":false,"options":{"num_predict":4,"temperature":0}}`},
		{"llamacpp-completion", "/completion", `{"prompt":"Once upon a time","n_predict":4,"temperature":0}`},
	} {
		b.Run(d.name, func(b *testing.B) {
			for b.Loop() {
				w := httptest.NewRecorder()
				r := httptest.NewRequest(http.MethodPost, d.path, strings.NewReader(d.body))
				r.Host, r.RemoteAddr = "localhost", "127.0.0.1:1234"
				r.Header.Set("Content-Type", "application/json")
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", d.path, w.Code, w.Body)
				}
			}
		})
	}
}
