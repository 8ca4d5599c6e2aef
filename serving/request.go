package serving

import (
	"maps"
	"slices"
	"strings"
	"time"

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
	// they override the server's and the others here. A value is a
	// json.RawMessage or what encoding/json encodes
	// (chat.Options.Kwargs).
	Kwargs map[string]any
	// Thinking (nil: the model's default) turns the model's thinking on
	// or off where the template reads enable_thinking (Qwen 3 and many
	// others) or thinking (DeepSeek V3.1).
	Thinking *bool
	// ReasoningEffort ("": none) is given to templates that read
	// reasoning_effort (gpt-oss).
	ReasoningEffort string
}

// TemplateKwargs are the template variables of a request: the model's,
// then thinking and reasoning_effort where the template reads them, then
// the request's own.
func TemplateKwargs(m *model.Model, v TemplateVars) map[string]any {
	kw := m.Kwargs()
	if v.Thinking != nil {
		for _, name := range []string{"enable_thinking", "thinking"} {
			if m.TemplateReads(name) {
				kw[name] = *v.Thinking
			}
		}
	}
	if v.ReasoningEffort != "" && m.TemplateReads("reasoning_effort") {
		kw["reasoning_effort"] = v.ReasoningEffort
	}
	maps.Copy(kw, v.Kwargs)
	return kw
}

// Request is a generation request in no dialect's words. Each dialect
// translates its wire body into one once, with its own validation and
// error shape, before the model is leased; Core.Build then makes the
// engine request and the answer plan from it for the leased model,
// checking what depends on the model (the vocabulary, the context, the
// template). A field a dialect does not expose keeps its zero value,
// which is the server's default.
type Request struct {
	// Messages are a chat, rendered by the model's chat template, unless
	// Prompt is set: then Prompt is the prompt as it is.
	Messages []chat.Message
	Prompt   *Prompt
	// Media are the request's images and sounds, decoded (package media)
	// and bounded by the dialect; Media[k] goes where chat.MediaMarker(k)
	// is in the rendered prompt or in Prompt.Text (a message's content
	// part chat.MediaPart(k)). At is set by Build.
	Media []engine.Media
	// Tools are the chat's tools and how the model may call them.
	Tools Tools
	// Vars are the chat's template variables (see TemplateKwargs).
	Vars TemplateVars
	// ReasoningBudget is the reasoning budget in tokens: nil the
	// server's, -1 none.
	ReasoningBudget *int
	// ReadPrompt reads the answer to a Prompt as a chat's is read (its
	// reasoning taken apart, its budget kept): Ollama's raw generate.
	// A Prompt's answer is otherwise plain text.
	ReadPrompt bool

	// Sampling are the sampling settings (validated by Build).
	Sampling Sampling
	// MaxTokens bounds the answer (0: until the context is full).
	MaxTokens int
	// IgnoreEOS generates past the end-of-generation token.
	IgnoreEOS bool
	// Stop are the request's stop strings (ParseStop bounds them); the
	// model's are added to a chat's.
	Stop []string
	// Grammar constrains the answer (GBNF: a response schema's, see
	// SchemaGrammar, or one given as it is); "" for none.
	Grammar string
	// Logprobs asks for each token's log-probability, TopLogprobs for
	// that many of the most likely tokens at each step with it.
	Logprobs    bool
	TopLogprobs int
	// Chunking paces the answer (nil: not paced), PauseTimeout bounds a
	// pause (0: the server's default; see Core.Admission).
	Chunking     *engine.Chunking
	PauseTimeout time.Duration
	// NoCachePrompt keeps the prompt out of the prefix cache
	// (llama-server's cache_prompt false); Slot pins the request to a
	// slot (llama-server's id_slot; nil: any).
	NoCachePrompt bool
	Slot          *int

	// Priority and CacheSalt are the request's, nil when absent (see
	// Core.Admission).
	Priority  *int
	CacheSalt *string
	// Stream answers as a stream; else whole.
	Stream bool
	// Params name the request fields errors report, as the dialect
	// calls them.
	Params Params
}

// Prompt is a prompt given as it is: Text, or token ids (checked
// against the model's vocabulary by Build).
type Prompt struct {
	Text   string
	Tokens []int64
}

