package engine_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
)

// TestStatsQueueByClassAndTTFT: Stats.Queue counts the waiting requests
// per priority class, queued and preempted apart, best class first; and
// Stats.TTFTSum/TTFTCount sum exactly the TTFTs the requests report.
// The requests in the slot are paced and pause after their first chunk,
// so that they hold it however fast the model is.
func TestStatsQueueByClassAndTTFT(t *testing.T) {
	// No grace ends in the test: the paused slot is not lent to a worse class.
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1, PauseGrace: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held := func(prio int) engine.Request {
		r := pacedStory(400)
		r.PauseTimeout = time.Hour
		r.Priority = prio
		return r
	}
	long := func(prio int) engine.Request {
		r := greedy("Once upon a time", 400)
		r.Priority = prio
		return r
	}
	queue := func(want []engine.ClassQueue) {
		t.Helper()
		poll(t, fmt.Sprintf("waiting for queue %+v", want), func() (bool, string) {
			got := e.Stats().Queue
			return slices.Equal(got, want), fmt.Sprintf("queue %+v", got)
		})
	}
	if q := e.Stats().Queue; q != nil {
		t.Fatalf("queue of an idle engine: %+v", q)
	}
	running, err := e.Submit(ctx, held(0))
	if err != nil {
		t.Fatal(err)
	}
	waitPaused(t, e, running)
	if st := e.Stats(); st.TTFTCount != 1 || st.TTFTSum <= 0 {
		t.Fatalf("after one first token: TTFTCount %d, TTFTSum %v", st.TTFTCount, st.TTFTSum)
	}
	var waiting []*engine.Stream
	for _, prio := range []int{2, 1, 2} { // worse classes: no preemption
		s, err := e.Submit(ctx, long(prio))
		if err != nil {
			t.Fatal(err)
		}
		waiting = append(waiting, s)
	}
	queue([]engine.ClassQueue{{Priority: 1, Queued: 1}, {Priority: 2, Queued: 2}})

	// A better class preempts the running request, which then waits to
	// resume in class 0.
	better, err := e.Submit(ctx, held(-1))
	if err != nil {
		t.Fatal(err)
	}
	waitPaused(t, e, better)
	queue([]engine.ClassQueue{{Priority: 0, Preempted: 1}, {Priority: 1, Queued: 1}, {Priority: 2, Queued: 2}})

	// The queued requests go first: cancelled together with the paused
	// one in the slot, one of them could take the slot before its own
	// cancellation reached the scheduler, and get a first token.
	var sum time.Duration
	var n uint64
	for _, s := range append(waiting, better, running) {
		s.Cancel()
		_, res := collect(t, s)
		if res.Timings.TTFT > 0 {
			sum += res.Timings.TTFT
			n++
		}
	}
	waitIdle(t, e)
	queue(nil)
	if n != 2 {
		t.Fatalf("%d requests got a first token, want 2 (the first and the one that preempted it)", n)
	}
	st := settled(t, e, 5)
	if st.TTFTCount != n || st.TTFTSum != sum {
		t.Fatalf("TTFTCount %d, TTFTSum %v; the results report %d first tokens, %v in all", st.TTFTCount, st.TTFTSum, n, sum)
	}
}
