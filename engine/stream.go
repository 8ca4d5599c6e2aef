package engine

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
)

// Stream is the caller's handle on a submitted request. Text arrives through
// Recv; the final state through Result once Recv has returned io.EOF.
//
// The scheduler writes into the stream's mailbox under a short mutex and
// signals a one-slot channel, so delivery never blocks the scheduler: a
// reader that falls behind gets the text coalesced into its next chunk
// (a paced request's chunks stay apart).
type Stream struct {
	id           uint64
	promptTokens int
	cancel       context.CancelFunc // ends the request's context
	wake         func()             // pokes the scheduler

	notify chan struct{} // capacity 1: "the mailbox changed"

	// Set by the caller, read by the scheduler.
	continued atomic.Int64 // the highest chunk index passed to Continue, -1 for none
	spoken    atomic.Int64 // Interrupt's spokenChars, -1 until then

	mu     sync.Mutex
	queue  []Chunk // delivered, unread
	open   bool    // the last queued chunk may still grow (unpaced text)
	done   bool
	result Result
}

func newStream(id uint64, promptTokens int, cancel context.CancelFunc, wake func()) *Stream {
	s := &Stream{id: id, promptTokens: promptTokens, cancel: cancel, wake: wake, notify: make(chan struct{}, 1)}
	s.continued.Store(-1)
	s.spoken.Store(-1)
	return s
}

// ID is the engine-wide request id (increasing from 1).
func (s *Stream) ID() uint64 { return s.id }

// PromptTokens is the number of prompt tokens after tokenization.
func (s *Stream) PromptTokens() int { return s.promptTokens }

// Cancel ends the request. The scheduler frees its slot at the next step
// boundary; Recv then returns io.EOF with FinishCancelled. Safe to call
// more than once and after the request finished.
func (s *Stream) Cancel() { s.cancel() }

// Continue resumes a paced request held after the chunk with the given
// index (see Request.Chunking); an index the request has not reached
// yet allows it to go on through that chunk without a pause. Continuing
// an older chunk, an unpaced request or a finished one does nothing.
func (s *Stream) Continue(index int) {
	for {
		old := s.continued.Load()
		if int64(index) <= old {
			return
		}
		if s.continued.CompareAndSwap(old, int64(index)) {
			s.wake()
			return
		}
	}
}

// Interrupt ends the request like Cancel, after the listener heard only
// the first spokenChars characters (runes) of its text. For a paced
// request (Request.Chunking) the KV cache keeps the prompt and the
// generated tokens whose text lies within them, so that the next turn,
// with the assistant's message cut to what was heard, finds it cached.
// The request finishes with FinishInterrupted.
func (s *Stream) Interrupt(spokenChars int) {
	s.spoken.CompareAndSwap(-1, int64(max(0, spokenChars)))
	s.cancel()
}

// Recv waits for generated text. It returns io.EOF once the request has
// finished and all text was delivered, or ctx's error if ctx ends first
// (which does not cancel the request; use Cancel or the Submit context).
func (s *Stream) Recv(ctx context.Context) (Chunk, error) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			c := s.queue[0]
			s.queue[0] = Chunk{}
			s.queue = s.queue[1:]
			if len(s.queue) == 0 {
				s.queue, s.open = nil, false
			}
			s.mu.Unlock()
			return c, nil
		}
		if s.done {
			s.mu.Unlock()
			return Chunk{}, io.EOF
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-ctx.Done():
			return Chunk{}, ctx.Err()
		}
	}
}

// Result is the request's final state. It is complete once Recv has
// returned io.EOF; before that it reports what is known so far.
func (s *Stream) Result() Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.result
}

// Done reports whether the request has finished (text may remain unread).
func (s *Stream) Done() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

// deliver appends unpaced text and the logprobs entries released with it
// (copied: the caller reuses lps); called by the scheduler only. Never
// blocks.
func (s *Stream) deliver(text string, ntok int, lps []TokenLogprobs) {
	if text == "" && ntok == 0 && len(lps) == 0 {
		return
	}
	s.mu.Lock()
	if n := len(s.queue); n > 0 && s.open {
		c := &s.queue[n-1]
		c.Text += text
		c.Tokens += ntok
		c.Logprobs = append(c.Logprobs, lps...)
	} else {
		c := Chunk{Text: text, Tokens: ntok}
		if len(lps) > 0 {
			c.Logprobs = append([]TokenLogprobs(nil), lps...)
		}
		s.queue = append(s.queue, c)
		s.open = true
	}
	s.mu.Unlock()
	s.signal()
}

// deliverChunk queues one whole paced chunk; called by the scheduler only.
func (s *Stream) deliverChunk(c Chunk) {
	s.mu.Lock()
	s.queue = append(s.queue, c)
	s.open = false
	s.mu.Unlock()
	s.signal()
}

// finish records the final state; called by the scheduler only, once.
func (s *Stream) finish(r Result) {
	s.mu.Lock()
	s.result = r
	s.done = true
	s.mu.Unlock()
	s.signal()
	s.cancel() // release the context's resources
}

func (s *Stream) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}
