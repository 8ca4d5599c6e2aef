package serving

import (
	"maps"
	"strings"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/model"
)

// Building an engine request from what every dialect asks the same way:
// the prompt rendered by the model's chat template, the template's
// variables, the client's text marked as plain.

// Render applies the chat template to the messages with opt (its BOS
// and EOS are the model's), for a prompt of at most lim.MaxPromptBytes:
// rendering stops past it.
func Render(m *model.Model, msgs []chat.Message, opt chat.Options, lim *Limits) (string, *Error) {
	if len(msgs) == 0 {
		return "", Invalid("messages", "'messages' must be a non-empty array")
	}
	opt.MaxBytes = lim.MaxPromptBytes
	prompt, err := m.Render(msgs, opt)
	if err != nil {
		return "", RenderError(err, lim)
	}
	return prompt, nil
}

// ClientSpans finds the message contents in the rendered prompt, in
// order, so that the engine tokenizes them as plain text: a user who types
// "<|im_end|><|im_start|>system" gets those characters, not control
// tokens, while the template's own markers stay special. A content the
// template changed beyond trimming is not found and not marked.
//
// It takes linear time: a search that finds nothing reads the rest of the
// prompt, so once such searches have read four prompts' worth, the
// messages left are not looked for.
func ClientSpans(prompt string, msgs []chat.Message) []engine.Span {
	var spans []engine.Span
	at := 0
	budget := 4 * len(prompt) // bytes that failed searches may still read
	for _, m := range msgs {
		text, err := m.Text()
		if err != nil {
			continue
		}
		for _, t := range []string{text, strings.TrimSpace(text)} {
			if t == "" {
				break
			}
			if i := strings.Index(prompt[at:], t); i >= 0 {
				spans = append(spans, engine.Span{Start: at + i, End: at + i + len(t)})
				at += i + len(t)
				break
			}
			if budget -= len(prompt) - at; budget < 0 {
				return spans
			}
		}
	}
	return spans
}

// TemplateVars are the chat template variables a request sets, in no
// dialect's words.
type TemplateVars struct {
	// Kwargs are variables set as they are, such as enable_thinking;
	// they override the server's. A value is a json.RawMessage or what
	// encoding/json encodes (chat.Options.Kwargs).
	Kwargs map[string]any
	// ReasoningEffort ("": none) is given to templates that read
	// reasoning_effort (gpt-oss), unless Kwargs sets it.
	ReasoningEffort string
}

// TemplateKwargs are the template variables of a request: the model's,
// then reasoning_effort where the template reads it, then the request's
// own.
func TemplateKwargs(m *model.Model, v TemplateVars) map[string]any {
	kw := m.Kwargs()
	if v.ReasoningEffort != "" && m.Template().Reads("reasoning_effort") {
		kw["reasoning_effort"] = v.ReasoningEffort
	}
	maps.Copy(kw, v.Kwargs)
	return kw
}

// Chat is what a chat request asks the same way in every dialect, once
// decoded: its messages, its tools and how they may be called, its chat
// template variables and its reasoning budget.
type Chat struct {
	Messages []chat.Message
	Tools    *Tools
	// Vars are the request's chat template variables (see
	// TemplateKwargs).
	Vars TemplateVars
	// Budget is the reasoning budget in tokens: nil the server's, -1
	// none.
	Budget *int
	// GrammarParam names the request field of the grammar req has
	// already (a response format), which forced tool calls cannot be
	// constrained by as well.
	GrammarParam string
}

// BuildChat completes req, its sampling and grammar set, as c asks of the
// model m within lim: the plan of its tools (a forced call's grammar),
// its prompt rendered by the chat template with the client's text marked
// plain, the model's stops, and how its answer is read.
func BuildChat(m *model.Model, req *engine.Request, c *Chat, lim *Limits) (ToolPlan, model.Plan, *Error) {
	plan, e := PlanTools(m, c.Tools, lim)
	if e != nil {
		return plan, model.Plan{}, e
	}
	switch {
	case plan.Parse && req.Chunking != nil:
		return plan, model.Plan{}, Invalid("chunking", "'chunking' cannot pace an answer that may call tools: send \"tool_choice\": \"none\" or no 'tools'")
	case plan.Grammar != "" && req.Grammar != "":
		return plan, model.Plan{}, Invalid("tool_choice", "'tool_choice' %s forces tool calls, which '%s' cannot constrain as well", c.Tools.Choice.describe(), c.GrammarParam)
	case plan.Grammar != "":
		req.Grammar = plan.Grammar
	}
	kw := TemplateKwargs(m, c.Vars)
	if req.Prompt, e = Render(m, c.Messages, chat.Options{AddGenerationPrompt: true, Tools: plan.Render, Kwargs: kw}, lim); e != nil {
		return plan, model.Plan{}, e
	}
	req.AddSpecial, req.ParseSpecial = true, true
	req.Plain = ClientSpans(req.Prompt, c.Messages)
	req.Stop = append(req.Stop, m.Stops()...)
	return plan, m.AnswerPlan(req, plan.Render, plan.Parse, plan.Max, c.Budget), nil
}
