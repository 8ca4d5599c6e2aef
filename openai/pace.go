package openai

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-llm/corral/chat"
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

// chunkingParams is the request's "chunking" object (see engine.Chunking).
type chunkingParams struct {
	FirstMinTokens *int     `json:"first_min_tokens"`
	FirstMaxTokens *int     `json:"first_max_tokens"`
	MaxChars       *int     `json:"max_chars"`
	PauseTimeout   *float64 `json:"pause_timeout"` // seconds
}

// engine converts p; nil p is no chunking.
func (p *chunkingParams) engine() (*engine.Chunking, time.Duration, *Error) {
	if p == nil {
		return nil, 0, nil
	}
	var c engine.Chunking
	for _, f := range []struct {
		name string
		v    *int
		dst  *int
	}{
		{"first_min_tokens", p.FirstMinTokens, &c.FirstMinTokens},
		{"first_max_tokens", p.FirstMaxTokens, &c.FirstMaxTokens},
		{"max_chars", p.MaxChars, &c.MaxChars},
	} {
		if f.v == nil {
			continue
		}
		if *f.v < 1 || *f.v > 1<<20 {
			return nil, 0, invalid("chunking", "'chunking.%s' must be in [1, %d], got %d", f.name, 1<<20, *f.v)
		}
		*f.dst = *f.v
	}
	if c.FirstMinTokens > 0 && c.FirstMaxTokens > 0 && c.FirstMinTokens > c.FirstMaxTokens {
		return nil, 0, invalid("chunking", "'chunking.first_min_tokens' (%d) is more than 'first_max_tokens' (%d)", c.FirstMinTokens, c.FirstMaxTokens)
	}
	var timeout time.Duration
	if p.PauseTimeout != nil {
		s := *p.PauseTimeout
		if !(s > 0 && s <= MaxPauseTimeout.Seconds()) {
			return nil, 0, invalid("chunking", "'chunking.pause_timeout' must be in (0, %g] seconds, got %g", MaxPauseTimeout.Seconds(), s)
		}
		timeout = time.Duration(s * float64(time.Second))
	}
	return &c, timeout, nil
}

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

// PacedChat starts a paced chat completion for another face of the API
// (package voice): body is a chat completion request, its "chunking"
// object optional (defaults); it is never streamed as HTTP. Its messages
// follow history, the conversation so far, which is not decoded or
// encoded again. The request lives until ctx ends or it finishes; its
// model stays loaded until the caller calls release, once done with the
// stream (release records a finished stream in the request metrics).
// With conv, its prompt continues conv's tokens when its text does (see
// Conversation).
func (a *API) PacedChat(ctx context.Context, body []byte, history []chat.Message, conv *Conversation) (s *engine.Stream, release func(), e *Error) {
	var req chatRequest
	if e := decodeJSON(body, &req); e != nil {
		return nil, nil, e
	}
	if len(history) > 0 {
		req.Messages = append(slices.Clip(history), req.Messages...)
	}
	if e := a.limits.checkChat(req.Messages, &req.toolFields); e != nil {
		return nil, nil, e
	}
	if req.Chunking == nil {
		req.Chunking = &chunkingParams{}
	}
	if e := req.chatUnsupported.check(); e != nil {
		return nil, nil, e
	}
	l, e := a.acquire(ctx, req.Model, req.KeepAlive)
	if e != nil {
		return nil, nil, e
	}
	m := l.Model()
	r, _, e := newChatRequest(m, &req, &a.limits)
	if e == nil {
		e = a.admission(ctx, &r, req.Priority, nil, req.CacheSalt)
	}
	if e != nil {
		l.Release()
		return nil, nil, e
	}
	if conv != nil {
		if conv.model != m.Info().Name {
			*conv = Conversation{model: m.Info().Name}
		}
		conv.pending = r.Prompt
		if cut := len(conv.text); conv.tokens != nil && strings.HasPrefix(r.Prompt, conv.text) {
			r.Prefix, r.Prompt = conv.tokens, r.Prompt[cut:]
			r.Plain = shiftSpans(r.Plain, cut)
		}
	}
	s, err := m.Engine().Submit(ctx, r)
	if err != nil {
		l.Release()
		return nil, nil, submitError(err, "messages")
	}
	release = func() {
		if s.Done() { // as it is once the caller has read the stream to its end
			a.metrics.observe(m.Info().Name, s.Result())
		}
		l.Release()
	}
	return s, release, nil
}

