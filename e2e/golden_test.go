package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/wire"
)

// TestGolden checks the greedy reference outputs through both completion
// endpoints, streamed and whole, all twelve running at once, a slot each.
// (Exact outputs need each sequence's KV cells in position order, which a
// cache whose cells were never freed guarantees: see the engine's
// TestGoldenAloneAndBatched.)
func TestGolden(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 4 * len(golden)})
	for _, g := range golden {
		v1 := map[string]any{"model": "tiny", "prompt": g.Prompt, "max_tokens": g.N, "temperature": 0, "ignore_eos": true}
		llama := map[string]any{"prompt": g.Prompt, "n_predict": g.N, "temperature": 0, "ignore_eos": true}
		t.Run(g.Prompt+"/v1", func(t *testing.T) {
			t.Parallel()
			resp, b := ts.Post(t, "/v1/completions", v1)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			var c textCompletion
			unmarshal(t, string(b), &c)
			if c.Object != "text_completion" || c.Model != "tiny" || len(c.Choices) != 1 {
				t.Fatalf("response %s", b)
			}
			if c.Choices[0].Text != g.Want {
				t.Errorf("text %q\nwant %q", c.Choices[0].Text, g.Want)
			}
			if fr := c.Choices[0].FinishReason; fr == nil || *fr != "length" {
				t.Errorf("finish_reason %v, want length", fr)
			}
			if u := c.Usage; u == nil || u.CompletionTokens != g.N || u.PromptTokens == 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
				t.Errorf("usage %+v", u)
			}
		})
		t.Run(g.Prompt+"/v1 stream", func(t *testing.T) {
			t.Parallel()
			body := map[string]any{"stream": true}
			for k, v := range v1 {
				body[k] = v
			}
			if got := v1Stream(t, ts.OpenStream(t, context.Background(), "/v1/completions", body), "length"); got != g.Want {
				t.Errorf("text %q\nwant %q", got, g.Want)
			}
		})
		t.Run(g.Prompt+"/completion", func(t *testing.T) {
			t.Parallel()
			resp, b := ts.Post(t, "/completion", llama)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			var c llamaCompletion
			unmarshal(t, string(b), &c)
			if c.Content != g.Want || !c.Stop || c.TokensPredicted != g.N || c.StopType != "limit" || c.TokensEvaluated == 0 {
				t.Errorf("got %s\nwant content %q", b, g.Want)
			}
		})
		t.Run(g.Prompt+"/completion stream", func(t *testing.T) {
			t.Parallel()
			body := map[string]any{"stream": true}
			for k, v := range llama {
				body[k] = v
			}
			text, final := llamaStream(t, ts.OpenStream(t, context.Background(), "/completion", body))
			if text != g.Want {
				t.Errorf("text %q\nwant %q", text, g.Want)
			}
			if final.TokensPredicted != g.N || final.StopType != "limit" || final.Timings == nil || final.Timings.PredictedN != g.N {
				t.Errorf("final event %+v", final)
			}
		})
	}
}

// TestConcurrentStreams runs 16 streams at once, each in a fresh slot of
// one unified cache; each must produce its greedy continuation exactly,
// whatever it was batched with.
func TestConcurrentStreams(t *testing.T) {
	// Passes of at most 32 tokens: llama.cpp's CPU flash attention takes
	// its tiled path for a pass of 64 query rows or more (GGML_FA_TILE_Q in
	// b10573), whose rounding differs from the row-by-row path a request
	// alone takes, enough to flip a near tie (TinyStories' "Hello" at its
	// 13th token: top-2 logits 0.014 apart). 16 prompts arriving together
	// fill such a pass about one run in 20.
	ts := startServer(t, engine.Config{Parallel: 16, BatchSize: 32})
	type result struct {
		i    int
		text string
	}
	results := make(chan result, 16)
	for i := range 16 {
		g := golden[i%len(golden)]
		go func() {
			// Failures come back as an impossible text: t.Fatal must not
			// be called off the test goroutine.
			text := func() string {
				body := map[string]any{"prompt": g.Prompt, "max_tokens": g.N, "temperature": 0, "ignore_eos": true, "stream": true}
				b, _ := json.Marshal(body)
				resp, err := ts.Client.Post(ts.URL+"/v1/completions", "application/json", bytes.NewReader(b))
				if err != nil {
					return "<" + err.Error() + ">"
				}
				defer resp.Body.Close()
				var sb strings.Builder
				r := wire.NewReader(resp.Body)
				done := false
				for {
					ev, err := r.Next()
					if err != nil {
						break
					}
					if ev.Done {
						done = true
						continue
					}
					data := string(ev.Data)
					var c textCompletion
					if json.Unmarshal([]byte(data), &c) != nil || len(c.Choices) != 1 {
						return "<bad event " + data + ">"
					}
					sb.WriteString(c.Choices[0].Text)
				}
				if !done {
					return "<no [DONE]>"
				}
				return sb.String()
			}()
			results <- result{i, text}
		}()
	}
	for range 16 {
		r := <-results
		if want := golden[r.i%len(golden)].Want; r.text != want {
			t.Errorf("stream %d: %q\nwant %q", r.i, r.text, want)
		}
	}
}
