package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/servetest"
	"github.com/corral-llm/corral/internal/testmodel"
	servedmodel "github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/server"
)

// Anthropic's official Go SDK, github.com/anthropics/anthropic-sdk-go/v2,
// against corral's /v1/messages over real HTTP on loopback, with a real
// engine and model. Every object the SDK decodes is walked for fields it
// does not know.

// claudeModel is a model name Claude Code sends: with one model served,
// corral serves any name with it.
const claudeModel = "claude-sonnet-4-5"

// anthropicClient is an SDK client for ts: no retries, ts's HTTP client.
func anthropicClient(ts *e2etest.Server, opts ...option.RequestOption) sdk.Client {
	return sdk.NewClient(append([]option.RequestOption{option.WithBaseURL(ts.URL), option.WithAPIKey("x"),
		option.WithMaxRetries(0), option.WithHTTPClient(ts.Client)}, opts...)...)
}

// anthropicGreedy is temperature 0, which SDK v2's params leave out.
var anthropicGreedy = option.WithJSONSet("temperature", 0)

// sdkMessage is a request for n tokens of an answer to sdkPrompt.
func sdkMessage(n int64) sdk.MessageNewParams {
	return sdk.MessageNewParams{Model: claudeModel, MaxTokens: n,
		Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock(sdkPrompt))}}
}

// streamMessage streams p and returns what the SDK accumulates, and the
// events' types.
func streamMessage(t *testing.T, client sdk.Client, p sdk.MessageNewParams, opts ...option.RequestOption) (sdk.Message, []string) {
	t.Helper()
	st := client.Messages.NewStreaming(context.Background(), p, opts...)
	defer st.Close()
	var (
		msg   sdk.Message
		types []string
	)
	for st.Next() {
		ev := st.Current()
		types = append(types, ev.Type)
		servetest.UnknownFields(t, ev.Type, reflect.ValueOf(ev))
		if err := msg.Accumulate(ev); err != nil {
			t.Fatalf("Accumulate(%s): %v", ev.RawJSON(), err)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	servetest.UnknownFields(t, "message", reflect.ValueOf(msg))
	return msg, types
}

// text is the text of msg's text blocks, and their count.
func text(msg sdk.Message) (string, int) {
	var b strings.Builder
	n := 0
	for _, c := range msg.Content {
		if c.Type == "text" {
			b.WriteString(c.Text)
			n++
		}
	}
	return b.String(), n
}

// TestAnthropicSDKMessages: a anthropicGreedy answer whole and streamed (each from
// a fresh server, as in TestSDKChat) is the same text, under the model
// name the client sent; its usage is exact (the prompt's tokens split
// into cached and not, as the engine counted them) and count_tokens
// counts the same prompt.
func TestAnthropicSDKMessages(t *testing.T) {
	const n = 16
	ts := startServer(t, engine.Config{Parallel: 1})
	client := anthropicClient(ts)
	whole, err := client.Messages.New(context.Background(), sdkMessage(n), anthropicGreedy)
	if err != nil {
		t.Fatal(err)
	}
	servetest.UnknownFields(t, "message", reflect.ValueOf(*whole))
	wholeText, blocks := text(*whole)
	if wholeText == "" || blocks != 1 || whole.Model != claudeModel || whole.Role != "assistant" || whole.Type != "message" ||
		!strings.HasPrefix(whole.ID, "msg_") {
		t.Fatalf("whole: %s", whole.RawJSON())
	}
	u := whole.Usage
	if whole.StopReason == "max_tokens" && u.OutputTokens != n || u.OutputTokens < 1 || u.OutputTokens > n ||
		u.InputTokens < 1 || u.CacheCreationInputTokens != 0 || u.CacheReadInputTokens != 0 {
		t.Errorf("whole usage %s (stop %q): want output tokens, input tokens, nothing cached on a fresh server", u.RawJSON(), whole.StopReason)
	}
	prompt := u.InputTokens + u.CacheReadInputTokens

	// count_tokens: the same prompt's tokens, nothing generated.
	count, err := client.Messages.CountTokens(context.Background(), sdk.MessageCountTokensParams{Model: claudeModel,
		Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock(sdkPrompt))}})
	if err != nil {
		t.Fatal(err)
	}
	servetest.UnknownFields(t, "count", reflect.ValueOf(*count))
	if count.InputTokens != prompt {
		t.Errorf("count_tokens %d, the answer's prompt %d", count.InputTokens, prompt)
	}

	// The same request again on the same server: its prompt is found in
	// the cache, and the usage says so.
	again, err := client.Messages.New(context.Background(), sdkMessage(1), anthropicGreedy)
	if err != nil {
		t.Fatal(err)
	}
	if a := again.Usage; a.InputTokens+a.CacheReadInputTokens != prompt || a.CacheReadInputTokens == 0 {
		t.Errorf("second request's usage %s: want %d prompt tokens, some of them read from the cache", a.RawJSON(), prompt)
	}

	msg, types := streamMessage(t, anthropicClient(startServer(t, engine.Config{Parallel: 1})), sdkMessage(n), anthropicGreedy)
	if got, blocks := text(msg); got != wholeText || blocks != 1 {
		t.Errorf("streamed %q in %d blocks, whole %q", got, blocks, wholeText)
	}
	if msg.StopReason != whole.StopReason || msg.Model != claudeModel || msg.Usage.OutputTokens != u.OutputTokens ||
		msg.Usage.InputTokens+msg.Usage.CacheReadInputTokens != prompt {
		t.Errorf("streamed %s, whole %s", msg.RawJSON(), whole.RawJSON())
	}
	if len(types) < 6 || types[0] != "message_start" || types[1] != "content_block_start" ||
		!slices.Equal(types[len(types)-3:], []string{"content_block_stop", "message_delta", "message_stop"}) {
		t.Errorf("events %v", types)
	}
}

