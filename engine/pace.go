package engine

import (
	"slices"
	"time"
	"unicode/utf8"
)

// Paced output for voice agents (Request.Chunking). The text of a paced
// request goes out in sentence-sized chunks (sentence.go decides where
// they end), and after each one the request pauses in its slot: the slot
// keeps its KV cache and the sampler its state, the token that starts the
// next sentence is sampled but not yet evaluated, and the slot takes no
// part in batches until Stream.Continue. So a paced response evaluates
// exactly the tokens an unpaced one does. Only the scheduler goroutine
// runs this.

// pacing is a paced request's progress, part of its generation.
type pacing struct {
	chunks     *chunker
	timeout    time.Duration
	index      int       // chunks delivered so far: the next chunk's index
	heldAt     time.Time // when the current pause began; zero when not paused
	heldTotal  time.Duration
	firstChunk time.Time
	delivered  int // characters of the chunks delivered
}

func newPacing(c Chunking, timeout time.Duration) *pacing {
	if timeout <= 0 {
		timeout = DefaultPauseTimeout
	}
	return &pacing{chunks: newChunker(c), timeout: timeout}
}

// held reports whether the request waits for Continue.
func (p *pacing) held() bool { return !p.heldAt.IsZero() }

// deadline is when the current pause times out.
func (p *pacing) deadline() time.Time { return p.heldAt.Add(p.timeout) }

// admissible reports whether r may take a slot: a preempted paced request
// that still waits for Continue has nothing to compute, and one whose
// disk-tier file is being read (see prefetch) waits for it.
func (r *request) admissible() bool {
	return !r.held() && (r.load == nil || r.load.done)
}

// held reports whether r, preempted while paused, waits for its client.
func (r *request) held() bool { return r.gen.pace != nil && r.gen.pace.held() }

// nextChunk delivers the complete chunks r's text holds and pauses r
// after the first that the client has not let it go past already
// (Stream.Continue with a later index). It reports whether r is paused.
func (s *scheduler) nextChunk(r *request, now time.Time) bool {
	p := r.gen.pace
	for {
		text, ntok, ok := p.chunks.next()
		if !ok {
			return false
		}
		c := Chunk{Text: text, Tokens: ntok, Index: p.index, Held: r.stream.continued.Load() < int64(p.index)}
		p.delivered += utf8.RuneCountInString(text)
		if p.index == 0 {
			p.firstChunk = now
		}
		p.index++
		r.stream.deliverChunk(c)
		if c.Held {
			p.heldAt = now
			return true
		}
	}
}

// lastChunks delivers what r's text holds at the end of its generation,
// still cut at sentence boundaries (nothing pauses any more), the final
// chunk marked Last.
func (s *scheduler) lastChunks(r *request, now time.Time) {
	p := r.gen.pace
	var cs []Chunk
	for {
		text, ntok, ok := p.chunks.next()
		if !ok {
			break
		}
		cs = append(cs, Chunk{Text: text, Tokens: ntok})
	}
	if text, ntok := p.chunks.flush(); text != "" {
		cs = append(cs, Chunk{Text: text, Tokens: ntok})
	}
	for i, c := range cs {
		if p.index == 0 {
			p.firstChunk = now
		}
		c.Index = p.index
		c.Last = i == len(cs)-1
		p.delivered += utf8.RuneCountInString(c.Text)
		p.index++
		r.stream.deliverChunk(c)
	}
}

// unpause looks at a paused request: it reports expired once the pause
// has lasted its timeout, released once the client continued it.
func (s *scheduler) unpause(r *request, now time.Time) (released, expired bool) {
	p := r.gen.pace
	switch {
	case r.stream.continued.Load() >= int64(p.index-1):
		p.heldTotal += now.Sub(p.heldAt)
		p.heldAt = time.Time{}
		return true, false
	case !now.Before(p.deadline()):
		p.heldTotal += now.Sub(p.heldAt)
		return false, true
	}
	return false, false
}

// pauseDeadline is the earliest time a pause times out, false if nothing
// is paused.
func (s *scheduler) pauseDeadline() (time.Time, bool) {
	var d time.Time
	see := func(r *request) {
		if p := r.gen.pace; p != nil && p.held() && (d.IsZero() || p.deadline().Before(d)) {
			d = p.deadline()
		}
	}
	for _, sl := range s.slots {
		if sl.state == statePaused {
			see(sl.req)
		}
	}
	for _, r := range s.waiting {
		see(r)
	}
	return d, !d.IsZero()
}

// graceOver reports whether the paused slot's grace (Config.PauseGrace)
// is over: a waiting request of any class may take it.
func (s *scheduler) graceOver(sl *slot, now time.Time) bool {
	return !now.Before(sl.req.gen.pace.heldAt.Add(max(s.e.cfg.PauseGrace, 0)))
}

// graceDeadline is the earliest end of a paused slot's grace after now,
// when a request that may take a slot waits; false if none. (A grace over
// by now needs no wake-up: busy, at the same instant, saw it.)
func (s *scheduler) graceDeadline(now time.Time) (time.Time, bool) {
	if !slices.ContainsFunc(s.waiting, (*request).admissible) {
		return time.Time{}, false
	}
	var d time.Time
	for _, sl := range s.slots {
		if sl.state != statePaused {
			continue
		}
		end := sl.req.gen.pace.heldAt.Add(max(s.e.cfg.PauseGrace, 0))
		if end.After(now) && (d.IsZero() || end.Before(d)) {
			d = end
		}
	}
	return d, !d.IsZero()
}

// keepSpoken trims the slot's cache, for an interrupted request whose
// listener heard its first spoken characters, to the prompt and the
// generated tokens whose text lies within them: the next turn, with the
// assistant's message cut to what was heard, finds that prefix cached and
// nothing the user did not hear.
func (s *scheduler) keepSpoken(sl *slot, spoken int) {
	r := sl.req
	if r.gen.pace == nil {
		return // nothing records where an unpaced request's text lies
	}
	k, _ := r.gen.history(spoken)
	s.truncate(sl, min(len(sl.cache), len(r.tokens)+k))
}

// pacedDone adds a finished paced request to the engine's sums.
func (s *scheduler) pacedDone(r *request, reason FinishReason) {
	g := &r.gen
	p := g.pace
	st := &s.paced
	st.Requests++
	st.Chunks += uint64(p.index)
	switch reason {
	case FinishPauseTimeout:
		st.PauseTimeouts++
	case FinishInterrupted:
		st.Interrupted++
	}
	if g.started {
		st.CachedTokens += uint64(g.cached)
		st.PromptEvaluated += uint64(g.evalPrompt)
		st.Reevaluated += uint64(g.reevaluated(len(r.tokens)))
	}
	if !p.firstChunk.IsZero() {
		st.FirstChunk += p.firstChunk.Sub(r.submitted)
		st.FirstChunkCount++
	}
}
