package media

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"runtime"

	"golang.org/x/image/webp"
)

// Image is a decoded picture as mtmd_bitmap_init takes it: W × H pixels,
// rows top to bottom, 3 bytes (R, G, B) a pixel, as stb_image's
// stbi_load(..., 3) gives them. EXIF orientation is ignored, as stb does.
type Image struct {
	W, H int
	RGB  []byte
}

// decodeSlots bounds the image decodes running at once, process-wide, so
// that the memory they take together is at most len(decodeSlots) times
// one bounded decode: GOMAXPROCS at start, at most 4. Within
// DefaultLimits (16.7 M pixels) one decode allocates, measured at 4096 ×
// 4096 with the RGB result: 112 MB for an 8-bit RGB PNG (Go decodes it
// as RGBA), 176 MB for a 16-bit RGBA one, 304 MB interlaced (its passes
// too), 72 MB for a baseline 4:2:0 JPEG; a progressive 4:4:4 JPEG's
// coefficients take 12 bytes a pixel more. A header declaring a size its
// data does not fill costs the same, as the image is allocated before
// its data runs out.
var decodeSlots = make(chan struct{}, min(runtime.GOMAXPROCS(0), 4))

// DecodeImage decodes a PNG, JPEG, GIF (its first frame) or WebP image.
// It refuses, in this order and before decoding: more bytes than
// lim.MaxImageBytes; bytes that are not one of those formats; a header
// declaring a side under 1 or over MaxImageSide, or more than
// lim.MaxImagePixels pixels. Only then does it decode, waiting for one of
// the process's decode slots (see decodeSlots) until ctx is done, when it
// returns ctx's error. Every other error is an *Error.
func DecodeImage(ctx context.Context, data []byte, lim Limits) (Image, error) {
	lim = lim.WithDefaults()
	if n := int64(len(data)); n > lim.MaxImageBytes {
		return Image{}, overLimit(KindImage, "max-image-bytes", "image is %d bytes, over --max-image-bytes %d", n, lim.MaxImageBytes)
	}
	w, h, format, err := ImageSize(data, lim)
	if err != nil {
		return Image{}, err
	}
	if format == FormatJPEG {
		if n := jpegScans(data, maxJPEGScans); n > maxJPEGScans {
			return Image{}, invalid(KindImage, nil, "image is a JPEG of more than %d scans", maxJPEGScans)
		}
	}
	select {
	case decodeSlots <- struct{}{}:
	case <-ctx.Done():
		return Image{}, ctx.Err()
	}
	defer func() { <-decodeSlots }()
	m, err := decodeImage(data, format, w, h)
	if err != nil {
		return Image{}, invalid(KindImage, err, "image is not a valid %s: %v", formatName(format), err)
	}
	if b := m.Bounds(); b.Dx() != w || b.Dy() != h {
		return Image{}, invalid(KindImage, nil, "image decodes to %d × %d pixels where its header says %d × %d", b.Dx(), b.Dy(), w, h)
	}
	return Image{W: w, H: h, RGB: toRGB(m)}, nil
}

// ImageSize reads an image's format (FormatPNG, FormatJPEG, FormatGIF or
// FormatWebP) and size from its header alone, with DecodeImage's checks
// but not its byte bound: the dimensions are checked against lim, and an
// unknown format, a malformed header, a side under 1 or over MaxImageSide
// are errors (*Error). It allocates little whatever the header says;
// dialects use it to count a placeholder image's tokens.
func ImageSize(data []byte, lim Limits) (w, h int, format string, err error) {
	lim = lim.WithDefaults()
	kind, format := Sniff(data)
	if kind != KindImage {
		return 0, 0, "", invalid(KindImage, nil, "image format not recognised: want PNG, JPEG, GIF or WebP")
	}
	var cfg image.Config
	r := bytes.NewReader(data)
	switch format {
	case FormatPNG:
		cfg, err = png.DecodeConfig(r)
	case FormatJPEG:
		cfg, err = jpeg.DecodeConfig(r)
	case FormatGIF:
		cfg, err = gif.DecodeConfig(r)
	case FormatWebP:
		cfg, err = webp.DecodeConfig(r)
		if err == nil {
			err = checkWebPFrame(data, cfg.Width, cfg.Height)
		}
	}
	if err != nil {
		return 0, 0, "", invalid(KindImage, err, "image is not a valid %s: %v", formatName(format), err)
	}
	w, h = cfg.Width, cfg.Height
	switch {
	case w < 1 || h < 1:
		return 0, 0, "", invalid(KindImage, nil, "image is %d × %d pixels: a side must be at least 1", w, h)
	case w > MaxImageSide || h > MaxImageSide:
		return 0, 0, "", invalid(KindImage, nil, "image is %d × %d pixels: a side may be at most %d", w, h, MaxImageSide)
	case int64(w)*int64(h) > lim.MaxImagePixels:
		return 0, 0, "", overLimit(KindImage, "max-image-pixels", "image is %d × %d pixels, over --max-image-pixels %d", w, h, lim.MaxImagePixels)
	}
	return w, h, format, nil
}