// TestAnthropicStopAndFormat: a stop_sequences entry the greedy answer
// writes ends it there, as stop_reason "stop_sequence" naming it (each
// answer from a fresh server, as in TestSDKChat); output_config.format's
// JSON schema constrains the answer (on stories260K, whose byte tokens
// can write JSON).
func TestAnthropicStopAndFormat(t *testing.T) {
	ctx := context.Background()
	first := anthropicClient(startServer(t, engine.Config{Parallel: 1}))
	whole, err := first.Messages.New(ctx, sdkMessage(24), anthropicGreedy)
	if err != nil {
		t.Fatal(err)
	}
	full, _ := text(*whole)
	words := strings.Fields(full)
	if len(words) < 4 {
		t.Fatalf("answer %q: too short to stop in", full)
	}
	stop := words[len(words)/2]
	p := sdkMessage(24)
	p.StopSequences = []string{"\u0000never", stop}
	second := anthropicClient(startServer(t, engine.Config{Parallel: 1}))
	stopped, err := second.Messages.New(ctx, p, anthropicGreedy)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := text(*stopped)
	if stopped.StopReason != sdk.StopReasonStopSequence || stopped.StopSequence != stop || got != full[:strings.Index(full, stop)] {
		t.Errorf("stop %q: %s\nfull answer %q", stop, stopped.RawJSON(), full)
	}

	p = sdkMessage(40)
	p.OutputConfig = sdk.OutputConfigParam{Format: sdk.JSONOutputFormatParam{Schema: map[string]any{
		"type":       "object",
		"properties": map[string]any{"city": map[string]any{"enum": []string{"Paris", "Tokyo"}}},
		"required":   []string{"city"},
	}}}
	bytesModel := anthropicClient(startModel(t, testmodel.Stories260K, engine.Config{Parallel: 1})) // its byte tokens write "{"
	formatted, err := bytesModel.Messages.New(ctx, p, anthropicGreedy)
	if err != nil {
		t.Fatal(err)
	}
	got, _ = text(*formatted)
	var v struct {
		City string `json:"city"`
	}
	if err := json.Unmarshal([]byte(got), &v); err != nil || (v.City != "Paris" && v.City != "Tokyo") {
		t.Errorf("output_config.format: %q: %v", got, err)
	}
}

// toolsTemplate is ChatML that lists the tools in a system turn and
// writes Hermes tool calls.
const toolsTemplate = `{%- if tools %}<|im_start|>system
{% for t in tools %}{{ t | tojson }}
{% endfor %}<|im_end|>
{% endif %}{%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}{% if m.tool_calls %}{% for tc in m.tool_calls %}<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}
</tool_call>{% endfor %}{% endif %}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}`

