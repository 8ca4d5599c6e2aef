// Package chat turns OpenAI-style messages into a prompt with the model's
// chat template (Jinja, as Hugging Face tokenizers ship them).
//
// Templates are rendered as transformers' apply_chat_template renders
// them (package chat/jinja), with the variables it gives them: messages,
// tools (None when there are none), documents (None),
// add_generation_prompt, bos_token, eos_token, raise_exception and
// strftime_now, and the caller's template arguments (Options.Kwargs). A
// template that reads functions and not tools (FireFunction v2's) gets
// what its callers pass it: functions, the tools as JSON text, and
// datetime.
package chat

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/corral-llm/corral/chat/jinja"
	"github.com/corral-llm/corral/wire"
)

// Message is one OpenAI chat message. Content is a string or an array of
// content parts ({"type":"text","text":...}); Text flattens it.
type Message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	Name       string          `json:"name,omitempty"`
	ToolCalls  []wire.ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	// ReasoningContent is the reasoning of an earlier assistant turn, as
	// llama-server and DeepSeek's API return it; Reasoning is the same as
	// vLLM names it. Templates that show past reasoning read either.
	ReasoningContent string `json:"reasoning_content,omitempty"`
	Reasoning        string `json:"reasoning,omitempty"`
}

// Options control rendering.
type Options struct {
	AddGenerationPrompt bool
	Tools               []wire.Tool
	BOSToken, EOSToken  string
	// Now is the time strftime_now reports (templates print today's date
	// from it); zero means the current time.
	Now time.Time
	// MaxBytes bounds the rendered text: rendering stops once the
	// template has written more, with an error wrapping ErrTooLong. 0
	// means no bound.
	MaxBytes int
	// Kwargs are extra template variables (a request's
	// chat_template_kwargs), such as enable_thinking or reasoning_effort.
	// A value is a json.RawMessage (objects keep their key order) or what
	// encoding/json decodes into an any. They may not replace the
	// variables above (see ErrReservedKwarg).
	Kwargs map[string]any
	// Mutable lets the template change lists and dicts in place
	// (list.append and the others: Kimi K2's template appends), which
	// transformers' sandbox refuses and so, without it, does Render
	// (see jinja.Options.Mutable).
	Mutable bool
}

// ErrReservedKwarg is wrapped by the error Render returns for an
// Options.Kwargs entry named like a variable Render sets itself.
var ErrReservedKwarg = errors.New("template argument is reserved")

// reserved are the variables Render sets.
var reserved = []string{"messages", "tools", "documents", "add_generation_prompt", "bos_token", "eos_token", "raise_exception", "strftime_now"}

// CheckKwarg reports whether name may be given in Options.Kwargs: an
// error wrapping ErrReservedKwarg if Render sets it itself.
func CheckKwarg(name string) error {
	if slices.Contains(reserved, name) {
		return fmt.Errorf("%w: %q is set by the server", ErrReservedKwarg, name)
	}
	return nil
}

// ErrTooLong is wrapped by the error Render returns when the rendered text
// would be longer than Options.MaxBytes.
var ErrTooLong = errors.New("rendered prompt too long")

// Template is a parsed chat template. It is safe for concurrent use.
type Template struct {
	tpl      *jinja.Template
	bos, eos string // defaults for empty Options.BOSToken/EOSToken
	stops    []string
	source   string
	// functions: the template reads the tools as functions, JSON text,
	// and the time as datetime, FireFunction v2's convention.
	functions bool
}

// newTemplate is a parsed template with what Render needs to know of it.
func newTemplate(tpl *jinja.Template, src string) *Template {
	return &Template{tpl: tpl, source: src, functions: tpl.Reads("functions") && !tpl.Reads("tools")}
}

