package llama_test

import (
	"context"
	"encoding/binary"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testsynth"
	"github.com/corral-llm/corral/llama"
)

// media is the folder of the test image and sound.
var media = filepath.Join("..", "testdata", "media")

// rgbOf reads a PNG as 3 bytes per pixel, row by row.
func rgbOf(t *testing.T, name string) (rgb []byte, nx, ny int) {
	t.Helper()
	f, err := os.Open(filepath.Join(media, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			rgb = append(rgb, byte(r>>8), byte(g>>8), byte(bl>>8))
		}
	}
	return rgb, b.Dx(), b.Dy()
}

// pcmOf reads a canonical 16-bit mono WAV (a 44-byte header) as samples
// in [-1, 1].
func pcmOf(t *testing.T, name string) []float32 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(media, name))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 44 || string(b[:4]) != "RIFF" || string(b[8:12]) != "WAVE" || binary.LittleEndian.Uint16(b[22:]) != 1 || binary.LittleEndian.Uint16(b[34:]) != 16 {
		t.Fatalf("%s: not a 16-bit mono WAV", name)
	}
	pcm := make([]float32, 0, (len(b)-44)/2)
	for i := 44; i+1 < len(b); i += 2 {
		pcm = append(pcm, float32(int16(binary.LittleEndian.Uint16(b[i:])))/32768)
	}
	return pcm
}

// TestProjectors: the synthetic projectors load with libmtmd for their
// text models, say which media they take, and encode the test image into
// 16 embeddings and the test sound into 750, of the model's width and
// finite; a projector does not load for a model of another width, nor a
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
	finite := func(t *testing.T, e llama.Encoded, m *llama.Model, tokens int) {
		t.Helper()
		if e.Tokens != tokens || len(e.Embd) != tokens*m.NEmbdInput() {
			t.Fatalf("%d tokens, %d floats; want %d tokens of %d", e.Tokens, len(e.Embd), tokens, m.NEmbdInput())
		}
		zero := true
		for _, v := range e.Embd {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("a non-finite embedding: %v", v)
			}
			zero = zero && v == 0
		}
		if zero {
			t.Fatal("every embedding is 0")
		}
	}

	vision := load("gemma3")
	if !vision.p.Vision() || vision.p.Audio() {
		t.Errorf("gemma3: vision %v, audio %v", vision.p.Vision(), vision.p.Audio())
	}
	rgb, nx, ny := rgbOf(t, "gradient-64.png")
	e, err := vision.p.EncodeImage(rgb, nx, ny)
	if err != nil {
		t.Fatal(err)
	}
	finite(t, e, vision.m, 16)
	if _, err := vision.p.EncodeAudio(make([]float32, 160)); err == nil {
		t.Error("gemma3 encoded audio")
	}
	if _, err := vision.p.EncodeImage(rgb[:len(rgb)-1], nx, ny); err == nil {
		t.Error("an image of the wrong size encoded")
	}

	audio := load("qwen2a")
	if vision.p.Vision() == audio.p.Vision() || !audio.p.Audio() || audio.p.AudioSampleRate() != 16000 {
		t.Errorf("qwen2a: vision %v, audio %v at %d Hz", audio.p.Vision(), audio.p.Audio(), audio.p.AudioSampleRate())
	}
	e, err = audio.p.EncodeAudio(pcmOf(t, "sine-440-1s.wav"))
	if err != nil {
		t.Fatal(err)
	}
	finite(t, e, audio.m, 750)

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
