package openai

import (
	"net/http"
	"strings"

	"github.com/corral-llm/corral/engine"
)

// responder shapes the responses of one completion endpoint. A responder
// serves one request, so it may keep state between events.
type responder interface {
	// streamStart is the first event of a stream, nil for none.
	streamStart() any
	// streamText is the event carrying generated text.
	streamText(text string, tokens int) any
	// streamEnd are the events after the last text.
	streamEnd(res engine.Result) []any
	// whole is the response body when not streaming.
	whole(text string, res engine.Result) any
}

// genMode says how to answer one generation.
type genMode struct {
	stream      bool
	doneMarker  bool   // end the stream with "data: [DONE]" (OpenAI)
	promptParam string // request field reported for prompt errors
}

// generate submits req on the request's context and answers with f. When
// the client goes away, at any point, the request's context ends and the
// engine drops the request.
func (a *API) generate(w http.ResponseWriter, r *http.Request, req engine.Request, mode genMode, f responder) {
	ctx := r.Context()
	s, err := a.eng.Submit(ctx, req)
	if err != nil {
		WriteError(w, submitError(err, mode.promptParam))
		return
	}
	defer s.Cancel()

	if !mode.stream {
		var text strings.Builder
		if err := receive(ctx, s, func(c engine.Chunk) error {
			text.WriteString(c.Text)
			return nil
		}); err != nil {
			return // the client is gone
		}
		res := s.Result()
		if e := resultError(res); e != nil {
			WriteError(w, e)
			return
		}
		writeJSON(w, http.StatusOK, f.whole(text.String(), res))
		return
	}

	// The stream begins with the first text, so that a request failing
	// before any (queue timeout, engine error) still gets an HTTP status.
	var (
		sse   *sseWriter
		carry utf8Carry
		ntok  int // tokens received but not yet reported
	)
	begin := func() error {
		if sse != nil {
			return nil
		}
		sse = startSSE(w)
		if ev := f.streamStart(); ev != nil {
			return sse.event(ev)
		}
		return nil
	}
	if err := receive(ctx, s, func(c engine.Chunk) error {
		if err := begin(); err != nil {
			return err
		}
		ntok += c.Tokens
		text := carry.next(c.Text)
		if text == "" {
			return nil
		}
		n := ntok
		ntok = 0
		return sse.event(f.streamText(text, n))
	}); err != nil {
		return // the client is gone
	}
	res := s.Result()
	e := resultError(res)
	if e != nil && sse == nil {
		WriteError(w, e)
		return
	}
	if begin() != nil {
		return
	}
	if rest := carry.rest(); rest != "" {
		if sse.event(f.streamText(rest, ntok)) != nil {
			return
		}
	}
	if e != nil {
		if sse.event(e.envelope()) != nil {
			return
		}
	} else {
		for _, ev := range f.streamEnd(res) {
			if sse.event(ev) != nil {
				return
			}
		}
	}
	if mode.doneMarker {
		sse.done()
	}
}
