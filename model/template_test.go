package model_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/wire"
)

// The chat templates of real models (../shared/templates) and what
// transformers renders with them (package chat's conformance corpus,
// written by chat/testdata/render.py).
const (
	expectedDir        = "../chat/testdata/expected"
	expectedMutableDir = "../chat/testdata/expected-mutable"
)

// conversation is one entry of chat's conformance corpus.
type conversation struct {
	Name     string         `json:"name"`
	Messages []chat.Message `json:"messages"`
	Tools    []wire.Tool    `json:"tools"`
}

// corpus returns the conversation of chat's corpus called name.
func corpus(t *testing.T, name string) conversation {
	t.Helper()
	b, err := os.ReadFile("../chat/testdata/conversations.json")
	if err != nil {
		t.Fatal(err)
	}
	var convs []conversation
	if err := json.Unmarshal(b, &convs); err != nil {
		t.Fatal(err)
	}
	for _, c := range convs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no conversation %s in the corpus", name)
	return conversation{}
}

// expected is transformers' render of conversation conv with template
// name (from dir), without its BOS text bos, which the tokenizer adds.
func expected(t *testing.T, dir, name, conv, bos string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name, conv+".txt"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(string(b), bos)
}

// specialTokens is the BOS text chat's corpus gives template name.
func specialBOS(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../chat/testdata/special_tokens.json")
	if err != nil {
		t.Fatal(err)
	}
	var tokens map[string]map[string]string
	if err := json.Unmarshal(b, &tokens); err != nil {
		t.Fatal(err)
	}
	return tokens[name]["bos_token"]
}

// templateFile is the path of the real chat template name.
func templateFile(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(testmodel.TemplatesDir(), name+".jinja")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("real chat template %s: %v", name, err)
	}
	return p
}

// newEngine loads the model at path on a real engine.
func newEngine(t *testing.T, path string) *engine.Engine {
	t.Helper()
	eng, err := engine.New(context.Background(), engine.Config{ModelPath: path, Threads: 1, Parallel: 1, CtxSize: 256})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return eng
}

// withTemplates writes a model with the tokenizer of stories260K (a
// shared test model) and the chat templates of the real templates named
// (tokenizer.chat_template and tokenizer.chat_template.tool_use; "" for
// none), and loads it on a real engine.
func withTemplates(t *testing.T, name, toolUse string) *engine.Engine {
	t.Helper()
	vocab, err := gguf.ReadMetadata(testmodel.Path(t, testmodel.Stories260K))
	if err != nil {
		t.Fatal(err)
	}
	o := gguf.SynthOptions{Tokenizer: vocab}
	if name != "" {
		o.ChatTemplate = testmodel.Template(t, name)
	}
	if toolUse != "" {
		o.ChatTemplateToolUse = testmodel.Template(t, toolUse)
	}
	p := filepath.Join(t.TempDir(), "m.gguf")
	if err := gguf.WriteSyntheticOptions(p, gguf.Shapes["tiny"], 1, o); err != nil {
		t.Fatal(err)
	}
	return newEngine(t, p)
}

// corpusNow is the time of the corpus's renders (render.py's).
var corpusNow = time.Date(2026, 11, 21, 9, 30, 0, 0, time.UTC)

// render renders conversation conv with m, offering its tools or not,
// without the BOS text the tokenizer adds.
func render(m *model.Model, conv conversation, tools bool) (string, error) {
	opt := chat.Options{AddGenerationPrompt: true, Now: corpusNow}
	if tools {
		opt.Tools = conv.Tools
	}
	return m.Render(conv.Messages, opt)
}