// formatName is format as its name is written: "PNG".
func formatName(format string) string {
	switch format {
	case FormatWebP:
		return "WebP"
	case FormatOgg:
		return "Ogg"
	case "":
		return "image"
	}
	b := []byte(format)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// decodeImage decodes data, whose header has been checked and declares
// w × h pixels. A panic in a decoder (they are not ours) is an error.
func decodeImage(data []byte, format string, w, h int) (m image.Image, err error) {
	defer func() {
		if p := recover(); p != nil {
			m, err = nil, fmt.Errorf("decoder failed: %v", p)
		}
	}()
	r := bytes.NewReader(data)
	switch format {
	case FormatPNG:
		return png.Decode(r)
	case FormatJPEG:
		return jpeg.Decode(r)
	case FormatGIF:
		f, err := gif.Decode(r)
		if err != nil {
			return nil, err
		}
		return gifCanvas(data, w, h, f.(*image.Paletted))
	case FormatWebP:
		return webp.Decode(r)
	}
	return nil, fmt.Errorf("unknown format %q", format)
}

// maxJPEGScans bounds a JPEG's scans. Go's decoder goes over every block
// of the image for each scan, however little data the scan holds: an AC
// scan of one end-of-band run is about 30 bytes, and costs about 9 ms at
// 4096 × 4096, so 20 MiB of them would take hours. Encoders write about
// 10 (libjpeg's and mozjpeg's progressive scripts), at most a few dozen.
const maxJPEGScans = 100

// jpegScans counts a JPEG's scans (SOS markers), as Go's decoder meets them,
// up to max + 1: it walks the segments by their lengths, and skips
// entropy-coded data (any byte but 0xFF, stuffed 0xFF 0x00, RSTn) and fill
// bytes.
func jpegScans(b []byte, max int) int {
	n := 0
	for i := 2; i+1 < len(b); {
		if b[i] != 0xff {
			i++
			continue
		}
		switch m := b[i+1]; {
		case m == 0xff:
			i++
			continue
		case m == 0x00, 0xd0 <= m && m <= 0xd7:
			i += 2
			continue
		case m == 0xd9: // EOI
			return n
		case m == 0xda: // SOS
			if n++; n > max {
				return n
			}
		}
		if i+4 > len(b) {
			break
		}
		i += 2 + int(binary.BigEndian.Uint16(b[i+2:]))
	}
	return n
}

// checkWebPFrame checks that a WebP's image, a VP8 or VP8L chunk, is the
// size of the canvas its header declares (w × h). webp.DecodeConfig reads
// an extended (VP8X) file's canvas size, but webp.Decode decodes the
// frame at the size the frame declares, which a crafted file could make
// far larger.
func checkWebPFrame(data []byte, w, h int) error {
	for off := 12; off+8 <= len(data); {
		id := string(data[off : off+4])
		size := int64(binary.LittleEndian.Uint32(data[off+4:]))
		body := data[off+8:]
		if int64(len(body)) > size {
			body = body[:size]
		}
		fw, fh := -1, -1
		switch id {
		case "VP8 ":
			// A frame tag (3 bytes), the start code 9d 01 2a, then
			// 14-bit width and height with 2 bits of scale each.
			if len(body) >= 10 && body[3] == 0x9d && body[4] == 0x01 && body[5] == 0x2a {
				fw = int(binary.LittleEndian.Uint16(body[6:]) & 0x3fff)
				fh = int(binary.LittleEndian.Uint16(body[8:]) & 0x3fff)
			}
		case "VP8L":
			// The signature 0x2f, then 14 bits of width - 1 and 14
			// of height - 1, least significant bit first.
			if len(body) >= 5 && body[0] == 0x2f {
				v := binary.LittleEndian.Uint32(body[1:])
				fw, fh = int(v&0x3fff)+1, int(v>>14&0x3fff)+1
			}
		default:
			off += 8 + int(size) + int(size&1)
			if size > int64(len(data)) {
				return nil // truncated: the decoder will say so
			}
			continue
		}
		if fw < 0 {
			return nil // malformed: the decoder will say so
		}
		if fw != w || fh != h {
			return fmt.Errorf("its frame is %d × %d pixels where its canvas is %d × %d", fw, fh, w, h)
		}
		return nil
	}
	return nil
}

// gifCanvas is a GIF's first frame f on its w × h logical screen, as stb_image
// composes it (stbi__gif_load_next): the screen starts transparent black;
// the frame's pixels are drawn but for its transparent ones; and when the
// background colour index is not 0, the pixels outside the frame get the
// global palette's background colour with its red and blue swapped (stb
// copies its palette entry, which it keeps as B, G, R, A, without
// reordering it).
func gifCanvas(data []byte, w, h int, f *image.Paletted) (*image.RGBA, error) {
	canvas := image.NewRGBA(image.Rect(0, 0, w, h))
	if flags, bg := data[10], int(data[11]); bg > 0 {
		var c [4]byte
		if n := 2 << (flags & 7); flags&0x80 != 0 && bg < n && 13+3*bg+3 <= len(data) {
			p := data[13+3*bg:]
			c = [4]byte{p[2], p[1], p[0], 0xff}
		} else {
			c[3] = 0xff
		}
		for i := 0; i < len(canvas.Pix); i += 4 {
			copy(canvas.Pix[i:i+4], c[:])
		}
	}
	fb := f.Bounds()
	if !fb.In(canvas.Bounds()) {
		return nil, fmt.Errorf("frame %v is outside the %d × %d screen", fb, w, h)
	}
	// The transparent index's entry is color.RGBA{} in Go's palette, and
	// stb leaves such a pixel 0: every entry can be copied.
	pal := paletteRGBA(f.Palette)
	for y := fb.Min.Y; y < fb.Max.Y; y++ {
		src := f.Pix[f.PixOffset(fb.Min.X, y):][:fb.Dx()]
		dst := canvas.Pix[canvas.PixOffset(fb.Min.X, y):]
		for i, ix := range src {
			copy(dst[4*i:4*i+4], pal[ix][:])
		}
	}
	return canvas, nil
}

// paletteRGBA is p as 256 straight-alpha colours, black past its end.
func paletteRGBA(p color.Palette) *[256][4]byte {
	var t [256][4]byte
	for i, c := range p {
		if i == 256 {
			break
		}
		n := color.NRGBAModel.Convert(c).(color.NRGBA)
		t[i] = [4]byte{n.R, n.G, n.B, n.A}
	}
	return &t
}

// rgbRows appends the red, green and blue of h rows of w pixels of px
// bytes each (4: 8-bit RGBA; 8: 16-bit RGBA, big-endian, of which the
// high bytes), stride bytes apart in pix.
func rgbRows(out, pix []byte, stride, w, h, px int) []byte {
	c := px / 4
	for y := range h {
		row := pix[y*stride:][:px*w]
		for i := 0; i < len(row); i += px {
			out = append(out, row[i], row[i+c], row[i+2*c])
		}
	}
	return out
}

// toRGB is m's pixels as stb_image gives them with 3 channels (stbi_load
// with req_comp 3, stbi__convert_format): alpha is dropped without
// premultiplying (stb keeps straight alpha, as PNG stores it), grey is
// copied to R, G and B, and 16-bit samples keep their high byte
// (stbi__convert_16_to_8: v >> 8).
func toRGB(m image.Image) []byte {
	b := m.Bounds()
	w, h := b.Dx(), b.Dy()
	out := make([]byte, 0, 3*w*h)
	switch m := m.(type) {
	case *image.NRGBA:
		out = rgbRows(out, m.Pix[m.PixOffset(b.Min.X, b.Min.Y):], m.Stride, w, h, 4)
	case *image.RGBA:
		// Only opaque images come as RGBA (PNG truecolour without
		// tRNS; a GIF canvas), where premultiplied is straight.
		out = rgbRows(out, m.Pix[m.PixOffset(b.Min.X, b.Min.Y):], m.Stride, w, h, 4)
	case *image.NRGBA64:
		out = rgbRows(out, m.Pix[m.PixOffset(b.Min.X, b.Min.Y):], m.Stride, w, h, 8)
	case *image.RGBA64:
		out = rgbRows(out, m.Pix[m.PixOffset(b.Min.X, b.Min.Y):], m.Stride, w, h, 8)
	case *image.Gray:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for _, v := range m.Pix[m.PixOffset(b.Min.X, y):][:w] {
				out = append(out, v, v, v)
			}
		}
	case *image.Gray16:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			row := m.Pix[m.PixOffset(b.Min.X, y):][:2*w]
			for i := 0; i < len(row); i += 2 {
				out = append(out, row[i], row[i], row[i])
			}
		}
	case *image.Paletted:
		pal := paletteRGBA(m.Palette)
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for _, ix := range m.Pix[m.PixOffset(b.Min.X, y):][:w] {
				out = append(out, pal[ix][0], pal[ix][1], pal[ix][2])
			}
		}
	case *image.YCbCr:
		out = appendYCbCr(out, m)
	case *image.NYCbCrA:
		out = appendYCbCr(out, &m.YCbCr)
	case *image.CMYK:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			row := m.Pix[m.PixOffset(b.Min.X, y):][:4*w]
			for i := 0; i < len(row); i += 4 {
				// Go inverts an Adobe CMYK JPEG's samples; stb
				// takes them as stored (inverted) and multiplies
				// by K.
				k := 255 - row[i+3]
				out = append(out, blinn(255-row[i], k), blinn(255-row[i+1], k), blinn(255-row[i+2], k))
			}
		}
	default:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				c := color.NRGBAModel.Convert(m.At(x, y)).(color.NRGBA)
				out = append(out, c.R, c.G, c.B)
			}
		}
	}
	return out
}

