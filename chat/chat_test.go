package chat

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-llm/corral/wire"
)

// msg builds a message with string content.
func msg(role, content string) Message {
	c, err := json.Marshal(content)
	if err != nil {
		panic(err)
	}
	return Message{Role: role, Content: c}
}

// conversation is a short chat with a system prompt.
var conversation = []Message{
	msg("system", "You are terse."),
	msg("user", "Hi!"),
	msg("assistant", "Hello."),
	msg("user", "What is 2+2?"),
}

func mustLookup(t *testing.T, name string) *Template {
	t.Helper()
	tpl, err := Lookup(name)
	if err != nil {
		t.Fatalf("Lookup(%q): %v", name, err)
	}
	return tpl
}

func mustParseFile(t *testing.T, name string) *Template {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := Parse(string(src))
	if err != nil {
		t.Fatalf("Parse(%s): %v", name, err)
	}
	return tpl
}

func mustRender(t *testing.T, tpl *Template, msgs []Message, opt Options) string {
	t.Helper()
	out, err := tpl.Render(msgs, opt)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	return out
}

func TestBuiltinGolden(t *testing.T) {
	tests := []struct {
		name string
		gen  bool
		opt  Options
		want string
	}{
		{name: "chatml", want: "<|im_start|>system\nYou are terse.<|im_end|>\n" +
			"<|im_start|>user\nHi!<|im_end|>\n" +
			"<|im_start|>assistant\nHello.<|im_end|>\n" +
			"<|im_start|>user\nWhat is 2+2?<|im_end|>\n"},
		{name: "chatml", gen: true, want: "<|im_start|>system\nYou are terse.<|im_end|>\n" +
			"<|im_start|>user\nHi!<|im_end|>\n" +
			"<|im_start|>assistant\nHello.<|im_end|>\n" +
			"<|im_start|>user\nWhat is 2+2?<|im_end|>\n" +
			"<|im_start|>assistant\n"},
		{name: "llama3", want: "<|begin_of_text|>" +
			"<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>" +
			"<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>" +
			"<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>" +
			"<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"},
		{name: "llama3", gen: true, opt: Options{BOSToken: "<BOS>"}, want: "<BOS>" +
			"<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>" +
			"<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>" +
			"<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>" +
			"<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>" +
			"<|start_header_id|>assistant<|end_header_id|>\n\n"},
		{name: "mistral", gen: true, want: "<s>[INST] You are terse.\n\nHi! [/INST] Hello.</s>[INST] What is 2+2? [/INST]"},
		{name: "gemma", gen: true, want: "<bos><start_of_turn>user\nYou are terse.\n\nHi!<end_of_turn>\n" +
			"<start_of_turn>model\nHello.<end_of_turn>\n" +
			"<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n" +
			"<start_of_turn>model\n"},
		{name: "phi3", gen: true, want: "<|system|>\nYou are terse.<|end|>\n" +
			"<|user|>\nHi!<|end|>\n" +
			"<|assistant|>\nHello.<|end|>\n" +
			"<|user|>\nWhat is 2+2?<|end|>\n" +
			"<|assistant|>\n"},
	}
	for _, tt := range tests {
		opt := tt.opt
		opt.AddGenerationPrompt = tt.gen
		got := mustRender(t, mustLookup(t, tt.name), conversation, opt)
		if got != tt.want {
			t.Errorf("%s (generation prompt %v):\n got %q\nwant %q", tt.name, tt.gen, got, tt.want)
		}
	}
}

func TestBuiltinToolHistory(t *testing.T) {
	call := wire.ToolCall{ID: "call_1", Type: "function"}
	call.Function.Name = "get_weather"
	call.Function.Arguments = `{"city": "Paris", "unit": "celsius"}`
	msgs := []Message{
		msg("developer", "Be brief."),
		msg("user", "Weather in Paris?"),
		{Role: "assistant", ToolCalls: []wire.ToolCall{call}},
		{Role: "tool", ToolCallID: "call_1", Content: json.RawMessage(`"22C"`)},
	}
	got := mustRender(t, mustLookup(t, "chatml"), msgs, Options{AddGenerationPrompt: true})
	want := "<|im_start|>system\nBe brief.<|im_end|>\n" +
		"<|im_start|>user\nWeather in Paris?<|im_end|>\n" +
		"<|im_start|>assistant\n<tool_call>\n" +
		`{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}` +
		"\n</tool_call><|im_end|>\n" +
		"<|im_start|>tool\n22C<|im_end|>\n" +
		"<|im_start|>assistant\n"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

func TestLookupUnknown(t *testing.T) {
	_, err := Lookup("nope")
	if err == nil {
		t.Fatal("Lookup(nope) succeeded")
	}
	for _, name := range []string{"chatml", "llama3", "mistral", "gemma", "phi3"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not list %s", err, name)
		}
	}
	if !slices.Equal(Names(), []string{"chatml", "gemma", "llama3", "mistral", "phi3"}) {
		t.Errorf("Names() = %v", Names())
	}
}

