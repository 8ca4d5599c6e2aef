// Package model is the served model: an engine with its chat template,
// its tool-call and reasoning formats, the text of its special tokens and
// the chat template variables every request gets. It renders prompts and
// reads answers (reasoning, content, tool calls) the same way for every
// dialect that serves it; registries load it with Loader.
package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/reasoning"
	"github.com/corral-llm/corral/registry"
	"github.com/corral-llm/corral/toolcall"
)

// Engine is what a Model needs from an engine; *engine.Engine satisfies it
// and documents the methods.
type Engine interface {
	Info() engine.ModelInfo
	Submit(ctx context.Context, req engine.Request) (*engine.Stream, error)
	Embed(ctx context.Context, inputs []engine.EmbedInput) (*engine.Embeddings, error)
	Tokenize(text string, addSpecial, parseSpecial bool) ([]int32, error)
	Render(ctx context.Context, req engine.Request) ([]int32, error)
	Detokenize(tokens []int32) string
	TokenPiece(tok int32) string
	Slots(ctx context.Context) ([]engine.SlotInfo, error)
	Stats() engine.Stats
	Drain()
	Close() error
}

// Options configure a Model.
type Options struct {
	// ChatTemplate names a built-in chat template (see chat.Lookup) used
	// instead of the model's own.
	ChatTemplate string
	// Template, when set, is the chat template, before ChatTemplate and
	// the model's own.
	Template *chat.Template
	// ToolFormat names the tool-call format (see toolcall.Names) to read
	// instead of the one the chat template implies (see
	// toolcall.Detect); "" keeps that one.
	ToolFormat string
	// ReasoningFormat says how the model's reasoning is read: "" (or
	// "auto", or "deepseek" as llama-server names it) splits it off the
	// content in the format the chat template implies (see
	// reasoning.Detect); "none" leaves it inline in the content; a
	// reasoning format's name (see reasoning.Names) splits it in that
	// format.
	ReasoningFormat string
	// ReasoningBudget is the default reasoning budget in tokens (see
	// engine.Reasoning) of requests that set none; nil or negative: no
	// budget.
	ReasoningBudget *int
	// ChatTemplateFile is a Jinja chat template file used instead of the
	// model's own; at most one of ChatTemplate and ChatTemplateFile is set.
	ChatTemplateFile string
	// ChatTemplateKwargs are chat template variables every request gets
	// (see ParseKwargs); a request's own chat_template_kwargs override
	// them one by one.
	ChatTemplateKwargs map[string]json.RawMessage
	// ChatTemplateMutable lets the chat template change lists and dicts
	// in place (Kimi K2's appends to a list), which transformers'
	// sandbox refuses: without it a template that names such a method
	// is refused at load (see chat.Options.Mutable).
	ChatTemplateMutable bool
	// Logger receives warnings; nil means slog.Default().
	Logger *slog.Logger
}

// ReasoningFormats are the values Options.ReasoningFormat takes
// beside the formats' names.
var ReasoningFormats = []string{"auto", "deepseek", "none"}

// Model is one loaded model as corral serves it: its engine, its chat
// template and the text of its special tokens.
type Model struct {
	eng  Engine
	info engine.ModelInfo
	// tmpl renders requests, but those that offer tools when toolTmpl,
	// the GGUF's tool_use template, is set. needsTools: tmpl renders only
	// requests that offer tools (see chat.Template.Check); mutable: the
	// templates may change lists in place.
	tmpl       *chat.Template
	toolTmpl   *chat.Template
	needsTools bool
	mutable    bool
	tools      toolcall.Format // how the model writes tool calls
	// think is how the model writes its reasoning (nil: it writes none
	// corral knows); split says the reasoning is split off the content.
	think     reasoning.Format
	split     bool
	budget    int                        // the default reasoning budget; negative: none
	closeToks []int32                    // think's Close, tokenized
	show      []int32                    // the special tokens of both formats' markup, output as text
	stops     []string                   // end-of-turn strings
	kwargs    map[string]json.RawMessage // template variables for every request
	bos       string                     // text of the BOS token
	eos       string                     // text of the EOS token
}

