package gguf

import (
	"math"
	"math/rand/v2"
	"strings"
)

// A model that copies (Shape.Copy) has weights set by hand instead of drawn
// at random: two attention layers that make an induction head, so that its
// greedy continuation of a prompt repeats what followed the last token's
// earlier occurrence in that prompt. It is the model speculative decoding
// pays on (a quote from a given document, an edit of a given text) without
// a trained one, at the cost of the shape around it: every other matrix is
// there and multiplied, with its output projections zero.
//
// The residual stream holds four parts: a constant 1 (dimension 0), the
// token's code T (a random unit vector of codeDims dimensions, one per
// token), the previous token's code P, and the prediction O.
//   - Layer 0, head 0 attends to the previous position. Its query and key
//     read only the constant and differ by a rotation of one position in
//     each of copyPosPairs RoPE pairs, so that after RoPE their product is a
//     sum of cos(ω(Δ-1)) over those pairs' frequencies ω (rope_freqs sets
//     them): largest at a distance Δ of one. Its value is T, written to P.
//   - Layer 1, head 0 matches its query T against the keys P in the pairs
//     that RoPE leaves alone (frequency 0), so a position whose previous
//     token is this one wins. Its value T (the token that followed) is
//     written to O.
//   - The output matrix scores every token by its code against O.
//
// Attention is made near hard by the scores' scale: copyPosScale over the
// position sum's worst margin, copyMatchScale over a code's.

// copyPosPairs is the number of RoPE pairs the previous-token head uses.
const copyPosPairs = 8

// copyPosFreqs are those pairs' frequencies (radians per position), chosen
// by a random search over log-uniform sets for the largest worst margin
// over distances up to 8,192: the mean of cos(ω(Δ-1)) is 1 at Δ = 1 and at
// most 0.75 elsewhere.
var copyPosFreqs = [copyPosPairs]float64{
	1.2277303763956058, 0.052981861691087824, 0.07391246117046708, 0.659799397023503,
	0.00643117151206848, 2.960592105905903, 2.9570840498520363, 0.020225599572303833,
}

// Scores after the attention's own scale: the previous position's score
// stands copyPosScale×0.25 above any other's, a matching code's about
// copyMatchScale×(1-0.5) above a random one's.
const (
	copyPosScale   = 80
	copyMatchScale = 60
)

// minCodeDims is the least number of dimensions of a token's code: fewer,
// and random codes collide too often for the output to pick the copied token.
const minCodeDims = 16

// copyRopeTensor holds the per-pair frequency divisors of a copying model.
const copyRopeTensor = "rope_freqs.weight"

// ropeBase is the rope.freq_base synthetic models are written with.
const ropeBase = 10000

// codeDims returns the dimensions of a token's code in a copying model of
// shape s: what a head leaves after the position pairs, and at most a
// third of the residual after the constant.
func (s Shape) codeDims() int {
	return min(s.Embd/s.Heads-2*copyPosPairs, (s.Embd-1)/3)
}

// copier computes the rows of a copying model's tensors.
type copier struct {
	s       Shape
	d       int         // code dimensions
	head    int         // head size
	codes   [][]float32 // a unit code per token
	rng     *rand.Rand  // for the matrices that do nothing useful
	r0, r1  float64     // RMS norm's factors at layers 0 and 1
	posAmp  float64     // query and key amplitude per position pair
	codeAmp float64     // query and key amplitude of the match
}

func newCopier(s Shape, rng *rand.Rand) *copier {
	c := &copier{s: s, d: s.codeDims(), head: s.Embd / s.Heads, rng: rng}
	c.codes = make([][]float32, s.Vocab)
	for v := range c.codes {
		code := make([]float32, c.d)
		var norm float64
		for i := range code {
			x := rng.NormFloat64()
			code[i] = float32(x)
			norm += x * x
		}
		for i := range code {
			code[i] /= float32(math.Sqrt(norm))
		}
		c.codes[v] = code
	}
	// The residual at layer 0 holds the constant and T, at layer 1 also P,
	// each of norm 1: RMS norm multiplies them by sqrt(embd/parts).
	c.r0 = math.Sqrt(float64(s.Embd) / 2)
	c.r1 = math.Sqrt(float64(s.Embd) / 3)
	// Attention multiplies q·k by 1/sqrt(head size).
	scale := math.Sqrt(float64(c.head))
	c.posAmp = math.Sqrt(copyPosScale * scale / copyPosPairs)
	c.codeAmp = math.Sqrt(copyMatchScale * scale)
	return c
}

// Where the parts of the residual stream start.
func (c *copier) tDim() int { return 1 }
func (c *copier) pDim() int { return 1 + c.d }
func (c *copier) oDim() int { return 1 + 2*c.d }

// row fills vals with row r of tensor t.
func (c *copier) row(t TensorInfo, r int, vals []float32) {
	clear(vals)
	name := t.Name
	switch {
	case name == copyRopeTensor:
		// One divisor per pair: RoPE turns pair i by base^(-2i/head) per
		// position, divided by it.
		for i := range vals {
			natural := math.Pow(ropeBase, -2*float64(i)/float64(c.head))
			if i < copyPosPairs {
				vals[i] = float32(natural / copyPosFreqs[i])
			} else {
				vals[i] = 1e30
			}
		}
		return
	case strings.HasSuffix(name, "norm.weight"):
		for i := range vals {
			vals[i] = 1
		}
		return
	case name == "token_embd.weight":
		vals[0] = 1
		copy(vals[c.tDim():], c.codes[r])
		return
	case name == "output.weight":
		if r != eosID {
			copy(vals[c.oDim():], c.codes[r])
		}
		return
	}
	layer := blockOf(name)
	kind := strings.TrimSuffix(name, ".weight")
	kind = kind[strings.LastIndexByte(kind, '.')+1:] // blk.N.attn_q.weight: attn_q
	head, e := r/c.head, r%c.head
	switch {
	case kind == "attn_output" || kind == "ffn_down":
		switch {
		case kind == "ffn_down" || layer > 1:
		case layer == 0 && r >= c.pDim() && r < c.pDim()+c.d:
			vals[r-c.pDim()] = 1
		case layer == 1 && r >= c.oDim() && r < c.oDim()+c.d:
			vals[r-c.oDim()] = 1
		}
		return
	case layer > 1 || head != 0 || (kind != "attn_q" && kind != "attn_k" && kind != "attn_v"):
		for i := range vals {
			vals[i] = float32(c.rng.NormFloat64() * weightStdDev)
		}
		return
	}
	pair := e / 2
	switch {
	case kind == "attn_v" && e < c.d:
		r := c.r0
		if layer == 1 {
			r = c.r1
		}
		vals[c.tDim()+e] = float32(1 / r)
	case layer == 0 && pair < copyPosPairs && kind == "attn_q" && e%2 == 0:
		vals[0] = float32(c.posAmp / c.r0)
	case layer == 0 && pair < copyPosPairs && kind == "attn_k":
		w := copyPosFreqs[pair]
		trig := math.Cos(w)
		if e%2 == 1 {
			trig = math.Sin(w)
		}
		vals[0] = float32(c.posAmp * trig / c.r0)
	case layer == 1 && pair >= copyPosPairs && e-2*copyPosPairs < c.d && kind == "attn_q":
		vals[c.tDim()+e-2*copyPosPairs] = float32(c.codeAmp / c.r1)
	case layer == 1 && pair >= copyPosPairs && e-2*copyPosPairs < c.d && kind == "attn_k":
		vals[c.pDim()+e-2*copyPosPairs] = float32(c.codeAmp / c.r1)
	}
}
