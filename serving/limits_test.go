package serving_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/servetest"
	"github.com/corral-llm/corral/llamacpp"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/ollama"
	"github.com/corral-llm/corral/openai"
	"github.com/corral-llm/corral/registry"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// limitedAPI serves fake as the one model "tiny" within lim.
func limitedAPI(t *testing.T, fake *servetest.Engine, lim serving.Limits) *serving.Core {
	t.Helper()
	m, err := model.New(fake, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	reg, err := registry.New(registry.Config{KeepAlive: -1, Logger: quiet}, []registry.Spec{{ID: fake.Model.Name}},
		func(context.Context, registry.Spec) (*model.Model, error) { return m, nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return serving.New(reg, serving.Options{Limits: lim, Logger: quiet})
}

// post runs body through handler h of a.
func post(a *serving.Core, h func(*serving.Core, http.ResponseWriter, *http.Request), body string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	r.Header.Set("Content-Type", "text/plain") // as the finding sent it: not looked at
	h(a, w, r)
	return w
}

// wantLimit checks that w is a 400 naming the flag, in OpenAI's shape
// (code limit_exceeded, param) or, with ollama, Ollama's {"error": ...}.
func wantLimit(t *testing.T, w *httptest.ResponseRecorder, ollama bool, param, flag string) {
	t.Helper()
	if w.Code != http.StatusBadRequest {
		t.Fatalf("status %d, want 400: %.300s", w.Code, w.Body)
	}
	var msg string
	if ollama {
		var res map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil || len(res) != 1 {
			t.Fatalf("%.300q is not Ollama's error: %v", w.Body, err)
		}
		msg, _ = res["error"].(string)
	} else {
		e := decodeEnvelope(t, w)
		if deref(e.Code) != "limit_exceeded" || deref(e.Param) != param {
			t.Errorf("code %q param %q, want limit_exceeded and %q", deref(e.Code), deref(e.Param), param)
		}
		msg = e.Message
	}
	if !strings.Contains(msg, "corral serve --"+flag) || !strings.Contains(msg, "at most") {
		t.Errorf("message %q does not name the limit and --%s", msg, flag)
	}
}

// allocated returns the bytes f allocates, all goroutines together.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// allowedToolsFinding is the 7 MB request that killed the server: one tool
// with a 3.5 MB description, allowed 80,000 times over, every copy of which
// went into the prompt (280 GB).
func allowedToolsFinding() string {
	var b strings.Builder
	b.WriteString(`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"t","description":"`)
	b.WriteString(strings.Repeat("d", 3500000))
	b.WriteString(`","parameters":{"type":"object"}}}],"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[`)
	for i := range 80000 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"type":"function","function":{"name":"t"}}`)
	}
	b.WriteString(`]}}}`)
	return b.String()
}

// TestAllowedToolsFinding: the request is refused before anything is
// rendered; with the limit raised, the tool named 80,000 times is shown
// once, and the request costs memory of the order of its size.
func TestAllowedToolsFinding(t *testing.T) {
	body := allowedToolsFinding()
	fake := servetest.NewEngine()
	var w *httptest.ResponseRecorder
	alloc := allocated(func() { w = post(limitedAPI(t, fake, serving.Limits{}), openai.ChatCompletions, body) })
	wantLimit(t, w, false, "tool_choice", "max-allowed-tools")
	if len(fake.Submitted) != 0 {
		t.Fatal("submitted")
	}
	t.Logf("refused, %d MB allocated for a %d MB request", alloc>>20, len(body)>>20)

	fake = servetest.NewEngine()
	fake.Model.ChatTemplate = `{% for t in tools or [] %}[{{ t.function.name }}: {{ t.function.description | length }}]{% endfor %}{% for m in messages %}{{ m.content }}{% endfor %}`
	alloc = allocated(func() {
		w = post(limitedAPI(t, fake, serving.Limits{MaxAllowedTools: 100000}), openai.ChatCompletions, body)
	})
	if w.Code != http.StatusServiceUnavailable || len(fake.Submitted) != 1 { // the fake's queue is full
		t.Fatalf("status %d, %d submitted: %.300s", w.Code, len(fake.Submitted), w.Body)
	}
	if p := fake.Submitted[0].Prompt; p != "[t: 3500000]hi" {
		t.Errorf("prompt %.200q, want the tool once", p)
	}
	if alloc > 40*uint64(len(body)) {
		t.Errorf("%d MB allocated for a %d MB request", alloc>>20, len(body)>>20)
	}
}

// TestSchemaFinding: the schema of 300,000 properties, through each field
// that takes a schema, is refused while it is read with a 400 naming the
// limit, in each API's shape.
func TestSchemaFinding(t *testing.T) {
	schema := servetest.ManyProperties(300000)
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name   string
		h      func(*serving.Core, http.ResponseWriter, *http.Request)
		body   string
		ollama bool
		param  string
	}{
		{"response_format", openai.ChatCompletions, `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` + schema + `}}}`, false, "response_format"},
		{"completions response_format", openai.Completions, `{"prompt":"hi","response_format":{"type":"json_object","schema":` + schema + `}}`, false, "response_format"},
		{"/completion json_schema", llamacpp.Completion, `{"prompt":"hi","json_schema":` + schema + `}`, false, "json_schema"},
		{"/api/chat format", ollama.Chat, `{` + msgs + `,"format":` + schema + `}`, true, "format"},
		{"/api/generate format", ollama.Generate, `{"prompt":"hi","format":` + schema + `}`, true, "format"},
		{"forced tool", openai.ChatCompletions, `{` + msgs + `,"tool_choice":"required","tools":[{"type":"function","function":{"name":"f","parameters":` + schema + `}}]}`, false, "tools"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := servetest.NewEngine()
			w := post(limitedAPI(t, fake, serving.Limits{}), tc.h, tc.body)
			wantLimit(t, w, tc.ollama, tc.param, "max-schema-properties")
			if len(fake.Submitted) != 0 {
				t.Error("submitted")
			}
		})
	}
}

// TestLimits: each limit, just within it and just past it, on each
// endpoint it applies to.
func TestLimits(t *testing.T) {
	chatH, complH, llamaH := openai.ChatCompletions, openai.Completions, llamacpp.Completion
	embedH, ollamaEmbedH, detokH := openai.Embeddings, ollama.Embed, llamacpp.Detokenize
	ochatH, ogenH := ollama.Chat, ollama.Generate
	msg := func(n int) string { // n user messages
		return `"messages":[` + strings.TrimSuffix(strings.Repeat(`{"role":"user","content":"hi"},`, n), ",") + `]`
	}
	tools := func(n int) string {
		var b []string
		for i := range n {
			b = append(b, fmt.Sprintf(`{"type":"function","function":{"name":"f%d"}}`, i))
		}
		return `"tools":[` + strings.Join(b, ",") + `]`
	}
	allowed := func(names ...string) string {
		var b []string
		for _, n := range names {
			b = append(b, fmt.Sprintf(`{"type":"function","function":{"name":%q}}`, n))
		}
		return `"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[` + strings.Join(b, ",") + `]}}`
	}
	text := func(n int) string { return strings.Repeat("a", n) }
	schema := func(values int) string { // a schema of values JSON values
		return `{"enum":[` + strings.TrimSuffix(strings.Repeat(`1,`, values-2), ",") + `]}`
	}
	lim := serving.Limits{
		MaxTools: 2, MaxAllowedTools: 2, MaxMessages: 2, MaxPromptBytes: 100, MaxSchemaNodes: 10, MaxSchemaProperties: 2,
		MaxLogprobs: 100, MaxEmbedInputs: 2, MaxEmbedBytes: 12, MaxDetokenizeBytes: 9,
	}
	for _, tc := range []struct {
		name   string
		h      func(*serving.Core, http.ResponseWriter, *http.Request)
		body   string
		param  string // "": within the limit, else the field at fault
		flag   string
		ollama bool
	}{
		{"tools within", chatH, `{` + msg(1) + `,` + tools(2) + `}`, "", "", false},
		{"tools", chatH, `{` + msg(1) + `,` + tools(3) + `}`, "tools", "max-tools", false},
		{"tools, tool_choice none", chatH, `{` + msg(1) + `,` + tools(3) + `,"tool_choice":"none"}`, "tools", "max-tools", false},
		{"ollama tools", ochatH, `{` + msg(1) + `,` + tools(3) + `}`, "tools", "max-tools", true},
		{"allowed_tools within", chatH, `{` + msg(1) + `,` + tools(2) + `,` + allowed("f0", "f1") + `}`, "", "", false},
		{"allowed_tools", chatH, `{` + msg(1) + `,` + tools(2) + `,` + allowed("f0", "f1", "f0") + `}`, "tool_choice", "max-allowed-tools", false},
		{"messages within", chatH, `{` + msg(2) + `}`, "", "", false},
		{"messages", chatH, `{` + msg(3) + `}`, "messages", "max-messages", false},
		{"ollama messages", ochatH, `{` + msg(3) + `}`, "messages", "max-messages", true},
		{"rendered prompt within", chatH, `{"messages":[{"role":"user","content":"` + text(40) + `"}]}`, "", "", false},
		{"rendered prompt", chatH, `{"messages":[{"role":"user","content":"` + text(101) + `"}]}`, "messages", "max-prompt-bytes", false},
		{"ollama rendered prompt", ochatH, `{"messages":[{"role":"user","content":"` + text(101) + `"}]}`, "messages", "max-prompt-bytes", true},
		{"ollama generate rendered prompt", ogenH, `{"prompt":"` + text(101) + `"}`, "messages", "max-prompt-bytes", true},
		{"ollama raw prompt", ogenH, `{"raw":true,"prompt":"` + text(101) + `"}`, "prompt", "max-prompt-bytes", true},
		{"completions prompt within", complH, `{"prompt":"` + text(100) + `"}`, "", "", false},
		{"completions prompt", complH, `{"prompt":"` + text(101) + `"}`, "prompt", "max-prompt-bytes", false},
		{"/completion prompt", llamaH, `{"prompt":["` + text(101) + `"]}`, "prompt", "max-prompt-bytes", false},
		{"schema within", llamaH, `{"prompt":"hi","json_schema":` + schema(10) + `}`, "", "", false},
		{"schema nodes", llamaH, `{"prompt":"hi","json_schema":` + schema(11) + `}`, "json_schema", "max-schema-nodes", false},
		{"schema properties", chatH, `{` + msg(1) + `,"response_format":{"type":"json_schema","json_schema":{"schema":{"properties":{"a":{},"b":{},"c":{}}}}}}`, "response_format", "max-schema-properties", false},
		{"forced tool schema", chatH, `{` + msg(1) + `,"tool_choice":"required","tools":[{"type":"function","function":{"name":"f","parameters":` + schema(11) + `}}]}`, "tools", "max-schema-nodes", false},
		{"ollama format", ogenH, `{"prompt":"hi","format":` + schema(11) + `}`, "format", "max-schema-nodes", true},
		// The fake's slot holds 64 tokens.
		{"chat logprobs within", chatH, `{` + msg(1) + `,"logprobs":true,"top_logprobs":1,"max_tokens":50}`, "", "", false},
		{"chat logprobs", chatH, `{` + msg(1) + `,"logprobs":true,"top_logprobs":1}`, "top_logprobs", "max-logprobs", false},
		{"chat logprobs, max_completion_tokens", chatH, `{` + msg(1) + `,"logprobs":true,"top_logprobs":1,"max_completion_tokens":51}`, "top_logprobs", "max-logprobs", false},
		{"completions logprobs", complH, `{"prompt":"hi","logprobs":1,"max_tokens":51}`, "logprobs", "max-logprobs", false},
		{"/completion n_probs within", llamaH, `{"prompt":"hi","n_probs":9,"n_predict":10}`, "", "", false},
		{"/completion n_probs", llamaH, `{"prompt":"hi","n_probs":9,"n_predict":11}`, "n_probs", "max-logprobs", false},
		{"embedding inputs within", embedH, `{"input":["a","b"]}`, "", "", false},
		{"embedding inputs", embedH, `{"input":["a","b","c"]}`, "input", "max-embed-inputs", false},
		{"embedding token inputs", embedH, `{"input":[[1],[2],[3]]}`, "input", "max-embed-inputs", false},
		{"embedding bytes within", embedH, `{"input":["` + text(6) + `","` + text(6) + `"]}`, "", "", false},
		{"embedding bytes", embedH, `{"input":["` + text(6) + `","` + text(7) + `"]}`, "input", "max-embed-bytes", false},
		{"embedding token bytes", embedH, `{"input":[1,2,3,4]}`, "input", "max-embed-bytes", false},
		{"ollama embedding inputs", ollamaEmbedH, `{"input":["a","b","c"]}`, "input", "max-embed-inputs", true},
		{"ollama embedding bytes", ollamaEmbedH, `{"input":"` + text(13) + `"}`, "input", "max-embed-bytes", true},
		// The fake's token 1 is "<s>".
		{"detokenize within", detokH, `{"tokens":[1,1,1]}`, "", "", false},
		{"detokenize", detokH, `{"tokens":[1,1,1,1]}`, "tokens", "max-detokenize-bytes", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := servetest.NewEngine()
			fake.Model.EmbedMaxTokens = 8
			w := post(limitedAPI(t, fake, lim), tc.h, tc.body)
			if tc.param == "" {
				// Past the checks: the fake answers 503 (its queue is
				// full) or /detokenize 200.
				if w.Code != http.StatusServiceUnavailable && w.Code != http.StatusOK {
					t.Fatalf("status %d, want the request past the checks: %.300s", w.Code, w.Body)
				}
				return
			}
			wantLimit(t, w, tc.ollama, tc.param, tc.flag)
			if len(fake.Submitted) != 0 {
				t.Error("submitted")
			}
		})
	}
}

