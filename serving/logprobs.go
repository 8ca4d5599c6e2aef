package serving

import "math"

// FiniteLogprob keeps a log-probability JSON can carry: -Inf (a probability
// that underflowed) and NaN become the lowest float32.
func FiniteLogprob(lp float32) float32 {
	if math.IsInf(float64(lp), 0) || math.IsNaN(float64(lp)) {
		return -math.MaxFloat32
	}
	return lp
}

// ByteValues are s's bytes as JSON numbers (OpenAI's "bytes").
func ByteValues(s string) []int {
	b := make([]int, len(s))
	for i := range len(s) {
		b[i] = int(s[i])
	}
	return b
}
