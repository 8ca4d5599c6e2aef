package media

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// fuzzImageLimits are small bounds, so that a fuzzed decode stays quick
// and what it may allocate is clear: about 24 bytes a pixel at worst
// (decoder buffers, the decoded image, the RGB) and the input a few
// times over.
var fuzzImageLimits = Limits{MaxImageBytes: 1 << 20, MaxImagePixels: 1 << 20}

// addRefSeeds adds the files in testdata/ref ending in ext, and those
// given, as seeds.
func addRefSeeds(f *testing.F, ext string, extra ...string) {
	names, _ := filepath.Glob(filepath.Join(refDir, "*"+ext))
	for _, name := range append(names, extra...) {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b)
		}
	}
}

// FuzzDecodeImage: DecodeImage never panics, every error but the
// context's is an *Error, an image it returns is within the bounds and
// whole, and what it allocates is bounded by the pixel bound and the
// input's size.
func FuzzDecodeImage(f *testing.F) {
	for _, ext := range []string{".png", ".gif", ".jpg"} {
		addRefSeeds(f, ext)
	}
	for _, name := range []string{"../testdata/media/gradient-64.png", "testdata/gopher-doc.1bpp.lossless.webp", "testdata/blue-purple-pink.lossy.webp"} {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b)
		}
	}
	f.Add(vp8x(16, 16, nil))
	f.Add(progressiveJPEG(64, 12))
	f.Add([]byte("GIF89a"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		m, err := DecodeImage(context.Background(), data, fuzzImageLimits)
		runtime.ReadMemStats(&after)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not an *Error", err, err)
			}
		} else {
			if m.W < 1 || m.H < 1 || m.W > MaxImageSide || m.H > MaxImageSide || int64(m.W)*int64(m.H) > fuzzImageLimits.MaxImagePixels {
				t.Fatalf("%d × %d decoded", m.W, m.H)
			}
			if len(m.RGB) != 3*m.W*m.H {
				t.Fatalf("%d × %d with %d bytes", m.W, m.H, len(m.RGB))
			}
		}
		if a := after.TotalAlloc - before.TotalAlloc; a > 24*uint64(fuzzImageLimits.MaxImagePixels)+16*uint64(len(data))+1<<20 {
			t.Fatalf("%d bytes allocated for %d bytes", a, len(data))
		}
	})
}

// fuzzAudioLimits bound a fuzzed clip to 30 seconds.
var fuzzAudioLimits = Limits{MaxAudioBytes: 1 << 20, MaxAudioSeconds: 30}

// FuzzDecodeAudio: DecodeAudio never panics, every error is an *Error, and
// the samples it returns (and what it allocates) are bounded by the
// seconds bound at the rate asked, whatever the header claims. Decoding
// MP3 allocates go-mp3's garbage too (mp3Garbage a second), and FLAC a
// frame's channels (at most 8 × 65535 samples of 8 bytes).
func FuzzDecodeAudio(f *testing.F) {
	addRefSeeds(f, ".wav", "../testdata/media/sine-440-1s.wav", "../testdata/media/sine-440-1s.mp3",
		"../testdata/media/sine-440-1s-left-44k.mp3", "../testdata/media/sine-440-1s-24bit.flac", "../testdata/media/stereo-mix.flac")
	for _, b := range [][]byte{[]byte("ID3\x04"), []byte("fLaC"), []byte("RIFF\x00\x00\x00\x00WAVE"), flacConstant(16000, 4, 4096), flacConstant(8000, 3, 65535)} {
		f.Add(b)
	}
	// Small ones, quicker to mutate.
	for _, s := range []wavSpec{
		{tag: 1, channels: 1, rate: 16000, bits: 8, frames: 1600},
		{tag: 1, channels: 2, rate: 8000, bits: 16, frames: 800, extra: true},
		{tag: 3, extensible: true, channels: 1, rate: 11025, bits: 32, frames: 1103},
		{tag: 1, channels: 1, rate: 16000, bits: 24, frames: 1600, claim: 1 << 31},
	} {
		f.Add(encodeWAV(s))
	}
	rates := []int{16000, 24000, 8000, 44100}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The last byte, if any, picks the rate asked.
		rate := rates[0]
		if len(data) > 0 {
			rate = rates[int(data[len(data)-1])%len(rates)]
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		out, err := DecodeAudio(data, rate, fuzzAudioLimits)
		runtime.ReadMemStats(&after)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not an *Error", err, err)
			}
			if out != nil {
				t.Fatal("samples with an error")
			}
		} else if max := int(fuzzAudioLimits.MaxAudioSeconds*float64(rate)) + 2; len(out) > max || len(out) < int(MinAudioSeconds*float64(rate))-1 {
			t.Fatalf("%d samples at %d Hz", len(out), rate)
		}
		bound := 4*uint64(fuzzAudioLimits.MaxAudioSeconds*float64(rate)+2) + 4*uint64(len(data)) + 64<<10
		switch _, format := Sniff(data); format {
		case FormatMP3:
			bound += 2*bound + mp3Garbage*uint64(fuzzAudioLimits.MaxAudioSeconds) + 16*uint64(len(data))
		case FormatFLAC:
			bound += 2*bound + 8*65535*8 + 16*uint64(len(data))
		}
		if a := after.TotalAlloc - before.TotalAlloc; a > bound {
			t.Fatalf("%d bytes allocated for %d bytes", a, len(data))
		}
	})
}