// TestAllowedToolsShownOnce: a function named twice in allowed_tools is
// shown (and forced) once, in the order they are named.
func TestAllowedToolsShownOnce(t *testing.T) {
	fake := servetest.NewEngine()
	fake.Model.ChatTemplate = `{% for t in tools or [] %}[{{ t.function.name }}]{% endfor %}{% for m in messages %}{{ m.content }}{% endfor %}`
	body := `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b"}},{"type":"function","function":{"name":"c"}}],
		"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"b"}},{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b"}}]}}}`
	w := post(limitedAPI(t, fake, serving.Limits{}), openai.ChatCompletions, body)
	if w.Code != http.StatusServiceUnavailable || len(fake.Submitted) != 1 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	req := fake.Submitted[0]
	if req.Prompt != "[b][a]hi" {
		t.Errorf("prompt %q, want [b][a]hi", req.Prompt)
	}
	if !strings.Contains(req.Grammar, `"\"a\""`) || !strings.Contains(req.Grammar, `"\"b\""`) || strings.Contains(req.Grammar, `"\"c\""`) {
		t.Errorf("grammar does not force a or b alone:\n%s", req.Grammar)
	}
}

// TestAgentRequestPasses: a coding agent's request, 60 tools with real
// schemas, a long conversation of a 120 KB prompt, passes the default
// limits, with tools offered and with a call forced.
func TestAgentRequestPasses(t *testing.T) {
	var tools []wire.Tool
	for i := range 60 {
		params := fmt.Sprintf(`{"type":"object","properties":{"path":{"type":"string","description":"the file"},"offset":{"type":"integer","minimum":0},
			"limit":{"type":"integer"},"mode":{"enum":["read","write","append"]},"options":{"type":"object","properties":{"recursive":{"type":"boolean"},
			"pattern":{"type":"string"},"exclude":{"type":"array","items":{"type":"string"}}}}},"required":["path"],"additionalProperties":false,"title":"tool %d"}`, i)
		tools = append(tools, wire.Tool{Type: "function", Function: wire.FunctionDef{Name: fmt.Sprintf("tool_%d", i), Description: strings.Repeat("Does things. ", 40), Parameters: json.RawMessage(params)}})
	}
	var msgs []chat.Message
	msgs = append(msgs, chat.Message{Role: "system", Content: servetest.JSONString(strings.Repeat("You are an agent. ", 1000))})
	for i := range 150 {
		msgs = append(msgs, chat.Message{Role: "user", Content: servetest.JSONString(fmt.Sprintf("step %d: %s", i, strings.Repeat("some output ", 50)))})
		msgs = append(msgs, chat.Message{Role: "assistant", Content: servetest.JSONString("ok")})
	}
	msgs = append(msgs, chat.Message{Role: "user", Content: servetest.JSONString("go on")})
	for _, choice := range []string{`"auto"`, `"required"`} {
		b, err := json.Marshal(map[string]any{"messages": msgs, "tools": tools, "tool_choice": json.RawMessage(choice)})
		if err != nil {
			t.Fatal(err)
		}
		fake := servetest.NewEngine()
		w := post(limitedAPI(t, fake, serving.Limits{}), openai.ChatCompletions, string(b))
		if w.Code != http.StatusServiceUnavailable || len(fake.Submitted) != 1 {
			t.Fatalf("tool_choice %s: status %d: %.500s", choice, w.Code, w.Body)
		}
		if n := len(fake.Submitted[0].Prompt); n < 100000 {
			t.Errorf("a prompt of %d bytes, want a long one", n)
		}
	}
}

