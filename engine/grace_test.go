package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
)

// longPrompt is long enough (more than 64 tokens) that a slot holding
// it is saved to the host cache before another prompt overwrites it.
var longPrompt = strings.Repeat("Tom had a big red ball and a small blue car. ", 10) + storyPrompt

// collectWithin reads a stream to the end, failing t if it has not ended
// within pollDeadline (a request that should finish and waits instead).
func collectWithin(t *testing.T, s *engine.Stream, what string) (string, engine.Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pollDeadline)
	defer cancel()
	var text string
	for {
		c, err := s.Recv(ctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s: not finished after %s", what, pollDeadline)
			}
			return text, s.Result()
		}
		text += c.Text
	}
}

// TestPausedSlotLentToAnyClassAfterGrace: a request of a worse class than
// a paused answer, finding no free slot, takes the paused slot once the
// grace is over and runs to its end while the answer is still paused;
// the answer, continued, resumes from the host cache with nothing
// evaluated twice and the text it has alone; a grace that ends while
// nothing computes wakes the scheduler. Within the grace (an hour here)
// the slot is not lent: the worse request waits until the answer ends,
// and the answer is never preempted.
func TestPausedSlotLentToAnyClassAfterGrace(t *testing.T) {
	model := testmodel.TinyStories656K
	paced := pacedStory(100)
	paced.Prompt = longPrompt
	paced.PauseTimeout = time.Hour // only the grace can free the slot
	plain := paced
	plain.Chunking = nil
	want := alone(t, model, plain)
	other := greedy("Tom had a red ball", 10)
	other.Priority = 5

	for _, tt := range []struct {
		grace time.Duration
		lent  bool
	}{
		{time.Millisecond, true},
		// Likely still running when the other request comes: the
		// scheduler, idle, must wake when it ends.
		{300 * time.Millisecond, true},
		{time.Hour, false},
	} {
		t.Run(fmt.Sprintf("grace %v", tt.grace), func(t *testing.T) {
			e := newEngine(t, model, engine.Config{Parallel: 1, HostCacheBytes: 64 << 20, PauseGrace: tt.grace})
			p := submit(t, e, paced)
			c, _ := nextChunk(t, p)
			if !c.Held {
				t.Fatalf("first chunk %+v not held", c)
			}
			waitPaused(t, e, p)
			o := submit(t, e, other)
			if tt.lent {
				if _, r := collectWithin(t, o, "the worse-class request after the grace"); r.Usage.CompletionTokens != other.MaxTokens {
					t.Fatalf("the worse-class request: %+v", r)
				}
				if p.Done() {
					t.Fatal("the paused answer ended while the other request had its slot")
				}
			} else {
				poll(t, "waiting for the worse-class request to queue", func() (bool, string) {
					q := e.Stats().Queue
					return slices.Equal(q, []engine.ClassQueue{{Priority: 5, Queued: 1}}), fmt.Sprintf("queue %+v", q)
				})
				if in := slotOf(t, e, p.ID()); in.State != "paused" {
					t.Fatalf("the paused answer lost its slot within the grace: %+v", in)
				}
			}
			p.Continue(c.Index)
			rest, res := pace(t, p, 1)
			if got := c.Text + joined(rest); got != want {
				t.Errorf("paced text:\n got %q\nwant %q (alone)", got, want)
			}
			wantPre := 0
			if tt.lent {
				wantPre = 1
			}
			if res.Preemptions != wantPre || res.Usage.ReevaluatedTokens != 0 {
				t.Errorf("paced result %+v: want %d preemptions, nothing evaluated twice", res, wantPre)
			}
			if !tt.lent {
				if _, r := collectWithin(t, o, "the worse-class request after the answer"); r.Usage.CompletionTokens != other.MaxTokens {
					t.Fatalf("the worse-class request: %+v", r)
				}
			}
		})
	}
}

// TestQueueTimesOutWhileSlotsPause: a request queued behind a paused slot
// it may not take (a better class, within the grace) fails with
// ErrQueueTimeout once it has waited MaxQueueWait, though nothing computes
// meanwhile; the paused answer keeps its slot.
func TestQueueTimesOutWhileSlotsPause(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1, PauseGrace: time.Hour, MaxQueueWait: 20 * time.Millisecond})
	paced := pacedStory(100)
	paced.PauseTimeout = time.Hour
	p := submit(t, e, paced)
	nextChunk(t, p)
	waitPaused(t, e, p)
	worse := greedy("Hello", 4)
	worse.Priority = 1
	_, res := collectWithin(t, submit(t, e, worse), "the queued request")
	if res.FinishReason != engine.FinishError || !errors.Is(res.Err, engine.ErrQueueTimeout) || res.Slot != -1 {
		t.Fatalf("queued request: %+v, want ErrQueueTimeout without a slot", res)
	}
	if res.Timings.Queued < 20*time.Millisecond {
		t.Errorf("timed out after %v in the queue, before MaxQueueWait", res.Timings.Queued)
	}
	if in := slotOf(t, e, p.ID()); in.State != "paused" {
		t.Errorf("the paused answer: %+v", in)
	}
	p.Cancel()
	collect(t, p)
}

// TestDefaultTimeLimits: an engine configured with zeros has a finite
// queue wait and pause grace (the defaults), and negative values turn
// them off.
func TestDefaultTimeLimits(t *testing.T) {
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 1})
	if wait, grace := engine.TimeLimits(e); wait != engine.DefaultMaxQueueWait || grace != engine.DefaultPauseGrace {
		t.Errorf("zero config: queue wait %v, pause grace %v; want %v, %v", wait, grace, engine.DefaultMaxQueueWait, engine.DefaultPauseGrace)
	}
	if engine.DefaultMaxQueueWait <= 0 || engine.DefaultPauseGrace <= 0 {
		t.Errorf("defaults %v, %v: want finite limits", engine.DefaultMaxQueueWait, engine.DefaultPauseGrace)
	}
	off := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 1, MaxQueueWait: -1, PauseGrace: -1})
	if wait, grace := engine.TimeLimits(off); wait >= 0 || grace >= 0 {
		t.Errorf("negative config: queue wait %v, pause grace %v; want them kept negative (off)", wait, grace)
	}
}
