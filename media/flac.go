package media

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
)

// A FLAC decoder (RFC 9639), frame by frame. It reads what dr_flac reads
// in a native FLAC stream: the STREAMINFO block (the others are skipped),
// then frames of 1 to 8 channels of 4 to 32 bits, with constant,
// verbatim, fixed and LPC subframes, wasted bits, Rice and escaped
// residuals, and left/side, side/right and mid/side stereo. Each frame's
// header (CRC-8) is checked, and its block size against the seconds
// bound, before its subframes are decoded; the frame's CRC-16 after.
// Frames must keep the stream's rate, channels and sample size. Bytes
// after the last frame that do not start a frame (a tag) are ignored.

// flacMaxBlock is the most samples a FLAC frame's channel holds.
const flacMaxBlock = 65535

// flacStream is a FLAC file's STREAMINFO: what its frames must keep.
type flacStream struct {
	rate, channels, bps int
}

// flacFrame is a frame's header, resolved against the stream's.
type flacFrame struct {
	block    int // samples a channel
	channels int
	stereo   int // 0 independent, or flacLeftSide, flacSideRight, flacMidSide
}

// The stereo decorrelations of a frame's channel assignment.
const (
	flacLeftSide  = 8
	flacSideRight = 9
	flacMidSide   = 10
)

// decodeFLAC is DecodeAudio for a FLAC file.
func decodeFLAC(data []byte, rate int, lim Limits) ([]float32, error) {
	body, ok := pastID3(data)
	if !ok {
		return nil, invalid(KindAudio, nil, "FLAC file's ID3 tag runs past the end of the file")
	}
	s, off, err := parseFLACHeader(body)
	if err != nil {
		return nil, err
	}
	c := newClip(s.rate, rate, lim, 0)
	var chans [8][]int64 // each channel's samples of the frame decoded last
	for decoded := 0; ; decoded++ {
		if len(body)-off < 2 || body[off] != 0xff || body[off+1]&0xfe != 0xf8 {
			if decoded == 0 {
				return nil, invalid(KindAudio, nil, "FLAC file has no audio frame")
			}
			break // the end, or a trailing tag
		}
		at := float64(c.frames) / float64(s.rate)
		f, r, err := s.frameHeader(body, off)
		if err != nil {
			return nil, invalid(KindAudio, nil, "FLAC frame at %.2f s: %v", at, err)
		}
		if err := c.room(f.block); err != nil {
			return nil, err
		}
		for ch := range f.channels {
			if cap(chans[ch]) < f.block {
				chans[ch] = make([]int64, f.block)
			}
			chans[ch] = chans[ch][:f.block]
			size := s.bps
			if f.stereo == flacLeftSide && ch == 1 || f.stereo == flacSideRight && ch == 0 || f.stereo == flacMidSide && ch == 1 {
				size++ // a side channel has a bit more
			}
			if err := r.subframe(chans[ch], size); err != nil {
				return nil, invalid(KindAudio, nil, "FLAC frame at %.2f s, channel %d: %v", at, ch, err)
			}
		}
		end, err := r.frameEnd(off)
		if err != nil {
			return nil, invalid(KindAudio, nil, "FLAC frame at %.2f s: %v", at, err)
		}
		off = end
		decorrelate(f.stereo, chans[0], chans[1])
		shift := uint(32 - s.bps)
		for i := range f.block {
			// dr_flac's f32: the sample at the top of an int32, × 2^-31.
			c.add(mix(f.channels, func(ch int) float32 {
				return float32(int32(uint32(chans[ch][i])<<shift)) * (1.0 / (1 << 31))
			}))
		}
	}
	return c.finish()
}

