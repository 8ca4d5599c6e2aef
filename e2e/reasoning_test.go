package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	servedmodel "github.com/corral-llm/corral/model"

	ollama "github.com/ollama/ollama/api"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/wire"
)

// Reasoning end to end: stories260K (its byte tokens can write any text)
// behind a ChatML template whose generation prompt opens <think>, as
// Qwen3.5's and DeepSeek R1's do, and which writes Hermes tool calls. The
// model reasons (tells a story) from its first token; the reasoning
// budget closes the reasoning for it, writing </think>, and the answer
// goes on: the reasoning comes back in reasoning_content (Ollama:
// thinking), apart from the content and the calls.

// thinkTemplate is ChatML that opens the reasoning, with the reasoning
// and the tool calls of earlier turns.
const thinkTemplate = `{%- for m in messages %}<|im_start|>{{ m.role }}
{% if m.reasoning_content %}<think>
{{ m.reasoning_content }}
</think>

{% endif %}{{ m.content }}{% if m.tool_calls %}{% for tc in m.tool_calls %}<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}
</tool_call>{% endfor %}{% endif %}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
<think>
{% endif %}`

// startThinking serves stories260K with thinkTemplate and opt.
func startThinking(t *testing.T, opt servedmodel.Options) *e2etest.Server {
	t.Helper()
	tpl, err := chat.Parse(thinkTemplate)
	if err != nil {
		t.Fatal(err)
	}
	opt.Template = tpl
	ts := e2etest.Start(t, testmodel.Stories260K, e2etest.Options{Engine: engine.Config{Parallel: 1}, Model: opt})
	return ts
}

func thinkRequest(extra map[string]any) map[string]any {
	body := map[string]any{
		"model":       "tiny",
		"messages":    []map[string]string{{"role": "user", "content": "Tell me a story."}},
		"max_tokens":  40,
		"temperature": 0,
		"ignore_eos":  true,
	}
	for k, v := range extra {
		body[k] = v
	}
	return body
}

// answer is a chat answer's fields, whole or put together from a stream.
type answer struct {
	reasoning, content string
	calls              []wire.ToolCall
	finish             string
	tokens             int
}