func TestParseErrors(t *testing.T) {
	for _, src := range []string{
		"{% if %}",
		"{{ 1 + }}",
		"{% for x in %}{% endfor %}",
		"{% endfor %}",
		"{{ messages",
		"{% if true %}unclosed",
		"{% generation %}x",
		"{% for x in y %}{% endif %}",
		"{{ x | nosuchfilter }}",
		"{% break %}",
		"{{ 'unterminated }}",
		"{% include '/etc/hostname' %}",
	} {
		if tpl, err := Parse(src); err == nil {
			if _, err := tpl.Render([]Message{msg("user", "hi")}, Options{}); err == nil {
				t.Errorf("%q parsed and rendered without error", src)
			}
		}
	}
}

func TestRenderTemplateErrors(t *testing.T) {
	for _, src := range []string{
		"{{ messages[0].content.nosuchmethod() }}",
		"{{ nosuchvar.field }}",
		"{{ messages | nosuchfilter }}",
		"{{ messages[0] | tojson(indent=[]) }}",
	} {
		tpl, err := Parse(src)
		if err != nil {
			continue // rejected up front is fine too
		}
		if out, err := tpl.Render([]Message{msg("user", "hi")}, Options{}); err == nil {
			t.Errorf("%q rendered %q without error", src, out)
		}
	}
}

func TestStops(t *testing.T) {
	tests := []struct {
		tpl  *Template
		want []string
	}{
		{mustLookup(t, "chatml"), []string{"<|im_end|>"}},
		{mustLookup(t, "llama3"), []string{"<|eot_id|>", "<|eom_id|>"}},
		{mustLookup(t, "gemma"), []string{"<end_of_turn>"}},
		{mustParseFile(t, "qwen2.5-instruct.jinja"), []string{"<|im_end|>"}},
		{mustParseFile(t, "llama3.2-instruct.jinja"), []string{"<|eot_id|>"}},
		{mustParseFile(t, "mistral-7b-instruct-v0.1.jinja"), nil},
	}
	for i, tt := range tests {
		if got := tt.tpl.Stops(); !slices.Equal(got, tt.want) {
			t.Errorf("%d: Stops() = %q, want %q", i, got, tt.want)
		}
	}
	tpl := mustLookup(t, "chatml")
	tpl.Stops()[0] = "changed"
	if tpl.Stops()[0] != "<|im_end|>" {
		t.Error("Stops() exposes the template's own slice")
	}
}

func TestDetect(t *testing.T) {
	for file, want := range map[string]string{
		"smollm2-instruct.jinja":         "chatml",
		"qwen2.5-instruct.jinja":         "chatml",
		"llama3.2-instruct.jinja":        "llama3",
		"mistral-7b-instruct-v0.1.jinja": "mistral",
	} {
		src, err := os.ReadFile(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		if got := Detect(string(src)); got != want {
			t.Errorf("Detect(%s) = %q, want %q", file, got, want)
		}
	}
	for name, b := range builtinTemplates {
		if got := Detect(b.source); got != name {
			t.Errorf("Detect(built-in %s) = %q", name, got)
		}
	}
	if got := Detect("{% for m in messages %}{{ m.content }}{% endfor %}"); got != "" {
		t.Errorf("Detect(plain) = %q, want \"\"", got)
	}
}

func TestRenderConcurrent(t *testing.T) {
	tpl := mustParseFile(t, "llama3.2-instruct.jinja")
	opt := Options{AddGenerationPrompt: true, Now: time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)}
	want := mustRender(t, tpl, conversation, opt)
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for range 16 {
		wg.Go(func() {
			got, err := tpl.Render(conversation, opt)
			if err != nil || got != want {
				errs <- got
			}
		})
	}
	wg.Wait()
	close(errs)
	for got := range errs {
		t.Errorf("concurrent render gave %q, want %q", got, want)
	}
}