// New prepares eng for serving, resolving its chat template: the one
// opt names (a built-in or a file), else the model's, else ChatML. The
// model's own may come with a tool_use template (the GGUF's
// tokenizer.chat_template.tool_use), which renders the requests that
// offer tools, as transformers and llama-server pick it; a model with
// only that one renders every request with it. A template that does not
// parse, or renders neither a plain conversation nor one offering a
// sample tool, or changes lists in place without
// Options.ChatTemplateMutable, is an error naming the model and the
// template line: corral never serves a model with a template it did not
// ask for. One that renders only with tools offered (a tools-only
// template: the Hermes 2 Pro and 3 tool_use templates) serves requests
// without tools if it renders them, else refuses them (chat.ErrNeedsTools).
func New(eng Engine, opt Options) (*Model, error) {
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	info := eng.Info()
	m := &Model{eng: eng, info: info, kwargs: opt.ChatTemplateKwargs, mutable: opt.ChatTemplateMutable,
		bos: eng.TokenPiece(info.BOS), eos: eng.TokenPiece(info.EOS)}
	var err error
	switch {
	case opt.Template != nil:
		m.tmpl = opt.Template
	case opt.ChatTemplate != "" && opt.ChatTemplateFile != "":
		return nil, fmt.Errorf("model %s: give a built-in chat template or a chat template file, not both", info.Name)
	case opt.ChatTemplate != "":
		if m.tmpl, err = chat.Lookup(opt.ChatTemplate); err != nil {
			return nil, err // it names the template and the known ones
		}
	case opt.ChatTemplateFile != "":
		src, err := os.ReadFile(opt.ChatTemplateFile)
		if err != nil {
			return nil, fmt.Errorf("model %s: chat template file: %w", info.Name, err)
		}
		if m.tmpl, m.needsTools, err = checkedTemplate(string(src), opt); err != nil {
			return nil, fmt.Errorf("model %s: chat template file %s: %w", info.Name, opt.ChatTemplateFile, err)
		}
	case info.ChatTemplate != "" || info.ChatTemplateToolUse != "":
		src, what := info.ChatTemplate, "chat template"
		if src == "" {
			src, what = info.ChatTemplateToolUse, "tool_use chat template (its only one)"
		}
		if m.tmpl, m.needsTools, err = checkedTemplate(src, opt); err != nil {
			return nil, ownTemplateError(info.Name, what, err)
		}
		if info.ChatTemplate != "" && info.ChatTemplateToolUse != "" {
			if m.toolTmpl, _, err = checkedTemplate(info.ChatTemplateToolUse, opt); err != nil {
				return nil, ownTemplateError(info.Name, "tool_use chat template", err)
			}
		}
	default:
		log.Info("model has no chat template; using chatml", "model", info.Name)
		if m.tmpl, err = chat.Lookup("chatml"); err != nil {
			return nil, fmt.Errorf("chat template chatml: %w", err)
		}
	}
	if err := m.formats(opt, log); err != nil {
		return nil, err
	}
	return m, nil
}

// mutableHint is how the error of a template that changes lists in place
// tells its way out.
const mutableHint = "allow it with --chat-template-mutable (chat_template_mutable: true in --config)"

// ownTemplateError is the error of a model whose own chat template (what:
// which one) fails checkedTemplate.
func ownTemplateError(model, what string, err error) error {
	if errors.Is(err, chat.ErrMutates) {
		return fmt.Errorf("model %s: its %s: %w, or replace it with --chat-template NAME or --chat-template-file FILE", model, what, err)
	}
	return fmt.Errorf("model %s: its %s does not work (replace it with --chat-template NAME or --chat-template-file FILE): %w", model, what, err)
}