// Params name a dialect's request fields for the errors Build reports.
type Params struct {
	// Prompt is the field of the messages or prompt ("messages",
	// "prompt", "input").
	Prompt string
	// Grammar is the field Request.Grammar came from ("" when none).
	Grammar string
	// Logprobs is the field a log-probability limit reports.
	Logprobs string
}

// Build makes the engine request of r for the model m and says how to
// answer it (its Framing and PacedID are the caller's to set): the
// sampling checked against the model; for a chat, the plan of its tools
// (a forced call's grammar), its prompt rendered by the chat template
// with the client's text marked plain, the model's stops, and how its
// answer is read.
func (c *Core) Build(m *model.Model, r *Request) (engine.Request, Generation, *Error) {
	lim := &c.limits
	info := m.Info()
	req := engine.Request{
		MaxTokens:     r.MaxTokens,
		IgnoreEOS:     r.IgnoreEOS,
		Stop:          slices.Clone(r.Stop),
		Grammar:       r.Grammar,
		Logprobs:      r.Logprobs,
		TopLogprobs:   r.TopLogprobs,
		Chunking:      r.Chunking,
		PauseTimeout:  r.PauseTimeout,
		NoCachePrompt: r.NoCachePrompt,
		AddSpecial:    true,
		ParseSpecial:  true,
	}
	if r.Slot != nil {
		req.PinSlot, req.SlotID = true, *r.Slot
	}
	g := Generation{Stream: r.Stream, PromptParam: r.Params.Prompt, GrammarParam: r.Params.Grammar, Priority: r.Priority, CacheSalt: r.CacheSalt}
	var e *Error
	if req.Sampling, e = r.Sampling.Engine(info.VocabSize, info.CtxPerRequest); e != nil {
		return req, g, e
	}
	if req.Logprobs && req.Chunking != nil {
		return req, g, Invalid("logprobs", "'logprobs' cannot be combined with 'chunking'")
	}
	if e := lim.CheckLogprobs(&req, info.CtxPerRequest, r.Params.Logprobs); e != nil {
		return req, g, e
	}
	if e := checkModalities(info, r.Media, r.Params.Prompt); e != nil {
		return req, g, e
	}
	if r.Prompt != nil {
		req.Prompt = r.Prompt.Text
		if req.Tokens, e = ParseTokens(r.Prompt.Tokens, info.VocabSize, r.Params.Prompt); e != nil {
			return req, g, e
		}
		if len(r.Media) > 0 {
			if len(req.Tokens) > 0 {
				return req, g, Invalid(r.Params.Prompt, "media go with a text prompt, not token ids")
			}
			req.Prompt, req.Media, req.Plain = placeMedia(req.Prompt, nil, r.Media)
		}
		if r.ReadPrompt {
			g.Plan = m.AnswerPlan(&req, nil, false, 0, r.ReasoningBudget)
		}
		return req, g, nil
	}
	plan, e := PlanTools(m, &r.Tools, lim)
	if e != nil {
		return req, g, e
	}
	switch {
	case plan.Parse && req.Chunking != nil:
		return req, g, Invalid("chunking", "'chunking' cannot pace an answer that may call tools: send \"tool_choice\": \"none\" or no 'tools'")
	case plan.Grammar != "" && req.Grammar != "":
		return req, g, Invalid("tool_choice", "'tool_choice' %s forces tool calls, which '%s' cannot constrain as well", r.Tools.Choice.describe(), r.Params.Grammar)
	case plan.Grammar != "":
		// A forced call's grammar comes from the tools; what forces it
		// is tool_choice.
		req.Grammar = plan.Grammar
		g.GrammarParam, g.UnwritableParam = "tools", "tool_choice"
	}
	kw := TemplateKwargs(m, r.Vars)
	if req.Prompt, e = Render(m, r.Messages, chat.Options{AddGenerationPrompt: true, Tools: plan.Render, Kwargs: kw}, lim); e != nil {
		return req, g, e
	}
	req.Plain = ClientSpans(req.Prompt, r.Messages)
	if len(r.Media) > 0 {
		req.Prompt, req.Media, req.Plain = placeMedia(req.Prompt, req.Plain, r.Media)
	}
	req.Stop = append(req.Stop, m.Stops()...)
	g.Plan = m.AnswerPlan(&req, plan.Render, plan.Parse, plan.Max, r.ReasoningBudget)
	return req, g, nil
}