// appendYCbCr appends m's pixels converted to RGB as stb_image's JPEG
// decoder does (load_jpeg_image): subsampled chroma is upsampled by its
// row resamplers (stbi__resample_row_hv_2 for 4:2:0, _h_2 for 4:2:2, _v_2
// for 4:4:0, nearest for 4:1:1 and 4:1:0), and each pixel converted with
// its fixed-point stbi__YCbCr_to_RGB_row. Go's IDCT is not stb's, so a JPEG
// still differs from stb's by a level here and there (about one sample in
// forty in a noisy picture, by one).
func appendYCbCr(out []byte, m *image.YCbCr) []byte {
	hs, vs := subsampling(m.SubsampleRatio)
	b := m.Bounds()
	w, h := b.Dx(), b.Dy()
	wl, rows := (w+hs-1)/hs, (h+vs-1)/vs
	if hs == 0 || b.Min != (image.Point{}) || len(m.Y) < (h-1)*m.YStride+w ||
		len(m.Cb) < (rows-1)*m.CStride+wl || len(m.Cr) < (rows-1)*m.CStride+wl {
		// Not as the decoders make them: convert pixel by pixel.
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				yi, ci := m.YOffset(x, y), m.COffset(x, y)
				r, g, bl := color.YCbCrToRGB(m.Y[yi], m.Cb[ci], m.Cr[ci])
				out = append(out, r, g, bl)
			}
		}
		return out
	}
	cbBuf, crBuf := make([]byte, w+3), make([]byte, w+3)
	ystep, line0, line1, ypos := vs>>1, 0, 0, 0
	for j := 0; j < h; j++ {
		near, far := line0, line1
		if ystep >= vs>>1 {
			near, far = line1, line0
		}
		cb := resampleRow(cbBuf, m.Cb[near*m.CStride:][:wl], m.Cb[far*m.CStride:][:wl], hs, vs)
		cr := resampleRow(crBuf, m.Cr[near*m.CStride:][:wl], m.Cr[far*m.CStride:][:wl], hs, vs)
		if ystep++; ystep >= vs {
			ystep, line0 = 0, line1
			if ypos++; ypos < rows {
				line1++
			}
		}
		for i, y := range m.Y[j*m.YStride:][:w] {
			out = stbYCbCrToRGB(out, y, cb[i], cr[i])
		}
	}
	return out
}

