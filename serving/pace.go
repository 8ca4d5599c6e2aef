package serving

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/wire"
)

// Paced chat completions, for voice agents: "chunking" on a streamed
// /v1/chat/completions request makes the engine cut the answer into
// sentence-sized chunks and pause after each one, holding the slot, its KV
// cache and the sampler, until the client says its text-to-speech is done
// with the chunk:
//
//	POST /v1/chat/completions/{id}/continue   {"index": n}   (optional; default: the last chunk sent)
//	POST /v1/chat/completions/{id}/cancel     {"spoken_chars": n}   (optional)
//
// {id} is the stream's response id. A cancel with spoken_chars is an
// interrupt: the KV cache keeps the prompt and the tokens of the first n
// characters, what the listener heard (see engine.Stream.Interrupt). Each
// text event carries "chunk": {"index", "held", "last"}; the usage chunk
// (stream_options.include_usage) carries "paced" metrics. The WebSocket
// face of the same mechanism is package voice.

// PacedMetricsOf measures a finished paced response.
func PacedMetricsOf(res engine.Result) wire.PacedMetrics {
	u := res.Usage
	m := wire.PacedMetrics{
		SlotID: res.Slot, Chunks: res.Chunks, TotalMS: ms(res.Timings.Total), TTFTMS: ms(res.Timings.TTFT),
		FirstChunkMS: ms(res.Timings.FirstChunk), ReevaluatedTokens: u.ReevaluatedTokens,
		HeldMS: ms(res.Timings.Held), CachedTokens: u.CachedTokens, EvaluatedTokens: u.EvaluatedTokens,
		FinishReason: string(res.FinishReason),
	}
	if u.PromptTokens > 0 {
		m.CacheHitRatio = float64(u.CachedTokens) / float64(u.PromptTokens)
	}
	return m
}

// Conversation carries a paced conversation from one turn to the next at
// the token level: the next turn's prompt starts with exactly the tokens
// the KV cache holds (the previous prompt and the answer's tokens, cut to
// what was spoken), where the model's own words, tokenized again from
// their text, need not give back its tokens. The zero value is a new
// conversation. Not for concurrent use.
type Conversation struct {
	model   string  // the model whose tokens these are
	text    string  // the rendered prompt text tokens stand for
	tokens  []int32 // engine.Result.History of the last turn
	pending string  // the current turn's rendered prompt
}

// Answered records the turn's result: output is the answer's text as
// delivered (its chunks).
func (c *Conversation) Answered(res engine.Result, output string) {
	kept := []rune(output)
	if res.History == nil || res.HistoryChars > len(kept) {
		c.text, c.tokens = "", nil // the text path will do
		return
	}
	c.text = c.pending + string(kept[:res.HistoryChars])
	c.tokens = res.History
}

// Resume prepares r, the next turn of c's conversation with model, to
// continue c's tokens when its prompt continues their text: r's prompt
// is then the rest, after the tokens (engine.Request.Prefix).
func (c *Conversation) Resume(r *engine.Request, model string) {
	if c.model != model {
		*c = Conversation{model: model}
	}
	c.pending = r.Prompt
	if cut := len(c.text); c.tokens != nil && strings.HasPrefix(r.Prompt, c.text) {
		r.Prefix, r.Prompt = c.tokens, r.Prompt[cut:]
		r.Plain = ShiftSpans(r.Plain, cut)
	}
}

// pacedStreams finds the paced streams being served by response id.
type pacedStreams struct {
	m sync.Map // id → *PacedStream
}

// PacedStream is one paced response being served, which its client
// continues and cancels by the response's id.
type PacedStream struct {
	s    *engine.Stream
	last atomic.Int64 // index of the last chunk sent, -1 before the first
}

func (p *pacedStreams) add(id string, s *engine.Stream) *PacedStream {
	ps := &PacedStream{s: s}
	ps.last.Store(-1)
	p.m.Store(id, ps)
	return ps
}

func (p *pacedStreams) remove(id string) { p.m.Delete(id) }

// Paced finds the paced response id being served: 404 when none is.
func (c *Core) Paced(id string) (*PacedStream, *Error) {
	return c.paced.get(id)
}

func (p *pacedStreams) get(id string) (*PacedStream, *Error) {
	v, ok := p.m.Load(id)
	if !ok {
		return nil, &Error{Status: http.StatusNotFound, Code: "not_found",
			Message: fmt.Sprintf("no paced response %q is streaming (it finished, or never existed)", id)}
	}
	return v.(*PacedStream), nil
}

// sent records a chunk written to the client.
func (ps *PacedStream) sent(c engine.Chunk) { ps.last.Store(int64(c.Index)) }

// Last is the index of the last chunk sent, -1 before the first.
func (ps *PacedStream) Last() int { return int(ps.last.Load()) }

// Continue lets the response go on past chunk index (see
// engine.Stream.Continue).
func (ps *PacedStream) Continue(index int) { ps.s.Continue(index) }

// Interrupt ends the response, the listener having heard spoken
// characters of it (see engine.Stream.Interrupt).
func (ps *PacedStream) Interrupt(spoken int) { ps.s.Interrupt(spoken) }

// ShiftSpans moves spans of a prompt to a suffix of it that starts at
// byte cut, dropping what lies before.
func ShiftSpans(spans []engine.Span, cut int) []engine.Span {
	var out []engine.Span
	for _, sp := range spans {
		if sp.End <= cut {
			continue
		}
		out = append(out, engine.Span{Start: max(sp.Start, cut) - cut, End: sp.End - cut})
	}
	return out
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// PacedRequest is a paced generation asked by another face of the API
// than HTTP (package voice), typed: nothing is encoded to be decoded
// again.
type PacedRequest struct {
	// Model names the model ("": the default), KeepAlive the keep_alive
	// asked (nil: none).
	Model     string
	KeepAlive *KeepAlive
	// Request is what is asked: paced when its Chunking is set (a voice
	// turn's sound is transcribed unpaced, its stream read to the end).
	Request *Request
	// Conv, when set, carries the conversation's tokens from one turn to
	// the next (see Conversation).
	Conv *Conversation
}

// StartPaced leases the model p names, builds its engine request, admits
// and submits it. The request lives until ctx ends or it finishes; its
// model stays loaded until the caller calls release, once done with the
// stream (release records a finished stream in the request metrics).
func (c *Core) StartPaced(ctx context.Context, p PacedRequest) (s *engine.Stream, release func(), e *Error) {
	l, e := c.Acquire(ctx, p.Model, p.KeepAlive)
	if e != nil {
		return nil, nil, e
	}
	m := l.Model()
	r, g, e := c.Build(m, p.Request)
	if e == nil {
		e = c.Admission(ctx, &r, g.Priority, nil, g.CacheSalt)
	}
	if e != nil {
		l.Release()
		return nil, nil, e
	}
	if p.Conv != nil {
		p.Conv.Resume(&r, m.Info().Name)
	}
	s, err := m.Engine().Submit(ctx, r)
	if err != nil {
		l.Release()
		return nil, nil, SubmitError(err, g.PromptParam)
	}
	release = func() {
		if s.Done() { // as it is once the caller has read the stream to its end
			c.metrics.observe(m.Info().Name, s.Result())
		}
		l.Release()
	}
	return s, release, nil
}
