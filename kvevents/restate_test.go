package kvevents_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-llm/corral/kvevents"
	"github.com/corral-llm/corral/kvevents/kvtest"
)

// A subscriber that joins learns the whole state from the publisher, at
// most once an interval, and no other subscriber hears of it (issue 31,
// finding 4: the engine's scheduler used to tell every subscriber all it
// held at each join).

// block is what a subscriber knows of a held block.
type block struct {
	parent string // hex; "" for none
	tokens string
}

// state replays batches into what a subscriber knows is held, by medium
// and hash.
type state map[string]block

func (st state) apply(t *testing.T, b kvtest.Batch) {
	t.Helper()
	for _, e := range b.Events {
		switch e.Kind {
		case "BlockStored":
			per := len(e.Tokens) / max(1, len(e.Hashes))
			parent := e.Parent
			for i, h := range e.Hashes {
				var toks []uint64
				if len(e.Tokens) > 0 {
					toks = e.Tokens[i*per : (i+1)*per]
				}
				p := ""
				if parent != nil {
					p = fmt.Sprintf("%x", parent)
				}
				st[e.Medium+"/"+fmt.Sprintf("%x", h)] = block{p, fmt.Sprint(toks)}
				parent = h
			}
		case "BlockRemoved":
			for _, h := range e.Hashes {
				delete(st, e.Medium+"/"+fmt.Sprintf("%x", h))
			}
		case "AllBlocksCleared":
			clear(st)
		}
	}
}

// TestRestateToJoinerOnly: a subscriber that joins gets the whole state
// at once, numbered as the last batch it covers, with every block's
// parent and tokens as the batches told them; a subscriber already there
// gets nothing more than the batches.
func TestRestateToJoinerOnly(t *testing.T) {
	p, addr := bindLoopback(t, kvevents.Options{})
	s := p.Topic("kv@pod@m")
	a := dial(t, addr)
	subscribe(t, a, "kv@")
	h := []kvevents.Hash{hash(0), hash(1), hash(2), hash(3), hash(4)}
	batches := [][]kvevents.Event{
		{{Kind: kvevents.Stored, Hashes: h[:3], Tokens: tokens(3*kvevents.BlockSize, 0)}},
		{{Kind: kvevents.Stored, Hashes: h[3:4], Parent: &h[1], Tokens: tokens(kvevents.BlockSize, 100)}, // a branch off h[1]
			{Kind: kvevents.Stored, Hashes: h[:1], Tokens: tokens(kvevents.BlockSize, 0), Medium: kvevents.MediumCPU}},
		{{Kind: kvevents.Removed, Hashes: h[2:3]}},
	}
	known := state{}
	for i, b := range batches {
		s.Publish(b)
		m := recv(t, a)
		if m.Seq != uint64(i) {
			t.Fatalf("batch %d came as %d", i, m.Seq)
		}
		known.apply(t, decode(t, m))
	}
	b := dial(t, addr)
	msgs := subscribe(t, b, "kv@")
	if len(msgs) == 0 {
		msgs = append(msgs, recv(t, b))
	}
	re := msgs[0]
	if re.Topic != "kv@pod@m" || re.Seq != uint64(len(batches)-1) {
		t.Fatalf("the joiner's first message: %q number %d; want the restatement, numbered %d", re.Topic, re.Seq, len(batches)-1)
	}
	got := state{}
	got.apply(t, decode(t, re))
	if !maps.Equal(got, known) {
		t.Errorf("the restatement tells\n%v\nthe batches told\n%v", got, known)
	}
	s.Publish([]kvevents.Event{{Kind: kvevents.Removed, Hashes: h[3:4]}})
	for name, sub := range map[string]*kvtest.Sub{"the first subscriber": a, "the joiner": b} {
		if m := recv(t, sub); m.Seq != uint64(len(batches)) {
			t.Errorf("%s got message %d next; want batch %d", name, m.Seq, len(batches))
		}
	}
	if n := p.Restates(); n != 1 {
		t.Errorf("%d restatements built; want 1", n)
	}
}

