package testsynth

import (
	"encoding/binary"
	"image/png"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// MediaDir is testdata/media, the committed test image and sound.
func MediaDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "media")
}

// RGB reads a PNG of testdata/media as 3 bytes per pixel, row by row.
func RGB(t testing.TB, name string) (rgb []byte, nx, ny int) {
	t.Helper()
	f, err := os.Open(filepath.Join(MediaDir(), name))
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

// PCM reads a canonical 16-bit mono WAV of testdata/media (a 44-byte
// header) as samples in [-1, 1].
func PCM(t testing.TB, name string) []float32 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(MediaDir(), name))
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
