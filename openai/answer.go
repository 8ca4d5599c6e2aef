package openai

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

// answerPlan is how one request's answer is read.
type answerPlan struct {
	think  reasoning.Format // splits the reasoning off; nil: none
	opened bool             // the prompt opened the reasoning
	tools  toolcall.Format  // reads calls from the content; nil: none
	defs   []wire.Tool      // the tools the calls are of
	max    int              // calls kept at most; 0: all
}

// reads reports whether the answer is read at all, rather than passed on
// as it is.
func (p answerPlan) reads() bool { return p.think != nil || p.tools != nil }

// reader returns a reader of one streamed answer.
func (p answerPlan) reader() *answerReader {
	a := &answerReader{}
	if p.think != nil {
		a.split = p.think.Splitter(p.opened)
	}
	if p.tools != nil {
		a.calls = p.tools.Parser(p.defs, p.max)
	}
	return a
}

// parse reads a whole answer, as a reader fed it in pieces would (but a
// call cut off at the end: see toolcall.Parse). cut says the answer was
// cut off (max_tokens, the end of the context).
func (p answerPlan) parse(text string, cut bool) (thinking, content string, calls []wire.ToolCall) {
	content = text
	if p.think != nil {
		thinking, content = reasoning.Split(p.think, p.opened, text)
	}
	if p.tools != nil {
		content, calls = toolcall.Parse(p.tools, p.defs, content, p.max, cut)
	}
	return thinking, content, calls
}

// answerReader reads one streamed answer.
type answerReader struct {
	split reasoning.Splitter // nil: the reasoning is not split off
	calls toolcall.Parser    // nil: calls are not read
}

// push adds text to the answer and returns the pieces it decided: the
// reasoning (a delta with ReasoningContent), then content and calls.
func (a *answerReader) push(text string) []wire.Delta {
	if a.split == nil {
		return a.content(text)
	}
	r, c := a.split.Push(text)
	return a.pieces(r, c)
}

// finish ends the answer (cut: it was cut off) and returns the pieces
// still held.
func (a *answerReader) finish(cut bool) []wire.Delta {
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

// Calls are the complete calls read so far.
func (a *answerReader) Calls() []wire.ToolCall {
	if a.calls == nil {
		return nil
	}
	return a.calls.Calls()
}

func (a *answerReader) pieces(thinking, content string) []wire.Delta {
	var out []wire.Delta
	if thinking != "" {
		out = append(out, wire.Delta{ReasoningContent: &thinking})
	}
	return append(out, a.content(content)...)
}

func (a *answerReader) content(text string) []wire.Delta {
	switch {
	case a.calls != nil:
		return a.calls.Push(text)
	case text == "":
		return nil
	}
	return []wire.Delta{{Content: &text}}
}

// merge joins pieces into one delta: their reasoning, content and calls.
func merge(ds []wire.Delta) wire.Delta {
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

// answerPlan prepares req, its prompt rendered, for the model's
// reasoning and tool-call formats, and returns how its answer is read:
// calls of tools when readCalls, keeping max. budget is the request's
// reasoning budget (nil: the server's; negative: none). The markup of
// both formats is output as text (engine.Request.ShowTokens). A prompt
// that opened the reasoning is noted, and a grammar that forces the
// answer (tool_choice, response_format) then lets the reasoning go on
// and close before what it forces; a budget becomes the engine's
// (engine.Request.Reasoning), which closes the reasoning in time.
func (m *Model) answerPlan(req *engine.Request, tools []wire.Tool, readCalls bool, max int, budget *int) answerPlan {
	plan := answerPlan{}
	if readCalls {
		plan.tools, plan.defs, plan.max = m.tools, tools, max
	}
	req.ShowTokens = m.show
	f := m.think
	if f == nil {
		return plan
	}
	opened := reasoning.Opened(f, req.Prompt)
	if m.split && req.Chunking == nil {
		// A paced answer is passed on as it is: each chunk is an event.
		plan.think, plan.opened = f, opened
	}
	if req.Grammar != "" && opened {
		req.Grammar = grammar.WithPrefix(req.Grammar, f.End(), f.Close())
	}
	n := m.budget
	if budget != nil {
		n = *budget
	}
	if n >= 0 && len(m.closeToks) > 0 {
		req.Reasoning = &engine.Reasoning{Budget: n, Open: opened, Start: f.Start(), End: f.End(), Close: m.closeToks}
	}
	return plan
}

// reasoningParams are a request's reasoning budget, under either name
// clients send it: thinking_budget, max_reasoning_tokens.
type reasoningParams struct {
	ThinkingBudget     *int `json:"thinking_budget"`
	MaxReasoningTokens *int `json:"max_reasoning_tokens"`
}

// budget is the requested budget in tokens: nil when absent (the
// server's default applies), -1 for none.
func (p *reasoningParams) budget() (*int, *Error) {
	b, param := p.ThinkingBudget, "thinking_budget"
	if b == nil {
		b, param = p.MaxReasoningTokens, "max_reasoning_tokens"
	} else if p.MaxReasoningTokens != nil && *p.MaxReasoningTokens != *b {
		return nil, invalid("max_reasoning_tokens", "'thinking_budget' and 'max_reasoning_tokens' name the same budget: send one")
	}
	if b != nil && *b < -1 {
		return nil, invalid(param, "'%s' must be -1 (no budget) or >= 0 tokens, got %d", param, *b)
	}
	return b, nil
}
