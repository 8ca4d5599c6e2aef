package openai

import (
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/model"
)

// responder shapes the responses of one completion endpoint. A responder
// serves one request, so it may keep state between events.
type responder interface {
	// streamStart is the first event of a stream, nil for none.
	streamStart() any
	// streamText is the event carrying generated text: c's text, or
	// part of it (a character split between chunks waits for the next);
	// nil when the text is held back for now (tool-call markup).
	// c.Tokens counts the tokens since the previous event, c.Logprobs
	// has their logprobs entries (with engine.Request.Logprobs).
	streamText(text string, c engine.Chunk) any
	// streamEnd are the events after the last text.
	streamEnd(res engine.Result) []any
	// whole is the response body when not streaming: the text and, with
	// engine.Request.Logprobs, every token's logprobs entry.
	whole(text string, lps []engine.TokenLogprobs, res engine.Result) any
}

// genMode says how to answer one generation.
type genMode struct {
	stream       bool
	doneMarker   bool    // end the stream with "data: [DONE]" (OpenAI)
	promptParam  string  // request field reported for prompt errors
	grammarParam string  // request field the grammar came from ("" when none)
	priority     *int    // the body's "priority", nil when absent
	cacheSalt    *string // the body's "cache_salt", nil when absent
	pacedID      string  // a paced stream's response id: Continue and cancel find it by this
	// unwritableParam is the request field reported when the model's
	// vocabulary cannot write what the grammar requires; "" for
	// grammarParam.
	unwritableParam string
	// ollama answers in Ollama's wire format: a stream of NDJSON lines
	// rather than server-sent events, and errors as {"error": message}
	// (see writeOllamaError).
	ollama bool
}

