package media

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
)

// The repository's sine: 16 kHz mono s16, so its samples are its values
// / 32768, exactly, and there are 16000 of them.
func TestSine(t *testing.T) {
	data, err := os.ReadFile("../testdata/media/sine-440-1s.wav")
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeAudio(data, 16000, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 16000 {
		t.Fatalf("%d samples, want 16000", len(got))
	}
	pcm := data[len(data)-32000:]
	for i, v := range got {
		x := int16(binary.LittleEndian.Uint16(pcm[2*i:]))
		if v != float32(x)/32768 {
			t.Fatalf("sample %d is %v, want %d/32768", i, v, x)
		}
		if want := float32(math.Round(16384*math.Sin(2*math.Pi*440*float64(i)/16000))) / 32768; v != want {
			t.Fatalf("sample %d is %v, want %v", i, v, want)
		}
	}
}

// Each sample format's conversion, on values whose results are known.
func TestWAVSampleFormats(t *testing.T) {
	frames := 1700 // over 0.1 s at 16 kHz
	for _, c := range []struct {
		name   string
		spec   wavSpec
		sample []byte  // one sample, repeated
		want   float32 // its value
	}{
		{"u8 0", wavSpec{tag: 1, bits: 8}, []byte{0}, -1},
		{"u8 255", wavSpec{tag: 1, bits: 8}, []byte{255}, float32(float32(255)*float32(0.00784313725490196078)) - 1},
		{"u8 128", wavSpec{tag: 1, bits: 8}, []byte{128}, float32(float32(128)*float32(0.00784313725490196078)) - 1},
		{"s16 min", wavSpec{tag: 1, bits: 16}, []byte{0x00, 0x80}, -1},
		{"s16 max", wavSpec{tag: 1, bits: 16}, []byte{0xff, 0x7f}, 32767.0 / 32768},
		{"s24 min", wavSpec{tag: 1, bits: 24}, []byte{0, 0, 0x80}, -1},
		{"s24 -1", wavSpec{tag: 1, bits: 24}, []byte{0xff, 0xff, 0xff}, -1.0 / (1 << 23)},
		{"s32 max", wavSpec{tag: 1, bits: 32}, []byte{0xff, 0xff, 0xff, 0x7f}, 1},
		{"s32 1", wavSpec{tag: 1, bits: 32}, []byte{1, 0, 0, 0}, 1.0 / (1 << 31)},
		{"s40 half", wavSpec{tag: 1, bits: 40}, []byte{0, 0, 0, 0, 0x40}, 0.5},
		{"f32", wavSpec{tag: 3, bits: 32}, binary.LittleEndian.AppendUint32(nil, math.Float32bits(-0.375)), -0.375},
		{"f64", wavSpec{tag: 3, bits: 64}, binary.LittleEndian.AppendUint64(nil, math.Float64bits(0.1)), 0.1},
		{"f64 over 1", wavSpec{tag: 3, bits: 64}, binary.LittleEndian.AppendUint64(nil, math.Float64bits(3.5)), 3.5},
		{"extensible s16", wavSpec{tag: 1, bits: 16, extensible: true}, []byte{0x00, 0xc0}, -0.5},
		{"extensible f32", wavSpec{tag: 3, bits: 32, extensible: true}, binary.LittleEndian.AppendUint32(nil, math.Float32bits(0.25)), 0.25},
	} {
		s := c.spec
		s.channels, s.rate = 1, 16000
		var pcm []byte
		for range frames {
			pcm = append(pcm, c.sample...)
		}
		got, err := DecodeAudio(wavBytes(s, pcm), 16000, Limits{})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if len(got) != frames || got[0] != c.want || got[frames-1] != c.want {
			t.Errorf("%s: %d samples, first %v, want %d of %v", c.name, len(got), got[0], frames, c.want)
		}
	}
}

// Channels are averaged: summed in float, divided by their count.
func TestWAVDownmix(t *testing.T) {
	s := wavSpec{tag: 3, channels: 3, rate: 16000, bits: 32}
	var pcm []byte
	for range 1700 {
		for _, v := range []float32{0.1, 0.7, -0.3} {
			pcm = binary.LittleEndian.AppendUint32(pcm, math.Float32bits(v))
		}
	}
	got, err := DecodeAudio(wavBytes(s, pcm), 16000, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if want := (float32(0.1) + float32(0.7) + float32(-0.3)) / 3; got[0] != want {
		t.Errorf("%v, want %v", got[0], want)
	}
}

// Resampling gives as many samples as miniaudio's length says, a delay
// of one input frame and a low-passed signal: a 1 kHz tone at 48 kHz
// comes out a 1 kHz tone at 16 kHz; a 7.9 kHz one, under the new
// Nyquist, is kept, and a 12 kHz one is mostly filtered out.
func TestResample(t *testing.T) {
	tone := func(freq float64, rate int) []byte {
		s := wavSpec{tag: 3, channels: 1, rate: rate, bits: 32}
		var pcm []byte
		for i := range rate / 2 {
			pcm = binary.LittleEndian.AppendUint32(pcm, math.Float32bits(float32(0.5*math.Sin(2*math.Pi*freq*float64(i)/float64(rate)))))
		}
		return wavBytes(s, pcm)
	}
	rms := func(x []float32) float64 {
		var s float64
		for _, v := range x[len(x)/4:] { // past the filter's settling
			s += float64(v) * float64(v)
		}
		return math.Sqrt(s / float64(len(x)-len(x)/4))
	}
	for _, c := range []struct {
		freq     float64
		rate     int
		min, max float64
	}{
		{1000, 48000, 0.34, 0.36}, // 0.5/√2 = 0.354
		{1000, 8000, 0.32, 0.36},
		{5000, 44100, 0.3, 0.36},
		{12000, 48000, 0, 0.1},
	} {
		got, err := DecodeAudio(tone(c.freq, c.rate), 16000, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if want := resampledLen(16000, uint64(c.rate), uint64(c.rate/2)); uint64(len(got)) != want || math.Abs(float64(len(got))-8000) > 1 {
			t.Errorf("%g Hz at %d: %d samples, want %d", c.freq, c.rate, len(got), want)
		}
		if got[0] != 0 {
			t.Errorf("%g Hz at %d: first sample %v, want 0 (the resampler's delay)", c.freq, c.rate, got[0])
		}
		if r := rms(got); r < c.min || r > c.max {
			t.Errorf("%g Hz at %d: RMS %.3f, want %.2f to %.2f", c.freq, c.rate, r, c.min, c.max)
		}
	}
}

// A data chunk that claims more than the file holds is cut to the file,
// as dr_wav does, and what it allocates follows the file, not the claim.
func TestWAVClaims(t *testing.T) {
	s := wavSpec{tag: 1, channels: 1, rate: 16000, bits: 16, frames: 1700, claim: 1 << 31}
	data := encodeWAV(s)
	var got []float32
	var err error
	a := allocated(func() { got, err = DecodeAudio(data, 16000, Limits{}) })
	if err != nil || len(got) != 1700 {
		t.Fatalf("%d samples, %v", len(got), err)
	}
	if a > 4*1700+64<<10 {
		t.Errorf("%d bytes allocated for 1700 samples", a)
	}
	t.Logf("WAV claiming 2 GiB of data, holding %d bytes: %d bytes allocated", len(data), a)
	// Claiming 0xFFFFFFFF (a streaming writer's "unknown") reads to the end.
	s.claim = 0xffffffff
	if got, err := DecodeAudio(encodeWAV(s), 16000, Limits{}); err != nil || len(got) != 1700 {
		t.Errorf("claim 0xFFFFFFFF: %d samples, %v", len(got), err)
	}
	// A chunk after the data is not data.
	after := wavBytes(wavSpec{tag: 1, channels: 1, rate: 16000, bits: 16}, make([]byte, 2*1700))
	after = append(after, "LIST\x04\x00\x00\x00INFO"...)
	if got, err := DecodeAudio(after, 16000, Limits{}); err != nil || len(got) != 1700 {
		t.Errorf("a chunk after the data: %d samples, %v", len(got), err)
	}
	// A partial last frame is dropped.
	stereo := encodeWAV(wavSpec{tag: 1, channels: 2, rate: 16000, bits: 16, frames: 1700})
	if got, err := DecodeAudio(stereo[:len(stereo)-3], 16000, Limits{}); err != nil || len(got) != 1699 {
		t.Errorf("cut mid-frame: %d samples, %v", len(got), err)
	}
}

// The bounds: bytes before anything, seconds from the header before any
// sample is allocated, and the shortest clip.
func TestAudioBounds(t *testing.T) {
	// 301 s of 8 kHz u8: 2.4 MB, over the 300 s default.
	long := encodeWAV(wavSpec{tag: 1, channels: 1, rate: 8000, bits: 8, frames: 301 * 8000})
	var err error
	a := allocated(func() { _, err = DecodeAudio(long, 16000, Limits{}) })
	var e *Error
	if !errors.As(err, &e) || e.Limit != "max-audio-seconds" || e.Msg != "audio is 301.00 seconds long, over --max-audio-seconds 300" {
		t.Errorf("301 s: %v", err)
	}
	if a > 16<<10 {
		t.Errorf("301 s: %d bytes allocated", a)
	}
	if _, err := DecodeAudio(long, 16000, Limits{MaxAudioSeconds: 301}); err != nil {
		t.Errorf("301 s within 301: %v", err)
	}
	_, err = DecodeAudio(long, 16000, Limits{MaxAudioBytes: int64(len(long)) - 1})
	if !errors.As(err, &e) || e.Limit != "max-audio-bytes" || !strings.Contains(e.Msg, "over --max-audio-bytes") {
		t.Errorf("bytes: %v", err)
	}
	short := encodeWAV(wavSpec{tag: 1, channels: 1, rate: 16000, bits: 16, frames: 1599})
	if _, err := DecodeAudio(short, 16000, Limits{}); !errors.As(err, &e) || e.Limit != "" || !strings.Contains(e.Msg, "at least 0.1 s") {
		t.Errorf("0.0999 s: %v", err)
	}
	if _, err := DecodeAudio(encodeWAV(wavSpec{tag: 1, channels: 1, rate: 16000, bits: 16, frames: 1600}), 16000, Limits{}); err != nil {
		t.Errorf("0.1 s: %v", err)
	}
	if _, err := DecodeAudio(short, 0, Limits{}); err == nil {
		t.Error("rate 0 taken")
	}
}

func TestAudioErrors(t *testing.T) {
	good := wavSpec{tag: 1, channels: 1, rate: 16000, bits: 16, frames: 1700}
	pcm := encodeWAV(good)[44:]
	with := func(f func(*wavSpec)) []byte {
		s := good
		f(&s)
		return wavBytes(s, pcm)
	}
	fmtAt := func(b []byte, off int, v uint16) []byte { // a field of the fmt chunk
		binary.LittleEndian.PutUint16(b[20+off:], v)
		return b
	}
	noFmt := append([]byte("RIFF\x00\x00\x00\x00WAVEdata"), binary.LittleEndian.AppendUint32(nil, uint32(len(pcm)))...)
	dataFirst := append(append(noFmt, pcm...), encodeWAV(good)[12:36]...)
	extBad := with(func(s *wavSpec) { s.extensible = true })
	binary.LittleEndian.PutUint16(extBad[36:], 20) // cbSize
	runaway := encodeWAV(wavSpec{tag: 1, channels: 1, rate: 16000, bits: 16, frames: 1700, extra: true})
	binary.LittleEndian.PutUint32(runaway[16:], 1<<30) // the LIST chunk
	for _, c := range []struct {
		name        string
		data        []byte
		unsupported bool
		msg         string
	}{
		{"empty", nil, false, "audio format not recognised: want WAV, MP3 or FLAC"},
		{"PNG", refPNGs()["rgb8"], false, "audio format not recognised"},
		{"RIFF only", []byte("RIFF\x00\x00\x00\x00WAVE"), false, "no fmt chunk"},
		{"no fmt", append(noFmt, pcm...), false, "data chunk before its fmt chunk"},
		{"data first", dataFirst, false, "data chunk before its fmt chunk"},
		{"short fmt", []byte("RIFF\x00\x00\x00\x00WAVEfmt \x0e\x00\x00\x00\x01\x00\x01\x00\x80\x3e\x00\x00\x00\x7d\x00\x00"), false, "fmt chunk is truncated"},
		{"cut in fmt", encodeWAV(good)[:30], false, "fmt chunk is truncated"},
		{"cut after fmt", encodeWAV(good)[:36], false, "no data chunk"},
		{"chunk past the end", runaway, false, "runs past the end"},
		{"0 channels", fmtAt(with(func(*wavSpec) {}), 2, 0), false, "WAV format is invalid"},
		{"0 Hz", fmtAt(fmtAt(with(func(*wavSpec) {}), 4, 0), 6, 0), false, "WAV format is invalid"},
		{"0 bits", fmtAt(with(func(*wavSpec) {}), 14, 0), false, "WAV format is invalid"},
		{"0 block align", fmtAt(with(func(s *wavSpec) { s.validBits = 12 }), 12, 0), false, "WAV format is invalid"},
		{"9 bytes a sample", with(func(s *wavSpec) { s.bits = 72 }), false, "WAV format is invalid"},
		{"f16", with(func(s *wavSpec) { s.tag, s.bits = 3, 16 }), false, "samples of 2 bytes are not supported"},
		{"extension 20 bytes", extBad, false, "extension is 20 bytes, not 22"},
		{"ADPCM", with(func(s *wavSpec) { s.tag = 2 }), true, "WAV codec 0x0002 is not supported: want PCM or IEEE float"},
		{"extensible A-law", with(func(s *wavSpec) { s.tag, s.extensible = 6, true }), true, "WAV codec 0x0006"},
		{"Ogg", []byte("OggS\x00\x02"), true, "Ogg audio is not supported: send WAV, MP3 or FLAC"},
	} {
		_, err := DecodeAudio(c.data, 16000, Limits{})
		var e *Error
		if !errors.As(err, &e) || e.Kind != KindAudio || e.Limit != "" || !strings.Contains(e.Msg, c.msg) || errors.Is(err, ErrUnsupported) != c.unsupported {
			t.Errorf("%s: error %v, want %q (unsupported %v)", c.name, err, c.msg, c.unsupported)
		}
	}
	// Every cut of a good file is refused or decodes what it holds.
	full := encodeWAV(wavSpec{tag: 1, extensible: true, channels: 2, rate: 16000, bits: 24, frames: 1700, extra: true})
	for n := range len(full) {
		got, err := DecodeAudio(full[:n], 16000, Limits{})
		if err == nil && len(got) < 1600 {
			t.Fatalf("cut at %d: %d samples", n, len(got))
		}
	}
}

// NaN and infinite float samples are refused; a float64 too large for
// float32 is infinite.
func TestWAVNotFinite(t *testing.T) {
	for _, v := range []float64{math.NaN(), math.Inf(1), 1e300} {
		s := wavSpec{tag: 3, channels: 1, rate: 16000, bits: 64}
		var pcm []byte
		for i := range 1700 {
			x := 0.0
			if i == 1000 {
				x = v
			}
			pcm = binary.LittleEndian.AppendUint64(pcm, math.Float64bits(x))
		}
		if _, err := DecodeAudio(wavBytes(s, pcm), 16000, Limits{}); err == nil || !strings.Contains(err.Error(), "sample 1000") {
			t.Errorf("%v: %v", v, err)
		}
	}
}

// 130 s of 48 kHz stereo s16 (25 MB), resampled to 16 kHz mono, and 300 s
// of 16 kHz mono: about the largest clips DefaultLimits take.
func BenchmarkDecodeAudio(b *testing.B) {
	for _, s := range []wavSpec{
		{tag: 1, channels: 2, rate: 48000, bits: 16, frames: 130 * 48000},
		{tag: 1, channels: 1, rate: 16000, bits: 16, frames: 300 * 16000},
	} {
		data := encodeWAV(s)
		b.Run(itoa(s.rate), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := DecodeAudio(data, 16000, Limits{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
