package serving_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	anth "github.com/anthropics/anthropic-sdk-go/v2"
	aopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/serving"
)

// The errors and counts coding agents act on, end to end on real models
// in every dialect that has them, read with the official SDKs: a prompt
// over the context, tool names of Anthropic's length, and the reasoning's
// tokens in the usage.

// clients are the official SDKs' clients of ts, which retry nothing.
func clients(ts string) (anth.Client, openai.Client) {
	return anth.NewClient(aopt.WithBaseURL(ts), aopt.WithAPIKey("k"), aopt.WithMaxRetries(0)),
		openai.NewClient(option.WithBaseURL(ts+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
}

// TestContextOverflowInEveryDialect: a conversation longer than the
// context is, on /v1/messages, Anthropic's 400 "prompt is too long: N
// tokens > M maximum" with N the prompt's exact count (as count_tokens
// counts it) and M the most a prompt may have (the context per request
// less the answer's first token), which Claude Code compacts by; on
// /v1/chat/completions and /v1/responses OpenAI's context_length_exceeded,
// which a Responses stream reports as a failed response (Codex compacts
// on it).
func TestContextOverflowInEveryDialect(t *testing.T) {
	a, eng := realAPI(t, engine.Config{Parallel: 1, CtxSize: 256}, serving.Options{})
	ts := keyServer(t, a, nil)
	ac, oc := clients(ts.URL)
	ctx := context.Background()
	max := eng.Info().CtxPerRequest - 1
	long := strings.Repeat("Once upon a time there was a little dog. ", 60)

	// Anthropic, whole and streamed: the error comes before any event.
	msg := anth.MessageNewParams{Model: "tiny", MaxTokens: 8, Messages: []anth.MessageParam{anth.NewUserMessage(anth.NewTextBlock(long))}}
	count, err := ac.Messages.CountTokens(ctx, anth.MessageCountTokensParams{Model: "tiny", Messages: msg.Messages})
	if err != nil {
		t.Fatal(err)
	}
	if int(count.InputTokens) <= max {
		t.Fatalf("the prompt has %d tokens, within the %d a prompt may have", count.InputTokens, max)
	}
	wantMsg := "prompt is too long: " + strconv.FormatInt(count.InputTokens, 10) + " tokens > " + strconv.Itoa(max) + " maximum"
	for _, stream := range []bool{false, true} {
		if stream {
			s := ac.Messages.NewStreaming(ctx, msg)
			for s.Next() {
				t.Errorf("streamed: event %s", s.Current().Type)
			}
			err = s.Err()
			s.Close()
		} else {
			_, err = ac.Messages.New(ctx, msg)
		}
		var ae *anth.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || ae.Type() != "invalid_request_error" || ae.Message != wantMsg {
			t.Errorf("/v1/messages (stream %v): %v, want a 400 invalid_request_error %q", stream, err, wantMsg)
			continue
		}
		var env map[string]any
		if json.Unmarshal([]byte(ae.RawJSON()), &env) != nil || len(env) != 2 || env["type"] != "error" {
			t.Errorf("/v1/messages: body %s, want {\"type\":\"error\",\"error\":{...}}", ae.RawJSON())
		}
		m := regexp.MustCompile(`(?i)prompt is too long[^0-9]*(\d+)\s*tokens?\s*>\s*(\d+)`).FindStringSubmatch(ae.Message)
		if n, _ := strconv.Atoi(m[1]); m == nil || n <= max || m[2] != strconv.Itoa(max) {
			t.Errorf("Claude Code reads %q as %v", ae.Message, m)
		}
	}

	// OpenAI's Chat Completions.
	_, err = oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(long)}})
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != http.StatusBadRequest || oe.Code != "context_length_exceeded" || oe.Param != "messages" ||
		!strings.Contains(oe.Message, "a prompt may have "+strconv.Itoa(max)+" tokens") {
		t.Errorf("/v1/chat/completions: %v, want a 400 context_length_exceeded", err)
	}

	// OpenAI's Responses: a 400 whole; streamed, a failed response.
	rp := responses.ResponseNewParams{Model: "tiny", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(long)}}
	if _, err := oc.Responses.New(ctx, rp); !errors.As(err, &oe) || oe.StatusCode != http.StatusBadRequest || oe.Code != "context_length_exceeded" || oe.Param != "input" {
		t.Errorf("/v1/responses: %v, want a 400 context_length_exceeded", err)
	}
	s := oc.Responses.NewStreaming(ctx, rp)
	var last responses.ResponseStreamEventUnion
	n := 0
	for s.Next() {
		last = s.Current()
		n++
	}
	if err := s.Err(); err != nil || n != 3 || last.Type != "response.failed" || last.AsResponseFailed().Response.Error.Code != "context_length_exceeded" {
		t.Errorf("/v1/responses, streamed: %v, %d events, last %s; want response.failed context_length_exceeded", err, n, last.RawJSON())
	}
	s.Close()
}

