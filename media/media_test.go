package media

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
)

func TestSniff(t *testing.T) {
	gradient, _ := os.ReadFile("../testdata/media/gradient-64.png")
	sine, _ := os.ReadFile("../testdata/media/sine-440-1s.wav")
	webp, _ := os.ReadFile("testdata/gopher-doc.1bpp.lossless.webp")
	for _, c := range []struct {
		data   []byte
		kind   Kind
		format string
	}{
		{gradient, KindImage, FormatPNG},
		{refJPEGs()["jpeg-gray"], KindImage, FormatJPEG},
		{refGIFs()["gif-full"], KindImage, FormatGIF},
		{webp, KindImage, FormatWebP},
		{sine, KindAudio, FormatWAV},
		{[]byte("ID3\x03"), KindAudio, FormatMP3},
		{[]byte{0xff, 0xfb, 0x90, 0x44}, KindAudio, FormatMP3}, // MPEG-1 layer III
		{[]byte{0xff, 0xf3, 0x64, 0xc4}, KindAudio, FormatMP3}, // MPEG-2 layer III
		{[]byte{0xff, 0xf1, 0x50, 0x80}, KindUnknown, ""},      // ADTS AAC: layer 00
		{[]byte{0xff, 0xfb, 0xf0, 0x44}, KindUnknown, ""},      // bitrate index 1111
		{[]byte{0xff, 0xd8, 0xff, 0xe0}, KindImage, FormatJPEG},
		{[]byte("fLaC\x00"), KindAudio, FormatFLAC},
		{[]byte("ID3\x04\x00\x00\x00\x00\x00\x02..fLaC"), KindAudio, FormatFLAC},                              // FLAC after a tag
		{[]byte("ID3\x04\x00\x10\x00\x00\x00\x00ID3\x04\x00\x00\x00\x00\x00\x00fLaC"), KindAudio, FormatFLAC}, // a tag with a footer
		{[]byte("ID3\x04\x00\x00\x00\x00\x00\x09fLaC"), KindAudio, FormatMP3},                                 // the tag runs past it
		{[]byte("OggS\x00"), KindAudio, FormatOgg},
		{[]byte("RIFF\x00\x00\x00\x00AVI "), KindUnknown, ""},
		{[]byte("GIF88a"), KindUnknown, ""},
		{[]byte("\x89PNG"), KindUnknown, ""},
		{nil, KindUnknown, ""},
	} {
		if k, f := Sniff(c.data); k != c.kind || f != c.format {
			t.Errorf("% x: %v %q, want %v %q", c.data[:min(len(c.data), 12)], k, f, c.kind, c.format)
		}
	}
}

func TestHash(t *testing.T) {
	gradient, _ := os.ReadFile("../testdata/media/gradient-64.png")
	// sha256sum testdata/media/gradient-64.png
	if h := Hash(gradient); hex.EncodeToString(h[:]) != "141181997e1d0de92a1c9e79e6cfd0eca77ff7323f3f74e993d404620ce69ca8" {
		t.Errorf("%x", h)
	}
	if Hash(nil) != sha256.Sum256(nil) {
		t.Error("Hash(nil)")
	}
}

func TestDecodedLen(t *testing.T) {
	for n := range 40 {
		b := make([]byte, n)
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding} {
			if got := DecodedLen(enc.EncodeToString(b)); got != int64(n) {
				t.Errorf("%d bytes: DecodedLen says %d", n, got)
			}
		}
	}
}

func TestParseDataURL(t *testing.T) {
	gradient, _ := os.ReadFile("../testdata/media/gradient-64.png")
	b64 := base64.StdEncoding.EncodeToString(gradient)
	for _, c := range []struct {
		url, mime string
	}{
		{"data:image/png;base64," + b64, "image/png"},
		{"DATA:Image/PNG;BASE64," + b64, "image/png"},
		{"data:image/png;name=x.png;base64," + b64, "image/png"},
		{"data:;base64," + strings.TrimRight(b64, "="), ""},
		{"data:image/png;base64," + b64[:60] + "\r\n" + b64[60:], "image/png"},
	} {
		mime, data, err := ParseDataURL(c.url, KindImage, Limits{})
		if err != nil || mime != c.mime || string(data) != string(gradient) {
			t.Errorf("%.40q: %q, %d bytes, %v", c.url, mime, len(data), err)
		}
	}
	for _, c := range []struct {
		url  string
		kind Kind
		lim  Limits
		flag string
		msg  string
	}{
		{"https://example.com/a.png", KindImage, Limits{}, "", "image URL is not a data URL"},
		{"data:image/png," + b64, KindImage, Limits{}, "", "is not base64"},
		{"data:image/png;base64" + b64, KindImage, Limits{}, "", "no ','"},
		{"data:image/png;base64,****", KindImage, Limits{}, "", "image is not valid base64"},
		{"data:image/png;base64," + b64, KindImage, Limits{MaxImageBytes: 374}, "max-image-bytes", "image is 375 bytes, over --max-image-bytes 374"},
		{"data:audio/wav;base64," + b64, KindAudio, Limits{MaxAudioBytes: 374}, "max-audio-bytes", "audio is 375 bytes, over --max-audio-bytes 374"},
	} {
		_, _, err := ParseDataURL(c.url, c.kind, c.lim)
		var e *Error
		if !errors.As(err, &e) || e.Limit != c.flag || !strings.Contains(e.Msg, c.msg) || e.Kind != c.kind {
			t.Errorf("%.40q: %v, want %q", c.url, err, c.msg)
		}
	}
}

// The bound is checked on the encoded length, before anything is decoded:
// 30 MB of base64 over a 20 MiB bound allocate nothing.
func TestDecodeBase64Bound(t *testing.T) {
	b64 := strings.Repeat("A", 30<<20)
	url := "data:image/png;base64," + b64
	var err error
	a := allocated(func() { _, _, err = ParseDataURL(url, KindImage, Limits{}) })
	var e *Error
	if !errors.As(err, &e) || e.Limit != "max-image-bytes" {
		t.Errorf("%v", err)
	}
	if a > 4096 {
		t.Errorf("%d bytes allocated", a)
	}
	a = allocated(func() { _, err = DecodeBase64(b64, KindAudio, Limits{MaxAudioBytes: 1 << 20}) })
	if !errors.As(err, &e) || e.Limit != "max-audio-bytes" || a > 4096 {
		t.Errorf("%v, %d bytes allocated", err, a)
	}
	// At the bound it decodes.
	if data, err := DecodeBase64(b64[:20<<20/3*4], KindImage, Limits{}); err != nil || len(data) != 20<<20/3*3 {
		t.Errorf("at the bound: %d bytes, %v", len(data), err)
	}
}

func TestDefaultLimits(t *testing.T) {
	d := DefaultLimits()
	if d.MaxImageBytes != 20<<20 || d.MaxImagePixels != 16777216 || d.MaxAudioBytes != 25<<20 || d.MaxAudioSeconds != 300 {
		t.Errorf("%+v", d)
	}
	if (Limits{MaxImageBytes: -1}).WithDefaults() != d {
		t.Error("zero and negative fields are not the defaults")
	}
	if MaxImageSide*MaxImageSide < d.MaxImagePixels {
		t.Error("the side bound is under the pixel bound's square")
	}
}
