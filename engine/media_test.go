package engine_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/internal/testsynth"
)

// mediaEngine is an engine on the synthetic text model and projector of
// kind (testsynth.Projector).
func mediaEngine(t *testing.T, kind string, cfg engine.Config) *engine.Engine {
	t.Helper()
	cfg.ModelPath, cfg.MMProj = testsynth.Projector(t, t.TempDir(), kind)
	return startEngine(t, cfg)
}

// withMedia is a greedy request, with logprobs, for prompt with media
// where its markers (testmodel.MediaMarker) are.
func withMedia(t *testing.T, prompt string, n int, media ...engine.Media) engine.Request {
	t.Helper()
	req := greedy("", n)
	req.Logprobs = true
	parts := strings.Split(prompt, testmodel.MediaMarker)
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

// goldenMedia is the media of a golden, read from testdata/media.
func goldenMedia(t *testing.T, g testmodel.MediaGolden) []engine.Media {
	var out []engine.Media
	for _, name := range g.Media {
		if strings.HasSuffix(name, ".wav") {
			out = append(out, engine.Media{PCM: testsynth.PCM(t, name)})
		} else {
			rgb, w, h := testsynth.RGB(t, name)
			out = append(out, engine.Media{RGB: rgb, W: w, H: h})
		}
	}
	return out
}

// TestMediaGoldens: the engine generates llama-server's tokens
// (testmodel.MediaGoldens) for prompts with images (Gemma 3's
// non-causal 16-token chunks, one prompt with the same image twice) and
// a sound (Qwen2-Audio's causal 750-token chunk, evaluated over two
// steps of a 512-token batch), and Qwen2-VL's images, whose cells take
// M-RoPE's 2-D positions, fewer than cells (in steps of a 16-token
// batch too), counting their cells as prompt tokens:
// alone, then again from the cache (nothing encoded twice), and batched
// with text-only prompts, whose tokens stay llama-server's too.
func TestMediaGoldens(t *testing.T) {
	for _, g := range testmodel.MediaGoldens {
		t.Run(g.Kind+" "+g.Prompt, func(t *testing.T) {
			// One slot: a sliding-window model (gemma3) reuses only its own
			// slot's cache, and a new request takes an empty slot first.
			e := mediaEngine(t, g.Kind, engine.Config{Parallel: 1, BatchSize: 512})
			req := withMedia(t, g.Prompt, g.N, goldenMedia(t, g)...)
			toks, err := e.Render(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if len(toks) != g.PromptTokens {
				t.Fatalf("%d prompt tokens %v; llama-server counts %d", len(toks), toks, g.PromptTokens)
			}
			_, lps, res := collectLogprobs(t, submit(t, e, req))
			if got := tokensOf(lps); !slices.Equal(got, g.Alone) || res.Usage.PromptTokens != g.PromptTokens {
				t.Errorf("alone: %v from %d prompt tokens (%v); want %v", got, res.Usage.PromptTokens, res.Err, g.Alone)
			}
			encoded := e.Stats().MediaEncoded
			if encoded != uint64(len(g.Media)) {
				t.Errorf("%d chunks encoded; want %d", encoded, len(g.Media))
			}

			_, lps, res = collectLogprobs(t, submit(t, e, req))
			if got := tokensOf(lps); !slices.Equal(got, g.Alone) {
				t.Errorf("again: %v; want %v", got, g.Alone)
			}
			// A whole prompt again is evaluated again on a recurrent state:
			// its checkpoint is at the prompt's end, and the last token is
			// evaluated again for its logits (TestMediaCheckpoints has a
			// second turn).
			if e.Info().MemoryKind != engine.MemoryHybrid {
				if res.Usage.CachedTokens != g.PromptTokens-1 {
					t.Errorf("again: %d tokens cached; want %d", res.Usage.CachedTokens, g.PromptTokens-1)
				}
				if st := e.Stats(); st.MediaEncoded != encoded {
					t.Errorf("again: %d chunks encoded; want %d (the first time's)", st.MediaEncoded, encoded)
				}
			}
			e.Close()

			e = mediaEngine(t, g.Kind, engine.Config{Parallel: 4, BatchSize: 512})
			var wg sync.WaitGroup
			wg.Add(1 + len(testmodel.ArchPrompts))
			go func() {
				defer wg.Done()
				_, lps, _ := collectLogprobs(t, submit(t, e, req))
				if got := tokensOf(lps); !slices.Equal(got, g.Batched) {
					t.Errorf("batched: %v; want %v", got, g.Batched)
				}
			}()
			for i, p := range testmodel.ArchPrompts {
				go func() {
					defer wg.Done()
					if got := archTokens(t, e, p.Prompt, p.N); !slices.Equal(got, g.TextBatched[i]) {
						t.Errorf("%q batched: %v; want %v", p.Prompt, got, g.TextBatched[i])
					}
				}()
			}
			wg.Wait()
			e.Close()

			if g.Kind != mropeGolden.Kind {
				return
			}
			// M-RoPE images are causal: in 16-cell steps, each of the two
			// images (24 and 16 cells) takes steps of its own, at the
			// positions of the whole image's.
			e = mediaEngine(t, g.Kind, engine.Config{Parallel: 1, BatchSize: 16})
			if _, lps, res := collectLogprobs(t, submit(t, e, req)); !slices.Equal(tokensOf(lps), g.Alone) {
				t.Errorf("in 16-cell steps: %v (%v); want %v", tokensOf(lps), res.Err, g.Alone)
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
	return startEngine(t, engine.Config{ModelPath: model, Parallel: 1})
}

// TestMediaPreempted: a request with an image, preempted while it
// decodes by one of a better class, resumes with its image encoded again
// (its cells were lost with the slot) and gives llama-server's tokens;
// the preempting text request too.
func TestMediaPreempted(t *testing.T) {
	for _, g := range []testmodel.MediaGolden{testmodel.MediaGoldens[0], mropeGolden} {
		t.Run(g.Kind, func(t *testing.T) { testMediaPreempted(t, g) })
	}
}

func testMediaPreempted(t *testing.T, g testmodel.MediaGolden) {
	cpu := engine.NewCPU(1)
	e := mediaEngine(t, g.Kind, engine.Config{Parallel: 1, BatchSize: 512, CPU: cpu})
	low := withMedia(t, g.Prompt, 200, goldenMedia(t, g)...)
	low.Priority = 1
	l := submit(t, e, low)
	waitState(t, e, l, "decode")
	hold := engine.HoldCPU(cpu)
	p := testmodel.ArchPrompts[1]
	h := submit(t, e, greedy(p.Prompt, p.N))
	hold()
	if _, res := collect(t, h); res.FinishReason != engine.FinishLength {
		t.Errorf("the preempting request: %s (%v)", res.FinishReason, res.Err)
	}
	_, lps, res := collectLogprobs(t, l)
	if got := tokensOf(lps); len(got) != 200 || !slices.Equal(got[:g.N], g.Alone) {
		t.Errorf("preempted and resumed: %d tokens, starting %v; want 200 starting %v", len(got), got[:min(len(got), g.N)], g.Alone)
	}
	if res.Preemptions != 1 {
		t.Errorf("preempted %d times; want 1", res.Preemptions)
	}
	if st := e.Stats(); st.MediaEncoded != uint64(2*len(g.Media)) {
		t.Errorf("%d chunks encoded; want %d (again after the preemption)", st.MediaEncoded, 2*len(g.Media))
	}
}

// TestMediaDiskCache: a prompt with a sound, cached on disk by one engine,
// is found whole by the next on the same directory, with no encode; an
// engine with another projector for the same model finds nothing, since
// the cells of a medium are the projector's.
func TestMediaDiskCache(t *testing.T) {
	for _, g := range []testmodel.MediaGolden{testmodel.MediaGoldens[2], mropeGolden} {
		t.Run(g.Kind, func(t *testing.T) { testMediaDiskCache(t, g) })
	}
}

func testMediaDiskCache(t *testing.T, g testmodel.MediaGolden) {
	dir, cache := t.TempDir(), t.TempDir()
	model, proj := testsynth.Projector(t, dir, g.Kind)
	cfg := engine.Config{ModelPath: model, MMProj: proj, Parallel: 1, BatchSize: 512, Threads: testThreads, DiskCacheDir: cache}
	run := func(cfg engine.Config) ([]int32, engine.Result, engine.Stats) {
		e, err := engine.New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		_, lps, res := collectLogprobs(t, submit(t, e, withMedia(t, g.Prompt, g.N, goldenMedia(t, g)...)))
		return tokensOf(lps), res, e.Stats()
	}
	if got, res, _ := run(cfg); !slices.Equal(got, g.Alone) || res.Usage.CachedTokens != 0 {
		t.Fatalf("cold: %v with %d cached; want %v with none", got, res.Usage.CachedTokens, g.Alone)
	}
	got, res, st := run(cfg)
	if !slices.Equal(got, g.Alone) || res.Usage.CachedTokens != g.PromptTokens-1 || st.MediaEncoded != 0 || st.DiskCacheHits != 1 {
		t.Errorf("after a restart: %v with %d cached, %d encodes, %d disk hits; want %v with %d, none, 1", got, res.Usage.CachedTokens, st.MediaEncoded, st.DiskCacheHits, g.Alone, g.PromptTokens-1)
	}
	other := filepath.Join(dir, "other.mmproj.gguf")
	if err := gguf.WriteSyntheticProjector(other, g.Kind, 256, 2); err != nil {
		t.Fatal(err)
	}
	cfg.MMProj = other
	if _, res, st := run(cfg); res.Usage.CachedTokens != 0 || st.MediaEncoded != uint64(len(g.Media)) {
		t.Errorf("another projector: %d cached, %d encodes; want none cached, %d", res.Usage.CachedTokens, st.MediaEncoded, len(g.Media))
	}
}

// TestMediaCancels: requests with a sound, cancelled at random points
// (before, while and after the encoder runs beside the steps) among
// others that run to the end, all finish, those left with llama-server's
// tokens; the engine is then idle, encodes anew and answers right.
func TestMediaCancels(t *testing.T) {
	g := testmodel.MediaGoldens[2]
	e := mediaEngine(t, g.Kind, engine.Config{Parallel: 2, BatchSize: 512})
	req := withMedia(t, g.Prompt, g.N, goldenMedia(t, g)...)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		ctx, cancel := context.WithCancel(context.Background())
		s, err := e.Submit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			time.AfterFunc(time.Duration(rng.IntN(400))*time.Millisecond, cancel)
		}
		go func() {
			defer wg.Done()
			_, lps, res := collectLogprobs(t, s)
			switch res.FinishReason {
			case engine.FinishCancelled:
			case engine.FinishLength:
				if got := tokensOf(lps); !slices.Equal(got, g.Alone) {
					t.Errorf("request %d: %v; want %v", i, got, g.Alone)
				}
			default:
				t.Errorf("request %d: %s (%v)", i, res.FinishReason, res.Err)
			}
			cancel()
		}()
	}
	wg.Wait()
	waitIdle(t, e)
	_, lps, _ := collectLogprobs(t, submit(t, e, req))
	if got := tokensOf(lps); !slices.Equal(got, g.Alone) {
		t.Errorf("after the cancels: %v; want %v", got, g.Alone)
	}
}

// TestMediaRequestsBounded: at most twice as many requests as slots hold
// preprocessed media at once; another Submit with media waits for a
// place (here it gives up, its context ended), and the places come back
// when the requests end.
func TestMediaRequestsBounded(t *testing.T) {
	g := testmodel.MediaGoldens[0]
	cpu := engine.NewCPU(1)
	e := mediaEngine(t, g.Kind, engine.Config{Parallel: 1, BatchSize: 512, CPU: cpu})
	hold := engine.HoldCPU(cpu)
	req := withMedia(t, g.Prompt, g.N, goldenMedia(t, g)...)
	a, b := submit(t, e, req), submit(t, e, req)
	if held, most := engine.MediaRequests(e); held != 2 || most != 2 {
		t.Fatalf("%d of %d places held; want 2 of 2", held, most)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Submit(ctx, req); !errors.Is(err, context.Canceled) {
		t.Errorf("a third request with media: %v; want it to wait for a place", err)
	}
	text := submit(t, e, greedy("Hello", 2)) // a text request waits for no place
	hold()
	if _, res := collect(t, text); res.FinishReason != engine.FinishLength {
		t.Errorf("the text request: %s (%v)", res.FinishReason, res.Err)
	}
	for _, s := range []*engine.Stream{a, b} {
		_, lps, _ := collectLogprobs(t, s)
		if got := tokensOf(lps); !slices.Equal(got, g.Alone) {
			t.Errorf("%v; want %v", got, g.Alone)
		}
	}
	waitIdle(t, e)
	if held, _ := engine.MediaRequests(e); held != 0 {
		t.Errorf("%d places held after the requests ended", held)
	}
}

// TestMediaAcrossSlots: a prompt with a sound cached in one slot is
// found by the same prompt in another slot (its cells shared, not
// evaluated again), with no encode and llama-server's tokens.
func TestMediaAcrossSlots(t *testing.T) {
	for _, g := range []testmodel.MediaGolden{testmodel.MediaGoldens[2], mropeGolden} {
		t.Run(g.Kind, func(t *testing.T) { testMediaAcrossSlots(t, g) })
	}
}

func testMediaAcrossSlots(t *testing.T, g testmodel.MediaGolden) {
	e := mediaEngine(t, g.Kind, engine.Config{Parallel: 2, BatchSize: 512})
	req := withMedia(t, g.Prompt, g.N, goldenMedia(t, g)...)
	req.PinSlot, req.SlotID = true, 0
	collectLogprobs(t, submit(t, e, req))
	req.SlotID = 1
	_, lps, res := collectLogprobs(t, submit(t, e, req))
	if got := tokensOf(lps); !slices.Equal(got, g.Alone) || res.Usage.CachedTokens != g.PromptTokens-1 {
		t.Errorf("in the other slot: %v with %d cached; want %v with %d", got, res.Usage.CachedTokens, g.Alone, g.PromptTokens-1)
	}
	if st := e.Stats(); st.MediaEncoded != uint64(len(g.Media)) {
		t.Errorf("%d chunks encoded; want %d", st.MediaEncoded, len(g.Media))
	}
}

// TestMediaCheckpoints: on a hybrid model with M-RoPE (Qwen3.5's
// recurrent layers, Qwen2-VL's positions) and on a sliding-window one
// (Gemma 3), a second turn that continues the first turn's prompt with
// its images continues from the checkpoint at that prompt's end (its
// images not encoded again), and generates what a fresh engine does.
func TestMediaCheckpoints(t *testing.T) {
	for _, g := range []testmodel.MediaGolden{testmodel.MediaGoldens[1], hybridGolden} {
		t.Run(g.Kind, func(t *testing.T) {
			cfg := engine.Config{Parallel: 1, BatchSize: 512, Threads: testThreads, HostCacheBytes: 64 << 20}
			cfg.ModelPath, cfg.MMProj = testsynth.Projector(t, t.TempDir(), g.Kind)
			first := withMedia(t, g.Prompt, g.N, goldenMedia(t, g)...)
			second := withMedia(t, g.Prompt+" Once upon a time", g.N, goldenMedia(t, g)...)
			fresh := startEngine(t, cfg)
			_, lps, _ := collectLogprobs(t, submit(t, fresh, second))
			want := tokensOf(lps)
			fresh.Close()

			e := startEngine(t, cfg)
			if _, lps, _ := collectLogprobs(t, submit(t, e, first)); !slices.Equal(tokensOf(lps), g.Alone) {
				t.Errorf("first turn: %v; want %v", tokensOf(lps), g.Alone)
			}
			_, lps, res := collectLogprobs(t, submit(t, e, second))
			if got := tokensOf(lps); !slices.Equal(got, want) {
				t.Errorf("second turn: %v; want %v (a fresh engine's)", got, want)
			}
			st := e.Stats()
			if res.Usage.CachedTokens != g.PromptTokens || st.CheckpointHits != 1 || st.MediaEncoded != uint64(len(g.Media)) {
				t.Errorf("second turn: %d cached, %d checkpoint hits, %d chunks encoded; want the first prompt's %d, 1, %d",
					res.Usage.CachedTokens, st.CheckpointHits, st.MediaEncoded, g.PromptTokens, len(g.Media))
			}
		})
	}
}

// hybridGolden is mropeGolden's prompt on Qwen3.5's hybrid model.
var hybridGolden = testmodel.MediaGoldens[5]

// mropeGolden is a golden of a model with M-RoPE (Qwen2-VL): two images
// of 24 and 16 cells over 6 and 4 positions.
var mropeGolden = testmodel.MediaGoldens[4]

// TestMediaWhileStreamsDecode: an image whose non-causal chunk (16
// cells) is over the prompts' share of a step while another stream
// decodes (PrefillBudget 8) goes in whole in one step, rather than
// waiting for the stream to end: its request ends while the stream
// still has most of its 1,500 tokens to go.
func TestMediaWhileStreamsDecode(t *testing.T) {
	g := testmodel.MediaGoldens[0]
	e := mediaEngine(t, g.Kind, engine.Config{Parallel: 2, BatchSize: 512, PrefillBudget: 8})
	long := submit(t, e, greedy("Once upon a time", 1500))
	waitState(t, e, long, "decode")
	_, lps, res := collectLogprobs(t, submit(t, e, withMedia(t, g.Prompt, g.N, goldenMedia(t, g)...)))
	if got := tokensOf(lps); !slices.Equal(got, g.Alone) {
		t.Errorf("beside a stream: %v (%v); want %v", got, res.Err, g.Alone)
	}
	infos, err := e.Slots(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(infos, func(in engine.SlotInfo) bool { return in.RequestID == long.ID() })
	if i < 0 || infos[i].Decoded > 1000 {
		t.Errorf("the image's request ended after most of the stream (%+v): it waited for it", infos)
	}
	long.Cancel()
	collect(t, long)
}
