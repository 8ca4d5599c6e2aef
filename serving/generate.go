package serving

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/wire"
)

// Encoder is what a dialect implements to frame one answer: its events
// while it streams, or its whole response. An Encoder serves one request,
// so it may keep state between calls.
//
// A stream's events arrive in this order: Start, then Deltas as the
// answer is decided, then either End or, when the generation fails once
// the stream has begun, Error. Each event is encoded as JSON: an Event is
// a server-sent event with a name, and an SSEAppender frames itself (in
// an NDJSON stream, an Event's Data is the line). A whole answer is one call of
// Whole. Errors before a stream's first event are not the Encoder's:
// they are returned to the handler (see Handle).
type Encoder interface {
	// Start returns the events that open a stream, nil for none.
	Start() []any
	// Deltas returns the events of the pieces of the answer decided
	// since the last call: ds are content, reasoning_content and
	// tool-call deltas as the answer's reader decided them (with a plan
	// that reads nothing, one delta with the text as content); calls are
	// the tool calls that became complete with them. c are the tokens
	// the text came from: c.Tokens counts them, c.Logprobs has their
	// entries (with engine.Request.Logprobs), c.Index, Held and Last say
	// which paced chunk they are. With a plan that reads, Deltas is
	// called for every piece of text received, so ds and calls may both
	// be empty (the reader holds the text back): an encoder that sends
	// logprobs keeps c's for its next event, and End sends those left.
	Deltas(ds []wire.Delta, calls []wire.ToolCall, c engine.Chunk) []any
	// End returns the events after the last delta: finish is the
	// neutral finish reason, res's FinishReason but "tool_calls" for an
	// answer that called tools and ended by itself.
	End(res engine.Result, finish string) []any
	// Whole returns the body of an answer that is not streamed.
	Whole(a Answer, res engine.Result) any
	// Error returns the event that reports e in a stream already begun.
	Error(e *Error) any
	// Ping returns the event that shows a waiting client (and proxies)
	// that the request is alive; nil for an SSE comment.
	Ping() any
}

// Answer is a whole answer, read as its plan says.
type Answer struct {
	// Text is the answer as the model wrote it (after any repair).
	Text string
	// Reasoning, Content and Calls are Text taken apart by the plan:
	// with a plan that reads nothing, Content is Text.
	Reasoning, Content string
	Calls              []wire.ToolCall
	// Logprobs has every token's entry, with engine.Request.Logprobs.
	Logprobs []engine.TokenLogprobs
	// Finish is the neutral finish reason (see Encoder.End).
	Finish string
}

// Framing is how a stream is written.
type Framing int

// The framings of a stream.
const (
	// SSE is server-sent events, text/event-stream.
	SSE Framing = iota
	// SSEDone is SSE ending with OpenAI's "data: [DONE]".
	SSEDone
	// NDJSON is newline-delimited JSON, application/x-ndjson.
	NDJSON
)

// Event is a server-sent event with a name ("event: Name"), Data its
// JSON data; events of other types have no name.
type Event struct {
	Name string
	Data any
}

// Generation says how to answer one engine request.
type Generation struct {
	// Stream answers as a stream in Framing; else whole, as JSON.
	Stream  bool
	Framing Framing
	// Plan is how the answer is read (see model.Plan): its reasoning
	// and tool calls taken apart, streamed or whole.
	Plan model.Plan
	// PromptParam is the request field reported for prompt errors.
	PromptParam string
	// GrammarParam is the request field the grammar came from ("" when
	// none); UnwritableParam the field reported when the model's
	// vocabulary cannot write what the grammar requires ("" for
	// GrammarParam).
	GrammarParam, UnwritableParam string
	// Priority is the body's priority, nil when absent; CacheSalt its
	// cache salt, nil when absent (see Core.Admission).
	Priority  *int
	CacheSalt *string
	// PacedID is a paced stream's response id, by which continue and
	// cancel find it (see Core.Paced); "" when not paced.
	PacedID string
	// InStream, when set, picks the errors of a stream's submission
	// (the engine refused the request before its first event) that the
	// stream reports all the same, as a failure its client reads there:
	// the headers (200), the encoder's Start, then its Error. Others are
	// an HTTP status, as always. OpenAI's Responses fails a response
	// whose prompt is over the context in its stream (response.failed,
	// code context_length_exceeded), where Codex looks for it.
	InStream func(e *Error) bool
}