// stories260K serves stories260K (its byte tokens write any text; no
// chat template: the chatml built-in and its Hermes calls, unless opt
// has one) as the one model "tiny", on loopback behind every dialect.
func stories260K(t *testing.T, opt model.Options) string {
	t.Helper()
	path := testmodel.Path(t, testmodel.Stories260K)
	eng, err := engine.New(context.Background(), engine.Config{ModelPath: path, Name: "tiny", Threads: 1, Parallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	return keyServer(t, serveModel(t, eng, eng, path, opt, serving.Options{}), nil).URL
}

// TestLongToolNames: a tool name of Anthropic's 128 characters is
// served on /v1/messages, a call of it forced (the grammar writes it, the
// Hermes parser reads it back), and on Ollama's /api/chat; OpenAI's
// endpoints keep their 64 (a 400 naming the name's field).
func TestLongToolNames(t *testing.T) {
	url := stories260K(t, model.Options{})
	ac, oc := clients(url)
	ctx := context.Background()
	long := strings.Repeat("get_the_weather-", 8)
	if len(long) != 128 {
		t.Fatal(len(long))
	}
	schema := anth.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string", "enum": []string{"Paris", "Lima"}}}, Required: []string{"city"}}
	msg, err := ac.Messages.New(ctx, anth.MessageNewParams{
		Model: "tiny", MaxTokens: 200,
		Messages:   []anth.MessageParam{anth.NewUserMessage(anth.NewTextBlock("Weather in Paris?"))},
		Tools:      []anth.ToolUnionParam{{OfTool: &anth.ToolParam{Name: long, InputSchema: schema}}},
		ToolChoice: anth.ToolChoiceParamOfTool(long),
	}, aopt.WithJSONSet("temperature", 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) == 0 || msg.StopReason != anth.StopReasonToolUse {
		t.Fatalf("message %s", msg.RawJSON())
	}
	if b := msg.Content[len(msg.Content)-1].AsToolUse(); b.Type != "tool_use" || b.Name != long || !strings.Contains(string(b.Input), `"city"`) {
		t.Errorf("tool_use %s", msg.Content[len(msg.Content)-1].RawJSON())
	}

	// OpenAI's rule on its endpoints.
	_, err = oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "tiny",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		Tools:    []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: long})}})
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != http.StatusBadRequest || oe.Param != "tools[0].function.name" {
		t.Errorf("/v1/chat/completions: %v, want a 400 about tools[0].function.name", err)
	}
	_, err = oc.Responses.New(ctx, responses.ResponseNewParams{Model: "tiny", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		Tools: []responses.ToolUnionParam{responses.ToolParamOfFunction(long, nil, false)}})
	if !errors.As(err, &oe) || oe.StatusCode != http.StatusBadRequest || oe.Param != "tools[0].name" {
		t.Errorf("/v1/responses: %v, want a 400 about tools[0].name", err)
	}

	// Ollama's, Anthropic's length.
	ts := url
	for _, name := range []string{long, long + "x"} {
		body := map[string]any{"model": "tiny", "stream": false, "messages": []map[string]string{{"role": "user", "content": "hi"}},
			"options": map[string]any{"num_predict": 2},
			"tools":   []map[string]any{{"type": "function", "function": map[string]any{"name": name, "parameters": map[string]any{"type": "object"}}}}}
		status, b, err := sendTo(ts, "/api/chat", body)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{true: 200, false: 400}[len(name) == 128]; status != want {
			t.Errorf("/api/chat, a name of %d: %d %s, want %d", len(name), status, b, want)
		}
	}
}

