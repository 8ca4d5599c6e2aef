package model

import (
	"strings"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/reasoning"
	"github.com/corral-llm/corral/toolcall"
	"github.com/corral-llm/corral/wire"
)

// How a model's answer is read, the same for every dialect (OpenAI's chat
// completions, Ollama's /api/chat and /api/generate), whole or streamed:
// the reasoning splitter of the model's reasoning format takes the answer
// apart into reasoning and content, and the content goes on through the
// tool-call parser of its tool-call format when the request reads calls.

// Plan is how one request's answer is read.
type Plan struct {
	Think  reasoning.Format // splits the reasoning off; nil: none
	Opened bool             // the prompt opened the reasoning
	Tools  toolcall.Format  // reads calls from the content; nil: none
	Defs   []wire.Tool      // the tools the calls are of
	Max    int              // calls kept at most; 0: all
}

// Reads reports whether the answer is read at all, rather than passed on
// as it is.
func (p Plan) Reads() bool { return p.Think != nil || p.Tools != nil }

// Reader returns a reader of one streamed answer.
func (p Plan) Reader() *Reader {
	a := &Reader{}
	if p.Think != nil {
		a.split = p.Think.Splitter(p.Opened)
	}
	if p.Tools != nil {
		a.calls = p.Tools.Parser(p.Defs, p.Max)
	}
	return a
}

// Parse reads a whole answer, as a reader fed it in pieces would (but a
// call cut off at the end: see toolcall.Parse). cut says the answer was
// cut off (max_tokens, the end of the context).
func (p Plan) Parse(text string, cut bool) (thinking, content string, calls []wire.ToolCall) {
	content = text
	if p.Think != nil {
		thinking, content = reasoning.Split(p.Think, p.Opened, text)
	}
	if p.Tools != nil {
		content, calls = toolcall.Parse(p.Tools, p.Defs, content, p.Max, cut)
	}
	return thinking, content, calls
}

// Reader reads one streamed answer.
type Reader struct {
	split reasoning.Splitter // nil: the reasoning is not split off
	calls toolcall.Parser    // nil: calls are not read
}

// Push adds text to the answer and returns the pieces it decided: the
// reasoning (a delta with ReasoningContent), then content and calls.
func (a *Reader) Push(text string) []wire.Delta {
	if a.split == nil {
		return a.content(text)
	}
	r, c := a.split.Push(text)
	return a.pieces(r, c)
}

// Finish ends the answer (cut: it was cut off) and returns the pieces
// still held.
func (a *Reader) Finish(cut bool) []wire.Delta {
	var out []wire.Delta
	if a.split != nil {
		r, c := a.split.Finish()
		out = a.pieces(r, c)
	}
	if a.calls != nil {
		if cut {
			a.calls.Cut()
		}
		out = append(out, a.calls.Finish()...)
	}
	return out
}

// Failed reports whether a region of call markup turned out not to be a
// call, and was given back as content (see toolcall.Failed).
func (a *Reader) Failed() bool { return a.calls != nil && toolcall.Failed(a.calls) }

// Calls are the complete calls read so far.
func (a *Reader) Calls() []wire.ToolCall {
	if a.calls == nil {
		return nil
	}
	return a.calls.Calls()
}

func (a *Reader) pieces(thinking, content string) []wire.Delta {
	var out []wire.Delta
	if thinking != "" {
		out = append(out, wire.Delta{ReasoningContent: &thinking})
	}
	return append(out, a.content(content)...)
}

func (a *Reader) content(text string) []wire.Delta {
	switch {
	case a.calls != nil:
		return a.calls.Push(text)
	case text == "":
		return nil
	}
	return []wire.Delta{{Content: &text}}
}

// Merge joins pieces into one delta: their reasoning, content and calls.
func Merge(ds []wire.Delta) wire.Delta {
	var d wire.Delta
	var r, c strings.Builder
	for _, x := range ds {
		if x.ReasoningContent != nil {
			r.WriteString(*x.ReasoningContent)
		}
		c.WriteString(x.Text())
		d.ToolCalls = append(d.ToolCalls, x.ToolCalls...)
	}
	if r.Len() > 0 {
		s := r.String()
		d.ReasoningContent = &s
	}
	if c.Len() > 0 {
		s := c.String()
		d.Content = &s
	}
	return d
}

// AnswerPlan prepares req, its prompt rendered, for the model's
// reasoning and tool-call formats, and returns how its answer is read:
// calls of tools when readCalls, keeping max. budget is the request's
// reasoning budget (nil: the server's; negative: none). The markup of
// both formats is output as text (engine.Request.ShowTokens). A prompt
// that opened the reasoning is noted, and a grammar that forces the
// answer (tool_choice, response_format) then lets the reasoning go on
// and close before what it forces. The reasoning's markers go to the
// engine (engine.Request.Reasoning), which counts its tokens, and with a
// budget closes it in time.
func (m *Model) AnswerPlan(req *engine.Request, tools []wire.Tool, readCalls bool, max int, budget *int) Plan {
	plan := Plan{}
	if readCalls {
		plan.Tools, plan.Defs, plan.Max = m.tools, tools, max
	}
	req.ShowTokens = m.show
	f := m.think
	if f == nil {
		return plan
	}
	opened := reasoning.Opened(f, req.Prompt)
	if m.split && req.Chunking == nil {
		// A paced answer is passed on as it is: each chunk is an event.
		plan.Think, plan.Opened = f, opened
	}
	if req.Grammar != "" && opened {
		req.Grammar = grammar.WithPrefix(req.Grammar, f.End(), f.Close())
	}
	// The engine counts the reasoning's tokens (Usage.ReasoningTokens),
	// and closes it once a budget is spent.
	start, end := f.Start(), f.End()
	if end == "" || len(end) > engine.MaxMarker || len(start) > engine.MaxMarker || start == "" && !opened {
		return plan
	}
	req.Reasoning = &engine.Reasoning{Budget: -1, Open: opened, Start: start, End: end}
	n := m.budget
	if budget != nil {
		n = *budget
	}
	if n >= 0 && len(m.closeToks) > 0 {
		req.Reasoning.Budget, req.Reasoning.Close = n, m.closeToks
	}
	return plan
}