// FuzzParseRender checks that no template source makes Parse or Render
// panic.
func FuzzParseRender(f *testing.F) {
	for _, b := range builtinTemplates {
		f.Add(b.source)
	}
	f.Add("{% for m in messages %}{{ m.content | tojson(indent=2) }}{% endfor %}")
	f.Add("{{ raise_exception('no') }}")
	f.Add("{% macro m(x) %}{{ x }}{% endmacro %}{{ m(messages) }}")
	f.Fuzz(func(t *testing.T, src string) {
		tpl, err := Parse(src)
		if err != nil {
			return
		}
		_, _ = tpl.Render(conversation, Options{AddGenerationPrompt: true})
	})
}

// TestCheck checks every real template: most render a plain
// conversation; the tool_use templates of Hermes 2 Pro and 3 and Command
// R+ render only with tools offered (Check offers a sample tool); Kimi
// K2's templates append to a list, which needs Options.Mutable.
func TestCheck(t *testing.T) {
	needsTools := []string{
		"CohereForAI-c4ai-command-r-plus-tool_use",
		"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use",
		"NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
	}
	mutates := map[string]string{
		"Kimi-K2-Instruct": "line 41: .append()",
		"Kimi-K2-Thinking": "line 35: .append()",
	}
	_, _, names := loadCorpus(t)
	for _, name := range names {
		src, err := os.ReadFile(filepath.Join("testdata", "templates", name+".jinja"))
		if err != nil {
			t.Fatal(err)
		}
		tpl, err := Parse(string(src))
		if err != nil {
			t.Fatal(err)
		}
		for _, mutable := range []bool{false, true} {
			got, err := tpl.Check(Options{Mutable: mutable})
			switch want, mut := mutates[name]; {
			case mut && !mutable:
				if !errors.Is(err, ErrMutates) || !strings.HasPrefix(err.Error(), want) {
					t.Errorf("%s: Check: %v, want %s: %v", name, err, want, ErrMutates)
				}
			case err != nil:
				t.Errorf("%s: Check (mutable %v): %v", name, mutable, err)
			case got != slices.Contains(needsTools, name):
				t.Errorf("%s: Check says needs tools %v", name, got)
			}
		}
	}
	// A template that fails with and without tools fails as it does
	// without.
	tpl, err := Parse("{% for t in tools %}{{ t.function.name }}{% endfor %}{{ nobody.gives }}")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tpl.Check(Options{}); err == nil || !strings.Contains(err.Error(), "'NoneType' object is not iterable") {
		t.Errorf("broken either way: %v", err)
	}
}

// TestFunctionsConvention checks FireFunction v2's template, which reads
// the tools as functions (JSON text) and the time as datetime: Render
// gives them (the conformance test compares the renders), and a
// request's template arguments override them.
func TestFunctionsConvention(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "templates", "fireworks-ai-llama-3-firefunction-v2.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 21, 10, 30, 0, 0, time.FixedZone("CET", 3600))
	out, err := tpl.Render([]Message{msg("user", "Hi")}, Options{Now: now})
	if err != nil || !strings.Contains(out, "Available functions as JSON spec:\n\nToday is Nov 21 2026 09:30:00 GMT.<|eot_id|>") {
		t.Errorf("no tools: %q, %v", out, err)
	}
	out, err = tpl.Render([]Message{msg("user", "Hi")}, Options{Now: now, Tools: sampleTools,
		Kwargs: map[string]any{"functions": "[my functions]", "datetime": "today"}})
	if err != nil || !strings.Contains(out, "JSON spec:\n[my functions]\nToday is today.") {
		t.Errorf("functions and datetime as template arguments: %q, %v", out, err)
	}
	// A template that reads tools gets no functions.
	tpl, err = Parse("{{ tools | length }}{{ functions is defined }}{{ datetime is defined }}")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := tpl.Render([]Message{msg("user", "Hi")}, Options{Tools: sampleTools}); err != nil || out != "1FalseFalse" {
		t.Errorf("a template reading tools: %q, %v", out, err)
	}
}