// formats resolves the model's tool-call and reasoning formats and what
// the engine needs of them: the special tokens of their markup, and the
// tokens that close a reasoning. A tool_use template, which renders the
// requests that offer tools, tells the calls' format, unless it writes
// none corral knows; the default template tells the reasoning's, unless
// it writes none.
func (m *Model) formats(opt Options, log *slog.Logger) error {
	src := m.tmpl.Source()
	m.tools = toolcall.Detect(src)
	if m.toolTmpl != nil {
		if f := toolcall.Detect(m.toolTmpl.Source()); f != toolcall.JSON {
			m.tools = f
		}
	}
	if opt.ToolFormat != "" {
		f, err := toolcall.Lookup(opt.ToolFormat)
		if err != nil {
			return err
		}
		m.tools = f
	}
	m.think, m.split = reasoning.Detect(src), true
	if m.think == nil && m.toolTmpl != nil {
		m.think = reasoning.Detect(m.toolTmpl.Source())
	}
	switch name := opt.ReasoningFormat; name {
	case "", "auto", "deepseek":
	case "none":
		m.split = false
	default:
		f, err := reasoning.Lookup(name)
		if err != nil {
			return fmt.Errorf("%w; or one of %s", err, strings.Join(ReasoningFormats, ", "))
		}
		m.think = f
	}
	m.budget = -1
	if opt.ReasoningBudget != nil {
		m.budget = *opt.ReasoningBudget
	}
	markers := m.tools.Markers()
	if m.think != nil {
		markers = append(markers, m.think.Markers()...)
		toks, err := m.eng.Tokenize(m.think.Close(), false, true)
		if err != nil || len(toks) == 0 || len(toks) > engine.MaxMarker {
			// The budget cannot close this model's reasoning.
			log.Warn("the reasoning's closing marker does not tokenize; no reasoning budget", "model", m.info.Name, "marker", m.think.Close(), "err", err)
		} else {
			m.closeToks = toks
		}
	}
	// The template's end-of-turn stops, but the formats' own markup:
	// gpt-oss ends its analysis with <|end|>, and its answer goes on.
	stops := m.tmpl.Stops()
	if m.toolTmpl != nil {
		stops = append(stops, m.toolTmpl.Stops()...)
	}
	for _, stop := range stops {
		if !slices.Contains(markers, stop) && !slices.Contains(m.stops, stop) {
			m.stops = append(m.stops, stop)
		}
	}
	// A marker that is one special token is output as its text.
	for _, mk := range markers {
		toks, err := m.eng.Tokenize(mk, false, true)
		if err == nil && len(toks) == 1 && !slices.Contains(m.show, toks[0]) && m.eng.TokenPiece(toks[0]) == mk {
			m.show = append(m.show, toks[0])
		}
	}
	return nil
}

// checkedTemplate parses a chat template and renders a plain
// conversation with it and the model's template variables (see
// chat.Template.Check), so that a broken one fails when its model loads
// rather than at every request; needsTools says it renders only requests
// that offer tools. One that changes lists in place without
// opt.ChatTemplateMutable fails, wrapping chat.ErrMutates and saying how
// to allow it.
func checkedTemplate(src string, opt Options) (tmpl *chat.Template, needsTools bool, err error) {
	if tmpl, err = chat.Parse(src); err != nil {
		return nil, false, err
	}
	kw := make(map[string]any, len(opt.ChatTemplateKwargs))
	for k, v := range opt.ChatTemplateKwargs {
		kw[k] = v
	}
	if needsTools, err = tmpl.Check(chat.Options{Kwargs: kw, Mutable: opt.ChatTemplateMutable}); err != nil {
		if errors.Is(err, chat.ErrMutates) {
			err = fmt.Errorf("%w: %s", err, mutableHint)
		}
		return nil, false, err
	}
	return tmpl, needsTools, nil
}

// Loader returns the registry loader of Models: an engine for the spec,
// with its chat template; log receives template warnings.
func Loader(log *slog.Logger) registry.Loader[*Model] {
	return func(ctx context.Context, spec registry.Spec) (*Model, error) {
		kwargs, err := ParseKwargs(spec.ChatTemplateKwargs)
		if err != nil {
			return nil, fmt.Errorf("model %s: chat template kwargs: %w", spec.ID, err)
		}
		cfg := spec.Engine
		if cfg.Name == "" {
			cfg.Name = spec.ID
		}
		eng, err := engine.New(ctx, cfg)
		if err != nil {
			return nil, err
		}
		m, err := New(eng, Options{ChatTemplate: spec.ChatTemplate, ChatTemplateFile: spec.ChatTemplateFile,
			ChatTemplateKwargs: kwargs, ChatTemplateMutable: spec.ChatTemplateMutable, ToolFormat: spec.ToolFormat,
			ReasoningFormat: spec.ReasoningFormat, ReasoningBudget: spec.ReasoningBudget, Logger: log})
		if err != nil {
			eng.Close()
			return nil, err
		}
		return m, nil
	}
}

// Engine is the model's engine.
func (m *Model) Engine() Engine { return m.eng }

// Info describes the model.
func (m *Model) Info() engine.ModelInfo { return m.info }

// Drain stops the engine admitting requests (see engine.Engine.Drain).
func (m *Model) Drain() { m.eng.Drain() }