// subsampling is r's horizontal and vertical chroma subsampling factors,
// or 0, 0 for a ratio Go does not name.
func subsampling(r image.YCbCrSubsampleRatio) (hs, vs int) {
	switch r {
	case image.YCbCrSubsampleRatio444:
		return 1, 1
	case image.YCbCrSubsampleRatio422:
		return 2, 1
	case image.YCbCrSubsampleRatio420:
		return 2, 2
	case image.YCbCrSubsampleRatio440:
		return 1, 2
	case image.YCbCrSubsampleRatio411:
		return 4, 1
	case image.YCbCrSubsampleRatio410:
		return 4, 2
	}
	return 0, 0
}

// resampleRow is stb_image's chroma row upsampling: near is the chroma
// row nearer the output row, far the other; it returns hs × len(near)
// samples (in buf when it computes them).
func resampleRow(buf, near, far []byte, hs, vs int) []byte {
	w := len(near)
	div4 := func(x int) byte { return byte(x >> 2) }
	switch {
	case hs == 1 && vs == 1:
		return near
	case hs == 1 && vs == 2: // stbi__resample_row_v_2
		for i := range w {
			buf[i] = div4(3*int(near[i]) + int(far[i]) + 2)
		}
	case hs == 2 && vs == 1: // stbi__resample_row_h_2
		if w == 1 {
			buf[0], buf[1] = near[0], near[0]
			return buf
		}
		buf[0] = near[0]
		buf[1] = div4(3*int(near[0]) + int(near[1]) + 2)
		i := 1
		for ; i < w-1; i++ {
			n := 3*int(near[i]) + 2
			buf[2*i] = div4(n + int(near[i-1]))
			buf[2*i+1] = div4(n + int(near[i+1]))
		}
		buf[2*i] = div4(3*int(near[w-2]) + int(near[w-1]) + 2)
		buf[2*i+1] = near[w-1]
	case hs == 2 && vs == 2: // stbi__resample_row_hv_2 (and its SIMD twin)
		if w == 1 {
			buf[0] = div4(3*int(near[0]) + int(far[0]) + 2)
			buf[1] = buf[0]
			return buf
		}
		t1 := 3*int(near[0]) + int(far[0])
		buf[0] = div4(t1 + 2)
		for i := 1; i < w; i++ {
			t0 := t1
			t1 = 3*int(near[i]) + int(far[i])
			buf[2*i-1] = byte((3*t0 + t1 + 8) >> 4)
			buf[2*i] = byte((3*t1 + t0 + 8) >> 4)
		}
		buf[2*w-1] = div4(t1 + 2)
	default: // stbi__resample_row_generic: nearest
		for i, v := range near {
			for j := range hs {
				buf[i*hs+j] = v
			}
		}
	}
	return buf
}