// wholeAnswer asks for a chat completion.
func wholeAnswer(t *testing.T, ts *e2etest.Server, body map[string]any) answer {
	t.Helper()
	resp, b := ts.Post(t, "/v1/chat/completions", body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var c wire.ChatCompletion
	unmarshal(t, string(b), &c)
	m := c.Choices[0].Message
	return answer{m.ReasoningContent, m.Content, m.ToolCalls, *c.Choices[0].FinishReason, c.Usage.CompletionTokens}
}

// streamAnswer streams a chat completion and puts it together.
func streamAnswer(t *testing.T, ts *e2etest.Server, body map[string]any) answer {
	t.Helper()
	body["stream"] = true
	body["stream_options"] = map[string]any{"include_usage": true}
	var a answer
	var r, c strings.Builder
	for _, data := range e2etest.ReadEvents(t, ts.OpenStream(t, t.Context(), "/v1/chat/completions", body)) {
		if data == "[DONE]" {
			break
		}
		var ch wire.ChatCompletionChunk
		unmarshal(t, data, &ch)
		if ch.Usage != nil {
			a.tokens = ch.Usage.CompletionTokens
		}
		if len(ch.Choices) == 0 {
			continue
		}
		d := ch.Choices[0].Delta
		if d.ReasoningContent != nil {
			if *d.ReasoningContent == "" || c.Len() > 0 {
				t.Errorf("reasoning %q after content %q, or empty: %s", *d.ReasoningContent, c.String(), data)
			}
			r.WriteString(*d.ReasoningContent)
		}
		c.WriteString(d.Text())
		for _, tc := range d.ToolCalls {
			for len(a.calls) <= tc.Index {
				a.calls = append(a.calls, wire.ToolCall{})
			}
			call := &a.calls[tc.Index]
			if tc.ID != "" {
				call.ID, call.Type, call.Function.Name = tc.ID, tc.Type, tc.Function.Name
			}
			call.Function.Arguments += tc.Function.Arguments
		}
		if f := ch.Choices[0].FinishReason; f != nil {
			a.finish = *f
		}
	}
	a.reasoning, a.content = r.String(), c.String()
	return a
}

// checkNoMarkup fails t when think markup reached reasoning or content.
func checkNoMarkup(t *testing.T, how string, a answer) {
	t.Helper()
	for _, m := range []string{"<think>", "</think>", "<tool_call>", "</tool_call>"} {
		if strings.Contains(a.reasoning, m) || strings.Contains(a.content, m) {
			t.Errorf("%s: %q in reasoning %q or content %q", how, m, a.reasoning, a.content)
		}
	}
}

// TestReasoningBudgetSplitsAnswer: a thinking_budget (or
// max_reasoning_tokens, or the server's default) closes the reasoning
// after its tokens; the reasoning and the content come back apart, the
// same whole and streamed.
func TestReasoningBudgetSplitsAnswer(t *testing.T) {
	eight := 8
	for name, tc := range map[string]struct {
		opt   servedmodel.Options
		extra map[string]any
	}{
		"thinking_budget":      {extra: map[string]any{"thinking_budget": 8}},
		"max_reasoning_tokens": {extra: map[string]any{"max_reasoning_tokens": 8}},
		"the server's budget":  {opt: servedmodel.Options{ReasoningBudget: &eight}},
	} {
		t.Run(name, func(t *testing.T) {
			// Each greedy answer from a fresh server (see TestSDKChat).
			whole := wholeAnswer(t, startThinking(t, tc.opt), thinkRequest(tc.extra))
			if whole.reasoning == "" || whole.content == "" || whole.finish != "length" || whole.tokens != 40 {
				t.Fatalf("whole: %+v", whole)
			}
			checkNoMarkup(t, "whole", whole)
			streamed := streamAnswer(t, startThinking(t, tc.opt), thinkRequest(tc.extra))
			checkNoMarkup(t, "streamed", streamed)
			if streamed.reasoning != whole.reasoning || streamed.content != whole.content || streamed.finish != "length" || streamed.tokens != 40 {
				t.Fatalf("streamed %+v, whole %+v", streamed, whole)
			}
		})
	}
	// The budget bounds the reasoning alone: a longer one leaves less of
	// max_tokens to the content.
	ts := startThinking(t, servedmodel.Options{})
	short := wholeAnswer(t, ts, thinkRequest(map[string]any{"thinking_budget": 4}))
	long := wholeAnswer(t, ts, thinkRequest(map[string]any{"thinking_budget": 20}))
	if len(long.reasoning) <= len(short.reasoning) || len(long.content) >= len(short.content) {
		t.Errorf("budget 4: %+v; budget 20: %+v", short, long)
	}
	// Without a budget the model reasons until max_tokens.
	if a := wholeAnswer(t, ts, thinkRequest(nil)); a.reasoning == "" || a.content != "" || a.finish != "length" {
		t.Errorf("no budget: %+v", a)
	}
	// A bad budget is the request's fault.
	resp, b := ts.Post(t, "/v1/chat/completions", thinkRequest(map[string]any{"thinking_budget": -2}))
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"param":"thinking_budget"`) {
		t.Errorf("thinking_budget -2: %d %s", resp.StatusCode, b)
	}
}

// --reasoning-format none keeps the reasoning in the content, markers and
// all, as llama-server's does.
func TestReasoningFormatNone(t *testing.T) {
	ts := startThinking(t, servedmodel.Options{ReasoningFormat: "none"})
	a := wholeAnswer(t, ts, thinkRequest(map[string]any{"thinking_budget": 8}))
	if a.reasoning != "" || strings.Count(a.content, "</think>") != 1 {
		t.Fatalf("none: %+v", a)
	}
	s := streamAnswer(t, ts, thinkRequest(map[string]any{"thinking_budget": 8}))
	if s.reasoning != "" || strings.Count(s.content, "</think>") != 1 {
		t.Fatalf("none, streamed: %+v", s)
	}
}

// A forced call after the reasoning: tool_choice's grammar lets the
// opened reasoning go on and close (the budget closes it), then forces
// the call; the answer has reasoning and a call, and no markup.
func TestReasoningThenToolCall(t *testing.T) {
	named := map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}
	body := func() map[string]any {
		return toolRequest(named, map[string]any{"thinking_budget": 6, "max_tokens": 120})
	}
	whole := wholeAnswer(t, startThinking(t, servedmodel.Options{}), body())
	checkNoMarkup(t, "whole", whole)
	if whole.reasoning == "" || whole.content != "" || len(whole.calls) != 1 || whole.finish != "tool_calls" {
		t.Fatalf("whole: %+v", whole)
	}
	checkCall(t, whole.calls[0])
	streamed := streamAnswer(t, startThinking(t, servedmodel.Options{}), body())
	checkNoMarkup(t, "streamed", streamed)
	if streamed.reasoning != whole.reasoning || streamed.content != "" || len(streamed.calls) != 1 ||
		streamed.calls[0].Function != whole.calls[0].Function || streamed.finish != "tool_calls" {
		t.Fatalf("streamed %+v, whole %+v", streamed, whole)
	}
	// The reasoning sent back in the history reaches the template.
	msgs := []any{
		map[string]any{"role": "user", "content": "What is the weather in Paris?"},
		map[string]any{"role": "assistant", "content": nil, "reasoning_content": whole.reasoning, "tool_calls": whole.calls},
		map[string]any{"role": "tool", "tool_call_id": whole.calls[0].ID, "content": "sunny"},
	}
	ts := startThinking(t, servedmodel.Options{})
	next := wholeAnswer(t, ts, toolRequest("auto", map[string]any{"messages": msgs, "max_tokens": 4}))
	if next.finish == "" {
		t.Fatalf("second turn: %+v", next)
	}
}

// The official OpenAI SDK reads the answer; reasoning_content is not a
// field of its types, so it comes from the raw JSON, whole and streamed.
func TestSDKReasoning(t *testing.T) {
	params := oai.ChatCompletionNewParams{
		Model:       "tiny",
		Messages:    []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Tell me a story.")},
		MaxTokens:   oai.Int(40),
		Temperature: oai.Float(0),
	}
	budget := option.WithJSONSet("thinking_budget", 8)
	client := sdkClient(startThinking(t, servedmodel.Options{}))
	c, err := client.Chat.Completions.New(context.Background(), params, budget, ignoreEOS)
	if err != nil {
		t.Fatal(err)
	}
	var reasoning string
	if err := json.Unmarshal([]byte(c.Choices[0].Message.JSON.ExtraFields["reasoning_content"].Raw()), &reasoning); err != nil {
		t.Fatalf("reasoning_content in %s: %v", c.RawJSON(), err)
	}
	content := c.Choices[0].Message.Content
	if reasoning == "" || content == "" || strings.Contains(content+reasoning, "think>") {
		t.Fatalf("whole: reasoning %q content %q", reasoning, content)
	}
	client = sdkClient(startThinking(t, servedmodel.Options{}))
	stream := client.Chat.Completions.NewStreaming(context.Background(), params, budget, ignoreEOS)
	var r, text strings.Builder
	for stream.Next() {
		ch := stream.Current()
		if len(ch.Choices) == 0 {
			continue
		}
		if raw := ch.Choices[0].Delta.JSON.ExtraFields["reasoning_content"].Raw(); raw != "" {
			var piece string
			if err := json.Unmarshal([]byte(raw), &piece); err != nil {
				t.Fatalf("chunk %s: %v", ch.RawJSON(), err)
			}
			r.WriteString(piece)
		}
		text.WriteString(ch.Choices[0].Delta.Content)
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if r.String() != reasoning || text.String() != content {
		t.Fatalf("streamed reasoning %q content %q; whole %q %q", r.String(), text.String(), reasoning, content)
	}
}

// Ollama's client reads the reasoning in "thinking": /api/chat with a
// forced call (Ollama has no tool_choice: "format" forces the JSON
// format's call object), whole and streamed, and /api/generate.
func TestOllamaThinking(t *testing.T) {
	start := func() *ollama.Client {
		ts := startThinking(t, servedmodel.Options{ToolFormat: "json"})
		base, err := url.Parse(ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		return ollama.NewClient(base, ts.Client)
	}
	callSchema, _ := json.Marshal(map[string]any{
		"type": "object",
		"properties": map[string]any{
			"name":      map[string]any{"const": "get_weather"},
			"arguments": weatherTool["function"].(map[string]any)["parameters"],
		},
		"required": []string{"name", "arguments"},
	})
	var tool ollama.Tool
	b, _ := json.Marshal(weatherTool)
	if err := json.Unmarshal(b, &tool); err != nil {
		t.Fatal(err)
	}
	opts := map[string]any{"temperature": 0, "num_predict": 120, "thinking_budget": 6}
	req := func(stream bool) *ollama.ChatRequest {
		return &ollama.ChatRequest{Model: "tiny", Messages: []ollama.Message{{Role: "user", Content: "What is the weather in Paris?"}},
			Tools: ollama.Tools{tool}, Format: callSchema, Stream: &stream, Options: opts}
	}
	var whole ollama.Message
	if err := start().Chat(context.Background(), req(false), func(r ollama.ChatResponse) error { whole = r.Message; return nil }); err != nil {
		t.Fatal(err)
	}
	if whole.Thinking == "" || whole.Content != "" || len(whole.ToolCalls) != 1 || whole.ToolCalls[0].Function.Name != "get_weather" ||
		strings.Contains(whole.Thinking, "think>") {
		t.Fatalf("whole: %+v", whole)
	}
	var thinking, content strings.Builder
	var calls []ollama.ToolCall
	if err := start().Chat(context.Background(), req(true), func(r ollama.ChatResponse) error {
		thinking.WriteString(r.Message.Thinking)
		content.WriteString(r.Message.Content)
		calls = append(calls, r.Message.ToolCalls...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if thinking.String() != whole.Thinking || content.Len() != 0 || len(calls) != 1 || calls[0].Function.Name != "get_weather" {
		t.Fatalf("streamed thinking %q content %q calls %+v; whole %+v", thinking.String(), content.String(), calls, whole)
	}
	city, _ := calls[0].Function.Arguments.Get("city")
	wholeCity, _ := whole.ToolCalls[0].Function.Arguments.Get("city")
	if city != wholeCity || city == nil {
		t.Errorf("streamed call city %v, whole %v", city, wholeCity)
	}

	// /api/generate renders the prompt with the same template.
	var gen ollama.GenerateResponse
	stream := false
	greq := &ollama.GenerateRequest{Model: "tiny", Prompt: "Tell me a story.", Stream: &stream,
		Options: map[string]any{"temperature": 0, "num_predict": 30, "ignore_eos": true, "max_reasoning_tokens": 8}}
	if err := start().Generate(context.Background(), greq, func(r ollama.GenerateResponse) error { gen = r; return nil }); err != nil {
		t.Fatal(err)
	}
	if gen.Thinking == "" || gen.Response == "" || strings.Contains(gen.Thinking+gen.Response, "think>") {
		t.Fatalf("generate: thinking %q response %q", gen.Thinking, gen.Response)
	}
}
