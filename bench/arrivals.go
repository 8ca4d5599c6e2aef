package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Arrivals generates the gaps between request arrivals of an open loop.
// The gaps are gamma distributed with shape = burstiness and mean 1/rate,
// as in vllm bench serve: burstiness 1 is a Poisson process (exponential
// gaps); below 1 arrivals are burstier, above 1 more regular. The variance
// of the gaps is 1/(rate²·burstiness).
type Arrivals struct {
	rng        *rand.Rand
	rate       float64
	burstiness float64
}

// NewArrivals returns a generator for rate requests per second. A rate of
// +Inf sends every request at once (all gaps are 0). The same seed gives
// the same gaps.
func NewArrivals(rate, burstiness float64, seed uint64) (*Arrivals, error) {
	if math.IsNaN(rate) || rate <= 0 {
		return nil, fmt.Errorf("request rate %v: must be positive", rate)
	}
	if math.IsNaN(burstiness) || math.IsInf(burstiness, 0) || burstiness <= 0 {
		return nil, fmt.Errorf("burstiness %v: must be positive and finite", burstiness)
	}
	return &Arrivals{
		rng:        rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		rate:       rate,
		burstiness: burstiness,
	}, nil
}

// NextSeconds returns the next gap in seconds.
func (a *Arrivals) NextSeconds() float64 {
	if math.IsInf(a.rate, 1) {
		return 0
	}
	scale := 1 / (a.rate * a.burstiness)
	return gamma(a.rng, a.burstiness) * scale
}

// Next returns the next gap.
func (a *Arrivals) Next() time.Duration {
	return time.Duration(a.NextSeconds() * float64(time.Second))
}

// gamma draws from Gamma(shape, 1) with Marsaglia and Tsang's method
// ("A simple method for generating gamma variables", 2000); shapes below 1
// use the boost Gamma(k) = Gamma(k+1)·U^(1/k).
func gamma(rng *rand.Rand, shape float64) float64 {
	if shape < 1 {
		u := rng.Float64()
		for u == 0 {
			u = rng.Float64()
		}
		return gamma(rng, shape+1) * math.Pow(u, 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if u < 1-0.0331*x*x*x*x {
			return d * v
		}
		if u > 0 && math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}
