package gguf

import (
	"encoding/binary"
	"math"
)

// q8Block is the number of values in one Q8_0 block; a block is stored as
// an fp16 scale d followed by 32 int8 values q, meaning q*d.
const q8Block = 32

// putF32 encodes src into dst (4 bytes per value).
func putF32(dst []byte, src []float32) {
	for i, v := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
}

// putQ8_0 quantizes src, a whole number of blocks, into dst (34 bytes per
// 32 values), the way ggml's reference quantizer does: the scale is the
// largest magnitude over 127, and each value rounds to the nearest step.
func putQ8_0(dst []byte, src []float32) {
	for b := 0; b < len(src)/q8Block; b++ {
		x := src[b*q8Block : (b+1)*q8Block]
		out := dst[b*(2+q8Block) : (b+1)*(2+q8Block)]
		var amax float32
		for _, v := range x {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(out, fp16(d))
		for i, v := range x {
			out[2+i] = byte(int8(math.Round(float64(v * id))))
		}
	}
}

// fp16 converts f to IEEE half precision, rounding to nearest even.
// Magnitudes too large for half precision become infinity; NaN is not
// expected here and becomes infinity too.
func fp16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case b&0x7fffffff == 0:
		return sign
	case exp >= 0x1f:
		return sign | 0x7c00
	case exp <= 0: // subnormal in half precision, or zero
		if exp < -10 {
			return sign
		}
		m := mant | 0x800000
		shift := uint(14 - exp)
		return sign | uint16(roundShift(m, shift))
	}
	// A carry out of the mantissa correctly bumps the exponent.
	return sign | uint16(uint32(exp)<<10+roundShift(mant, 13))
}

// roundShift returns m >> shift rounded to nearest, ties to even.
func roundShift(m uint32, shift uint) uint32 {
	q := m >> shift
	rem := m & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && q&1 == 1) {
		q++
	}
	return q
}