// TestToolUseTemplate checks a GGUF's tokenizer.chat_template.tool_use:
// it renders the requests that offer tools, as transformers and
// llama-server pick it, the default template the others; the calls are
// read in its format when the default template writes none corral knows.
func TestToolUseTemplate(t *testing.T) {
	const def, toolUse = "google-gemma-2-2b-it", "CohereForAI-c4ai-command-r-plus-tool_use"
	m, err := model.New(withTemplates(t, def, toolUse), model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if m.ToolTemplate() == nil || m.ToolTemplate().Source() != testmodel.Template(t, toolUse) {
		t.Fatal("the tool_use template was not loaded")
	}
	user, flat := corpus(t, "user"), corpus(t, "tool-flat-roundtrip")
	if got, err := render(m, user, false); err != nil || got != expected(t, expectedDir, def, "user", specialBOS(t, def)) {
		t.Errorf("without tools: %q, %v; want the default template's render", got, err)
	}
	if got, err := render(m, flat, true); err != nil || got != expected(t, expectedDir, toolUse, "tool-flat-roundtrip", specialBOS(t, toolUse)) {
		t.Errorf("with tools: %q, %v; want the tool_use template's render", got, err)
	}
	// Gemma 2's template writes no calls; Command R+'s tool_use one does.
	if got := m.ToolFormat().Name(); got != "command-r-plus" {
		t.Errorf("tool format %s, want command-r-plus", got)
	}
	// --chat-template-file replaces both.
	plain, err := model.New(withTemplates(t, def, toolUse), model.Options{ChatTemplateFile: templateFile(t, "Qwen-Qwen2.5-7B-Instruct")})
	if err != nil {
		t.Fatal(err)
	}
	if plain.ToolTemplate() != nil || plain.ToolFormat().Name() != "hermes" {
		t.Errorf("--chat-template-file kept the tool_use template (format %s)", plain.ToolFormat().Name())
	}

	// A model whose only template is a tool_use one renders every
	// request with it, and it renders only requests that offer tools.
	const hermes = "NousResearch-Hermes-3-Llama-3.1-8B-tool_use"
	only, err := model.New(withTemplates(t, "", hermes), model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := render(only, flat, true); err != nil || got != expected(t, expectedDir, hermes, "tool-flat-roundtrip", specialBOS(t, hermes)) {
		t.Errorf("tool_use only, with tools: %q, %v", got, err)
	}
	if _, err := render(only, user, false); !errors.Is(err, chat.ErrNeedsTools) {
		t.Errorf("tool_use only, without tools: %v, want %v", err, chat.ErrNeedsTools)
	}
	// Both templates' ends of turn are stops.
	both, err := model.New(withTemplates(t, def, hermes), model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(both.Stops(), "<|im_end|>") || !slices.Contains(both.Stops(), "<end_of_turn>") {
		t.Errorf("stops %q lack a template's end of turn", both.Stops())
	}

	// A tool_use template that does not work stops the model loading.
	bad := filepath.Join(t.TempDir(), "bad.gguf")
	vocab, err := gguf.ReadMetadata(testmodel.Path(t, testmodel.Stories260K))
	if err != nil {
		t.Fatal(err)
	}
	if err := gguf.WriteSyntheticOptions(bad, gguf.Shapes["tiny"], 1, gguf.SynthOptions{Tokenizer: vocab,
		ChatTemplate: testmodel.Template(t, def), ChatTemplateToolUse: "{{ tools[0].function.name + nobody_gives_this }}"}); err != nil {
		t.Fatal(err)
	}
	_, err = model.New(newEngine(t, bad), model.Options{})
	if err == nil || !strings.Contains(err.Error(), "its tool_use chat template does not work") || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("a broken tool_use template: %v", err)
	}
}

// TestToolsOnlyTemplateFiles checks the real templates that render only
// requests offering tools (or, FireFunction v2's, read them as
// functions), each given as --chat-template-file on a real engine: the
// model loads, a request with tools renders as transformers renders it,
// and one without tools renders if the template can, else fails with
// chat.ErrNeedsTools.
func TestToolsOnlyTemplateFiles(t *testing.T) {
	eng := newEngine(t, testmodel.Path(t, testmodel.Stories260K))
	user, flat := corpus(t, "user"), corpus(t, "tool-flat-roundtrip")
	for name, plain := range map[string]bool{
		"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": false,
		"NousResearch-Hermes-3-Llama-3.1-8B-tool_use":   false,
		"CohereForAI-c4ai-command-r-plus-tool_use":      false,
		"fireworks-ai-llama-3-firefunction-v2":          true,
	} {
		m, err := model.New(eng, model.Options{ChatTemplateFile: templateFile(t, name)})
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		bos := specialBOS(t, name)
		if got, err := render(m, flat, true); err != nil || got != expected(t, expectedDir, name, flat.Name, bos) {
			t.Errorf("%s with tools:\n got %q, %v\nwant %q", name, got, err, expected(t, expectedDir, name, flat.Name, bos))
		}
		got, err := render(m, user, false)
		switch {
		case plain && (err != nil || got != expected(t, expectedDir, name, user.Name, bos)):
			t.Errorf("%s without tools: %q, %v; want transformers' render", name, got, err)
		case !plain && !errors.Is(err, chat.ErrNeedsTools):
			t.Errorf("%s without tools: %q, %v; want %v", name, got, err, chat.ErrNeedsTools)
		}
	}
}

// TestMutableTemplate checks Kimi K2's template, which appends to a list
// as it renders tool calls: refused at load, naming the opt-in, unless
// Options.ChatTemplateMutable allows it; then it renders as a mutable
// sandbox does.
func TestMutableTemplate(t *testing.T) {
	const kimi = "Kimi-K2-Instruct"
	eng := newEngine(t, testmodel.Path(t, testmodel.Stories260K))
	_, err := model.New(eng, model.Options{ChatTemplateFile: templateFile(t, kimi)})
	if err == nil || !errors.Is(err, chat.ErrMutates) || !strings.Contains(err.Error(), "--chat-template-mutable") || !strings.Contains(err.Error(), "line 41") {
		t.Errorf("--chat-template-file %s: %v, want an error naming --chat-template-mutable", kimi, err)
	}
	_, err = model.New(withTemplates(t, kimi, ""), model.Options{})
	if err == nil || !strings.Contains(err.Error(), "--chat-template-mutable") {
		t.Errorf("a GGUF with %s's template: %v, want an error naming --chat-template-mutable", kimi, err)
	}
	m, err := model.New(eng, model.Options{ChatTemplateFile: templateFile(t, kimi), ChatTemplateMutable: true})
	if err != nil {
		t.Fatal(err)
	}
	conv := corpus(t, "tool-roundtrip")
	if got, err := render(m, conv, true); err != nil || got != expected(t, expectedMutableDir, kimi, conv.Name, "") {
		t.Errorf("with tool calls:\n got %q, %v\nwant %q", got, err, expected(t, expectedMutableDir, kimi, conv.Name, ""))
	}
	if m, err = model.New(withTemplates(t, kimi, ""), model.Options{ChatTemplateMutable: true}); err != nil {
		t.Fatal(err)
	}
	if got, err := render(m, conv, true); err != nil || got != expected(t, expectedMutableDir, kimi, conv.Name, "") {
		t.Errorf("the GGUF's own, with tool calls: %q, %v", got, err)
	}
}