// TestRestateRateLimited: within RestateInterval of a restatement, a
// joiner gets the batches but not the state; a topic nobody joined is
// not restated.
func TestRestateRateLimited(t *testing.T) {
	p, addr := bindLoopback(t, kvevents.Options{RestateInterval: patience * 60})
	s := p.Topic("kv@pod@m")
	p.Topic("kv@pod@other").Publish([]kvevents.Event{{Kind: kvevents.Stored, Hashes: []kvevents.Hash{hash(9)}, Tokens: tokens(kvevents.BlockSize, 0)}})
	stored := []kvevents.Event{{Kind: kvevents.Stored, Hashes: []kvevents.Hash{hash(1)}, Tokens: tokens(kvevents.BlockSize, 0)}}
	// A watcher there from the start gets batch 0 as a batch; once it
	// has, the publisher has encoded it, and the first joiner is sure to
	// join a topic with a state (had it joined first, it would have got
	// batch 0 as a batch and the second joiner the first restatement).
	w := dial(t, addr)
	subscribe(t, w, "kv@pod@m")
	s.Publish(stored)
	if m := recv(t, w); m.Seq != 0 {
		t.Fatalf("the watcher's first message is %d; want batch 0", m.Seq)
	}
	a := dial(t, addr)
	msgs := subscribe(t, a, "kv@pod@m")
	if len(msgs) == 0 {
		msgs = append(msgs, recv(t, a))
	}
	if msgs[0].Seq != 0 || len(decode(t, msgs[0]).Events) != 1 {
		t.Fatalf("the first joiner's first message is %d; want the restatement of batch 0", msgs[0].Seq)
	}
	b := dial(t, addr)
	if msgs := subscribe(t, b, "kv@pod@m"); len(msgs) != 0 {
		t.Fatalf("a second joiner within the interval got %d messages before any batch", len(msgs))
	}
	s.Publish(stored)
	if m := recv(t, b); m.Seq != 1 {
		t.Errorf("the second joiner's first message is %d; want batch 1", m.Seq)
	}
	if n := p.Restates(); n != 1 {
		t.Errorf("%d restatements built; want 1", n)
	}
}

// TestJoinLeaveUnderLoad: subscribers that come and go while batches are
// published each see a consistent stream: sequence numbers never go back
// (a restatement repeats the number of the last batch it covers), and
// what a subscriber replays, once its restatement is in, is at each
// batch the state of the batches up to there. The batches go out in
// waves, one after each join, so that joins fall all along the stream.
// Close then leaves no goroutine (TestMain).
func TestJoinLeaveUnderLoad(t *testing.T) {
	p, addr := bindLoopback(t, kvevents.Options{RestateInterval: 1})
	s := p.Topic("kv@pod@m")
	const subscribers, rounds, per = 4, 5, 40
	const waves = subscribers*rounds + 1
	const n = waves * per // within the publisher's queue of batches: a wave waits for a join
	r := rand.New(rand.NewPCG(1, 2))
	var batches [][]kvevents.Event
	truth := make([]state, n) // after each batch
	st := state{}
	for i := range n {
		var e kvevents.Event
		if h := hash(r.IntN(64)); i%3 == 2 {
			e = kvevents.Event{Kind: kvevents.Removed, Hashes: []kvevents.Hash{h}}
		} else {
			e = kvevents.Event{Kind: kvevents.Stored, Hashes: []kvevents.Hash{h}, Tokens: tokens(kvevents.BlockSize, i)}
		}
		batches = append(batches, []kvevents.Event{e})
		st.apply(t, asBatch(e))
		truth[i] = maps.Clone(st)
	}
	joined, stop := make(chan struct{}, waves), make(chan struct{})
	var published atomic.Int64 // waves
	var publisher, subs sync.WaitGroup
	publisher.Go(func() {
		for w := range waves {
			if w > 0 {
				select {
				case <-joined:
				case <-stop: // a subscriber failed
					return
				}
			}
			for _, b := range batches[w*per : (w+1)*per] {
				s.Publish(b)
			}
			published.Store(int64(w + 1))
		}
	})
	for range subscribers {
		subs.Go(func() {
			for range rounds {
				if !joinAndFollow(t, addr, joined, &published, truth, waves, per) {
					return
				}
			}
		})
	}
	subs.Wait()
	close(stop)
	publisher.Wait()
}