// TestAllowedToolsLinear: 300,000 tools, each allowed, are matched by name
// in linear time (a scan of the tools per entry would take minutes).
func TestAllowedToolsLinear(t *testing.T) {
	const n = 300000
	fields := openai.ToolFields{Tools: make([]wire.Tool, n)}
	var b strings.Builder
	b.WriteString(`{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[`)
	for i := range n {
		fields.Tools[i] = wire.Tool{Type: "function", Function: wire.FunctionDef{Name: fmt.Sprintf("f%d", i)}}
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"type":"function","function":{"name":"f%d"}}`, n-1-i)
	}
	b.WriteString(`]}}`)
	fields.ToolChoice = json.RawMessage(b.String())
	m, err := model.New(servetest.NewEngine(), model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lim := serving.Limits{MaxTools: n, MaxAllowedTools: n}.WithDefaults()
	tools, e := fields.Parse(&lim)
	if e != nil {
		t.Fatal(e)
	}
	plan, e := serving.PlanTools(m, &tools, &lim)
	if e != nil {
		t.Fatal(e)
	}
	if len(plan.Render) != n || plan.Render[0].Function.Name != fmt.Sprintf("f%d", n-1) {
		t.Fatalf("%d tools shown, the first %q", len(plan.Render), plan.Render[0].Function.Name)
	}
}

// TestClientSpansLinear: contents the template does not show verbatim are
// looked for in bounded time (20,000 of them in a 4 MB prompt would read
// 160 GB), and those found before are marked.
func TestClientSpansLinear(t *testing.T) {
	prompt := "<|user|>hello<|end|>" + strings.Repeat("x", 4<<20)
	msgs := []chat.Message{{Role: "user", Content: servetest.JSONString("hello")}}
	for range 20000 {
		msgs = append(msgs, chat.Message{Role: "user", Content: servetest.JSONString("  not there  ")})
	}
	spans := serving.ClientSpans(prompt, msgs)
	if len(spans) != 1 || spans[0] != (engine.Span{Start: 8, End: 13}) {
		t.Fatalf("spans %v, want hello's", spans)
	}
}

// TestResultErrorNoToken: a generation stopped because the request's
// grammar or biases leave no token to sample is the request's fault (400,
// code no_token), not the server's (found by FuzzRequests: a forced call
// of a tool the tiny model's vocabulary cannot write).
func TestResultErrorNoToken(t *testing.T) {
	e := serving.ResultError(engine.Result{FinishReason: engine.FinishError, Err: fmt.Errorf("%w: exception in llama.cpp", engine.ErrNoToken)})
	if e == nil || e.Status != http.StatusBadRequest || openai.ErrorObject(e).Type != wire.TypeInvalidRequest || e.Code != "no_token" {
		t.Fatalf("%+v, want a 400 no_token", e)
	}
	if e := serving.ResultError(engine.Result{FinishReason: engine.FinishError, Err: errors.New("decode failed")}); e == nil || e.Status != http.StatusInternalServerError {
		t.Fatalf("%+v, want a 500", e)
	}
}