// parseFLACHeader reads a FLAC file's "fLaC" and metadata blocks: the
// first is STREAMINFO, the others are skipped. off is where the frames
// start.
func parseFLACHeader(b []byte) (s flacStream, off int, err error) {
	if !bytes.HasPrefix(b, []byte("fLaC")) {
		return s, 0, invalid(KindAudio, nil, "FLAC file does not start with fLaC")
	}
	off = 4
	for first := true; ; first = false {
		if len(b)-off < 4 {
			return s, 0, invalid(KindAudio, nil, "FLAC metadata is truncated")
		}
		last, typ := b[off]&0x80 != 0, b[off]&0x7f
		n := int(b[off+1])<<16 | int(b[off+2])<<8 | int(b[off+3])
		off += 4
		if n > len(b)-off {
			return s, 0, invalid(KindAudio, nil, "FLAC metadata block of type %d runs past the end of the file", typ)
		}
		switch {
		case first && (typ != 0 || n < 34):
			return s, 0, invalid(KindAudio, nil, "FLAC file does not start with a STREAMINFO block")
		case first:
			// 16+16 bits block sizes, 24+24 frame sizes, then 20 bits
			// rate, 3 channels - 1, 5 bits a sample - 1.
			v := binary.BigEndian.Uint64(b[off+10:])
			s.rate = int(v >> 44)
			s.channels = int(v>>41&7) + 1
			s.bps = int(v>>36&31) + 1
			if s.rate < 1 || s.rate > maxAudioRate || s.bps < 4 {
				return s, 0, invalid(KindAudio, nil, "FLAC format is invalid: %d Hz, %d bits", s.rate, s.bps)
			}
		case typ == 127:
			return s, 0, invalid(KindAudio, nil, "FLAC metadata block of type 127 is invalid")
		}
		off += n
		if last {
			return s, off, nil
		}
	}
}

// frameHeader reads the header of the frame at b[off:] (its sync
// checked): the frame, and a reader at its first subframe.
func (s flacStream) frameHeader(b []byte, off int) (flacFrame, *bitReader, error) {
	var f flacFrame
	if len(b)-off < 6 {
		return f, nil, fmt.Errorf("header is truncated")
	}
	h := b[off:]
	blockCode, rateCode := h[2]>>4, h[2]&15
	chanCode, bpsCode := h[3]>>4, h[3]>>1&7
	if blockCode == 0 || rateCode == 15 || chanCode > flacMidSide || bpsCode == 3 || h[3]&1 != 0 {
		return f, nil, fmt.Errorf("header has a reserved code")
	}
	// The frame or sample number, coded as UTF-8 is (up to 36 bits).
	p := 4
	n := bits.LeadingZeros8(^h[p])
	switch {
	case n == 1 || n > 7:
		return f, nil, fmt.Errorf("header's number is malformed")
	case n > 1:
		if len(h) < p+n {
			return f, nil, fmt.Errorf("header is truncated")
		}
		for _, x := range h[p+1 : p+n] {
			if x&0xc0 != 0x80 {
				return f, nil, fmt.Errorf("header's number is malformed")
			}
		}
		p += n
	default:
		p++
	}
	// Then the block size and rate, where their codes say they follow.
	need := map[byte]int{6: 1, 7: 2}[blockCode] + map[byte]int{12: 1, 13: 2, 14: 2}[rateCode] + 1 // and the CRC-8
	if len(h) < p+need {
		return f, nil, fmt.Errorf("header is truncated")
	}
	switch {
	case blockCode == 1:
		f.block = 192
	case blockCode <= 5:
		f.block = 144 << blockCode // 576 × 2^(code-2)
	case blockCode == 6:
		f.block = int(h[p]) + 1
		p++
	case blockCode == 7:
		f.block = int(binary.BigEndian.Uint16(h[p:])) + 1
		p += 2
	default:
		f.block = 1 << blockCode // 256 × 2^(code-8)
	}
	var rate int
	switch rateCode {
	case 0:
		rate = s.rate
	case 12:
		rate = int(h[p]) * 1000
		p++
	case 13:
		rate = int(binary.BigEndian.Uint16(h[p:]))
		p += 2
	case 14:
		rate = int(binary.BigEndian.Uint16(h[p:])) * 10
		p += 2
	default:
		rate = flacRates[rateCode]
	}
	if crc8(h[:p]) != h[p] {
		return f, nil, fmt.Errorf("header's CRC-8 does not match")
	}
	bps := []int{s.bps, 8, 12, 0, 16, 20, 24, 32}[bpsCode]
	f.channels = int(chanCode) + 1
	if chanCode >= flacLeftSide {
		f.channels, f.stereo = 2, int(chanCode)
	}
	switch {
	case f.block > flacMaxBlock:
		return f, nil, fmt.Errorf("block of %d samples is over %d", f.block, flacMaxBlock)
	case rate != s.rate || f.channels != s.channels || bps != s.bps:
		return f, nil, fmt.Errorf("%d Hz, %d channels of %d bits differ from the stream's %d Hz, %d channels of %d bits", rate, f.channels, bps, s.rate, s.channels, s.bps)
	}
	return f, &bitReader{b: b, pos: 8 * (off + p + 1)}, nil
}