// TestAnthropicCountTokens: count_tokens counts the prompt a Messages
// request's answer reports in its usage, its tools rendered by the
// template (which shows them) as the answer's were.
func TestAnthropicCountTokens(t *testing.T) {
	tpl, err := chat.Parse(toolsTemplate)
	if err != nil {
		t.Fatal(err)
	}
	client := anthropicClient(startThinkingTemplate(t, tpl))
	ctx := context.Background()
	msgs := []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("What is the weather in Paris?"))}
	p := sdk.MessageNewParams{Model: claudeModel, MaxTokens: 1, Messages: msgs, Tools: []sdk.ToolUnionParam{anthropicWeather()},
		System: []sdk.TextBlockParam{{Text: "Be brief."}}}
	m, err := client.Messages.New(ctx, p, anthropicGreedy)
	if err != nil {
		t.Fatal(err)
	}
	prompt := m.Usage.InputTokens + m.Usage.CacheReadInputTokens
	withTools, err := client.Messages.CountTokens(ctx, sdk.MessageCountTokensParams{Model: claudeModel, Messages: msgs,
		Tools:  []sdk.MessageCountTokensToolUnionParam{{OfTool: p.Tools[0].OfTool}},
		System: sdk.MessageCountTokensParamsSystemUnion{OfTextBlockArray: p.System}})
	if err != nil {
		t.Fatal(err)
	}
	without, err := client.Messages.CountTokens(ctx, sdk.MessageCountTokensParams{Model: claudeModel, Messages: msgs,
		System: sdk.MessageCountTokensParamsSystemUnion{OfTextBlockArray: p.System}})
	if err != nil {
		t.Fatal(err)
	}
	if withTools.InputTokens != prompt || without.InputTokens >= prompt || without.InputTokens < 1 {
		t.Errorf("count_tokens %d with the tools, %d without; the answer's prompt %d", withTools.InputTokens, without.InputTokens, prompt)
	}
}

// anthropicWeather is the weather tool in Anthropic's shape.
func anthropicWeather() sdk.ToolUnionParam {
	tool := sdk.ToolUnionParamOfTool(sdk.ToolInputSchemaParam{
		Properties: map[string]any{
			"city": map[string]any{"type": "string", "enum": []string{"Paris", "Tokyo"}},
			"days": map[string]any{"type": "integer", "minimum": 1, "maximum": 7},
		},
		Required: []string{"city", "days"},
	}, "get_weather")
	tool.OfTool.Description = sdk.String("Weather forecast for a city.")
	return tool
}

// checkWeatherInput checks a tool_use's input against the weather tool's
// schema.
func checkWeatherInput(t *testing.T, in json.RawMessage) {
	t.Helper()
	var args struct {
		City string `json:"city"`
		Days int    `json:"days"`
	}
	if err := json.Unmarshal(in, &args); err != nil || (args.City != "Paris" && args.City != "Tokyo") || args.Days < 1 || args.Days > 7 {
		t.Errorf("input %s: %v", in, err)
	}
}

// TestAnthropicSDKTools forces a call with tool_choice {"type": "tool"},
// whole and streamed through the SDK's accumulator (the same call), and
// sends its tool_result back for the next turn, which answers in text
// with tool_choice none.
func TestAnthropicSDKTools(t *testing.T) {
	ts := startModel(t, testmodel.Stories260K, engine.Config{Parallel: 1})
	client := anthropicClient(ts)
	ctx := context.Background()
	p := sdk.MessageNewParams{
		Model:      claudeModel,
		MaxTokens:  120,
		Messages:   []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("What is the weather in Paris?"))},
		Tools:      []sdk.ToolUnionParam{anthropicWeather()},
		ToolChoice: sdk.ToolChoiceParamOfTool("get_weather"),
	}
	whole, err := client.Messages.New(ctx, p, anthropicGreedy)
	if err != nil {
		t.Fatal(err)
	}
	servetest.UnknownFields(t, "message", reflect.ValueOf(*whole))
	if whole.StopReason != sdk.StopReasonToolUse || len(whole.Content) != 1 || whole.Content[0].Type != "tool_use" {
		t.Fatalf("whole: %s", whole.RawJSON())
	}
	call := whole.Content[0].AsToolUse()
	if call.Name != "get_weather" || !strings.HasPrefix(call.ID, "toolu_") {
		t.Errorf("call %s", call.RawJSON())
	}
	checkWeatherInput(t, call.Input)

	msg, _ := streamMessage(t, client, p, anthropicGreedy)
	if msg.StopReason != sdk.StopReasonToolUse || len(msg.Content) != 1 || msg.Content[0].Type != "tool_use" {
		t.Fatalf("streamed: %s", msg.RawJSON())
	}
	streamed := msg.Content[0].AsToolUse()
	var a, b any
	json.Unmarshal(streamed.Input, &a)
	json.Unmarshal(call.Input, &b)
	if streamed.Name != call.Name || a == nil || !reflect.DeepEqual(a, b) {
		t.Errorf("streamed call %s, whole %s", streamed.RawJSON(), call.RawJSON())
	}

	// The result goes back with the call; tool_choice none answers in
	// text.
	p.Messages = append(p.Messages, whole.ToParam(),
		sdk.NewUserMessage(sdk.NewToolResultBlock(call.ID, `{"forecast": "sunny"}`, false)))
	p.ToolChoice = sdk.ToolChoiceUnionParam{OfNone: &sdk.ToolChoiceNoneParam{}}
	p.MaxTokens = 8
	next, err := client.Messages.New(ctx, p, anthropicGreedy)
	if err != nil {
		t.Fatal(err)
	}
	if got, blocks := text(*next); got == "" || blocks != 1 || len(next.Content) != 1 || next.StopReason == sdk.StopReasonToolUse {
		t.Fatalf("second turn: %s", next.RawJSON())
	}
	// disable_parallel_tool_use with "any": one call at most.
	p.Messages = p.Messages[:1]
	p.ToolChoice = sdk.ToolChoiceUnionParam{OfAny: &sdk.ToolChoiceAnyParam{DisableParallelToolUse: sdk.Bool(true)}}
	p.MaxTokens = 200
	one, err := client.Messages.New(ctx, p, anthropicGreedy)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(one.Content); n != 1 || one.Content[0].Type != "tool_use" {
		t.Errorf("any, one call: %s", one.RawJSON())
	}
}

