// Package chat turns OpenAI-style messages into a prompt with the model's
// chat template (Jinja, as Hugging Face tokenizers ship them).
//
// Templates see what transformers' apply_chat_template gives them:
// messages, tools, add_generation_prompt, bos_token, eos_token,
// raise_exception and strftime_now, with Python's tojson, string methods
// and dictionary order.
package chat

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"

	"github.com/corral-llm/corral/openai/wire"
)

// Message is one OpenAI chat message. Content is a string or an array of
// content parts ({"type":"text","text":...}); Text flattens it.
type Message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	Name       string          `json:"name,omitempty"`
	ToolCalls  []ToolCall      `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	// ReasoningContent is an assistant's reasoning, as a client sends it
	// back (llama-server's and vLLM's field); templates see it as
	// reasoning_content, thinking and reasoning.
	ReasoningContent string `json:"reasoning_content,omitempty"`
}

// ToolCall is an assistant's call of a function tool.
type ToolCall = wire.ToolCall

// Tool is an OpenAI function tool definition.
type Tool = wire.Tool

// Options control rendering.
type Options struct {
	AddGenerationPrompt bool
	Tools               []Tool
	BOSToken, EOSToken  string
	// Now is the time strftime_now reports (templates print today's date
	// from it); zero means the current time.
	Now time.Time
	// MaxBytes bounds the rendered text: rendering stops once the
	// template has written more, with an error wrapping ErrTooLong. 0
	// means no bound.
	MaxBytes int
}

// ErrTooLong is wrapped by the error Render returns when the rendered text
// would be longer than Options.MaxBytes.
var ErrTooLong = errors.New("rendered prompt too long")

// Template is a parsed chat template. It is safe for concurrent use.
type Template struct {
	tpl      *exec.Template
	bos, eos string // defaults for empty Options.BOSToken/EOSToken
	stops    []string
	source   string
}

// templateName is what the loader calls the one template source; no other
// name resolves, so {% include %} and {% import %} cannot read files.
const templateName = "/chat_template"

// Lookup returns a built-in template by name ("chatml", "llama3", ...).
func Lookup(name string) (*Template, error) {
	b, ok := builtinTemplates[name]
	if !ok {
		return nil, fmt.Errorf("unknown chat template %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	tpl, err := compile(b.source)
	if err != nil {
		return nil, fmt.Errorf("chat template %s: %w", name, err)
	}
	return &Template{tpl: tpl, bos: b.bos, eos: b.eos, stops: b.stops, source: b.source}, nil
}

// Parse parses a Jinja chat template source (tokenizer.chat_template).
func Parse(src string) (*Template, error) {
	tpl, err := compile(src)
	if err != nil {
		return nil, err
	}
	return &Template{tpl: tpl, stops: markersIn(src), source: src}, nil
}

// compile parses src with the options transformers uses (trim_blocks,
// lstrip_blocks). A panic inside the template library is an error.
func compile(src string) (tpl *exec.Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			tpl, err = nil, fmt.Errorf("parse chat template: %v", r)
		}
	}()
	loader, err := loaders.NewMemoryLoader(map[string]string{templateName: src})
	if err != nil {
		return nil, fmt.Errorf("parse chat template: %w", err)
	}
	cfg := config.New()
	cfg.TrimBlocks = true
	cfg.LeftStripBlocks = true
	tpl, err = exec.NewTemplate(templateName, cfg, loader, environment)
	if err != nil {
		// The library's own message repeats the whole source; keep its cause.
		if cause := errors.Unwrap(err); cause != nil {
			err = cause
		}
		return nil, fmt.Errorf("parse chat template: %w", err)
	}
	return tpl, nil
}

// Render renders msgs to prompt text. Invalid messages (unknown role,
// empty list, content of the wrong shape) give an error wrapping
// ErrInvalidMessages that names the message's index; a template that calls
// raise_exception gives a *RaiseError. The text includes the BOS token
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
	var raised *RaiseError
	data := map[string]any{
		"messages":              messages,
		"add_generation_prompt": opt.AddGenerationPrompt,
		"bos_token":             cmp.Or(opt.BOSToken, t.bos),
		"eos_token":             cmp.Or(opt.EOSToken, t.eos),
		"raise_exception": func(args *exec.VarArgs) (any, error) {
			raised = &RaiseError{Message: joinArgs(args)}
			return nil, raised
		},
		"strftime_now": func(args *exec.VarArgs) string {
			return strftime(joinArgs(args), now)
		},
	}
	if len(opt.Tools) > 0 {
		tools, err := toValue(opt.Tools)
		if err != nil {
			return "", fmt.Errorf("render chat template: tools: %w", err)
		}
		data["tools"] = tools
	}
	out := &boundedWriter{max: opt.MaxBytes}
	err = execute(t.tpl, data, out)
	if out.over {
		return "", fmt.Errorf("render chat template: %w: more than %d bytes", ErrTooLong, opt.MaxBytes)
	}
	if raised != nil {
		return "", fmt.Errorf("render chat template: %w", raised)
	}
	if err != nil {
		return "", fmt.Errorf("render chat template: %w", err)
	}
	return out.b.String(), nil
}

// execute runs tpl, writing to w; a panic inside the template library is
// an error.
func execute(tpl *exec.Template, data map[string]any, w io.Writer) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("template panicked: %v", r)
		}
	}()
	return tpl.Execute(w, exec.NewContext(data))
}

// boundedWriter collects a template's output up to max bytes (0: no
// bound); a write past it fails, which stops the template.
type boundedWriter struct {
	b    strings.Builder
	max  int
	over bool // a write went past max
}

func (w *boundedWriter) Write(p []byte) (int, error) {
	if w.max > 0 && w.b.Len()+len(p) > w.max {
		w.over = true
		return 0, ErrTooLong
	}
	return w.b.Write(p)
}

func joinArgs(args *exec.VarArgs) string {
	parts := make([]string, len(args.Args))
	for i, a := range args.Args {
		parts[i] = a.String()
	}
	return strings.Join(parts, " ")
}

// Stops are the end-of-turn strings of this template (e.g. "<|im_end|>"),
// to be used as stop strings when the model does not emit EOG. For a
// parsed template they are the well-known markers its source contains.
func (t *Template) Stops() []string { return append([]string(nil), t.stops...) }

// Source is the template's Jinja source: what tells the markup of the
// model's tool calls and reasoning (see toolcall.Detect and
// reasoning.Detect).
func (t *Template) Source() string { return t.source }