// thinkTemplate is ChatML whose generation prompt opens the reasoning,
// as Qwen3.5's does.
const thinkTemplate = `{%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
<think>
{% endif %}`

// TestReasoningTokensInEveryDialect: the usage counts the reasoning's
// tokens exactly, the same in every dialect that has a field for them:
// stories260K reasons from its first token (the prompt opened the
// reasoning) until the reasoning budget, 5 tokens, closes it, writing
// "</think>\n\n" for it; the tokens through the one that writes
// </think> are the reasoning's.
func TestReasoningTokensInEveryDialect(t *testing.T) {
	tpl, err := chat.Parse(thinkTemplate)
	if err != nil {
		t.Fatal(err)
	}
	budget := 5
	url := stories260K(t, model.Options{Template: tpl, ReasoningBudget: &budget})
	ac, oc := clients(url)
	ctx := context.Background()

	// The closing tokens through the one that writes </think>.
	eng, err := engine.New(ctx, engine.Config{ModelPath: testmodel.Path(t, testmodel.Stories260K), Threads: 1, Parallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	closeToks, err := eng.Tokenize("</think>\n\n", false, true)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	want := budget
	for _, tok := range closeToks {
		text.WriteString(eng.TokenPiece(tok))
		want++
		if strings.Contains(text.String(), "</think>") {
			break
		}
	}
	eng.Close()

	const max = 40
	chat, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "tiny", MaxTokens: openai.Int(max), Temperature: openai.Float(0),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me a story.")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := chat.Usage.CompletionTokensDetails.ReasoningTokens; got != int64(want) || chat.Choices[0].Message.Content == "" {
		t.Errorf("/v1/chat/completions: %d reasoning tokens of %d, want %d: %s", got, chat.Usage.CompletionTokens, want, chat.RawJSON())
	}
	resp, err := oc.Responses.New(ctx, responses.ResponseNewParams{Model: "tiny", MaxOutputTokens: openai.Int(max), Temperature: openai.Float(0),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Tell me a story.")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Usage.OutputTokensDetails.ReasoningTokens; got != int64(want) {
		t.Errorf("/v1/responses: %d reasoning tokens of %d, want %d", got, resp.Usage.OutputTokens, want)
	}
	s := ac.Messages.NewStreaming(ctx, anth.MessageNewParams{Model: "tiny", MaxTokens: max,
		Messages: []anth.MessageParam{anth.NewUserMessage(anth.NewTextBlock("Tell me a story."))}}, aopt.WithJSONSet("temperature", 0))
	var msg anth.Message
	for s.Next() {
		if err := msg.Accumulate(s.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if got := msg.Usage.OutputTokensDetails.ThinkingTokens; got != int64(want) || msg.Content[0].Type != "thinking" {
		t.Errorf("/v1/messages: %d thinking tokens of %d, want %d: %s", got, msg.Usage.OutputTokens, want, msg.RawJSON())
	}
}

// sendTo posts body to path on the server at url.
func sendTo(url, path string, body any) (int, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.Post(url+path, "application/json", strings.NewReader(string(b)))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var out json.RawMessage
	err = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, err
}