// thinkSwitchTemplate is thinkTemplate whose generation prompt opens the
// reasoning unless enable_thinking is false, as Qwen 3's does.
var thinkSwitchTemplate = strings.Replace(thinkTemplate, "<|im_start|>assistant\n<think>\n{% endif %}",
	"<|im_start|>assistant\n{% if enable_thinking is not defined or enable_thinking %}<think>\n{% endif %}{% endif %}", 1)

// TestAnthropicThinking: thinking enabled with a budget_tokens on a
// template that reasons comes back as a thinking block, then the text,
// the same whole and streamed; display "omitted" leaves it out; thinking
// disabled on a template that reads enable_thinking does not reason.
func TestAnthropicThinking(t *testing.T) {
	p := sdk.MessageNewParams{Model: claudeModel, MaxTokens: 40,
		Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock(sdkPrompt))},
		Thinking: sdk.ThinkingConfigParamOfEnabled(8)}
	first := anthropicClient(startThinking(t, servedmodel.Options{}))
	whole, err := first.Messages.New(context.Background(), p, anthropicGreedy)
	if err != nil {
		t.Fatal(err)
	}
	servetest.UnknownFields(t, "message", reflect.ValueOf(*whole))
	if len(whole.Content) != 2 || whole.Content[0].Type != "thinking" || whole.Content[1].Type != "text" {
		t.Fatalf("whole: %s", whole.RawJSON())
	}
	thinking, content := whole.Content[0].Thinking, whole.Content[1].Text
	if thinking == "" || content == "" || strings.Contains(thinking+content, "think>") {
		t.Fatalf("whole: thinking %q, text %q", thinking, content)
	}
	msg, _ := streamMessage(t, anthropicClient(startThinking(t, servedmodel.Options{})), p, anthropicGreedy)
	if len(msg.Content) != 2 || msg.Content[0].Thinking != thinking || msg.Content[1].Text != content || msg.StopReason != whole.StopReason {
		t.Fatalf("streamed %s\nwhole %s", msg.RawJSON(), whole.RawJSON())
	}
	p.Thinking.OfEnabled.Display = sdk.ThinkingConfigEnabledDisplayOmitted
	third := anthropicClient(startThinking(t, servedmodel.Options{}))
	omitted, err := third.Messages.New(context.Background(), p, anthropicGreedy)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := text(*omitted); len(omitted.Content) != 1 || got != content {
		t.Errorf("omitted: %s", omitted.RawJSON())
	}

	tpl, err := chat.Parse(thinkSwitchTemplate)
	if err != nil {
		t.Fatal(err)
	}
	switched := anthropicClient(startThinkingTemplate(t, tpl))
	p.Thinking = sdk.ThinkingConfigParamOfEnabled(8)
	on, err := switched.Messages.New(context.Background(), p, anthropicGreedy)
	if err != nil {
		t.Fatal(err)
	}
	p.Thinking = sdk.ThinkingConfigParamUnion{OfDisabled: &sdk.ThinkingConfigDisabledParam{}}
	off, err := switched.Messages.New(context.Background(), p, anthropicGreedy)
	if err != nil {
		t.Fatal(err)
	}
	if len(on.Content) != 2 || on.Content[0].Type != "thinking" {
		t.Errorf("enabled, on the template that reads enable_thinking: %s", on.RawJSON())
	}
	if got, blocks := text(*off); len(off.Content) != 1 || blocks != 1 || got == "" || strings.Contains(got, "think>") {
		t.Errorf("disabled: %s", off.RawJSON())
	}
}