// flacRates are the rates of a frame header's codes 1 to 11.
var flacRates = [12]int{1: 88200, 2: 176400, 3: 192000, 4: 8000, 5: 16000, 6: 22050, 7: 24000, 8: 32000, 9: 44100, 10: 48000, 11: 96000}

// decorrelate undoes a frame's stereo decorrelation: a and b become left
// and right.
func decorrelate(stereo int, a, b []int64) {
	switch stereo {
	case flacLeftSide:
		for i := range a {
			b[i] = a[i] - b[i]
		}
	case flacSideRight:
		for i := range a {
			a[i] += b[i]
		}
	case flacMidSide:
		for i := range a {
			mid := a[i]<<1 | b[i]&1
			a[i], b[i] = (mid+b[i])>>1, (mid-b[i])>>1
		}
	}
}

// bitReader reads a FLAC frame's bits, most significant first.
type bitReader struct {
	b   []byte
	pos int // in bits
}

// errTruncated is a frame that runs past the end of the file.
var errTruncated = fmt.Errorf("frame is truncated")

// read reads n bits (n ≤ 57) as an unsigned number.
func (r *bitReader) read(n int) (uint64, error) {
	if n > len(r.b)*8-r.pos {
		return 0, errTruncated
	}
	var v uint64
	for n > 0 {
		avail := 8 - r.pos&7
		take := min(avail, n)
		v = v<<take | uint64(r.b[r.pos>>3])>>(avail-take)&(1<<take-1)
		n -= take
		r.pos += take
	}
	return v, nil
}

// signed reads n bits (n ≤ 57) as a two's complement number.
func (r *bitReader) signed(n int) (int64, error) {
	v, err := r.read(n)
	if n == 0 || err != nil {
		return 0, err
	}
	return int64(v<<(64-n)) >> (64 - n), nil
}

// unary reads zeros up to a one, and returns how many.
func (r *bitReader) unary() (uint64, error) {
	var q uint64
	for r.pos < len(r.b)*8 {
		x := r.b[r.pos>>3] << (r.pos & 7)
		if x != 0 {
			z := bits.LeadingZeros8(x)
			r.pos += z + 1
			return q + uint64(z), nil
		}
		q += uint64(8 - r.pos&7)
		r.pos += 8 - r.pos&7
	}
	return 0, errTruncated
}

// subframe decodes one channel's subframe into out (the block's
// samples), of size bits a sample before the wasted bits.
func (r *bitReader) subframe(out []int64, size int) error {
	h, err := r.read(8)
	if err != nil {
		return err
	}
	typ := int(h >> 1 & 63)
	if h&0x80 != 0 {
		return fmt.Errorf("subframe header's padding bit is set")
	}
	wasted := 0
	if h&1 != 0 {
		k, err := r.unary()
		if err != nil {
			return err
		}
		if k >= uint64(size) {
			return fmt.Errorf("subframe wastes %d of its %d bits", k+1, size)
		}
		wasted = int(k) + 1
		size -= wasted
	}
	switch {
	case typ == 0: // constant
		v, err := r.signed(size)
		if err != nil {
			return err
		}
		for i := range out {
			out[i] = v
		}
	case typ == 1: // verbatim
		for i := range out {
			if out[i], err = r.signed(size); err != nil {
				return err
			}
		}
	case typ >= 8 && typ <= 12:
		err = r.predicted(out, size, typ-8, false)
	case typ >= 32:
		err = r.predicted(out, size, typ-31, true)
	default:
		return fmt.Errorf("subframe type %d is reserved", typ)
	}
	if err != nil {
		return err
	}
	if wasted > 0 {
		for i := range out {
			out[i] <<= wasted
		}
	}
	return nil
}

