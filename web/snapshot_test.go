package web

import (
	"testing"
	"time"
)

// TestRate: tokens/s and mean TTFT over an interval, summed over the
// models; a model loaded again in between (its counters went back) counts
// from zero, and one new in the interval counts whole.
func TestRate(t *testing.T) {
	t0 := time.Unix(100, 0)
	prev := map[string]counters{
		"a": {tokens: 100, ttftCount: 2, ttftSum: 40 * time.Millisecond},
		"b": {tokens: 500, ttftCount: 9, ttftSum: time.Second},
	}
	cur := map[string]counters{
		"a": {tokens: 300, ttftCount: 4, ttftSum: 80 * time.Millisecond}, // +200 tokens, 2 first tokens in 40ms
		"b": {tokens: 50, ttftCount: 1, ttftSum: 10 * time.Millisecond},  // reloaded: 50 tokens, 1 in 10ms
		"c": {tokens: 50},                                                // new, no first token
	}
	r := rate(prev, cur, t0, t0.Add(2*time.Second))
	if r.Seconds != 2 || r.TokensPerSecond != 150 || r.FirstTokens != 3 || r.TTFTMs == nil || *r.TTFTMs != 50.0/3 {
		t.Fatalf("rate %+v (ttft %v)", r, r.TTFTMs)
	}
	if r := rate(cur, cur, t0, t0.Add(time.Second)); r.TokensPerSecond != 0 || r.TTFTMs != nil || r.FirstTokens != 0 {
		t.Fatalf("rate of an idle interval %+v", r)
	}
	if r := rate(prev, cur, t0, t0); r != nil {
		t.Fatalf("rate of an empty interval %+v", r)
	}
}

// TestChanged: a snapshot is sent between the periodic ones when what
// the page shows changes, not for the time alone.
func TestChanged(t *testing.T) {
	base := func() Snapshot {
		return Snapshot{Time: 1, Status: "ok", Models: []ModelView{{ID: "m", State: "loaded",
			Slots: []SlotView{{ID: 0, State: "idle"}}, Queue: []ClassQueue{}}}}
	}
	if a, b := base(), base(); changed(a, b) {
		t.Fatal("equal snapshots changed")
	}
	b := base()
	b.Time = 2
	if changed(base(), b) {
		t.Fatal("the time alone changed the snapshot")
	}
	for name, edit := range map[string]func(*Snapshot){
		"status":      func(s *Snapshot) { s.Status = "draining" },
		"memory":      func(s *Snapshot) { s.Memory.UsedBytes = 1 },
		"model state": func(s *Snapshot) { s.Models[0].State = "unloading" },
		"slot state":  func(s *Snapshot) { s.Models[0].Slots[0].State = "decode" },
		"slot tokens": func(s *Snapshot) { s.Models[0].Slots[0].Decoded = 3 },
		"queue":       func(s *Snapshot) { s.Models[0].Queue = append(s.Models[0].Queue, ClassQueue{Queued: 1}) },
		"model added": func(s *Snapshot) { s.Models = append(s.Models, ModelView{ID: "n"}) },
	} {
		b := base()
		edit(&b)
		if !changed(base(), b) {
			t.Errorf("a change of %s went unnoticed", name)
		}
	}
}
