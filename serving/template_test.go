package serving_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-llm/corral/anthropic"
	"github.com/corral-llm/corral/internal/servetest"
	"github.com/corral-llm/corral/llamacpp"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/ollama"
	"github.com/corral-llm/corral/openai"
	"github.com/corral-llm/corral/registry"
	"github.com/corral-llm/corral/serving"
)

// The chat templates of real models, and what transformers renders with
// them (package chat's conformance corpus).
const (
	templatesDir = "../chat/testdata/templates"
	expectedDir  = "../chat/testdata/expected"
)

// realTemplate returns a fake engine whose model has the chat template of
// testdata/templates/name.jinja.
func realTemplate(t *testing.T, name string) *servetest.Engine {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(templatesDir, name+".jinja"))
	if err != nil {
		t.Fatal(err)
	}
	fake := servetest.NewEngine()
	fake.Model.ChatTemplate = string(src)
	return fake
}

// expected is transformers' render of conversation conv with template
// name.
func expected(t *testing.T, name, conv string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(expectedDir, name, conv+".txt"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// serveWith serves body to h on an API whose model has opt.
func serveWith(t *testing.T, fake *servetest.Engine, opt model.Options, h func(*serving.Core, http.ResponseWriter, *http.Request), body string) *httptest.ResponseRecorder {
	t.Helper()
	m, err := model.New(fake, opt)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.New(registry.Config{KeepAlive: -1}, []registry.Spec{{ID: fake.Model.Name}},
		func(context.Context, registry.Spec) (*model.Model, error) { return m, nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	w := httptest.NewRecorder()
	h(serving.New(reg, serving.Options{}), w, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)))
	return w
}

// applyTemplate posts body to /apply-template and returns the prompt.
func applyTemplate(t *testing.T, fake *servetest.Engine, opt model.Options, body string) string {
	t.Helper()
	w := serveWith(t, fake, opt, llamacpp.ApplyTemplate, body)
	var resp struct {
		Prompt *string `json:"prompt"`
	}
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &resp) != nil || resp.Prompt == nil {
		t.Fatalf("/apply-template %s: %d %s", body, w.Code, w.Body)
	}
	return *resp.Prompt
}

const kwargsConversation = `"messages": [{"role": "system", "content": "You are a concise assistant."}, {"role": "user", "content": "Is 91 prime?"}]`

// TestApplyTemplate checks /apply-template against transformers' renders
// of the same requests.
func TestApplyTemplate(t *testing.T) {
	fake := realTemplate(t, "Qwen-Qwen3-0.6B")
	got := applyTemplate(t, fake, model.Options{}, `{"messages": [{"role": "user", "content": "What is the capital of France?"}]}`)
	if want := expected(t, "Qwen-Qwen3-0.6B", "user"); got != want {
		t.Errorf("plain:\n got %q\nwant %q", got, want)
	}
	got = applyTemplate(t, fake, model.Options{}, `{"add_generation_prompt": false, "messages": [
		{"role": "user", "content": "Name a prime number."}, {"role": "assistant", "content": "7 is a prime number."},
		{"role": "user", "content": "Another one?"}, {"role": "assistant", "content": "13."}]}`)
	if want := expected(t, "Qwen-Qwen3-0.6B", "multiturn-nogen"); got != want {
		t.Errorf("add_generation_prompt false:\n got %q\nwant %q", got, want)
	}

	// Tools and the tool_choice that hides them.
	convs, err := os.ReadFile("../chat/testdata/conversations.json")
	if err != nil {
		t.Fatal(err)
	}
	var corpus []json.RawMessage
	if err := json.Unmarshal(convs, &corpus); err != nil {
		t.Fatal(err)
	}
	var roundTrip json.RawMessage
	for _, c := range corpus {
		if strings.Contains(string(c), `"name": "tool-roundtrip"`) {
			roundTrip = c
		}
	}
	fake = realTemplate(t, "meta-llama-Llama-3.1-8B-Instruct")
	got = applyTemplate(t, fake, model.Options{}, string(roundTrip))
	// The fake model adds BOS itself, so the prompt lacks the template's.
	want := strings.TrimPrefix(expected(t, "meta-llama-Llama-3.1-8B-Instruct", "tool-roundtrip"), "<|begin_of_text|>")
	if got != want {
		t.Errorf("tool round trip:\n got %q\nwant %q", got, want)
	}
	hidden := applyTemplate(t, fake, model.Options{}, strings.Replace(string(roundTrip), `"tools":`, `"tool_choice": "none", "tools":`, 1))
	if strings.Contains(hidden, "search_flights") || !strings.Contains(got, "search_flights") {
		t.Errorf("tool_choice none still shows the tools:\n%s", hidden)
	}
}

// TestTemplateKwargs checks chat_template_kwargs, the server's kwargs
// under them, and reasoning_effort, with real templates.
func TestTemplateKwargs(t *testing.T) {
	qwen := realTemplate(t, "Qwen-Qwen3-0.6B")
	const emptyThink = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
	got := applyTemplate(t, qwen, model.Options{}, `{"chat_template_kwargs": {"enable_thinking": false}, `+kwargsConversation+`}`)
	if want := expected(t, "Qwen-Qwen3-0.6B", "kwargs"); got != want || !strings.HasSuffix(got, emptyThink) {
		t.Errorf("enable_thinking false:\n got %q\nwant %q", got, want)
	}
	server := model.Options{ChatTemplateKwargs: map[string]json.RawMessage{"enable_thinking": json.RawMessage("false")}}
	if got := applyTemplate(t, qwen, server, `{`+kwargsConversation+`}`); !strings.HasSuffix(got, emptyThink) {
		t.Errorf("server enable_thinking false: %q", got)
	}
	if got := applyTemplate(t, qwen, server, `{"chat_template_kwargs": {"enable_thinking": true}, `+kwargsConversation+`}`); strings.Contains(got, "<think>") {
		t.Errorf("a request's enable_thinking true does not override the server's false: %q", got)
	}

	// gpt-oss reads reasoning_effort into its system message; a chat
	// completion's prompt is what the engine is given.
	gpt := realTemplate(t, "openai-gpt-oss-120b")
	for effort, want := range map[string]string{`"reasoning_effort": "high", `: "Reasoning: high", "": "Reasoning: medium",
		`"reasoning_effort": "high", "chat_template_kwargs": {"reasoning_effort": "low"}, `: "Reasoning: low"} {
		gpt.Submitted = nil
		serveWith(t, gpt, model.Options{}, openai.ChatCompletions, `{`+effort+kwargsConversation+`}`)
		if len(gpt.Submitted) != 1 || !strings.Contains(gpt.Submitted[0].Prompt, want+"\n") {
			t.Errorf("%s: prompt lacks %q: %v", effort, want, gpt.Submitted)
		}
	}
	// Templates that do not read reasoning_effort do not get it.
	if got := applyTemplate(t, qwen, model.Options{}, `{"reasoning_effort": "high", `+kwargsConversation+`}`); got != expected(t, "Qwen-Qwen3-0.6B", "kwargs")[:len(got)] || strings.Contains(got, "high") {
		t.Errorf("reasoning_effort reached a template that does not read it: %q", got)
	}
}

func TestTemplateKwargsBounds(t *testing.T) {
	deep := strings.Repeat("[", 17) + strings.Repeat("]", 17)
	var many []string
	for i := range 65 {
		many = append(many, `"k`+itoa(i)+`": 1`)
	}
	for _, tt := range []struct{ body, param, msg string }{
		{`{"chat_template_kwargs": [1], "messages": [{"role": "user", "content": "x"}]}`, "chat_template_kwargs", "JSON object"},
		{`{"chat_template_kwargs": "x", "messages": [{"role": "user", "content": "x"}]}`, "chat_template_kwargs", "JSON object"},
		{`{"chat_template_kwargs": {"messages": []}, "messages": [{"role": "user", "content": "x"}]}`, "chat_template_kwargs", `"messages" is set by the server`},
		{`{"chat_template_kwargs": {"bos_token": "x"}, "messages": [{"role": "user", "content": "x"}]}`, "chat_template_kwargs", `"bos_token" is set by the server`},
		{`{"chat_template_kwargs": {"a": ` + deep + `}, "messages": [{"role": "user", "content": "x"}]}`, "chat_template_kwargs", "nest more than 16"},
		{`{"chat_template_kwargs": {` + strings.Join(many, ", ") + `}, "messages": [{"role": "user", "content": "x"}]}`, "chat_template_kwargs", "at most 64"},
		{`{"reasoning_effort": "extreme", "messages": [{"role": "user", "content": "x"}]}`, "reasoning_effort", "must be one of"},
	} {
		for _, h := range []func(*serving.Core, http.ResponseWriter, *http.Request){openai.ChatCompletions, llamacpp.ApplyTemplate} {
			fake := realTemplate(t, "Qwen-Qwen3-0.6B")
			w := serveWith(t, fake, model.Options{}, h, tt.body)
			if w.Code != http.StatusBadRequest {
				t.Errorf("%.80s: %d %s, want 400", tt.body, w.Code, w.Body)
				continue
			}
			e := decodeEnvelope(t, w)
			if e.Param == nil || *e.Param != tt.param || !strings.Contains(e.Message, tt.msg) {
				t.Errorf("%.80s: param %v message %q, want %s and %q", tt.body, deref(e.Param), e.Message, tt.param, tt.msg)
			}
			if len(fake.Submitted) != 0 {
				t.Errorf("%.80s: submitted", tt.body)
			}
		}
	}
	// 64 variables nested 16 deep are fine.
	ok := `{"chat_template_kwargs": {` + strings.Join(many[:63], ", ") + `, "d": ` + strings.Repeat("[", 16) + strings.Repeat("]", 16) + `}, "messages": [{"role": "user", "content": "x"}]}`
	applyTemplate(t, realTemplate(t, "Qwen-Qwen3-0.6B"), model.Options{}, ok)
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// TestOllamaThink checks that Ollama's think sets the variable each
// template reads.
func TestOllamaThink(t *testing.T) {
	const msgs = `"stream": false, "messages": [{"role": "user", "content": "Is 91 prime?"}]`
	for _, tt := range []struct {
		template, think string
		want            string // the prompt ends with it
		absent          string // the prompt lacks it
	}{
		{"Qwen-Qwen3-0.6B", `false`, "<|im_start|>assistant\n<think>\n\n</think>\n\n", ""},
		{"Qwen-Qwen3-0.6B", `true`, "<|im_start|>assistant\n", "<think>"},
		{"Qwen-Qwen3-0.6B", `"low"`, "<|im_start|>assistant\n", "<think>"},
		{"deepseek-ai-DeepSeek-V3.1", `true`, "<｜Assistant｜><think>", ""},
		{"deepseek-ai-DeepSeek-V3.1", `false`, "<｜Assistant｜><think></think>", ""},
		{"openai-gpt-oss-120b", `"high"`, "<|start|>assistant", "Reasoning: medium"},
	} {
		fake := realTemplate(t, tt.template)
		serveWith(t, fake, model.Options{}, ollama.Chat, `{"think": `+tt.think+`, `+msgs+`}`)
		if len(fake.Submitted) != 1 {
			t.Errorf("%s think %s: nothing submitted", tt.template, tt.think)
			continue
		}
		p := fake.Submitted[0].Prompt
		if !strings.HasSuffix(p, tt.want) || tt.absent != "" && strings.Contains(p, tt.absent) {
			t.Errorf("%s think %s: prompt ends %q, want %q and no %q", tt.template, tt.think, p[max(0, len(p)-80):], tt.want, tt.absent)
		}
		if tt.template == "openai-gpt-oss-120b" && !strings.Contains(p, "Reasoning: high\n") {
			t.Errorf("gpt-oss think \"high\": prompt lacks Reasoning: high: %q", p)
		}
	}
	fake := realTemplate(t, "Qwen-Qwen3-0.6B")
	w := serveWith(t, fake, model.Options{}, ollama.Chat, `{"think": "max", `+msgs+`}`)
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "'think' must be") || len(fake.Submitted) != 0 {
		t.Errorf("think \"max\": %d %s", w.Code, w.Body)
	}
}

// TestModelTemplateErrors checks that a model whose chat template does
// not work is refused at load, with its name and the template line, and
// that one without a template gets ChatML.
func TestModelTemplateErrors(t *testing.T) {
	fake := servetest.NewEngine()
	fake.Model.Name = "broken-model"
	fake.Model.ChatTemplate = "{% for m in messages %}\n{{ m.content }\n{% endfor %}"
	_, err := model.New(fake, model.Options{})
	if err == nil || !strings.Contains(err.Error(), "broken-model") || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("unparsable template: %v, want an error naming the model and line 2", err)
	}
	// A template that reads a variable nobody gives it.
	plugged := servetest.NewEngine()
	plugged.Model.Name = "plugged"
	plugged.Model.ChatTemplate = "{{ messages[0].content }}\n{{ 'Plugins: ' + plugins }}"
	_, err = model.New(plugged, model.Options{})
	if err == nil || !strings.Contains(err.Error(), "plugged") || !strings.Contains(err.Error(), "'plugins' is undefined") || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("template that cannot render: %v", err)
	}
	// Replacing the template makes it load, and so does giving the
	// variable it reads.
	if _, err := model.New(plugged, model.Options{ChatTemplate: "llama3"}); err != nil {
		t.Errorf("--chat-template over a broken template: %v", err)
	}
	withPlugins := model.Options{ChatTemplateKwargs: map[string]json.RawMessage{"plugins": json.RawMessage(`"none"`)}}
	if got := applyTemplate(t, plugged, withPlugins, `{"messages": [{"role": "user", "content": "hi"}]}`); got != "hi\nPlugins: none" {
		t.Errorf("a template with --chat-template-kwargs plugins: %q", got)
	}
	file := filepath.Join(t.TempDir(), "t.jinja")
	if err := os.WriteFile(file, []byte("{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := applyTemplate(t, plugged, model.Options{ChatTemplateFile: file}, `{"messages": [{"role": "user", "content": "hi"}]}`); got != "[user]hi" {
		t.Errorf("--chat-template-file: %q", got)
	}
	if err := os.WriteFile(file, []byte("ok\n{{ x + }}"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = model.New(servetest.NewEngine(), model.Options{ChatTemplateFile: file})
	if err == nil || !strings.Contains(err.Error(), "tiny") || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad template file: %v", err)
	}
	if _, err := model.New(servetest.NewEngine(), model.Options{ChatTemplate: "chatml", ChatTemplateFile: file}); err == nil {
		t.Error("a built-in and a file together were accepted")
	}
	// No template at all: ChatML.
	if got := applyTemplate(t, servetest.NewEngine(), model.Options{}, `{"messages": [{"role": "user", "content": "hi"}]}`); got != "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n" {
		t.Errorf("no template: %q", got)
	}
}

// TestTemplateRenderError checks that a template failing on a request's
// messages is a 400 naming the template line, not a 500: functionary
// v3.2's template concatenates tool-call arguments, which are an object.
func TestTemplateRenderError(t *testing.T) {
	fake := realTemplate(t, "meetkai-functionary-medium-v3.2")
	w := serveWith(t, fake, model.Options{}, openai.ChatCompletions, `{"messages": [
		{"role": "user", "content": "Weather?"},
		{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
		{"role": "tool", "tool_call_id": "c", "content": "22C"}]}`)
	if w.Code != http.StatusBadRequest {
		t.Fatalf("%d %s, want 400", w.Code, w.Body)
	}
	e := decodeEnvelope(t, w)
	if e.Code == nil || *e.Code != "chat_template_error" || !strings.Contains(e.Message, "line ") || !strings.Contains(e.Message, "can only concatenate str") {
		t.Errorf("error %+v", e)
	}
}

// TestToolsOnlyTemplate checks a model whose only chat template renders
// only requests that offer tools (a tool_use template: Hermes 3's): a
// chat with tools renders, one without is a 400 naming tools in each
// dialect's shape, never a 500.
func TestToolsOnlyTemplate(t *testing.T) {
	const tools = `"tools": [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]`
	const msgs = `"messages": [{"role": "user", "content": "Weather in Paris?"}]`
	fake := realTemplate(t, "NousResearch-Hermes-3-Llama-3.1-8B-tool_use")
	if w := serveWith(t, fake, model.Options{}, openai.ChatCompletions, `{`+tools+`, `+msgs+`}`); len(fake.Submitted) != 1 || !strings.Contains(fake.Submitted[0].Prompt, "<tools>") {
		t.Fatalf("with tools: nothing submitted: %d %s", w.Code, w.Body)
	}
	for _, body := range []string{`{` + msgs + `}`, `{"tool_choice": "none", ` + tools + `, ` + msgs + `}`} {
		fake.Submitted = nil
		w := serveWith(t, fake, model.Options{}, openai.ChatCompletions, body)
		if w.Code != http.StatusBadRequest || len(fake.Submitted) != 0 {
			t.Errorf("%.60s: %d %s, want 400", body, w.Code, w.Body)
			continue
		}
		e := decodeEnvelope(t, w)
		if deref(e.Param) != "tools" || deref(e.Code) != "chat_template_error" || !strings.Contains(e.Message, "renders only requests that offer 'tools'") || !strings.Contains(e.Message, "line ") {
			t.Errorf("%.60s: error %+v", body, e)
		}
	}
	w := serveWith(t, fake, model.Options{}, anthropic.Messages, `{"model": "tiny", "max_tokens": 8, `+msgs+`}`)
	var ae struct {
		Type  string `json:"type"`
		Error struct {
			Type, Message string
		} `json:"error"`
	}
	if w.Code != http.StatusBadRequest || json.Unmarshal(w.Body.Bytes(), &ae) != nil || ae.Type != "error" || ae.Error.Type != "invalid_request_error" || !strings.Contains(ae.Error.Message, "offer 'tools'") {
		t.Errorf("anthropic without tools: %d %s", w.Code, w.Body)
	}
}

// TestToolUseTemplateKwargs checks that the variables a request sets
// through Ollama's think reach a GGUF's tool_use template, which renders
// the chats that offer tools, when it reads them and the default
// template does not.
func TestToolUseTemplateKwargs(t *testing.T) {
	fake := realTemplate(t, "google-gemma-2-2b-it")
	qwen, err := os.ReadFile(filepath.Join(templatesDir, "Qwen-Qwen3-0.6B.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	fake.Model.ChatTemplateToolUse = string(qwen)
	serveWith(t, fake, model.Options{}, ollama.Chat, `{"think": false, "stream": false, "messages": [{"role": "user", "content": "Weather?"}],
		"tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]}`)
	if len(fake.Submitted) != 1 || !strings.HasSuffix(fake.Submitted[0].Prompt, "<|im_start|>assistant\n<think>\n\n</think>\n\n") {
		t.Errorf("think false with tools: %v", fake.Submitted)
	}
}
