package media

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"os"
	"runtime"
	"strings"
	"testing"
)

// allocated is the bytes f allocates, all goroutines together.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func decode(t *testing.T, data []byte, lim Limits) (Image, error) {
	t.Helper()
	return DecodeImage(context.Background(), data, lim)
}

// The repository's gradient: pixel (x, y) is (4x, 4y, 2(x+y)).
func TestGradient(t *testing.T) {
	data, err := os.ReadFile("../testdata/media/gradient-64.png")
	if err != nil {
		t.Fatal(err)
	}
	m, err := decode(t, data, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if m.W != 64 || m.H != 64 || len(m.RGB) != 64*64*3 {
		t.Fatalf("%d × %d, %d bytes", m.W, m.H, len(m.RGB))
	}
	for y := 0; y < 64; y++ {
		for x := 0; x < 64; x++ {
			p := m.RGB[3*(64*y+x):]
			if p[0] != byte(4*x) || p[1] != byte(4*y) || p[2] != byte(2*(x+y)) {
				t.Fatalf("pixel (%d, %d) is %v, want %v", x, y, p[:3], []byte{byte(4 * x), byte(4 * y), byte(2 * (x + y))})
			}
		}
	}
}

// toRGB follows stb's rules for every image type Go's decoders return,
// and the ones no reference file reaches (CMYK, NYCbCrA, the fallback).
func TestToRGB(t *testing.T) {
	r := image.Rect(0, 0, 2, 1)
	nrgba := image.NewNRGBA(r)
	nrgba.SetNRGBA(0, 0, color.NRGBA{200, 100, 50, 0}) // straight: kept under alpha 0
	nrgba.SetNRGBA(1, 0, color.NRGBA{200, 100, 50, 128})
	nrgba64 := image.NewNRGBA64(r)
	nrgba64.SetNRGBA64(0, 0, color.NRGBA64{0xabff, 0x1280, 0x00ff, 0})
	nrgba64.SetNRGBA64(1, 0, color.NRGBA64{0xff00, 0x80ff, 0x7f80, 0x8000})
	rgba64 := image.NewRGBA64(r)
	rgba64.SetRGBA64(0, 0, color.RGBA64{0xabff, 0x1280, 0x00ff, 0xffff})
	rgba64.SetRGBA64(1, 0, color.RGBA64{0xff00, 0x80ff, 0x7f80, 0xffff})
	rgba := image.NewRGBA(r)
	rgba.SetRGBA(0, 0, color.RGBA{1, 2, 3, 255})
	rgba.SetRGBA(1, 0, color.RGBA{250, 128, 0, 255})
	gray := image.NewGray(r)
	gray.SetGray(0, 0, color.Gray{7})
	gray.SetGray(1, 0, color.Gray{200})
	gray16 := image.NewGray16(r)
	gray16.SetGray16(0, 0, color.Gray16{0x12ff})
	gray16.SetGray16(1, 0, color.Gray16{0xfe01})
	pal := image.NewPaletted(r, color.Palette{color.NRGBA{10, 20, 30, 0}, color.RGBA{40, 50, 60, 255}})
	pal.SetColorIndex(0, 0, 0)
	pal.SetColorIndex(1, 0, 5) // past the palette: black
	cmyk := image.NewCMYK(r)
	cmyk.SetCMYK(0, 0, color.CMYK{0, 0, 0, 0})
	cmyk.SetCMYK(1, 0, color.CMYK{255 - 200, 255 - 100, 255 - 50, 255 - 128})
	ycc := image.NewNYCbCrA(r, image.YCbCrSubsampleRatio444)
	ycc.Y[0], ycc.Cb[0], ycc.Cr[0], ycc.A[0] = 128, 128, 128, 0
	ycc.Y[1], ycc.Cb[1], ycc.Cr[1], ycc.A[1] = 81, 90, 240, 255
	alpha := image.NewAlpha(r) // the fallback: white at alpha 0x80 is white straight
	alpha.SetAlpha(0, 0, color.Alpha{0x80})
	alpha.SetAlpha(1, 0, color.Alpha{0xff})
	for _, c := range []struct {
		name string
		m    image.Image
		want []byte
	}{
		{"NRGBA", nrgba, []byte{200, 100, 50, 200, 100, 50}},
		{"NRGBA64", nrgba64, []byte{0xab, 0x12, 0x00, 0xff, 0x80, 0x7f}},
		{"RGBA64", rgba64, []byte{0xab, 0x12, 0x00, 0xff, 0x80, 0x7f}},
		{"RGBA", rgba, []byte{1, 2, 3, 250, 128, 0}},
		{"Gray", gray, []byte{7, 7, 7, 200, 200, 200}},
		{"Gray16", gray16, []byte{0x12, 0x12, 0x12, 0xfe, 0xfe, 0xfe}},
		{"Paletted", pal, []byte{10, 20, 30, 0, 0, 0}},
		// stbi__blinn_8x8 of the stored (inverted) values: no ink is white;
		// 200 × 128 / 255 = 100.4.
		{"CMYK", cmyk, []byte{255, 255, 255, 100, 50, 25}},
		// stbi__YCbCr_to_RGB_row, alpha dropped: grey stays grey;
		// (81, 90, 240) is (238.5, 14.6, 14.2) in its fixed point.
		{"NYCbCrA", ycc, []byte{128, 128, 128, 238, 14, 14}},
		{"Alpha", alpha, []byte{255, 255, 255, 255, 255, 255}},
	} {
		if got := toRGB(c.m); !bytes.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// Every type image/png writes comes back as stb reads it: encoded with
// image/png, decoded, compared with the rules (straight alpha dropped,
// 16 bits to their high byte, grey replicated).
func TestPNGRoundTrip(t *testing.T) {
	const w, h = 5, 3
	r := image.Rect(0, 0, w, h)
	p := pattern(16)
	nrgba, nrgba64, gray16 := image.NewNRGBA(r), image.NewNRGBA64(r), image.NewGray16(r)
	want8, want16, wantGray := []byte{}, []byte{}, []byte{}
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			v := func(c int) uint16 { return uint16(p(x, y, c)) }
			a := v(3)
			if x == 1 {
				a = 0
			}
			nrgba.SetNRGBA(x, y, color.NRGBA{byte(v(0)), byte(v(1)), byte(v(2)), byte(a)})
			want8 = append(want8, byte(v(0)), byte(v(1)), byte(v(2)))
			nrgba64.SetNRGBA64(x, y, color.NRGBA64{v(0), v(1), v(2), a})
			want16 = append(want16, byte(v(0)>>8), byte(v(1)>>8), byte(v(2)>>8))
			gray16.SetGray16(x, y, color.Gray16{v(0)})
			wantGray = append(wantGray, byte(v(0)>>8), byte(v(0)>>8), byte(v(0)>>8))
		}
	}
	for _, c := range []struct {
		name string
		m    image.Image
		want []byte
	}{{"NRGBA", nrgba, want8}, {"NRGBA64", nrgba64, want16}, {"Gray16", gray16, wantGray}} {
		var b bytes.Buffer
		if err := png.Encode(&b, c.m); err != nil {
			t.Fatal(err)
		}
		m, err := decode(t, b.Bytes(), Limits{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if m.W != w || m.H != h || !bytes.Equal(m.RGB, c.want) {
			t.Errorf("%s: %d × %d %v, want %v", c.name, m.W, m.H, m.RGB, c.want)
		}
	}
}

// WebP, which stb cannot read: lossless pixels equal the PNG of the same
// picture; lossy ones are Go's YCbCr planes converted; an extended
// (VP8X) file decodes.
func TestWebP(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	lossless, err := decode(t, read("gopher-doc.1bpp.lossless.webp"), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := decode(t, read("gopher-doc.1bpp.png"), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if lossless.W != ref.W || lossless.H != ref.H || !bytes.Equal(lossless.RGB, ref.RGB) {
		t.Errorf("lossless WebP: %d × %d, differs from its PNG (%d × %d)", lossless.W, lossless.H, ref.W, ref.H)
	}

	vp8 := read("blue-purple-pink.lossy.webp")
	lossy, err := decode(t, vp8, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeImage(vp8, FormatWebP, 150, 100)
	if err != nil {
		t.Fatal(err)
	}
	if lossy.W != 150 || lossy.H != 100 || !bytes.Equal(lossy.RGB, appendYCbCr(nil, m.(*image.YCbCr))) {
		t.Errorf("lossy WebP: %d × %d, not its YCbCr planes converted", lossy.W, lossy.H)
	}
	// Against Go's own conversion (nearest chroma, more precision): close
	// on average (chroma edges differ), channel for channel.
	var diff [3]int
	for i := 0; i < len(lossy.RGB); i += 3 {
		c := color.NRGBAModel.Convert(m.At(i/3%150, i/3/150)).(color.NRGBA)
		diff[0] += abs(int(c.R) - int(lossy.RGB[i]))
		diff[1] += abs(int(c.G) - int(lossy.RGB[i+1]))
		diff[2] += abs(int(c.B) - int(lossy.RGB[i+2]))
	}
	for c, d := range diff {
		if mean := float64(d) / (150 * 100); mean > 2 {
			t.Errorf("lossy WebP channel %d is %.1f levels from Go's At on average", c, mean)
		}
	}

	// The same VP8 frame in an extended file of its size decodes the same.
	ext, err := decode(t, vp8x(150, 100, vp8[12:]), Limits{})
	if err != nil {
		t.Fatalf("VP8X: %v", err)
	}
	if !bytes.Equal(ext.RGB, lossy.RGB) {
		t.Error("VP8X: pixels differ from the simple file's")
	}
}

// vp8x is an extended WebP with canvas w × h and the chunks after it.
func vp8x(w, h int, chunks []byte) []byte {
	body := []byte("WEBPVP8X")
	body = binary.LittleEndian.AppendUint32(body, 10)
	body = append(body, 0, 0, 0, 0)
	body = append(body, byte(w-1), byte((w-1)>>8), byte((w-1)>>16), byte(h-1), byte((h-1)>>8), byte((h-1)>>16))
	body = append(body, chunks...)
	out := []byte("RIFF")
	out = binary.LittleEndian.AppendUint32(out, uint32(len(body)))
	return append(out, body...)
}

// A frame larger than its VP8X canvas would be decoded at the frame's size
// (webp.DecodeConfig reads the canvas): refused, without decoding.
func TestWebPFrameLargerThanCanvas(t *testing.T) {
	v := uint32(16383) | 16383<<14
	vp8l := []byte("VP8L")
	vp8l = binary.LittleEndian.AppendUint32(vp8l, 64)
	vp8l = append(vp8l, 0x2f)
	vp8l = binary.LittleEndian.AppendUint32(vp8l, v)
	vp8l = append(vp8l, make([]byte, 59)...)
	data := vp8x(16, 16, vp8l)
	var err error
	if a := allocated(func() { _, err = decode(t, data, Limits{}) }); a > 1<<20 {
		t.Errorf("%d bytes allocated", a)
	}
	var e *Error
	if !errors.As(err, &e) || !strings.Contains(e.Msg, "16384 × 16384") {
		t.Errorf("error %v, want its frame's size refused", err)
	}
}

// Bombs: a few hundred bytes declaring a huge image are refused from their
// header, allocating almost nothing.
func TestImageBombs(t *testing.T) {
	var jpg bytes.Buffer
	if err := jpeg.Encode(&jpg, image.NewGray(image.Rect(0, 0, 8, 8)), nil); err != nil {
		t.Fatal(err)
	}
	sof := bytes.Index(jpg.Bytes(), []byte{0xff, 0xc0})
	jpegOf := func(w, h int) []byte {
		b := bytes.Clone(jpg.Bytes())
		binary.BigEndian.PutUint16(b[sof+5:], uint16(h))
		binary.BigEndian.PutUint16(b[sof+7:], uint16(w))
		return b
	}
	ihdr := func(w, h int) []byte {
		b := encodePNG(pngSpec{w: 1, h: 1, depth: 8, colorType: 6, sample: pattern(8)})
		binary.BigEndian.PutUint32(b[16:], uint32(w))
		binary.BigEndian.PutUint32(b[20:], uint32(h))
		end := 8 + 8 + 13
		binary.BigEndian.PutUint32(b[end:], crc(b[12:end]))
		return b
	}
	gifOf := func(w, h int) []byte {
		b := bytes.Clone(refGIFs()["gif-full"])
		binary.LittleEndian.PutUint16(b[6:], uint16(w))
		binary.LittleEndian.PutUint16(b[8:], uint16(h))
		return b
	}
	webpOf := func(w, h int) []byte { return vp8x(w, h, nil) }
	for _, c := range []struct {
		name  string
		data  []byte
		limit string
		msg   string
	}{
		{"PNG 100000²", ihdr(100000, 100000), "", "100000 × 100000 pixels: a side may be at most 16384"},
		{"PNG 16000²", ihdr(16000, 16000), "max-image-pixels", "image is 16000 × 16000 pixels, over --max-image-pixels 16777216"},
		{"PNG 20000 × 1", ihdr(20000, 1), "", "a side may be at most 16384"},
		{"GIF 65535²", gifOf(65535, 65535), "", "a side may be at most 16384"},
		{"GIF 5000²", gifOf(5000, 5000), "max-image-pixels", "over --max-image-pixels"},
		{"JPEG 65000²", jpegOf(65000, 65000), "", "a side may be at most 16384"},
		{"JPEG 8000²", jpegOf(8000, 8000), "max-image-pixels", "over --max-image-pixels"},
		{"WebP 100000²", webpOf(100000, 100000), "", "a side may be at most 16384"},
		{"WebP 10000²", webpOf(10000, 10000), "max-image-pixels", "over --max-image-pixels"},
		{"PNG 0 high", ihdr(10, 0), "", "not a valid PNG"},
	} {
		if len(c.data) > 1000 {
			t.Fatalf("%s: %d bytes", c.name, len(c.data))
		}
		var err error
		a := allocated(func() { _, err = decode(t, c.data, Limits{}) })
		var e *Error
		if !errors.As(err, &e) || e.Limit != c.limit || !strings.Contains(e.Msg, c.msg) || e.Kind != KindImage {
			t.Errorf("%s: error %#v, want limit %q and %q", c.name, err, c.limit, c.msg)
		}
		if a > 64<<10 {
			t.Errorf("%s: %d bytes allocated", c.name, a)
		}
		t.Logf("%s (%d bytes): %d bytes allocated: %v", c.name, len(c.data), a, err)
	}
}

func crc(b []byte) uint32 {
	out := pngChunk(nil, string(b[:4]), b[4:])
	return binary.BigEndian.Uint32(out[len(out)-4:])
}

// A PNG within the pixel bound whose zlib stream expands far past its
// pixels is refused, having allocated about its pixels, not its stream.
func TestPNGZlibBomb(t *testing.T) {
	const w, h = 1000, 1000
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, zlib.BestCompression)
	zero := make([]byte, 1<<20)
	for range 256 { // 256 MiB of zeros: 256 times the image
		zw.Write(zero)
	}
	zw.Close()
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr, w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 0
	data := pngChunk([]byte("\x89PNG\r\n\x1a\n"), "IHDR", ihdr)
	data = pngChunk(data, "IDAT", z.Bytes())
	data = pngChunk(data, "IEND", nil)
	var err error
	a := allocated(func() { _, err = decode(t, data, Limits{}) })
	if err == nil || !strings.Contains(err.Error(), "too much pixel data") {
		t.Errorf("error %v, want too much pixel data", err)
	}
	// The gray image (1 byte a pixel), a row buffer and the decoder's.
	if a > 2*w*h+1<<20 {
		t.Errorf("%d bytes allocated for a %d × %d grey PNG of %d bytes", a, w, h, len(data))
	}
	t.Logf("%d-byte PNG inflating to 256 MiB: %d bytes allocated", len(data), a)
}

// An image declaring a size its data does not fill allocates its declared
// (bounded) size, no more.
func TestTruncatedImages(t *testing.T) {
	full := refPNGs()["rgba8"]
	for n := 0; n < len(full); n += 7 {
		if _, err := decode(t, full[:n], Limits{}); err == nil {
			t.Fatalf("PNG cut at %d of %d bytes decoded", n, len(full))
		}
	}
	gradient, _ := os.ReadFile("../testdata/media/gradient-64.png")
	big := bytes.Clone(gradient)
	binary.BigEndian.PutUint32(big[16:], 4096)
	binary.BigEndian.PutUint32(big[20:], 4096)
	binary.BigEndian.PutUint32(big[29:], crc(big[12:29]))
	var err error
	a := allocated(func() { _, err = decode(t, big, Limits{}) })
	if err == nil {
		t.Fatal("4096² PNG of 64² data decoded")
	}
	if a > 4096*4096*4+1<<20 {
		t.Errorf("%d bytes allocated", a)
	}
	t.Logf("4096² RGB PNG with 375 bytes of data: %d bytes allocated: %v", a, err)
}

func TestImageErrors(t *testing.T) {
	gradient, _ := os.ReadFile("../testdata/media/gradient-64.png")
	wav := encodeWAV(wavSpec{tag: 1, channels: 1, rate: 16000, bits: 16, frames: 2000})
	for _, c := range []struct {
		name  string
		data  []byte
		lim   Limits
		limit string
		msg   string
	}{
		{"bytes", gradient, Limits{MaxImageBytes: 374}, "max-image-bytes", "image is 375 bytes, over --max-image-bytes 374"},
		{"pixels", gradient, Limits{MaxImagePixels: 4095}, "max-image-pixels", "image is 64 × 64 pixels, over --max-image-pixels 4095"},
		{"empty", nil, Limits{}, "", "image format not recognised: want PNG, JPEG, GIF or WebP"},
		{"text", []byte("hello, world"), Limits{}, "", "image format not recognised"},
		{"audio", wav, Limits{}, "", "image format not recognised"},
		{"BMP", []byte("BM\x00\x00\x00\x00\x00\x00\x00\x00"), Limits{}, "", "image format not recognised"},
		{"bad PNG", []byte("\x89PNG\r\n\x1a\nnonsense"), Limits{}, "", "image is not a valid PNG"},
	} {
		_, err := decode(t, c.data, c.lim)
		var e *Error
		if !errors.As(err, &e) || e.Limit != c.limit || !strings.Contains(e.Msg, c.msg) {
			t.Errorf("%s: error %v, want limit %q and %q", c.name, err, c.limit, c.msg)
		}
	}
	if _, err := decode(t, gradient, Limits{MaxImageBytes: 375, MaxImagePixels: 4096}); err != nil {
		t.Errorf("at the bounds: %v", err)
	}
}

// A decode waits for a slot, and gives up when its context is done.
func TestDecodeSlots(t *testing.T) {
	gradient, _ := os.ReadFile("../testdata/media/gradient-64.png")
	for range cap(decodeSlots) {
		decodeSlots <- struct{}{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := DecodeImage(ctx, gradient, Limits{})
	for range cap(decodeSlots) {
		<-decodeSlots
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("with every slot taken: %v, want context.Canceled", err)
	}
	// Refused before it waits: a bad image never takes a slot.
	for range cap(decodeSlots) {
		decodeSlots <- struct{}{}
	}
	_, err = DecodeImage(ctx, []byte("nonsense"), Limits{})
	for range cap(decodeSlots) {
		<-decodeSlots
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Errorf("bad image with every slot taken: %v", err)
	}
	if _, err := DecodeImage(context.Background(), gradient, Limits{}); err != nil {
		t.Errorf("slots not given back: %v", err)
	}
}

func TestImageSize(t *testing.T) {
	gradient, _ := os.ReadFile("../testdata/media/gradient-64.png")
	w, h, format, err := ImageSize(gradient[:40], Limits{}) // IHDR is enough
	if err != nil || w != 64 || h != 64 || format != FormatPNG {
		t.Errorf("%d × %d %q %v", w, h, format, err)
	}
}

// A JPEG of many tiny scans, each of which costs Go's decoder a pass over
// the image, is refused before it is decoded; one of as many scans as
// taken decodes.
func TestJPEGScanBomb(t *testing.T) {
	small := progressiveJPEG(64, maxJPEGScans)
	if _, err := decode(t, small, Limits{}); err != nil {
		t.Fatalf("%d scans: %v", maxJPEGScans, err)
	}
	bomb := progressiveJPEG(4096, 2000) // 70 KB, about 20 s of decoding
	var err error
	a := allocated(func() { _, err = decode(t, bomb, Limits{}) })
	var e *Error
	if !errors.As(err, &e) || !strings.Contains(e.Msg, "more than 100 scans") {
		t.Errorf("%d-byte JPEG of 2000 scans: %v", len(bomb), err)
	}
	if a > 64<<10 {
		t.Errorf("%d bytes allocated", a)
	}
	if _, err := decode(t, progressiveJPEG(64, maxJPEGScans+1), Limits{}); err == nil {
		t.Errorf("%d scans taken", maxJPEGScans+1)
	}
	// Scans are counted as the decoder meets them: not inside other
	// segments (an EXIF thumbnail's), nor in entropy-coded data.
	app1 := append([]byte{0xff, 0xe1, 0, 8}, 0xff, 0xda, 0, 2, 0xff, 0xda)
	withApp := append(append(bytes.Clone(small[:2]), app1...), small[2:]...)
	if n := jpegScans(withApp, 1000); n != maxJPEGScans {
		t.Errorf("with an APP1 holding SOS markers: %d scans counted, want %d", n, maxJPEGScans)
	}
	if _, err := decode(t, withApp, Limits{}); err != nil {
		t.Errorf("with an APP1 holding SOS markers: %v", err)
	}
	if n := jpegScans([]byte{0xff, 0xd8, 0xff, 0xda, 0, 2, 0x12, 0xff, 0x00, 0xff, 0xd0, 0x34, 0xff, 0xff, 0xda, 0, 2, 0xff, 0xd9, 0xff, 0xda}, 1000); n != 2 {
		t.Errorf("%d scans counted, want 2", n)
	}
}