// pacedStreams finds the paced streams being served by response id.
type pacedStreams struct {
	m sync.Map // id → *pacedStream
}

// pacedStream is one paced response being served.
type pacedStream struct {
	s    *engine.Stream
	last atomic.Int64 // index of the last chunk sent, -1 before the first
}

func (p *pacedStreams) add(id string, s *engine.Stream) *pacedStream {
	ps := &pacedStream{s: s}
	ps.last.Store(-1)
	p.m.Store(id, ps)
	return ps
}

func (p *pacedStreams) remove(id string) { p.m.Delete(id) }

func (p *pacedStreams) get(id string) (*pacedStream, *Error) {
	v, ok := p.m.Load(id)
	if !ok {
		return nil, &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Code: "not_found",
			Message: fmt.Sprintf("no paced response %q is streaming (it finished, or never existed)", id)}
	}
	return v.(*pacedStream), nil
}

// sent records a chunk written to the client.
func (ps *pacedStream) sent(c engine.Chunk) { ps.last.Store(int64(c.Index)) }

// continueBody is the optional body of .../continue.
type continueBody struct {
	Index *int `json:"index"`
}

// cancelBody is the optional body of .../cancel.
type cancelBody struct {
	SpokenChars *int `json:"spoken_chars"`
}

// pacedAck is the answer to continue and cancel.
type pacedAck struct {
	ID     string `json:"id"`
	Object string `json:"object"`          // "chat.completion.continue" or ".cancel"
	Index  *int   `json:"index,omitempty"` // continue: the chunk continued
}

// ContinueChat serves POST /v1/chat/completions/{id}/continue: the paced
// response goes on past the chunk given by index (default: the last one
// sent).
func (a *API) ContinueChat(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var body continueBody
	if e := decodeOptionalBody(r, &body); e != nil {
		WriteError(w, e)
		return
	}
	ps, e := a.paced.get(id)
	if e != nil {
		WriteError(w, e)
		return
	}
	index := int(ps.last.Load())
	if body.Index != nil {
		if *body.Index < 0 {
			WriteError(w, invalid("index", "'index' must be >= 0, got %d", *body.Index))
			return
		}
		index = *body.Index
	}
	ps.s.Continue(index)
	writeJSON(w, http.StatusOK, pacedAck{ID: id, Object: "chat.completion.continue", Index: &index})
}

// CancelChat serves POST /v1/chat/completions/{id}/cancel: the response
// ends, its stream with finish_reason "interrupted"; spoken_chars says how
// much of it the listener heard (default: all that was generated).
func (a *API) CancelChat(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var body cancelBody
	if e := decodeOptionalBody(r, &body); e != nil {
		WriteError(w, e)
		return
	}
	if body.SpokenChars != nil && *body.SpokenChars < 0 {
		WriteError(w, invalid("spoken_chars", "'spoken_chars' must be >= 0, got %d", *body.SpokenChars))
		return
	}
	ps, e := a.paced.get(id)
	if e != nil {
		WriteError(w, e)
		return
	}
	spoken := math.MaxInt32 // all of it
	if body.SpokenChars != nil {
		spoken = *body.SpokenChars
	}
	ps.s.Interrupt(spoken)
	writeJSON(w, http.StatusOK, pacedAck{ID: id, Object: "chat.completion.cancel"})
}

// shiftSpans moves spans of a prompt to a suffix of it that starts at
// byte cut, dropping what lies before.
func shiftSpans(spans []engine.Span, cut int) []engine.Span {
	var out []engine.Span
	for _, sp := range spans {
		if sp.End <= cut {
			continue
		}
		out = append(out, engine.Span{Start: max(sp.Start, cut) - cut, End: sp.End - cut})
	}
	return out
}