// The fixed-point factors of stbi__YCbCr_to_RGB_row,
// stbi__float2fixed(x) = (int)(x × 4096 + 0.5) << 8.
var (
	crR = stbFixed(1.40200)
	crG = -stbFixed(0.71414)
	cbG = -stbFixed(0.34414)
	cbB = stbFixed(1.77200)
)

func stbFixed(x float32) int32 { return int32(x*4096+0.5) << 8 }

// stbYCbCrToRGB appends one pixel converted as stbi__YCbCr_to_RGB_row.
func stbYCbCrToRGB(out []byte, y, cb, cr byte) []byte {
	yf := int32(y)<<20 + 1<<19
	icr, icb := int32(cr)-128, int32(cb)-128
	r := (yf + icr*crR) >> 20
	g := (yf + icr*crG + (icb*cbG)&^0xffff) >> 20
	b := (yf + icb*cbB) >> 20
	return append(out, clamp255(r), clamp255(g), clamp255(b))
}

func clamp255(v int32) byte {
	return byte(min(max(v, 0), 255))
}

// blinn is stbi__blinn_8x8, x × y / 255 rounded, which stb_image uses to
// apply an Adobe CMYK JPEG's K.
func blinn(x, y byte) byte {
	t := uint32(x)*uint32(y) + 128
	return byte((t + t>>8) >> 8)
}