// generate submits req on the request's context and answers with f. When
// the client goes away, at any point, the request's context ends and the
// engine drops the request; so does a client that stops reading, once a
// write has waited StreamConfig.WriteTimeout.
//
// A stream sends its headers (200, text/event-stream) at the first text or
// once StreamConfig.KeepAlive has passed without any, whichever comes
// first, and then a ": ping" comment whenever KeepAlive passes without an
// event. A request that fails before the headers (queue full, queue
// timeout, engine error) gets a plain HTTP error status; one that fails
// after them gets an error event with the error envelope, then [DONE]
// where the endpoint uses it. With mode.ollama the stream is NDJSON
// (application/x-ndjson), its ping an object without text, and errors
// take Ollama's shape.
func (a *API) generate(w http.ResponseWriter, r *http.Request, m *model.Model, req engine.Request, mode genMode, f responder) {
	ctx := r.Context()
	cfg := streamConfig(ctx)
	fail, errorEvent := WriteError, (*Error).Envelope
	if mode.ollama {
		fail, errorEvent = writeOllamaError, ollamaErrorBody
	}
	var e *Error
	if e = a.admission(ctx, &req, mode.priority, r.Header, mode.cacheSalt); e != nil {
		fail(w, e)
		return
	}
	s, err := m.Engine().Submit(ctx, req)
	if err != nil {
		e := submitError(err, mode.promptParam)
		switch {
		case errors.Is(err, engine.ErrGrammarUnsatisfiable):
			e = mode.unsatisfiable(err)
		case errors.Is(err, engine.ErrGrammar) && mode.grammarParam != "":
			e.Param = mode.grammarParam
		}
		fail(w, e)
		return
	}
	out := &outcome{a: a, ctx: ctx, m: m, s: s}
	defer out.end()
	var paced *pacedStream
	if mode.pacedID != "" {
		paced = a.paced.add(mode.pacedID, s)
		defer a.paced.remove(mode.pacedID)
	}

	if !mode.stream {
		var text strings.Builder
		var lps []engine.TokenLogprobs
		if err := receive(ctx, s, func(c engine.Chunk) error {
			text.WriteString(c.Text)
			lps = append(lps, c.Logprobs...)
			return nil
		}); err != nil {
			out.gone = true
			return
		}
		res := s.Result()
		out.final(res)
		answer := text.String()
		if rp, ok := f.(repairer); ok {
			answer, res = a.repairCalls(ctx, m, req, rp.answerPlan(), answer, res)
		}
		if setWriteDeadline(http.NewResponseController(w), cfg.WriteTimeout) != nil {
			out.gone = true
			return
		}
		if e := mode.resultError(res); e != nil {
			fail(w, e)
			return
		}
		writeJSON(w, http.StatusOK, f.whole(answer, lps, res))
		return
	}

	var (
		sw      streamWriter // non-nil once the headers are sent
		started bool         // f.streamStart was sent
		carry   utf8Carry
		ntok    int                    // tokens received but not yet reported
		lps     []engine.TokenLogprobs // their logprobs entries
	)
	headers := func() error {
		if sw != nil {
			return nil
		}
		var err error
		if mode.ollama {
			sw, err = startNDJSON(w, cfg.WriteTimeout, func() any { return f.streamText("", engine.Chunk{}) })
		} else {
			sw, err = startSSETimeout(w, cfg.WriteTimeout)
		}
		return err
	}
	begin := func() error {
		if err := headers(); err != nil || started {
			return err
		}
		started = true
		if ev := f.streamStart(); ev != nil {
			return sw.event(ev)
		}
		return nil
	}
	for {
		c, err := recvWithin(ctx, s, cfg.KeepAlive)
		if err == io.EOF {
			break
		}
		if err == errIdle {
			// Queued or prefilling: show the client (and any proxy) that
			// the request is alive.
			if headers() != nil || sw.ping() != nil {
				out.gone = true // or does not read
				return
			}
			continue
		}
		if err != nil {
			out.gone = true
			return
		}
		if begin() != nil {
			out.gone = true
			return
		}
		ntok += c.Tokens
		lps = append(lps, c.Logprobs...)
		text := carry.next(c.Text)
		if text == "" {
			continue
		}
		c.Tokens, ntok = ntok, 0
		c.Logprobs, lps = lps, nil
		if paced != nil {
			paced.sent(c) // before the client can see it and continue
		}
		if ev := f.streamText(text, c); ev != nil && sw.event(ev) != nil {
			out.gone = true
			return
		}
	}
	res := s.Result()
	out.final(res)
	e = mode.resultError(res)
	if e != nil && sw == nil {
		fail(w, e)
		return
	}
	if e == nil && begin() != nil {
		out.gone = true
		return
	}
	if rest := carry.rest(); rest != "" || len(lps) > 0 {
		if ev := f.streamText(rest, engine.Chunk{Tokens: ntok, Logprobs: lps}); ev != nil && sw.event(ev) != nil {
			out.gone = true
			return
		}
	}
	if e != nil {
		if sw.event(errorEvent(e)) != nil {
			out.gone = true
			return
		}
	} else {
		for _, ev := range f.streamEnd(res) {
			if sw.event(ev) != nil {
				out.gone = true
				return
			}
		}
	}
	if mode.doneMarker {
		sw.done()
	}
}

// resultError is resultError(res), the request field at fault named as
// the mode says.
func (mode genMode) resultError(res engine.Result) *Error {
	if res.FinishReason == engine.FinishError && errors.Is(res.Err, engine.ErrGrammarUnsatisfiable) {
		return mode.unsatisfiable(res.Err)
	}
	return resultError(res)
}

// unsatisfiable is the error of a grammar the model's vocabulary cannot
// write, about the field that asked for it.
func (mode genMode) unsatisfiable(err error) *Error {
	param := mode.unwritableParam
	if param == "" {
		param = mode.grammarParam
	}
	if param == "" {
		param = "grammar"
	}
	return unsatisfiable(err, param)
}

// Drain stops admission: from then on requests fail with 503, and so do
// those queued in every engine, while running ones go on.
func (a *API) Drain() { a.models.Drain() }
