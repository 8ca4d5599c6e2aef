package media

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The reference tests compare the decoders with what llama.cpp b10573's
// own code gives for the same files: stb_image for images, miniaudio for
// WAV. testdata/ref holds the files and their decodes; goldens.sh there
// remakes the decodes with refdecode.cpp (the mtmd helper's calls, built
// against the llama.cpp tarball), after
//
//	go test ./media -run TestWriteRefInputs -media.write-ref
//
// has written the files.

var writeRef = flag.Bool("media.write-ref", false, "write the reference inputs into testdata/ref")

const refDir = "testdata/ref"

// TestWriteRefInputs writes the reference inputs, with -media.write-ref.
func TestWriteRefInputs(t *testing.T) {
	if !*writeRef {
		t.Skip("only with -media.write-ref")
	}
	write := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(refDir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, b := range refPNGs() {
		write(name+".png", b)
	}
	for name, b := range refGIFs() {
		write(name+".gif", b)
	}
	for name, b := range refJPEGs() {
		write(name+".jpg", b)
	}
	var rates []string
	for name, w := range refWAVs() {
		write(name+".wav", encodeWAV(w.spec))
		rates = append(rates, fmt.Sprintf("%s %d\n", name, w.rate))
	}
	sort.Strings(rates)
	write("rates.txt", []byte(strings.Join(rates, "")))
}

// refFiles is the names in testdata/ref ending in ext, which there must
// be.
func refFiles(t *testing.T, ext string) []string {
	names, err := filepath.Glob(filepath.Join(refDir, "*"+ext))
	if err != nil || len(names) == 0 {
		t.Fatalf("no %s files in %s (%v)", ext, refDir, err)
	}
	return names
}

// TestRefImages decodes each reference PNG and GIF and compares its
// pixels with stb_image's, byte for byte, and each JPEG's within a small
// tolerance (Go's IDCT is not stb's) but for one whose IDCTs agree.
func TestRefImages(t *testing.T) {
	var files []string
	for _, ext := range []string{".png", ".gif", ".jpg"} {
		files = append(files, refFiles(t, ext)...)
	}
	if len(files) != len(refPNGs())+len(refGIFs())+len(refJPEGs()) {
		t.Fatalf("%d reference images, want %d: run TestWriteRefInputs and goldens.sh", len(files), len(refPNGs())+len(refGIFs())+len(refJPEGs()))
	}
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(path + ".rgb")
		if err != nil {
			t.Fatal(err)
		}
		var w, h int
		if size, err := os.ReadFile(path + ".size"); err != nil {
			t.Fatal(err)
		} else if _, err := fmt.Sscan(string(size), &w, &h); err != nil {
			t.Fatalf("%s.size: %v", path, err)
		}
		m, err := DecodeImage(context.Background(), data, Limits{})
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if m.W != w || m.H != h || len(m.RGB) != len(want) {
			t.Errorf("%s: %d × %d (%d bytes), stb gives %d × %d (%d bytes)", path, m.W, m.H, len(m.RGB), w, h, len(want))
			continue
		}
		tolerance := 0
		if strings.HasSuffix(path, ".jpg") && !strings.HasSuffix(path, "-blocks.jpg") {
			tolerance = 2
		}
		worst, at := 0, -1
		for i := range want {
			if d := abs(int(m.RGB[i]) - int(want[i])); d > worst {
				worst, at = d, i
			}
		}
		if worst > tolerance {
			p := at / 3
			t.Errorf("%s: pixel (%d, %d) channel %d is %d, stb gives %d (tolerance %d)", path, p%w, p/w, at%3, m.RGB[at], want[at], tolerance)
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// TestRefAudio decodes each reference WAV at its rate and compares the
// samples with miniaudio's, bit for bit.
func TestRefAudio(t *testing.T) {
	rates := map[string]int{}
	list, err := os.ReadFile(filepath.Join(refDir, "rates.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		var name string
		var rate int
		if _, err := fmt.Sscan(line, &name, &rate); err != nil {
			t.Fatalf("rates.txt: %q: %v", line, err)
		}
		rates[name] = rate
	}
	files := refFiles(t, ".wav")
	if len(files) != len(refWAVs()) {
		t.Fatalf("%d reference WAVs, want %d: run TestWriteRefInputs and goldens.sh", len(files), len(refWAVs()))
	}
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".wav")
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(path + ".f32")
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeAudio(data, rates[name], Limits{})
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(got) != len(raw)/4 {
			t.Errorf("%s: %d samples, miniaudio gives %d", name, len(got), len(raw)/4)
			continue
		}
		for i, v := range got {
			if w := binary.LittleEndian.Uint32(raw[4*i:]); math.Float32bits(v) != w {
				t.Errorf("%s: sample %d is %v (%08x), miniaudio gives %v (%08x)", name, i, v, math.Float32bits(v), math.Float32frombits(w), w)
				break
			}
		}
	}
}
