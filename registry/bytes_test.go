package registry

import (
	"math"
	"testing"
)

func TestParseBytes(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1073741824", 1 << 30, true},
		{"8GiB", 8 << 30, true},
		{"8 gib", 8 << 30, true},
		{"512MB", 512e6, true},
		{"512m", 512e6, true},
		{"1.5GiB", 3 << 29, true},
		{"0", 0, true},
		{"50%", 500, true},
		{"100%", 1000, true},
		{"150%", 0, false},
		{"-1GiB", 0, false},
		{"8 parsecs", 0, false},
		{"", 0, false},
		{"1e30TB", 0, false},
	} {
		got, err := ParseBytes(tt.in, 1000)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d (ok %v)", tt.in, got, err, tt.want, tt.ok)
		}
	}
	if _, err := ParseBytes("50%", 0); err == nil {
		t.Error("a percentage of an unknown total was accepted")
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 3 << 29: "1.5 GiB", math.MaxInt64: "unlimited"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestBudgetIsAtomic(t *testing.T) {
	b := NewBudget(100)
	done := make(chan bool)
	for range 50 {
		go func() { done <- b.TryReserve(10) }()
	}
	ok := 0
	for range 50 {
		if <-done {
			ok++
		}
	}
	if ok != 10 || b.Used() != 100 {
		t.Fatalf("%d reservations of 10 fit in 100 (used %d), want 10", ok, b.Used())
	}
	b.Release(100)
	if !NewBudget(0).Unlimited() || !NewBudget(0).TryReserve(math.MaxInt64/2) {
		t.Error("a zero budget is not unlimited")
	}
}