// Close frees the engine.
func (m *Model) Close() error { return m.eng.Close() }

// Stops are the model's end-of-turn strings: the chat template's, less
// the markup of its formats.
func (m *Model) Stops() []string { return m.stops }

// Template is the model's chat template: the one for requests without
// tools (see ToolTemplate).
func (m *Model) Template() *chat.Template { return m.tmpl }

// ToolTemplate is the template for the requests that offer tools, when
// the model's own chat template came with one (the GGUF's
// tokenizer.chat_template.tool_use); nil when Template renders them.
func (m *Model) ToolTemplate() *chat.Template { return m.toolTmpl }

// template is the chat template of a request that offers tools or not.
func (m *Model) template(tools bool) *chat.Template {
	if tools && m.toolTmpl != nil {
		return m.toolTmpl
	}
	return m.tmpl
}

// TemplateReads reports whether a chat template of the model reads a
// variable called name, such as enable_thinking or reasoning_effort.
func (m *Model) TemplateReads(name string) bool {
	return m.tmpl.Reads(name) || m.toolTmpl != nil && m.toolTmpl.Reads(name)
}

// ToolFormat is how the model writes tool calls.
func (m *Model) ToolFormat() toolcall.Format { return m.tools }

// ReasoningFormat is how the model writes its reasoning (nil: none corral
// knows); split says the reasoning is split off the content.
func (m *Model) ReasoningFormat() (f reasoning.Format, split bool) { return m.think, m.split }

// Kwargs returns a copy of the chat template variables every request
// gets, for the request's own to be added to.
func (m *Model) Kwargs() map[string]any {
	kw := make(map[string]any, len(m.kwargs)+2)
	for k, v := range m.kwargs {
		kw[k] = v
	}
	return kw
}

// Render applies the chat template to msgs with opt, the model's BOS and
// EOS text filled in: the tool_use template when opt offers tools and
// the model has one. Templates often start with the BOS text; the
// tokenizer adds BOS itself, so the rendered prompt lacks it when the
// model adds one. A template that renders only requests that offer tools
// failing on a request without them is an error wrapping
// chat.ErrNeedsTools.
func (m *Model) Render(msgs []chat.Message, opt chat.Options) (string, error) {
	opt.BOSToken, opt.EOSToken, opt.Mutable = m.bos, m.eos, m.mutable
	tools := len(opt.Tools) > 0
	prompt, err := m.template(tools).Render(msgs, opt)
	if err != nil {
		if !tools && m.needsTools && !errors.Is(err, chat.ErrTooLong) && !errors.Is(err, chat.ErrInvalidMessages) && !errors.Is(err, chat.ErrReservedKwarg) {
			return "", fmt.Errorf("%w: %w", chat.ErrNeedsTools, err)
		}
		return "", err
	}
	if m.info.AddBOS && m.bos != "" {
		prompt = strings.TrimPrefix(prompt, m.bos)
	}
	return prompt, nil
}

const (
	// maxKwargs bounds how many variables chat_template_kwargs sets.
	maxKwargs = 64
	// maxKwargsDepth bounds how deeply its values nest.
	maxKwargsDepth = 16
)

// ParseKwargs checks chat template variables given as a JSON object
// (null or empty: none): at most 64, values nested at most 16 deep, and
// none of the variables the server sets itself (messages, tools, ...).
func ParseKwargs(raw json.RawMessage) (map[string]json.RawMessage, error) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if raw = bytes.TrimSpace(raw); raw[0] != '{' {
		return nil, errors.New("want a JSON object of template variables")
	}
	if err := checkDepth(raw, maxKwargsDepth+1); err != nil {
		return nil, err
	}
	var kw map[string]json.RawMessage
	if err := json.Unmarshal(raw, &kw); err != nil {
		return nil, err
	}
	if len(kw) > maxKwargs {
		return nil, fmt.Errorf("%d template variables; at most %d", len(kw), maxKwargs)
	}
	for _, k := range slices.Sorted(maps.Keys(kw)) {
		if err := chat.CheckKwarg(k); err != nil {
			return nil, err
		}
	}
	return kw, nil
}

// checkDepth fails when JSON nests deeper than limit arrays and objects.
func checkDepth(raw json.RawMessage, limit int) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	depth := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if depth++; depth > limit {
				return fmt.Errorf("values nest more than %d deep", limit-1)
			}
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
}
