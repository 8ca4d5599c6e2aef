package gguf

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// halfToFloat decodes an IEEE half-precision value.
func halfToFloat(h uint16) float32 {
	sign := float32(1)
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, mant := int(h>>10&0x1f), float64(h&0x3ff)
	switch exp {
	case 0:
		return sign * float32(math.Ldexp(mant, -24))
	case 0x1f:
		return sign * float32(math.Inf(1))
	}
	return sign * float32(math.Ldexp(1024+mant, exp-25))
}

// dequantQ8_0 decodes Q8_0 blocks.
func dequantQ8_0(data []byte) []float32 {
	var out []float32
	for b := 0; b+34 <= len(data); b += 34 {
		d := halfToFloat(binary.LittleEndian.Uint16(data[b:]))
		for _, q := range data[b+2 : b+34] {
			out = append(out, d*float32(int8(q)))
		}
	}
	return out
}

func TestFP16RoundTrip(t *testing.T) {
	for h := range uint32(1 << 16) {
		if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
			continue // NaN
		}
		f := halfToFloat(uint16(h))
		if got := fp16(f); got != uint16(h) {
			t.Fatalf("fp16(%g) = %#04x, want %#04x", f, got, h)
		}
	}
}

func TestFP16Rounding(t *testing.T) {
	for _, tc := range []struct {
		f    float32
		want uint16
	}{
		{0.1, 0x2e66},
		{-2, 0xc000},
		{65519, 0x7bff},
		{65520, 0x7c00},                                  // rounds up to infinity
		{1e10, 0x7c00},                                   // overflow
		{float32(math.Ldexp(1, -25)), 0x0000},            // tie between 0 and the smallest subnormal: even
		{float32(math.Ldexp(1.5, -25)), 0x0001},          // above the tie
		{float32(math.Ldexp(3, -25)), 0x0002},            // tie between 1 and 2 subnormal steps: even
		{float32(math.Ldexp(1, -30)), 0x0000},            // underflow
		{float32(math.Ldexp(2047, -25)), 0x0400},         // largest-subnormal tie carries into the smallest normal
		{1 + float32(math.Ldexp(1, -11)), 0x3c00},        // tie: even mantissa stays
		{1 + float32(math.Ldexp(3, -11)), 0x3c02},        // tie: odd mantissa rounds up
		{-float32(math.Ldexp(1.5, -25)), 0x8001},         // negative subnormal
		{float32(math.Copysign(0, -1)), 0x8000},          // negative zero
		{float32(math.Ldexp(1, -14)) * 0.999999, 0x0400}, // just below the smallest normal
	} {
		if got := fp16(tc.f); got != tc.want {
			t.Errorf("fp16(%g) = %#04x, want %#04x", tc.f, got, tc.want)
		}
	}
}

func TestQ8_0(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]float32, 4*q8Block)
	for i := range src {
		src[i] = float32(rng.NormFloat64())
	}
	for i := range src[q8Block : 2*q8Block] {
		src[q8Block+i] = 0 // an all-zero block
	}
	dst := make([]byte, 4*34)
	putQ8_0(dst, src)
	got := dequantQ8_0(dst)
	for b := range 4 {
		x := src[b*q8Block : (b+1)*q8Block]
		var amax float32
		for _, v := range x {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		step := halfToFloat(binary.LittleEndian.Uint16(dst[b*34:]))
		if math.Abs(float64(step-amax/127)) > float64(amax/127)/1000 {
			t.Errorf("block %d: scale %g, want about %g", b, step, amax/127)
		}
		for i, v := range x {
			if e := math.Abs(float64(got[b*q8Block+i] - v)); e > float64(step)*0.51 {
				t.Errorf("block %d value %d: %g decodes to %g (step %g)", b, i, v, got[b*q8Block+i], step)
			}
		}
	}
}
