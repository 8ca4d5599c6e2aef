package llama_test

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testsynth"
	"github.com/corral-llm/corral/llama"
)

// TestProjectors: the synthetic projectors load with libmtmd for their
// text models, say which media they take, and encode the test image into
// 16 embeddings and the test sound into 750, of the model's width and
// finite, between their markers; an encode whose context ends stops
// after a layer; a projector does not load for a model of another width, nor a
// text model as a projector.
func TestProjectors(t *testing.T) {
	dir := t.TempDir()
	type loaded struct {
		m *llama.Model
		p *llama.Projector
	}
	load := func(kind string) loaded {
		mp, pp := testsynth.Projector(t, dir, kind)
		m, err := llama.LoadModel(context.Background(), mp)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		p, err := llama.LoadProjector(pp, m, 2)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return loaded{m, p}
	}
	// encode tokenizes a medium and encodes its one chunk, checking the
	// embeddings are tokens rows of the model's width, finite and not all 0,
	// and that the chunk has text pieces (its markers) around it.
	encode := func(t *testing.T, l loaded, pieces []llama.MediaPiece, err error, tokens int) *llama.MediaChunk {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { llama.FreePieces(pieces) })
		var c *llama.MediaChunk
		for _, pc := range pieces {
			if pc.Chunk != nil {
				c = pc.Chunk
			}
		}
		if len(pieces) != 3 || pieces[0].Tokens == nil || pieces[2].Tokens == nil || c != pieces[1].Chunk || c.Tokens != tokens {
			t.Fatalf("pieces %+v; want markers around one chunk of %d tokens", pieces, tokens)
		}
		e, err := l.p.Encode(context.Background(), c, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(e) != tokens*l.m.NEmbdInput() {
			t.Fatalf("%d floats; want %d tokens of %d", len(e), tokens, l.m.NEmbdInput())
		}
		zero := true
		for _, v := range e {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("a non-finite embedding: %v", v)
			}
			zero = zero && v == 0
		}
		if zero {
			t.Fatal("every embedding is 0")
		}
		return c
	}

	vision := load("gemma3")
	if !vision.p.Vision() || vision.p.Audio() {
		t.Errorf("gemma3: vision %v, audio %v", vision.p.Vision(), vision.p.Audio())
	}
	rgb, nx, ny := testsynth.RGB(t, "gradient-64.png")
	pieces, err := vision.p.TokenizeImage(rgb, nx, ny)
	img := encode(t, vision, pieces, err, 16)
	if !img.NonCausal || img.Audio || img.Positions != 16 {
		t.Errorf("gemma3's image chunk: %+v; want non-causal, 16 positions", *img)
	}
	if _, err := vision.p.TokenizeAudio(make([]float32, 160)); err == nil {
		t.Error("gemma3 took audio")
	}
	if _, err := vision.p.TokenizeImage(rgb[:len(rgb)-1], nx, ny); err == nil {
		t.Error("an image of the wrong size was taken")
	}

	audio := load("qwen2a")
	if vision.p.Vision() == audio.p.Vision() || !audio.p.Audio() || audio.p.AudioSampleRate() != 16000 {
		t.Errorf("qwen2a: vision %v, audio %v at %d Hz", audio.p.Vision(), audio.p.Audio(), audio.p.AudioSampleRate())
	}
	pieces, err = audio.p.TokenizeAudio(testsynth.PCM(t, "sine-440-1s.wav"))
	snd := encode(t, audio, pieces, err, 750)
	if snd.NonCausal || !snd.Audio {
		t.Errorf("qwen2a's chunk: %+v; want causal audio", *snd)
	}
	if layers := audio.p.EncodedLayers(); layers != 2 {
		t.Errorf("the encode computed %d layers; the synthetic encoder has 2", layers)
	}

	// An encode aborted (its context ended) stops after its first layer.
	audio.p.AbortNextEncode()
	if _, err := audio.p.Encode(context.Background(), snd, nil); !errors.Is(err, llama.ErrEncodeCancelled) {
		t.Errorf("an aborted encode: %v", err)
	}
	if layers := audio.p.EncodedLayers(); layers != 1 {
		t.Errorf("an aborted encode computed %d layers; want 1", layers)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := audio.p.Encode(ctx, snd, nil); !errors.Is(err, llama.ErrEncodeCancelled) {
		t.Errorf("an encode with its context ended: %v", err)
	}
	if _, err := audio.p.Encode(context.Background(), snd, nil); err != nil {
		t.Errorf("an encode after aborted ones: %v", err)
	}

	// Qwen2-VL: a 96 × 64 image is 6 × 4 tokens (8-pixel patches merged
	// 2 × 2) over 6 positions, placed in 2-D as llama.cpp's helpers do:
	// every token at pos0 on the first plane, its row (y) on the second,
	// its column (x) on the third, 0 on the fourth.
	mrope := load("qwen2vl_merger")
	if !mrope.p.MRoPE() || vision.p.MRoPE() || audio.p.MRoPE() {
		t.Errorf("M-RoPE: qwen2vl %v, gemma3 %v, qwen2a %v; want only qwen2vl", mrope.p.MRoPE(), vision.p.MRoPE(), audio.p.MRoPE())
	}
	rgb, nx, ny = testsynth.RGB(t, "gradient-96x64.png")
	pieces, err = mrope.p.TokenizeImage(rgb, nx, ny)
	wideImg := encode(t, mrope, pieces, err, 24)
	if wideImg.NonCausal || wideImg.Positions != 6 || !wideImg.OnePosition {
		t.Errorf("qwen2vl's image chunk: %+v; want causal, 6 positions, one first-plane position", *wideImg)
	}
	if img.OnePosition || snd.OnePosition {
		t.Error("a chunk of a model without M-RoPE takes one position")
	}
	pos := mrope.p.Positions(wideImg, 100, 7, 2) // tokens 7 and 8: row 1, columns 1 and 2
	if want := []int32{100, 100, 101, 101, 101, 102, 0, 0}; !slices.Equal(pos, want) {
		t.Errorf("positions of tokens 7 and 8 from 100: %v; want %v", pos, want)
	}
	if pos := vision.p.Positions(img, 100, 7, 2); !slices.Equal(pos, []int32{107, 108}) {
		t.Errorf("gemma3: positions of tokens 7 and 8 from 100: %v; want 107 and 108", pos)
	}

	wide := filepath.Join(dir, "wide.mmproj.gguf")
	if err := gguf.WriteSyntheticProjector(wide, "gemma3", 2*vision.m.NEmbdInput(), 1); err != nil {
		t.Fatal(err)
	}
	if p, err := llama.LoadProjector(wide, vision.m, 2); err == nil {
		p.Close()
		t.Error("a projector loaded for a model of another width")
	}
	if p, err := llama.LoadProjector(filepath.Join(dir, "qwen2a.gguf"), audio.m, 2); err == nil {
		p.Close()
		t.Error("a text model loaded as a projector")
	}
}
