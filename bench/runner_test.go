package bench

import (
	"context"
	"errors"
	"math"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/corral-llm/corral/wire"
)

// countingTarget is a Target double for the runner's pure logic: it
// answers at once and records what it was asked.
type countingTarget struct {
	mu          sync.Mutex
	inFlight    int
	maxInFlight int
	prompts     []string
	cancelAfter []int
}

func (c *countingTarget) Do(_ context.Context, p Prompt, cancelAfter int) Record {
	c.mu.Lock()
	c.inFlight++
	c.maxInFlight = max(c.maxInFlight, c.inFlight)
	c.prompts = append(c.prompts, p.Text())
	c.cancelAfter = append(c.cancelAfter, cancelAfter)
	c.mu.Unlock()
	for range 10 {
		runtime.Gosched() // let other requests overlap this one
	}
	c.mu.Lock()
	c.inFlight--
	c.mu.Unlock()
	return Record{Chunks: []time.Duration{1, 2}, End: 3, OutputTokens: 2, Cancelled: cancelAfter > 0}
}

func numbered(n int) []Prompt {
	ps := make([]Prompt, n)
	for i := range ps {
		ps[i] = Prompt{Messages: []wire.Message{{Role: "user", Content: strconv.Itoa(i)}}}
	}
	return ps
}

func TestClosedLoop(t *testing.T) {
	tgt := &countingTarget{}
	var observed int
	var mu sync.Mutex
	out, err := Run(context.Background(), tgt, numbered(7), Config{Concurrency: 3, NumRequests: 40},
		func(Record) { mu.Lock(); observed++; mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Records) != 40 || observed != 40 {
		t.Errorf("%d records, %d observed; want 40", len(out.Records), observed)
	}
	if tgt.maxInFlight > 3 || tgt.maxInFlight < 1 {
		t.Errorf("max in flight %d, want 1..3", tgt.maxInFlight)
	}
	counts := map[string]int{}
	for _, p := range tgt.prompts {
		counts[p]++
	}
	// 40 requests over 7 prompts: prompts 0–4 six times, 5–6 five times.
	for i := range 7 {
		want := 5
		if i < 5 {
			want = 6
		}
		if got := counts[strconv.Itoa(i)]; got != want {
			t.Errorf("prompt %d sent %d times, want %d", i, got, want)
		}
	}
	for i := 1; i < len(out.Records); i++ {
		if out.Records[i].Start < out.Records[i-1].Start {
			t.Fatal("records are not in order of sending")
		}
	}
}

func TestWarmupPrompts(t *testing.T) {
	tgt := &countingTarget{}
	out, err := Run(context.Background(), tgt, numbered(5), Config{Concurrency: 1, NumRequests: 3, Warmup: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Records) != 3 {
		t.Errorf("%d records, want the 3 measured only", len(out.Records))
	}
	want := []string{"3", "4", "0", "1", "2"} // warmup from the end, then from the start
	if len(tgt.prompts) != len(want) {
		t.Fatalf("prompts sent %v, want %v", tgt.prompts, want)
	}
	for i := range want {
		if tgt.prompts[i] != want[i] {
			t.Fatalf("prompts sent %v, want %v", tgt.prompts, want)
		}
	}
}

func TestCancelFraction(t *testing.T) {
	tgt := &countingTarget{}
	cfg := Config{Concurrency: 4, NumRequests: 1000, CancelFraction: 0.3, CancelAfterTokens: 5, Seed: 9}
	out, err := Run(context.Background(), tgt, numbered(1), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	cancelled := 0
	for _, k := range tgt.cancelAfter {
		switch k {
		case 0:
		case 5:
			cancelled++
		default:
			t.Fatalf("cancelAfter %d, want 0 or 5", k)
		}
	}
	// Binomial(1000, 0.3): mean 300, standard deviation 14.5.
	if cancelled < 250 || cancelled > 350 {
		t.Errorf("%d of 1000 requests cancelled, want about 300", cancelled)
	}
	if s := Summarize(out.Records, out.Duration, SLO{}); s.Cancelled != cancelled || s.Completed != 1000-cancelled {
		t.Errorf("summary counts %d cancelled, %d completed; want %d, %d", s.Cancelled, s.Completed, cancelled, 1000-cancelled)
	}
}

func TestOpenLoopCap(t *testing.T) {
	tgt := &countingTarget{}
	out, err := Run(context.Background(), tgt, numbered(3),
		Config{RequestRate: math.Inf(1), Concurrency: 2, NumRequests: 50}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Records) != 50 {
		t.Errorf("%d records, want 50", len(out.Records))
	}
	if tgt.maxInFlight > 2 {
		t.Errorf("max in flight %d, want at most the cap of 2", tgt.maxInFlight)
	}
}

func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, &countingTarget{}, numbered(1), Config{Concurrency: 1, NumRequests: 5}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{Concurrency: 0, NumRequests: 1},                    // closed loop without clients
		{Concurrency: -1, NumRequests: 1, RequestRate: 1},   // negative cap
		{Concurrency: 1},                                    // neither count nor duration
		{Concurrency: 1, NumRequests: 1, RequestRate: -2},   // negative rate
		{Concurrency: 1, NumRequests: 1, Burstiness: -1},    // negative burstiness
		{Concurrency: 1, NumRequests: 1, CancelFraction: 2}, // fraction above 1
		{Concurrency: 1, NumRequests: 1, CancelFraction: 0.5},
		{Concurrency: 1, NumRequests: 1, Warmup: -1},
	} {
		if _, err := Run(context.Background(), &countingTarget{}, numbered(1), cfg, nil); err == nil {
			t.Errorf("Run accepted %+v", cfg)
		}
	}
	if _, err := Run(context.Background(), &countingTarget{}, nil, Config{Concurrency: 1, NumRequests: 1}, nil); err == nil {
		t.Error("Run accepted no prompts")
	}
}