// Generate admits req, submits it on the request's context and answers
// it through enc as g says. When the client goes away, at any point, the
// request's context ends and the engine drops the request; so does a
// client that stops reading, once a write has waited
// StreamConfig.WriteTimeout.
//
// A stream sends its headers (200) at the first text or once
// StreamConfig.KeepAlive has passed without any, whichever comes first,
// and then enc's ping whenever KeepAlive passes without an event. A
// request that fails before the headers (admission, queue full, queue
// timeout, engine error) returns its error, for the handler to write
// (but for the errors g.InStream picks); one that fails after them gets
// enc's error event, then [DONE] with SSEDone.
// An answer whose tool call failed is repaired (see Options.ToolRepair):
// a whole one before it is sent, a streamed one from the failed call on
// (see streamrepair.go).
func (c *Core) Generate(x *Exchange, req engine.Request, g Generation, enc Encoder) *Error {
	ctx := x.R.Context()
	if e := c.Admission(ctx, &req, g.Priority, x.R.Header, g.CacheSalt); e != nil {
		return e
	}
	m := x.Model
	s, err := m.Engine().Submit(ctx, req)
	if err != nil {
		e := SubmitError(err, g.PromptParam)
		switch {
		case errors.Is(err, engine.ErrGrammarUnsatisfiable):
			e = g.unsatisfiable(err)
		case errors.Is(err, engine.ErrGrammar) && g.GrammarParam != "":
			e.Param = g.GrammarParam
		}
		if g.Stream && g.InStream != nil && g.InStream(e) {
			st := &stream{x: x, g: g, enc: enc, cfg: StreamConfigOf(ctx)}
			if st.begin() == nil && st.sw.event(enc.Error(e)) == nil && g.Framing == SSEDone {
				st.sw.done()
			}
			return nil
		}
		return e
	}
	out := &outcome{core: c, ctx: ctx, m: m, s: s}
	defer out.end()
	if !g.Stream {
		return c.whole(x, out, req, g, enc)
	}
	var paced *PacedStream
	if g.PacedID != "" {
		paced = c.paced.add(g.PacedID, s)
		defer c.paced.remove(g.PacedID)
	}
	st := &stream{x: x, g: g, enc: enc, cfg: StreamConfigOf(ctx)}
	if g.Plan.Reads() {
		st.reader = g.Plan.Reader()
		if c.repairs(req, g.Plan) {
			st.fix = &streamRepair{req: req}
		}
	}
	var (
		carry utf8Carry
		ntok  int                    // tokens received but not yet reported
		lps   []engine.TokenLogprobs // their logprobs entries
	)
	for {
		ch, err := recvWithin(ctx, s, st.cfg.KeepAlive)
		if err == io.EOF {
			break
		}
		if err == errIdle {
			// Queued or prefilling: show the client (and any proxy) that
			// the request is alive.
			if st.ping() != nil {
				out.gone = true // or does not read
				return nil
			}
			continue
		}
		if err != nil || st.begin() != nil {
			out.gone = true
			return nil
		}
		ntok += ch.Tokens
		lps = append(lps, ch.Logprobs...)
		if text := carry.next(ch.Text); text != "" {
			ch.Tokens, ntok = ntok, 0
			ch.Logprobs, lps = lps, nil
			if paced != nil {
				paced.sent(ch) // before the client can see it and continue
			}
			if st.text(text, ch) != nil {
				out.gone = true
				return nil
			}
		}
		if st.alive() != nil {
			out.gone = true
			return nil
		}
	}
	res := s.Result()
	out.final(res)
	e := g.resultError(res)
	if e != nil && st.sw == nil {
		return e
	}
	if e == nil && st.begin() != nil {
		out.gone = true
		return nil
	}
	if rest := carry.rest(); rest != "" || len(lps) > 0 {
		if st.text(rest, engine.Chunk{Tokens: ntok, Logprobs: lps}) != nil {
			out.gone = true
			return nil
		}
	}
	if e != nil {
		if st.sw.event(enc.Error(e)) != nil {
			out.gone = true
			return nil
		}
	} else if st.end(res) != nil {
		out.gone = true
		return nil
	}
	if g.Framing == SSEDone {
		st.sw.done()
	}
	return nil
}

// whole answers a generation that is not streamed: the whole answer,
// repaired and read as g's plan says.
func (c *Core) whole(x *Exchange, out *outcome, req engine.Request, g Generation, enc Encoder) *Error {
	ctx := x.R.Context()
	var text strings.Builder
	var lps []engine.TokenLogprobs
	if err := receive(ctx, out.s, func(ch engine.Chunk) error {
		text.WriteString(ch.Text)
		lps = append(lps, ch.Logprobs...)
		return nil
	}); err != nil {
		out.gone = true
		return nil
	}
	res := out.s.Result()
	out.final(res)
	ans := Answer{Text: text.String(), Logprobs: lps}
	ans.Text, res = c.repairCalls(ctx, x.Model, req, g.Plan, ans.Text, res, nil)
	if setWriteDeadline(http.NewResponseController(x.W), StreamConfigOf(ctx).WriteTimeout) != nil {
		out.gone = true
		return nil
	}
	if e := g.resultError(res); e != nil {
		return e
	}
	ans.Content = ans.Text
	if g.Plan.Reads() {
		ans.Reasoning, ans.Content, ans.Calls = g.Plan.Parse(ans.Text, res.FinishReason == engine.FinishLength)
	}
	ans.Finish = g.finish(res, ans.Calls)
	switch body := enc.Whole(ans, res).(type) {
	case PlainText:
		x.W.Header().Set("Content-Type", "text/plain; charset=utf-8")
		x.W.WriteHeader(http.StatusOK)
		io.WriteString(x.W, string(body))
	default:
		WriteJSON(x.W, http.StatusOK, body)
	}
	return nil
}

