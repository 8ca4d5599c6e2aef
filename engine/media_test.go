package engine_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testsynth"
)

// mediaEngine is an engine on the synthetic text model and projector of
// kind (testsynth.Projector).
func mediaEngine(t *testing.T, kind string, cfg engine.Config) *engine.Engine {
	t.Helper()
	model, proj := testsynth.Projector(t, t.TempDir(), kind)
	cfg.ModelPath, cfg.MMProj = model, proj
	if cfg.Threads == 0 {
		cfg.Threads = testThreads
	}
	e, err := engine.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// withImage is a greedy request for prompt with the test image where
// marker is (removed).
func withMedia(t *testing.T, prompt string, n int, media ...engine.Media) engine.Request {
	t.Helper()
	req := greedy("", n)
	req.Logprobs = true
	parts := strings.Split(prompt, "<__media__>")
	if len(parts) != len(media)+1 {
		t.Fatalf("%q: %d markers for %d media", prompt, len(parts)-1, len(media))
	}
	var b strings.Builder
	for i, p := range parts {
		b.WriteString(p)
		if i < len(media) {
			media[i].At = b.Len()
			req.Media = append(req.Media, media[i])
		}
	}
	req.Prompt = b.String()
	return req
}

func testImage(t *testing.T) engine.Media {
	rgb, w, h := testsynth.RGB(t, "gradient-64.png")
	return engine.Media{RGB: rgb, W: w, H: h}
}

func testSound(t *testing.T) engine.Media {
	return engine.Media{PCM: testsynth.PCM(t, "sine-440-1s.wav")}
}

// placeholders counts a token list's media cells.
func placeholders(toks []int32) int {
	n := 0
	for _, t := range toks {
		if t < 0 {
			n++
		}
	}
	return n
}

// TestMediaInPrompts: an image (Gemma 3's non-causal 16-token chunk) and
// a sound (Qwen2-Audio's causal 750-token chunk, evaluated over two
// steps of a 512-token batch) go into prompts as many cells as the
// projector makes, between their markers; the same prompt again finds
// them in the cache, encodes nothing and gives the same tokens.
func TestMediaInPrompts(t *testing.T) {
	for _, c := range []struct {
		kind, prompt string
		medium       func(*testing.T) engine.Media
		cells        int
	}{
		{"gemma3", "Describe<__media__> the image.", testImage, 16},
		{"qwen2a", "Listen:<__media__> What is it?", testSound, 750},
	} {
		t.Run(c.kind, func(t *testing.T) {
			// One slot: a sliding-window model (gemma3) reuses only its own
			// slot's cache, and a new request takes an empty slot first.
			e := mediaEngine(t, c.kind, engine.Config{Parallel: 1, BatchSize: 512})
			req := withMedia(t, c.prompt, 12, c.medium(t))
			toks, err := e.Render(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if got := placeholders(toks); got != c.cells {
				t.Fatalf("%d media cells in %v; want %d", got, toks, c.cells)
			}
			_, lps, res := collectLogprobs(t, submit(t, e, req))
			if res.FinishReason != engine.FinishLength || res.Usage.PromptTokens != len(toks) {
				t.Fatalf("finish %s (%v), %d prompt tokens; want length, %d", res.FinishReason, res.Err, res.Usage.PromptTokens, len(toks))
			}
			first := tokensOf(lps)
			t.Logf("%s: %d prompt tokens, generated %v", c.kind, len(toks), first)
			if st := e.Stats(); st.MediaEncoded != 1 {
				t.Errorf("%d chunks encoded; want 1", st.MediaEncoded)
			}

			_, lps, res = collectLogprobs(t, submit(t, e, req))
			if again := tokensOf(lps); !slices.Equal(again, first) {
				t.Errorf("again: %v; want %v", again, first)
			}
			if res.Usage.CachedTokens != len(toks)-1 {
				t.Errorf("again: %d tokens cached; want %d", res.Usage.CachedTokens, len(toks)-1)
			}
			if st := e.Stats(); st.MediaEncoded != 1 {
				t.Errorf("again: %d chunks encoded; want 1 (the first)", st.MediaEncoded)
			}
		})
	}
}

// TestMediaRefused: media a model cannot take are refused at Submit with
// ErrMedia.
func TestMediaRefused(t *testing.T) {
	vision := mediaEngine(t, "gemma3", engine.Config{Parallel: 1, BatchSize: 8})
	for name, req := range map[string]engine.Request{
		"a sound for a vision model":       withMedia(t, "Hear<__media__> this", 4, testSound(t)),
		"an image over the batch":          withMedia(t, "See<__media__> this", 4, testImage(t)),
		"a prompt that ends with a medium": withMedia(t, "See<__media__>", 4, testImage(t)),
		"media with token ids":             {Tokens: []int32{1, 2}, Media: []engine.Media{testImage(t)}},
		"a medium past the prompt":         {Prompt: "ab", Media: []engine.Media{{At: 3, RGB: make([]byte, 3), W: 1, H: 1}}},
		"an image of the wrong size":       {Prompt: "ab", Media: []engine.Media{{At: 1, RGB: make([]byte, 5), W: 1, H: 1}}},
		"media out of order":               {Prompt: "abc", Media: []engine.Media{{At: 2, RGB: make([]byte, 3), W: 1, H: 1}, {At: 1, RGB: make([]byte, 3), W: 1, H: 1}}},
		"neither an image nor a sound":     {Prompt: "ab", Media: []engine.Media{{At: 1}}},
	} {
		if _, err := vision.Submit(context.Background(), req); !errors.Is(err, engine.ErrMedia) {
			t.Errorf("%s: %v; want ErrMedia", name, err)
		}
	}
	text := mediaEngineless(t)
	if _, err := text.Submit(context.Background(), withMedia(t, "See<__media__> this", 4, testImage(t))); !errors.Is(err, engine.ErrMedia) || !strings.Contains(err.Error(), "no projector") {
		t.Errorf("an image for a model without a projector: %v", err)
	}
	if st := vision.Stats(); st.MediaEncoded != 0 {
		t.Errorf("%d chunks encoded", st.MediaEncoded)
	}
}

// mediaEngineless is an engine on gemma3's synthetic text model without
// its projector.
func mediaEngineless(t *testing.T) *engine.Engine {
	model, _ := testsynth.Projector(t, t.TempDir(), "gemma3")
	e, err := engine.New(context.Background(), engine.Config{ModelPath: model, Parallel: 1, Threads: testThreads})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}
