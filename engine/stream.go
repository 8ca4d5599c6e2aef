package engine

import (
	"context"
	"io"
	"strings"
	"sync"
)

// Stream is the caller's handle on a submitted request. Text arrives through
// Recv; the final state through Result once Recv has returned io.EOF.
//
// The scheduler writes into the stream's mailbox under a short mutex and
// signals a one-slot channel, so delivery never blocks the scheduler: a
// reader that falls behind gets the text coalesced into its next chunk.
type Stream struct {
	id           uint64
	promptTokens int
	cancel       context.CancelFunc // ends the request's context

	notify chan struct{} // capacity 1: "the mailbox changed"

	mu      sync.Mutex
	pending strings.Builder
	ntok    int
	done    bool
	result  Result
}

func newStream(id uint64, promptTokens int, cancel context.CancelFunc) *Stream {
	return &Stream{id: id, promptTokens: promptTokens, cancel: cancel, notify: make(chan struct{}, 1)}
}

// ID is the engine-wide request id (increasing from 1).
func (s *Stream) ID() uint64 { return s.id }

// PromptTokens is the number of prompt tokens after tokenization.
func (s *Stream) PromptTokens() int { return s.promptTokens }

// Cancel ends the request. The scheduler frees its slot at the next step
// boundary; Recv then returns io.EOF with FinishCancelled. Safe to call
// more than once and after the request finished.
func (s *Stream) Cancel() { s.cancel() }

// Recv waits for generated text. It returns io.EOF once the request has
// finished and all text was delivered, or ctx's error if ctx ends first
// (which does not cancel the request; use Cancel or the Submit context).
func (s *Stream) Recv(ctx context.Context) (Chunk, error) {
	for {
		s.mu.Lock()
		if s.pending.Len() > 0 {
			c := Chunk{Text: s.pending.String(), Tokens: s.ntok}
			s.pending.Reset()
			s.ntok = 0
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

// deliver appends text; called by the scheduler only. Never blocks.
func (s *Stream) deliver(text string, ntok int) {
	if text == "" && ntok == 0 {
		return
	}
	s.mu.Lock()
	s.pending.WriteString(text)
	s.ntok += ntok
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