// PlainText is a whole answer's body sent as text/plain, not JSON (a
// transcription's with response_format text).
type PlainText string

// stream is one streamed answer being written.
type stream struct {
	x       *Exchange
	g       Generation
	enc     Encoder
	cfg     StreamConfig
	reader  *model.Reader // reads the answer; nil when it is passed on as it is
	fix     *streamRepair // holds the calls back for repair; nil when they are not
	sw      streamWriter  // non-nil once the headers are sent
	started bool          // enc.Start was sent
	sent    int           // the reader's complete calls already sent
	wrote   time.Time     // when the client was last written to (by now)
}

// headers sends the stream's headers, once.
func (st *stream) headers() error {
	if st.sw != nil {
		return nil
	}
	var err error
	if st.g.Framing == NDJSON {
		st.sw, err = startNDJSON(st.x.W, st.cfg.WriteTimeout, st.enc.Ping)
	} else {
		st.sw, err = startSSETimeout(st.x.W, st.cfg.WriteTimeout, st.enc.Ping)
	}
	st.wrote = now()
	return err
}

// ping shows the client that the request is alive.
func (st *stream) ping() error {
	if err := st.headers(); err != nil {
		return err
	}
	st.wrote = now()
	return st.sw.ping()
}

// alive pings the client once KeepAlive has passed since it was last
// written to: tokens may come for a long time with nothing to send, while
// a stream holds back what may be a broken call, and while the call is
// repaired (see streamrepair.go), and a proxy's idle timeout must not end
// the request meanwhile.
func (st *stream) alive() error {
	if st.sw == nil || now().Sub(st.wrote) < st.cfg.KeepAlive {
		return nil
	}
	return st.ping()
}

// begin sends the headers and the encoder's first events, once.
func (st *stream) begin() error {
	if err := st.headers(); err != nil || st.started {
		return err
	}
	st.started = true
	return st.events(st.enc.Start())
}

// text passes text, from the tokens of c, through the answer's reader to
// the encoder.
func (st *stream) text(text string, c engine.Chunk) error {
	switch {
	case st.reader == nil:
		return st.events(st.enc.Deltas([]wire.Delta{{Content: &text}}, nil, c))
	case st.fix != nil:
		return st.push(text, c)
	}
	return st.events(st.enc.Deltas(st.reader.Push(text), st.calls(), c))
}

// calls are the calls the reader completed since the last ones sent.
func (st *stream) calls() []wire.ToolCall {
	calls := st.reader.Calls()[st.sent:]
	st.sent += len(calls)
	return calls
}

// end reads the end of the answer and sends the encoder's last events.
func (st *stream) end(res engine.Result) error {
	if st.fix != nil {
		return st.finish(res)
	}
	var calls []wire.ToolCall
	if st.reader != nil {
		ds, done := st.reader.Finish(res.FinishReason == engine.FinishLength), st.calls()
		if len(ds) > 0 || len(done) > 0 {
			if err := st.events(st.enc.Deltas(ds, done, engine.Chunk{})); err != nil {
				return err
			}
		}
		calls = st.reader.Calls()
	}
	return st.events(st.enc.End(res, st.g.finish(res, calls)))
}

// events writes evs, in order.
func (st *stream) events(evs []any) error {
	for _, ev := range evs {
		if err := st.sw.event(ev); err != nil {
			return err
		}
	}
	if len(evs) > 0 {
		st.wrote = now()
	}
	return nil
}

// finish is the neutral finish reason of an answer that made calls:
// "tool_calls" when the plan reads calls, it made some and it ended by
// itself; else res's.
func (g Generation) finish(res engine.Result, calls []wire.ToolCall) string {
	if g.Plan.Tools != nil && len(calls) > 0 && res.FinishReason == engine.FinishStop {
		return "tool_calls"
	}
	return string(res.FinishReason)
}

// resultError is ResultError(res), the request field at fault named as g
// says.
func (g Generation) resultError(res engine.Result) *Error {
	if res.FinishReason == engine.FinishError && errors.Is(res.Err, engine.ErrGrammarUnsatisfiable) {
		return g.unsatisfiable(res.Err)
	}
	return ResultError(res)
}

// unsatisfiable is the error of a grammar the model's vocabulary cannot
// write, about the field that asked for it.
func (g Generation) unsatisfiable(err error) *Error {
	param := g.UnwritableParam
	if param == "" {
		param = g.GrammarParam
	}
	if param == "" {
		param = "grammar"
	}
	return Unsatisfiable(err, param)
}

// Drain stops admission: from then on requests fail with 503, and so do
// those queued in every engine, while running ones go on.
func (c *Core) Drain() { c.models.Drain() }
