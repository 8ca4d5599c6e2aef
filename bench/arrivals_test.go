package bench

import (
	"math"
	"testing"
)

// TestArrivalMoments checks on generated gaps (not the wall clock) that
// their mean is 1/rate and their variance 1/(rate²·burstiness).
func TestArrivalMoments(t *testing.T) {
	const n = 200_000
	for _, tc := range []struct{ rate, burstiness float64 }{
		{10, 1},   // Poisson: exponential gaps, variance = mean²
		{10, 0.5}, // burstier
		{4, 3},    // more regular
		{100, 0.2},
	} {
		a, err := NewArrivals(tc.rate, tc.burstiness, 42)
		if err != nil {
			t.Fatal(err)
		}
		var sum, sumSq float64
		for range n {
			g := a.NextSeconds()
			if g < 0 {
				t.Fatalf("negative gap %v", g)
			}
			sum += g
			sumSq += g * g
		}
		mean := sum / n
		variance := sumSq/n - mean*mean
		wantMean := 1 / tc.rate
		wantVar := 1 / (tc.rate * tc.rate * tc.burstiness)
		// Standard errors at n = 200k are below 0.5% for the mean and 1.5%
		// for the variance at these shapes; the bounds are about 3 of them.
		if rel := math.Abs(mean-wantMean) / wantMean; rel > 0.015 {
			t.Errorf("rate %v burstiness %v: mean gap %.6f, want %.6f (off by %.2f%%)", tc.rate, tc.burstiness, mean, wantMean, rel*100)
		}
		if rel := math.Abs(variance-wantVar) / wantVar; rel > 0.05 {
			t.Errorf("rate %v burstiness %v: gap variance %.6g, want %.6g (off by %.2f%%)", tc.rate, tc.burstiness, variance, wantVar, rel*100)
		}
	}
}

func TestArrivalsSeeded(t *testing.T) {
	a, _ := NewArrivals(5, 0.7, 7)
	b, _ := NewArrivals(5, 0.7, 7)
	c, _ := NewArrivals(5, 0.7, 8)
	same := true
	for range 100 {
		x, y, z := a.Next(), b.Next(), c.Next()
		if x != y {
			t.Fatalf("same seed gave %v and %v", x, y)
		}
		same = same && x == z
	}
	if same {
		t.Error("different seeds gave the same 100 gaps")
	}
}

func TestArrivalsInfiniteRate(t *testing.T) {
	a, err := NewArrivals(math.Inf(1), 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if g := a.Next(); g != 0 {
			t.Fatalf("infinite rate: gap %v, want 0", g)
		}
	}
}

func TestArrivalsBadInput(t *testing.T) {
	for _, tc := range []struct{ rate, burstiness float64 }{
		{0, 1}, {-1, 1}, {math.NaN(), 1}, {1, 0}, {1, -2}, {1, math.Inf(1)}, {1, math.NaN()},
	} {
		if _, err := NewArrivals(tc.rate, tc.burstiness, 1); err == nil {
			t.Errorf("NewArrivals(%v, %v) succeeded, want error", tc.rate, tc.burstiness)
		}
	}
}
