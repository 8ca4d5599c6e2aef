package media

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
)

func readMedia(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("../testdata/media/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sinePCM is the repository's sine as DecodeAudio reads the WAV.
func sinePCM(t *testing.T) []float32 {
	t.Helper()
	pcm, err := DecodeAudio(readMedia(t, "sine-440-1s.wav"), 16000, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return pcm
}

// The FLAC files are lossless, so each decodes to miniaudio's samples
// (refdecode, media/testdata/ref) bit for bit; the two made from the
// sine decode to the WAV's samples too. The files cover LPC, fixed,
// constant and verbatim subframes, 16 and 24 bits, wasted bits, and the
// four stereo channel assignments (flac -a shows them).
func TestFLAC(t *testing.T) {
	sine := sinePCM(t)
	for _, c := range []struct {
		name      string
		miniaudio string // SHA-256 of refdecode's float32 samples at 16 kHz
		sine      bool
	}{
		{"sine-440-1s.flac", "68defd08eadf97b630b2328ac74c17ca52969d46313934ed255d26bc65009f37", true},
		{"sine-440-1s-24bit.flac", "68defd08eadf97b630b2328ac74c17ca52969d46313934ed255d26bc65009f37", true},
		{"stereo-mix.flac", "15b077bf2b471597409e5f8a627f553810739f84d620b392b053f968538ad2e0", false},
	} {
		got, err := DecodeAudio(readMedia(t, c.name), 16000, Limits{})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var raw []byte
		for _, v := range got {
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
		}
		if h := sha256.Sum256(raw); hex.EncodeToString(h[:]) != c.miniaudio {
			t.Errorf("%s: %d samples differ from miniaudio's", c.name, len(got))
		}
		if c.sine && !equalPCM(got, sine) {
			t.Errorf("%s: %d samples differ from the WAV's %d", c.name, len(got), len(sine))
		}
	}
	// Resampled as a WAV is: through the one resampler.
	flac24, err := DecodeAudio(readMedia(t, "sine-440-1s.flac"), 24000, Limits{})
	wav24, err2 := DecodeAudio(readMedia(t, "sine-440-1s.wav"), 24000, Limits{})
	if err != nil || err2 != nil || len(wav24) != 24000 || !equalPCM(flac24, wav24) {
		t.Errorf("at 24 kHz: %d and %d samples, %v, %v", len(flac24), len(wav24), err, err2)
	}
}

func equalPCM(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The MP3s of the sine (lame, testdata/media/make-compressed.sh) come
// close to the WAV's samples, past LAME's encoder delay. Measured: the
// 16 kHz mono one (MPEG-2) at 1105 samples' delay, correlation 1.00000,
// RMS error 0.0178 against the sine's RMS 0.354; the 44.1 kHz stereo one
// (MPEG-1, left the sine, right silent, so the mono mix is half the sine)
// at 402 samples, correlation 0.99998, RMS error 0.0090 against 0.177.
// Against miniaudio's own decode of each file (refdecode: dr_mp3, then
// the same resampler) they have the same length (17280 and 16718
// samples), no delay, correlation 1.00000 and an RMS difference of
// 0.00003 and 0.00001, about one 16-bit step: go-mp3 rounds to 16 bits
// where dr_mp3 gives float.
func TestMP3Sine(t *testing.T) {
	sine := sinePCM(t)
	for _, c := range []struct {
		name  string
		n     int     // samples, miniaudio's
		delay int     // where the sine starts
		scale float32 // of the sine in the mix
	}{
		{"sine-440-1s.mp3", 17280, 1105, 1},
		{"sine-440-1s-left-44k.mp3", 16718, 402, 0.5},
	} {
		got, err := DecodeAudio(readMedia(t, c.name), 16000, Limits{})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if len(got) != c.n {
			t.Errorf("%s: %d samples, want %d", c.name, len(got), c.n)
		}
		// Within the sine, past the filters' edges.
		var sxy, sxx, syy, se float64
		for i := 200; i < len(sine)-200 && i+c.delay < len(got); i++ {
			x, y := float64(got[i+c.delay]), float64(c.scale*sine[i])
			sxy += x * y
			sxx += x * x
			syy += y * y
			se += (x - y) * (x - y)
		}
		corr, rel := sxy/math.Sqrt(sxx*syy), math.Sqrt(se/syy)
		if corr < 0.9999 || rel > 0.06 {
			t.Errorf("%s: correlation %.5f, RMS error %.3f of the signal's", c.name, corr, rel)
		}
	}
}

// mp3Garbage bounds what go-mp3 allocates a second of audio, garbage
// that it drops frame by frame (measured: 1.3 MB a second of 16 kHz
// MPEG-2, 2.4 MB of 44.1 kHz MPEG-1, about 50 and 63 KB a frame).
const mp3Garbage = 3 << 20

// Bombs: an MP3 of the sine's frames over and over (40 s in 173 KB),
// and a FLAC of constant frames of 65535 samples (13 bytes each, 4 s at
// 16 kHz), are refused once they pass the seconds bound, naming it, and
// what is allocated follows the bound, not the file.
func TestCompressedBombs(t *testing.T) {
	mp3Bomb := bytes.Repeat(readMedia(t, "sine-440-1s.mp3"), 40)
	flacBomb := flacConstant(16000, 100, 65535)
	for _, c := range []struct {
		name      string
		data      []byte
		secs      float64
		allocated uint64 // at most
	}{
		{"MP3", mp3Bomb, 2, mp3Garbage*2 + 2*4*2*16000 + 1<<20},
		// Two frames decoded; the third refused from its header.
		{"FLAC", flacBomb, 10, 65535*8 + 2*4*10*16000 + 64<<10},
		// The first frame is over the bound: nothing is decoded.
		{"FLAC 1 s", flacBomb, 1, 64 << 10},
	} {
		var err error
		a := allocated(func() { _, err = DecodeAudio(c.data, 16000, Limits{MaxAudioSeconds: c.secs}) })
		var e *Error
		if !errors.As(err, &e) || e.Limit != "max-audio-seconds" || !strings.Contains(e.Msg, "over --max-audio-seconds") && !strings.Contains(e.Msg, "longer than --max-audio-seconds") {
			t.Errorf("%s of %d bytes: %v", c.name, len(c.data), err)
		}
		if a > c.allocated {
			t.Errorf("%s of %d bytes within %g s: %d bytes allocated, want at most %d", c.name, len(c.data), c.secs, a, c.allocated)
		}
	}
	// Within a bound that holds them, they decode whole.
	if got, err := DecodeAudio(mp3Bomb, 16000, Limits{MaxAudioSeconds: 50}); err != nil || len(got) != 40*17280 {
		t.Errorf("MP3 within 50 s: %d samples, %v", len(got), err)
	}
	if got, err := DecodeAudio(flacBomb, 16000, Limits{MaxAudioSeconds: 410}); err != nil || len(got) != 100*65535 {
		t.Errorf("FLAC within 410 s: %d samples, %v", len(got), err)
	}
}

// flacConstant is a FLAC stream of frames mono 16-bit frames at rate,
// each block samples of a constant subframe (the value 1000).
func flacConstant(rate, frames, block int) []byte {
	b := []byte("fLaC\x80\x00\x00\x22")                 // the last block, STREAMINFO, 34 bytes
	b = binary.BigEndian.AppendUint16(b, uint16(block)) // min and max block size
	b = binary.BigEndian.AppendUint16(b, uint16(block))
	b = append(b, 0, 0, 0, 0, 0, 0) // frame sizes unknown
	b = binary.BigEndian.AppendUint64(b, uint64(rate)<<44|15<<36)
	b = append(b, make([]byte, 16)...) // MD5 unknown
	for i := range frames {
		start := len(b)
		// Block size from 16 bits after the header, the stream's rate,
		// mono, 16 bits; frame number i (UTF-8 coded, under 128).
		b = append(b, 0xff, 0xf8, 0x70, 0x08, byte(i))
		b = binary.BigEndian.AppendUint16(b, uint16(block-1))
		b = append(b, crc8(b[start:]))
		b = append(b, 0x00)                        // constant subframe
		b = binary.BigEndian.AppendUint16(b, 1000) // its value
		b = binary.BigEndian.AppendUint16(b, crc16(b[start:]))
	}
	return b
}

// A cut file decodes what it holds whole, or is refused with an *Error;
// so is a file with one byte changed, wherever.
func TestCompressedDamage(t *testing.T) {
	for _, name := range []string{"sine-440-1s.mp3", "sine-440-1s-left-44k.mp3", "sine-440-1s.flac", "stereo-mix.flac"} {
		data := readMedia(t, name)
		check := func(what string, b []byte) {
			got, err := DecodeAudio(b, 16000, Limits{})
			var e *Error
			if err != nil && !errors.As(err, &e) {
				t.Fatalf("%s %s: %v (%T)", name, what, err, err)
			}
			if err == nil && len(got) < 1600 {
				t.Fatalf("%s %s: %d samples", name, what, len(got))
			}
		}
		// Some 40 places each (go-mp3 takes about 10 ms a second).
		for n := 0; n < len(data); n += len(data)/40 + 1 {
			check("cut at "+itoa(n), data[:n])
		}
		for i := 3; i < len(data); i += len(data)/40 + 1 {
			b := bytes.Clone(data)
			b[i] ^= 0x5a
			check("changed at "+itoa(i), b)
		}
	}
	// A FLAC cut within a frame is refused: its frames hold no length,
	// so a cut frame cannot be told from a damaged one.
	flac := readMedia(t, "sine-440-1s.flac")
	if _, err := DecodeAudio(flac[:len(flac)-100], 16000, Limits{}); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("FLAC cut in its last frame: %v", err)
	}
}

func TestCompressedErrors(t *testing.T) {
	flac := readMedia(t, "sine-440-1s.flac")
	badCRC := bytes.Clone(flac)
	badCRC[len(badCRC)-1] ^= 1
	rate0 := bytes.Clone(flac)
	rate0[18], rate0[19], rate0[20] = 0, 0, rate0[20]&0x0f // STREAMINFO's 20 rate bits
	for _, c := range []struct {
		name string
		data []byte
		msg  string
	}{
		{"MP3 tag only", []byte("ID3\x04\x00\x00\x00\x00\x00\x00"), "audio is not a valid MP3"},
		{"MP3 tag past the end", []byte("ID3\x04\x00\x00\x00\x00\x01\x00\xff\xfb"), "ID3 tag runs past the end"},
		{"MP3 frame of zeros", append([]byte{0xff, 0xfb, 0x90, 0x64}, make([]byte, 500)...), "0.026 seconds long: at least 0.1 s"},
		{"FLAC STREAMINFO cut", flac[:20], "runs past the end"},
		{"FLAC without frames", flacConstant(16000, 0, 4096), "no audio frame"},
		{"FLAC CRC-16", badCRC, "CRC-16 does not match"},
		{"FLAC 0 Hz", rate0, "FLAC format is invalid: 0 Hz"},
		{"FLAC of 0.075 s", flacConstant(16000, 100, 12), "at least 0.1 s"},
		{"FLAC 400 kHz", flacConstant(400000, 1, 4096), "FLAC format is invalid: 400000 Hz"},
	} {
		_, err := DecodeAudio(c.data, 16000, Limits{})
		var e *Error
		if !errors.As(err, &e) || e.Kind != KindAudio || e.Limit != "" || !strings.Contains(e.Msg, c.msg) {
			t.Errorf("%s: %v, want %q", c.name, err, c.msg)
		}
	}
	// A FLAC after an ID3 tag, and an MP3 after two, decode.
	tag := []byte("ID3\x04\x00\x00\x00\x00\x00\x04abcd")
	for _, name := range []string{"sine-440-1s.flac", "sine-440-1s.mp3"} {
		data := append(append(bytes.Clone(tag), tag...), readMedia(t, name)...)
		if _, err := DecodeAudio(data, 16000, Limits{}); err != nil {
			t.Errorf("%s after tags: %v", name, err)
		}
	}
}