// fixedCoefs are the fixed predictors of orders 0 to 4.
var fixedCoefs = [][]int64{{}, {1}, {2, -1}, {3, -3, 1}, {4, -6, 4, -1}}

// predicted decodes a fixed (lpc false) or LPC subframe of that order
// into out: the warm-up samples; for LPC, the coefficients' precision,
// their shift and the coefficients; the residual; then each sample is
// the residual plus the prediction (coefs[j] × the sample j+1 back,
// summed, shifted right).
func (r *bitReader) predicted(out []int64, size, order int, lpc bool) error {
	if order > len(out) {
		return fmt.Errorf("predictor of order %d is longer than its block of %d", order, len(out))
	}
	var err error
	for i := range order {
		if out[i], err = r.signed(size); err != nil {
			return err
		}
	}
	var lpcCoefs [32]int64
	coefs, shift := fixedCoefs[min(order, 4)], 0
	if lpc {
		v, err := r.read(9)
		if err != nil {
			return err
		}
		precision := int(v>>5) + 1
		if shift = int(int8(v<<3) >> 3); precision == 16 || shift < 0 {
			return fmt.Errorf("LPC precision %d or shift %d is invalid", precision, shift)
		}
		coefs = lpcCoefs[:order]
		for i := range coefs {
			if coefs[i], err = r.signed(precision); err != nil {
				return err
			}
		}
	}
	if err := r.residual(out, order); err != nil {
		return err
	}
	for i := order; i < len(out); i++ {
		var p int64
		for j, c := range coefs {
			p += c * out[i-1-j]
		}
		out[i] += p >> shift
	}
	return nil
}

// residual reads a subframe's Rice-coded residual into out[order:].
func (r *bitReader) residual(out []int64, order int) error {
	v, err := r.read(6)
	if err != nil {
		return err
	}
	method, porder := v>>4, int(v&15)
	if method > 1 {
		return fmt.Errorf("residual coding method %d is reserved", method)
	}
	paramBits, escape := 4, uint64(15)
	if method == 1 {
		paramBits, escape = 5, 31
	}
	parts := 1 << porder
	if len(out)%parts != 0 || len(out)/parts < order {
		return fmt.Errorf("%d residual partitions do not divide a block of %d after %d warm-up samples", parts, len(out), order)
	}
	i := order
	for p := range parts {
		end := (p + 1) * len(out) / parts
		param, err := r.read(paramBits)
		if err != nil {
			return err
		}
		if param == escape {
			n, err := r.read(5)
			if err != nil {
				return err
			}
			for ; i < end; i++ {
				if out[i], err = r.signed(int(n)); err != nil {
					return err
				}
			}
			continue
		}
		for ; i < end; i++ {
			q, err := r.unary()
			if err != nil {
				return err
			}
			low, err := r.read(int(param))
			if err != nil {
				return err
			}
			u := q<<param | low
			out[i] = int64(u>>1) ^ -int64(u&1)
		}
	}
	return nil
}

// frameEnd checks the CRC-16 of the frame that starts at byte start and
// whose subframes r has read, past the padding to a byte: the offset of
// the next frame.
func (r *bitReader) frameEnd(start int) (int, error) {
	end := (r.pos + 7) / 8
	if len(r.b)-end < 2 {
		return 0, errTruncated
	}
	if crc16(r.b[start:end]) != binary.BigEndian.Uint16(r.b[end:]) {
		return 0, fmt.Errorf("CRC-16 does not match")
	}
	return end + 2, nil
}

// crc8 is FLAC's header CRC: polynomial x^8 + x^2 + x + 1, from 0.
func crc8(b []byte) byte {
	var c byte
	for _, x := range b {
		c ^= x
		for range 8 {
			if c&0x80 != 0 {
				c = c<<1 ^ 0x07
			} else {
				c <<= 1
			}
		}
	}
	return c
}

// crc16Table is FLAC's frame CRC by byte: polynomial x^16 + x^15 + x^2 +
// 1, from 0.
var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x8005
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

func crc16(b []byte) uint16 {
	var c uint16
	for _, x := range b {
		c = c<<8 ^ crc16Table[byte(c>>8)^x]
	}
	return c
}