// startThinkingTemplate serves stories260K with the template tpl.
func startThinkingTemplate(t *testing.T, tpl *chat.Template) *e2etest.Server {
	t.Helper()
	ts := e2etest.Start(t, testmodel.Stories260K, e2etest.Options{Engine: engine.Config{Parallel: 1},
		Model: servedmodel.Options{Template: tpl}})
	return ts
}

// anthropicError returns err as the SDK's *sdk.Error, failing t otherwise.
func anthropicError(t *testing.T, err error) *sdk.Error {
	t.Helper()
	var e *sdk.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want *anthropic.Error", err, err)
	}
	return e
}

// envelope is Anthropic's error body.
type envelope struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// TestAnthropicErrors: refusals reach the SDK in Anthropic's envelope
// and status: a missing or wrong key (401, the gate's), a body over the
// server's limit (413, the gate's), an invalid request (400, naming its
// field). The key works as x-api-key and as a Bearer token, with any
// anthropic-version and anthropic-beta.
func TestAnthropicErrors(t *testing.T) {
	ts := e2etest.Start(t, testmodel.TinyStories656K, e2etest.Options{Engine: engine.Config{Parallel: 1},
		Server: server.Config{Policy: e2etest.KeyPolicy(t, nil, nil, e2etest.APIKey+" name=tester"), MaxBody: 4096}})
	ctx := context.Background()
	check := func(what string, err error, status int, typ string) {
		t.Helper()
		e := anthropicError(t, err)
		var env envelope
		if jerr := json.Unmarshal([]byte(e.RawJSON()), &env); jerr != nil || e.StatusCode != status || string(e.Type()) != typ ||
			env.Type != "error" || env.Error.Type != typ || env.Error.Message == "" {
			t.Errorf("%s: %d %s, want %d %s", what, e.StatusCode, e.RawJSON(), status, typ)
		}
	}
	bad := anthropicClient(ts)
	_, err := bad.Messages.New(ctx, sdkMessage(2))
	check("wrong key", err, 401, "authentication_error")
	good := anthropicClient(ts, option.WithAPIKey(e2etest.APIKey))
	if m, err := good.Messages.New(ctx, sdkMessage(2)); err != nil || len(m.Content) == 0 {
		t.Fatalf("right key: %v", err)
	}
	_, err = good.Messages.New(ctx, sdkMessage(2), option.WithJSONDel("max_tokens"))
	check("no max_tokens", err, 400, "invalid_request_error")
	if !strings.Contains(anthropicError(t, err).Message, "max_tokens") {
		t.Errorf("no max_tokens: %s", anthropicError(t, err).RawJSON())
	}
	_, err = good.Messages.New(ctx, sdkMessage(2), option.WithJSONSet("top_k", -1))
	check("top_k -1", err, 400, "invalid_request_error")
	_, err = good.Messages.New(ctx, sdkMessage(2), option.WithJSONSet("system", strings.Repeat("x", 5000)))
	check("body over --max-body", err, 413, "request_too_large")
	_, err = good.Messages.CountTokens(ctx, sdk.MessageCountTokensParams{Model: claudeModel})
	check("count_tokens without messages", err, 400, "invalid_request_error")

	// Raw requests: no key at all; the key as x-api-key (Claude Code's)
	// and as a Bearer token, with the headers Claude Code sends.
	body := `{"model":"` + claudeModel + `","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name    string
		headers map[string]string
		status  int
	}{
		{"no key", nil, 401},
		{"x-api-key", map[string]string{"X-Api-Key": e2etest.APIKey, "Anthropic-Version": "2023-06-01",
			"Anthropic-Beta": "claude-code-20250219,interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14"}, 200},
		{"bearer", map[string]string{"Authorization": "Bearer " + e2etest.APIKey, "Anthropic-Version": "2099-01-01", "Anthropic-Beta": "anything"}, 200},
	} {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/messages", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range tc.headers {
			req.Header.Set(k, v)
		}
		resp, err := ts.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var env envelope
		json.NewDecoder(resp.Body).Decode(&env)
		resp.Body.Close()
		if resp.StatusCode != tc.status || (tc.status == 401 && (env.Type != "error" || env.Error.Type != "authentication_error")) {
			t.Errorf("%s: %d %+v", tc.name, resp.StatusCode, env)
		}
	}
}