// Lookup returns a built-in template by name ("chatml", "llama3", ...).
func Lookup(name string) (*Template, error) {
	b, ok := builtinTemplates[name]
	if !ok {
		return nil, fmt.Errorf("unknown chat template %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	tpl, err := jinja.Parse(b.source)
	if err != nil {
		return nil, fmt.Errorf("chat template %s: %w", name, err)
	}
	t := newTemplate(tpl, b.source)
	t.bos, t.eos, t.stops = b.bos, b.eos, b.stops
	return t, nil
}

// Parse parses a Jinja chat template source (tokenizer.chat_template).
// A syntax error is a *jinja.Error, which names the template line.
func Parse(src string) (*Template, error) {
	tpl, err := jinja.Parse(src)
	if err != nil {
		return nil, fmt.Errorf("parse chat template: %w", err)
	}
	t := newTemplate(tpl, src)
	t.stops = markersIn(src)
	return t, nil
}

// ErrMutates is wrapped by the error Check returns for a template that
// changes a list or dict in place, unless Options.Mutable allows it.
var ErrMutates = errors.New("the template changes a list or dict in place, which transformers' sandbox refuses")

// ErrNeedsTools is what a template that renders only requests offering
// tools (see Check) fails with given none; the caller wraps it around the
// render's error.
var ErrNeedsTools = errors.New("the chat template renders only requests that offer tools")

// sampleTools are the tools Check offers a template that cannot render a
// conversation without tools: one function with one string parameter,
// which any template that renders tools can render.
var sampleTools = []wire.Tool{{Type: "function", Function: wire.FunctionDef{
	Name: "get_weather", Description: "Get the current weather in a city.",
	Parameters: json.RawMessage(`{"type": "object", "properties": {"city": {"type": "string", "description": "The city, e.g. Paris"}}, "required": ["city"]}`),
}}}

// Check renders a one-message conversation with opt and the generation
// prompt, as a chat completion would, to find a template that cannot
// serve any request (it reads a variable nobody gives it, say): its error
// names the template line. A template rejecting the conversation
// (raise_exception) is not an error. A template that fails on the
// conversation but renders it with a sample tool offered renders only
// requests that offer tools (the Hermes 2 Pro and 3 tool_use templates
// iterate over tools): it passes, with needsTools true. A template that
// names a method changing a list or dict in place fails with an error
// wrapping ErrMutates, naming the method and its line, unless
// opt.Mutable allows it.
func (t *Template) Check(opt Options) (needsTools bool, err error) {
	if name, line := t.tpl.Mutates(); name != "" && !opt.Mutable {
		return false, fmt.Errorf("line %d: .%s(): %w", line, name, ErrMutates)
	}
	msgs := []Message{{Role: "user", Content: json.RawMessage(`"Hello"`)}}
	opt.AddGenerationPrompt = true
	opt.Tools = nil
	_, err = t.Render(msgs, opt)
	var raised *RaiseError
	if err == nil || errors.As(err, &raised) {
		return false, nil
	}
	opt.Tools = sampleTools
	if _, toolsErr := t.Render(msgs, opt); toolsErr == nil || errors.As(toolsErr, &raised) {
		return true, nil
	}
	return false, err
}

// Reads reports whether the template reads a variable called name, such
// as enable_thinking or reasoning_effort.
func (t *Template) Reads(name string) bool { return t.tpl.Reads(name) }

// Render renders msgs to prompt text. Invalid messages (unknown role,
// empty list, content of the wrong shape) give an error wrapping
// ErrInvalidMessages that names the message's index; a template that calls
// raise_exception gives a *RaiseError; a template that fails otherwise
// gives a *jinja.Error naming its line. The text includes the BOS token
// when the template writes bos_token: tokenize it parsing special tokens
// and without adding BOS again.
func (t *Template) Render(msgs []Message, opt Options) (string, error) {
	messages, err := templateMessages(msgs)
	if err != nil {
		return "", fmt.Errorf("render chat template: %w", err)
	}
	now := opt.Now
	if now.IsZero() {
		now = time.Now()
	}
	vars := map[string]any{
		"messages":              messages,
		"tools":                 nil,
		"documents":             nil,
		"add_generation_prompt": opt.AddGenerationPrompt,
		"bos_token":             cmp.Or(opt.BOSToken, t.bos),
		"eos_token":             cmp.Or(opt.EOSToken, t.eos),
		"raise_exception": jinja.Func(func(args []any, _ map[string]any) (any, error) {
			msg := ""
			if len(args) > 0 {
				msg = jinja.Str(args[0])
			}
			return nil, &RaiseError{Message: msg}
		}),
		"strftime_now": jinja.Func(func(args []any, _ map[string]any) (any, error) {
			if len(args) != 1 {
				return nil, fmt.Errorf("strftime_now takes one argument, not %d", len(args))
			}
			return strftime(jinja.Str(args[0]), now), nil
		}),
	}
	if len(opt.Tools) > 0 {
		tools, err := toValue(opt.Tools)
		if err != nil {
			return "", fmt.Errorf("render chat template: tools: %w", err)
		}
		vars["tools"] = tools
	}
	if t.functions {
		// FireFunction v2's template reads no tools: its callers pass
		// them as functions, JSON text, and the time as datetime, as
		// llama-server did ("" without tools).
		functions := ""
		if vars["tools"] != nil {
			if functions, err = jinja.ToJSON(vars["tools"], 2); err != nil {
				return "", fmt.Errorf("render chat template: tools: %w", err)
			}
		}
		vars["functions"] = functions
		vars["datetime"] = strftime("%b %d %Y %H:%M:%S GMT", now.UTC())
	}
	for k, v := range opt.Kwargs {
		if err := CheckKwarg(k); err != nil {
			return "", fmt.Errorf("render chat template: %w", err)
		}
		val, err := toValue(v)
		if err != nil {
			return "", fmt.Errorf("render chat template: template argument %q: %w", k, err)
		}
		vars[k] = val
	}
	out, err := t.tpl.RenderOptions(vars, jinja.Options{Limit: opt.MaxBytes, Mutable: opt.Mutable})
	if err != nil {
		var raised *RaiseError
		if errors.As(err, &raised) {
			return "", fmt.Errorf("render chat template: %w", raised)
		}
		if errors.Is(err, jinja.ErrOutputLimit) {
			return "", fmt.Errorf("render chat template: %w: more than %d bytes", ErrTooLong, opt.MaxBytes)
		}
		return "", fmt.Errorf("render chat template: %w", err)
	}
	return out, nil
}

// toValue converts a Go value to template values through its JSON form
// (a json.RawMessage as it is), keeping the order of object keys.
func toValue(v any) (any, error) {
	data, ok := v.(json.RawMessage)
	if !ok {
		var err error
		if data, err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	return jinja.FromJSON(data)
}

// Stops are the end-of-turn strings of this template (e.g. "<|im_end|>"),
// to be used as stop strings when the model does not emit EOG. For a
// parsed template they are the well-known markers its source contains.
func (t *Template) Stops() []string { return append([]string(nil), t.stops...) }

// Source is the template's Jinja source: what tells the markup of the
// model's tool calls and reasoning (see toolcall.Detect and
// reasoning.Detect).
func (t *Template) Source() string { return t.source }
