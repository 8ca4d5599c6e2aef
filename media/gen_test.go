package media

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"math"
)

// This file makes the test media: PNGs of every colour type and depth
// written byte by byte (image/png's encoder writes only some), GIFs and
// JPEGs from the standard encoders, and WAVs of every sample format. The
// reference ones are written to testdata/ref by TestWriteRefInputs.

// pngSpec is a PNG to write: its IHDR fields, a palette and tRNS chunk,
// and its samples (in colour type order, 16-bit ones as one value each).
type pngSpec struct {
	w, h, depth, colorType int
	interlace              bool
	plte, trns             []byte
	sample                 func(x, y, c int) int
}

// channels is the samples a pixel of colour type ct has.
func channels(ct int) int {
	return map[int]int{0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[ct]
}

// adam7 is the interlace passes: x0, y0, dx, dy.
var adam7 = [7][4]int{{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4}, {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}}

// encodePNG writes s unfiltered (filter 0 on every row).
func encodePNG(s pngSpec) []byte {
	var raw bytes.Buffer
	row := func(xs []int, y int) {
		raw.WriteByte(0)
		nc := channels(s.colorType)
		var bits, acc int
		for _, x := range xs {
			for c := 0; c < nc; c++ {
				v := s.sample(x, y, c)
				switch {
				case s.depth == 16:
					raw.WriteByte(byte(v >> 8))
					raw.WriteByte(byte(v))
				case s.depth == 8:
					raw.WriteByte(byte(v))
				default:
					acc = acc<<s.depth | v&(1<<s.depth-1)
					bits += s.depth
					if bits == 8 {
						raw.WriteByte(byte(acc))
						acc, bits = 0, 0
					}
				}
			}
		}
		if bits > 0 {
			raw.WriteByte(byte(acc << (8 - bits)))
		}
	}
	passes := [][4]int{{0, 0, 1, 1}}
	if s.interlace {
		passes = adam7[:]
	}
	for _, p := range passes {
		var xs []int
		for x := p[0]; x < s.w; x += p[2] {
			xs = append(xs, x)
		}
		if len(xs) == 0 {
			continue
		}
		for y := p[1]; y < s.h; y += p[3] {
			row(xs, y)
		}
	}
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write(raw.Bytes())
	zw.Close()
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr, uint32(s.w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(s.h))
	ihdr[8], ihdr[9] = byte(s.depth), byte(s.colorType)
	if s.interlace {
		ihdr[12] = 1
	}
	out := []byte("\x89PNG\r\n\x1a\n")
	out = pngChunk(out, "IHDR", ihdr)
	if s.plte != nil {
		out = pngChunk(out, "PLTE", s.plte)
	}
	if s.trns != nil {
		out = pngChunk(out, "tRNS", s.trns)
	}
	out = pngChunk(out, "IDAT", z.Bytes())
	return pngChunk(out, "IEND", nil)
}

// pngChunk appends a chunk with its length and CRC.
func pngChunk(out []byte, kind string, data []byte) []byte {
	out = binary.BigEndian.AppendUint32(out, uint32(len(data)))
	start := len(out)
	out = append(out, kind...)
	out = append(out, data...)
	return binary.BigEndian.AppendUint32(out, crc32.ChecksumIEEE(out[start:]))
}

// pattern is a sample in [0, 2^depth) that varies with x, y and the
// channel, its high and low bytes both.
func pattern(depth int) func(x, y, c int) int {
	return func(x, y, c int) int {
		v := uint32(x*2654435761+y*40503+c*97+x*y*7) ^ uint32(y*x*x)
		v ^= v >> 13
		v *= 0x5bd1e995
		v ^= v >> 15
		return int(v & (1<<depth - 1))
	}
}

// alphaPattern is pattern with the last channel (alpha) 0 on some pixels,
// whose colour then only straight alpha keeps.
func alphaPattern(depth, nc int) func(x, y, c int) int {
	p := pattern(depth)
	return func(x, y, c int) int {
		if c == nc-1 && (x+y)%5 == 0 {
			return 0
		}
		return p(x, y, c)
	}
}

// palette is n entries of distinct RGB.
func palette(n int) []byte {
	p := make([]byte, 3*n)
	for i := range p {
		p[i] = byte(i*67 + i/3*13)
	}
	return p
}

// refPNGs are the PNGs checked against stb_image.
func refPNGs() map[string][]byte {
	const w, h = 19, 13
	m := map[string][]byte{}
	add := func(name string, s pngSpec) {
		s.w, s.h = w, h
		if s.sample == nil {
			if s.colorType == 4 || s.colorType == 6 {
				s.sample = alphaPattern(s.depth, channels(s.colorType))
			} else {
				s.sample = pattern(s.depth)
			}
		}
		m[name] = encodePNG(s)
	}
	for _, d := range []int{1, 2, 4, 8, 16} {
		add("gray"+itoa(d), pngSpec{depth: d, colorType: 0})
	}
	add("graya8", pngSpec{depth: 8, colorType: 4})
	add("graya16", pngSpec{depth: 16, colorType: 4})
	add("rgb8", pngSpec{depth: 8, colorType: 2})
	add("rgb16", pngSpec{depth: 16, colorType: 2})
	add("rgba8", pngSpec{depth: 8, colorType: 6})
	add("rgba16", pngSpec{depth: 16, colorType: 6})
	for _, d := range []int{1, 2, 4, 8} {
		n := 1 << d
		if d == 8 {
			n = 200 // indices past the palette are out of range: avoid them
		}
		idx := pattern(d)
		add("pal"+itoa(d), pngSpec{depth: d, colorType: 3, plte: palette(n), sample: func(x, y, c int) int { return idx(x, y, c) % n }})
	}
	// tRNS: palette alphas (the rest opaque), a grey and an RGB colour key.
	idx := pattern(8)
	add("pal8-trns", pngSpec{depth: 8, colorType: 3, plte: palette(256), trns: []byte{0, 10, 128, 255, 0, 77},
		sample: func(x, y, c int) int { return idx(x, y, c) % 12 }})
	gray := pattern(8)
	add("gray8-trns", pngSpec{depth: 8, colorType: 0, trns: []byte{0, byte(gray(3, 4, 0))}})
	rgb := pattern(16)
	add("rgb16-trns", pngSpec{depth: 16, colorType: 2, trns: []byte{
		byte(rgb(5, 6, 0) >> 8), byte(rgb(5, 6, 0)), byte(rgb(5, 6, 1) >> 8), byte(rgb(5, 6, 1)), byte(rgb(5, 6, 2) >> 8), byte(rgb(5, 6, 2))}})
	add("rgba8-interlaced", pngSpec{depth: 8, colorType: 6, interlace: true})
	add("gray4-interlaced", pngSpec{depth: 4, colorType: 0, interlace: true})
	add("rgb16-interlaced", pngSpec{depth: 16, colorType: 2, interlace: true})
	return m
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// refGIFs are the GIFs checked against stb_image: a whole-screen frame on
// the global palette; a frame smaller than the screen with a background
// colour index (stb fills the rest with that colour, red and blue
// swapped); a frame with a local palette and a transparent index.
func refGIFs() map[string][]byte {
	m := map[string][]byte{}
	global := color.Palette{}
	for i := 0; i < 16; i++ {
		global = append(global, color.RGBA{byte(i * 16), byte(255 - i*9), byte(i * i), 255})
	}
	frame := func(r image.Rectangle, p color.Palette) *image.Paletted {
		f := image.NewPaletted(r, p)
		idx := pattern(8)
		for y := r.Min.Y; y < r.Max.Y; y++ {
			for x := r.Min.X; x < r.Max.X; x++ {
				f.SetColorIndex(x, y, uint8(idx(x, y, 0)%len(p)))
			}
		}
		return f
	}
	enc := func(g *gif.GIF) []byte {
		var b bytes.Buffer
		if err := gif.EncodeAll(&b, g); err != nil {
			panic(err)
		}
		return b.Bytes()
	}
	cfg := image.Config{ColorModel: global, Width: 21, Height: 15}
	m["gif-full"] = enc(&gif.GIF{Image: []*image.Paletted{frame(image.Rect(0, 0, 21, 15), global)}, Delay: []int{0}, Config: cfg})
	m["gif-bg"] = enc(&gif.GIF{Image: []*image.Paletted{frame(image.Rect(3, 2, 17, 11), global)}, Delay: []int{0}, Config: cfg, BackgroundIndex: 5})
	local := color.Palette{color.RGBA{200, 10, 30, 255}, color.RGBA{}, color.RGBA{5, 250, 100, 255}, color.RGBA{90, 90, 240, 255}}
	m["gif-local-transparent"] = enc(&gif.GIF{Image: []*image.Paletted{frame(image.Rect(4, 1, 20, 14), local)}, Delay: []int{0}, Config: cfg})
	return m
}

// refJPEGs are JPEGs compared with stb_image within a tolerance: Go's IDCT
// and chroma upsampling are not stb's.
func refJPEGs() map[string][]byte {
	const w, h = 37, 29
	rgb := image.NewRGBA(image.Rect(0, 0, w, h))
	gray := image.NewGray(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			// Smooth, so that the compression error is small.
			r := 128 + 100*math.Sin(float64(x)/6)
			g := 128 + 100*math.Cos(float64(y)/5)
			b := float64(x+y) * 3
			rgb.Set(x, y, color.RGBA{byte(r), byte(g), byte(b), 255})
			gray.SetGray(x, y, color.Gray{byte(r)})
		}
	}
	enc := func(m image.Image) []byte {
		var b bytes.Buffer
		if err := jpeg.Encode(&b, m, &jpeg.Options{Quality: 95}); err != nil {
			panic(err)
		}
		return b.Bytes()
	}
	// Flat 16 × 16 blocks (a 4:2:0 MCU each), whose DCTs are their DC
	// alone: Go's IDCT and stb's agree on them, so only the chroma
	// upsampling and colour conversion are left to differ.
	const bw, bh = 16 * 5, 16 * 3
	blocks := image.NewRGBA(image.Rect(0, 0, bw, bh))
	for y := 0; y < bh; y++ {
		for x := 0; x < bw; x++ {
			i := x/16 + 5*(y/16)
			blocks.Set(x, y, color.RGBA{byte(i * 53), byte(255 - i*31), byte(i * i * 7), 255})
		}
	}
	return map[string][]byte{"jpeg-420": enc(rgb), "jpeg-gray": enc(gray), "jpeg-blocks": enc(blocks)}
}

// wavSpec is a WAV to write.
type wavSpec struct {
	tag        uint16 // 1 PCM, 3 float
	extensible bool
	channels   int
	rate       int
	bits       int // container bits
	validBits  int // the fmt chunk's bits when not the container's (PCM)
	frames     int
	extra      bool  // a LIST chunk of odd size before fmt and one after
	claim      int64 // the data chunk's size field when not the data's
}

// encodeWAV writes s with a deterministic signal: a chirp, noise and
// both extremes of the range.
func encodeWAV(s wavSpec) []byte {
	bps := s.bits / 8
	data := make([]byte, 0, s.frames*s.channels*bps)
	seed := uint32(12345)
	for i := 0; i < s.frames; i++ {
		for c := 0; c < s.channels; c++ {
			seed = seed*1664525 + 1013904223
			noise := float64(int32(seed)) / (1 << 31)
			t := float64(i) / float64(s.rate)
			v := 0.6*math.Sin(2*math.Pi*(300+2000*t)*t*float64(c+1)) + 0.35*noise
			switch i % 97 {
			case 13:
				v = 1
			case 14:
				v = -1
			}
			data = appendSample(data, s, v)
		}
	}
	return wavBytes(s, data)
}

// appendSample appends v in [-1, 1] in s's sample format.
func appendSample(data []byte, s wavSpec, v float64) []byte {
	bps := s.bits / 8
	if s.tag == 3 {
		if bps == 4 {
			return binary.LittleEndian.AppendUint32(data, math.Float32bits(float32(v)))
		}
		return binary.LittleEndian.AppendUint64(data, math.Float64bits(v))
	}
	if bps == 1 {
		return append(data, byte(min(255, max(0, math.Round(v*127.5+127.5)))))
	}
	full := math.Ldexp(1, 8*bps-1)
	q := int64(min(full-1, max(-full, math.Round(v*full))))
	if s.validBits > 0 && s.validBits < s.bits {
		q &^= 1<<(s.bits-s.validBits) - 1 // low bits zero, as a 12-bit file has
	}
	for j := 0; j < bps; j++ {
		data = append(data, byte(q>>(8*j)))
	}
	return data
}

// wavBytes wraps sample data in a RIFF WAVE header for s.
func wavBytes(s wavSpec, data []byte) []byte {
	bits := s.bits
	if s.validBits > 0 {
		bits = s.validBits
	}
	var fmtc []byte
	fmtc = binary.LittleEndian.AppendUint16(fmtc, map[bool]uint16{false: s.tag, true: 0xfffe}[s.extensible])
	fmtc = binary.LittleEndian.AppendUint16(fmtc, uint16(s.channels))
	fmtc = binary.LittleEndian.AppendUint32(fmtc, uint32(s.rate))
	fmtc = binary.LittleEndian.AppendUint32(fmtc, uint32(s.rate*s.channels*s.bits/8))
	fmtc = binary.LittleEndian.AppendUint16(fmtc, uint16(s.channels*s.bits/8))
	fmtc = binary.LittleEndian.AppendUint16(fmtc, uint16(bits))
	if s.extensible {
		fmtc = binary.LittleEndian.AppendUint16(fmtc, 22)
		fmtc = binary.LittleEndian.AppendUint16(fmtc, uint16(bits))
		fmtc = binary.LittleEndian.AppendUint32(fmtc, 0)
		fmtc = binary.LittleEndian.AppendUint16(fmtc, s.tag)
		fmtc = append(fmtc, "\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"...)
	}
	body := []byte("WAVE")
	chunk := func(id string, b []byte, claim int64) {
		body = append(body, id...)
		if claim == 0 {
			claim = int64(len(b))
		}
		body = binary.LittleEndian.AppendUint32(body, uint32(claim))
		body = append(body, b...)
		if len(b)%2 == 1 && id != "data" {
			body = append(body, 0)
		}
	}
	if s.extra {
		chunk("LIST", []byte("INFOISFT\x05\x00\x00\x00test\x00"), 0)
	}
	chunk("fmt ", fmtc, 0)
	if s.extra {
		chunk("junk", []byte("odd"), 0)
	}
	chunk("data", data, s.claim)
	out := []byte("RIFF")
	out = binary.LittleEndian.AppendUint32(out, uint32(len(body)))
	return append(out, body...)
}

// refWAV is a WAV checked against miniaudio, and the rate it is decoded
// to.
type refWAV struct {
	spec wavSpec
	rate int
}

// refWAVs are the WAVs checked against miniaudio: each sample format,
// downmixes, and resampling down and up by several ratios.
func refWAVs() map[string]refWAV {
	const secs = 0.11
	f := func(rate int) int { return int(math.Ceil(secs * float64(rate))) }
	return map[string]refWAV{
		"u8-mono-16k":           {wavSpec{tag: 1, channels: 1, rate: 16000, bits: 8, frames: f(16000)}, 16000},
		"s16-stereo-16k":        {wavSpec{tag: 1, channels: 2, rate: 16000, bits: 16, frames: f(16000)}, 16000},
		"s24-mono-16k":          {wavSpec{tag: 1, channels: 1, rate: 16000, bits: 24, frames: f(16000)}, 16000},
		"s32-stereo-16k":        {wavSpec{tag: 1, channels: 2, rate: 16000, bits: 32, frames: f(16000)}, 16000},
		"s40-mono-16k":          {wavSpec{tag: 1, channels: 1, rate: 16000, bits: 40, frames: f(16000)}, 16000},
		"s12-mono-16k":          {wavSpec{tag: 1, channels: 1, rate: 16000, bits: 16, validBits: 12, frames: f(16000)}, 16000},
		"f32-mono-16k":          {wavSpec{tag: 3, channels: 1, rate: 16000, bits: 32, frames: f(16000)}, 16000},
		"f64-stereo-16k":        {wavSpec{tag: 3, channels: 2, rate: 16000, bits: 64, frames: f(16000)}, 16000},
		"s16-6ch-16k":           {wavSpec{tag: 1, channels: 6, rate: 16000, bits: 16, frames: f(16000)}, 16000},
		"ext-s16-stereo-48k":    {wavSpec{tag: 1, extensible: true, channels: 2, rate: 48000, bits: 16, frames: f(48000)}, 16000},
		"ext-f32-mono-16k":      {wavSpec{tag: 3, extensible: true, channels: 1, rate: 16000, bits: 32, frames: f(16000)}, 16000},
		"s16-mono-44k1":         {wavSpec{tag: 1, channels: 1, rate: 44100, bits: 16, frames: f(44100)}, 16000},
		"s16-mono-24k":          {wavSpec{tag: 1, channels: 1, rate: 24000, bits: 16, frames: f(24000)}, 16000},
		"s16-mono-8k":           {wavSpec{tag: 1, channels: 1, rate: 8000, bits: 16, frames: f(8000)}, 16000},
		"f32-stereo-22k05":      {wavSpec{tag: 3, channels: 2, rate: 22050, bits: 32, frames: f(22050)}, 16000},
		"s16-mono-11k025":       {wavSpec{tag: 1, channels: 1, rate: 11025, bits: 16, frames: f(11025)}, 16000},
		"s16-mono-16k-to-24k":   {wavSpec{tag: 1, channels: 1, rate: 16000, bits: 16, frames: f(16000)}, 24000},
		"s16-mono-16k-chunks":   {wavSpec{tag: 1, channels: 1, rate: 16000, bits: 16, frames: f(16000), extra: true}, 16000},
		"s16-stereo-16k-claims": {wavSpec{tag: 1, channels: 2, rate: 16000, bits: 16, frames: f(16000), claim: 1 << 31}, 16000},
	}
}

// progressiveJPEG is an n × n grey progressive JPEG of the given number of
// AC scans, each one end-of-band run over every block: a few dozen bytes
// a scan, each of which Go's decoder spends a pass over the image on.
func progressiveJPEG(n, scans int) []byte {
	var b bytes.Buffer
	b.Write([]byte{0xff, 0xd8})
	b.Write([]byte{0xff, 0xdb, 0, 67, 0}) // DQT 0: all ones
	for range 64 {
		b.WriteByte(1)
	}
	// SOF2: 8 bits, n × n, one component (id 1, 1 × 1, table 0).
	b.Write([]byte{0xff, 0xc2, 0, 11, 8, byte(n >> 8), byte(n), byte(n >> 8), byte(n), 1, 1, 0x11, 0})
	// DHT AC 0: one 1-bit code, for 0xE0: an end-of-band run of 2^14 + 14 bits.
	b.Write([]byte{0xff, 0xc4, 0, 2 + 1 + 16 + 1, 0x10, 1})
	b.Write(make([]byte, 15))
	b.WriteByte(0xe0)
	blocks := (n + 7) / 8 * ((n + 7) / 8)
	for range scans {
		b.Write([]byte{0xff, 0xda, 0, 8, 1, 1, 0x00, 1, 63, 0}) // SOS: AC 1..63
		var bits []byte
		for left := blocks; left > 0; {
			// 0xE0's runs are 2^14 to 2^15 - 1 blocks: one past the
			// last block ends the scan just the same.
			run := max(min(left, 1<<15-1), 1<<14)
			bits = append(bits, 0)
			for k := 13; k >= 0; k-- {
				bits = append(bits, byte((run-1<<14)>>k&1))
			}
			left -= run
		}
		for len(bits)%8 != 0 {
			bits = append(bits, 1)
		}
		for i := 0; i < len(bits); i += 8 {
			var c byte
			for k := range 8 {
				c = c<<1 | bits[i+k]
			}
			b.WriteByte(c)
			if c == 0xff {
				b.WriteByte(0)
			}
		}
	}
	b.Write([]byte{0xff, 0xd9})
	return b.Bytes()
}