// joinAndFollow joins the publisher at addr, signals joined, and reads
// until the end of the wave after those published when it joined, and
// until the state it replayed is the state of the batches up to there.
func joinAndFollow(t *testing.T, addr string, joined chan<- struct{}, published *atomic.Int64, truth []state, waves, per int) bool {
	sub, err := kvtest.Dial(addr, patience)
	if err != nil {
		t.Error(err)
		return false
	}
	defer sub.Close()
	sub.SetReadDeadline(time.Now().Add(patience))
	sub.Subscribe("kv@")
	early, err := sub.Sync()
	if err != nil {
		t.Error(err)
		return false
	}
	target := uint64(min(int(published.Load()), waves-1)*per + per - 1)
	joined <- struct{}{} // the next wave goes out
	seen, last := state{}, uint64(0)
	for last < target || !maps.Equal(seen, truth[last]) {
		var m kvtest.Message
		if len(early) > 0 {
			m, early = early[0], early[1:]
		} else if m, err = sub.Recv(); err != nil {
			t.Errorf("after message %d, holding %d blocks where the batches hold %d: %v", last, len(seen), len(truth[last]), err)
			return false
		}
		if m.Seq < last {
			t.Errorf("message %d after %d", m.Seq, last)
			return false
		}
		last = m.Seq
		b, err := kvtest.Decode(m.Payload)
		if err != nil {
			t.Error(err)
			return false
		}
		seen.apply(t, b)
	}
	return true
}

// asBatch is e as a subscriber decodes it.
func asBatch(e kvevents.Event) kvtest.Batch {
	d := kvtest.Event{Medium: e.Medium, TokensField: e.Kind == kvevents.Stored, BlockSize: kvevents.BlockSize}
	d.Kind = map[kvevents.Kind]string{kvevents.Stored: "BlockStored", kvevents.Removed: "BlockRemoved", kvevents.Cleared: "AllBlocksCleared"}[e.Kind]
	for _, h := range e.Hashes {
		d.Hashes = append(d.Hashes, h[:])
	}
	if e.Parent != nil {
		d.Parent = e.Parent[:]
	}
	for _, tok := range e.Tokens {
		d.Tokens = append(d.Tokens, uint64(tok))
	}
	return kvtest.Batch{Events: []kvtest.Event{d}}
}

// TestLostBatchAsksResync: a batch dropped before it is encoded (here:
// larger than the queue of batches may hold) is counted, its number
// skipped, and its stream asks, once, for the whole state again.
func TestLostBatchAsksResync(t *testing.T) {
	p, addr := bindLoopback(t, kvevents.Options{})
	s := p.Topic("kv@pod@m")
	sub := dial(t, addr)
	subscribe(t, sub, "kv@")
	s.Publish([]kvevents.Event{{Kind: kvevents.Removed, Hashes: make([]kvevents.Hash, 64<<20/32+1)}}) // over 64 MiB
	if !s.Resync() || s.Resync() {
		t.Error("a dropped batch did not make its stream ask for the whole state once")
	}
	s.Publish([]kvevents.Event{{Kind: kvevents.Cleared}})
	if m := recv(t, sub); m.Seq != 1 {
		t.Errorf("the batch after the dropped one came as %d; want 1", m.Seq)
	}
	if p.Dropped() != 1 || p.Published() != 2 {
		t.Errorf("%d published, %d dropped; want 2 and 1", p.Published(), p.Dropped())
	}
}
