package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	rsdk "github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/servetest"
	"github.com/corral-llm/corral/internal/testmodel"
	servedmodel "github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/responses"
	"github.com/corral-llm/corral/server"
	"github.com/corral-llm/corral/wire"
)

// OpenAI's Responses API through the official Go SDK's Responses client
// (openai-go v3), over real HTTP on loopback, with a real engine and
// model.

// weatherFunction is the weather tool as a Responses function tool.
func weatherFunction() rsdk.ToolUnionParam {
	return rsdk.ToolParamOfFunction("get_weather", map[string]any{
		"type": "object",
		"properties": map[string]any{
			"city": map[string]any{"type": "string", "enum": []string{"Paris", "Tokyo"}},
			"days": map[string]any{"type": "integer", "minimum": 1, "maximum": 7},
		},
		"required": []string{"city", "days"},
	}, false)
}

// streamResponse runs p as a stream, checking every event's sequence
// number and known fields, and returns the completed response as the
// SDK's accumulator rebuilt it, and the types of the events.
func streamResponse(t *testing.T, client openai.Client, p rsdk.ResponseNewParams, opts ...option.RequestOption) (rsdk.Response, []string) {
	t.Helper()
	stream := client.Responses.NewStreaming(context.Background(), p, opts...)
	acc := &rsdk.ResponseAccumulator{}
	var types []string
	for stream.Next() {
		ev := stream.Current()
		if ev.SequenceNumber != int64(len(types)) {
			t.Errorf("event %d (%s): sequence_number %d", len(types), ev.Type, ev.SequenceNumber)
		}
		types = append(types, ev.Type)
		servetest.UnknownFields(t, ev.Type, reflect.ValueOf(ev.AsAny()))
		var server rsdk.ResponsesServerEventUnion
		if err := json.Unmarshal([]byte(ev.RawJSON()), &server); err != nil {
			t.Fatalf("%s: %v", ev.Type, err)
		}
		if err := acc.AddEvent(server); err != nil {
			t.Fatalf("accumulator: %s: %v", ev.Type, err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(types) == 0 || types[len(types)-1] != "response.completed" && types[len(types)-1] != "response.incomplete" {
		t.Fatalf("events %v, want them to end with response.completed or response.incomplete", types)
	}
	resp, err := acc.ReconstructedResponse()
	if err != nil {
		t.Fatal(err)
	}
	return *resp, types
}

// TestResponsesSDK: a greedy answer, whole and streamed, is the same text
// with exact usage; a forced function call comes back as a function_call
// item, and its output sent back gets an answer; a stored response is
// continued with previous_response_id, read back and deleted.
func TestResponsesSDK(t *testing.T) {
	ts := startModel(t, testmodel.Stories260K, engine.Config{Parallel: 1})
	client := sdkClient(ts)
	ctx := context.Background()
	p := rsdk.ResponseNewParams{
		Model:           "stories",
		Input:           rsdk.ResponseNewParamsInputUnion{OfString: openai.String("Tell me a story.")},
		MaxOutputTokens: openai.Int(24),
		Temperature:     openai.Float(0),
		Store:           openai.Bool(false),
	}
	whole, err := client.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	servetest.UnknownFields(t, "response", reflect.ValueOf(*whole))
	if whole.Status != "incomplete" || whole.OutputText() == "" || whole.Usage.OutputTokens != 24 || whole.Usage.InputTokens == 0 {
		t.Fatalf("whole: %s", whole.RawJSON())
	}
	streamed, types := streamResponse(t, client, p)
	if streamed.OutputText() != whole.OutputText() || types[0] != "response.created" {
		t.Errorf("streamed %q (%v), whole %q", streamed.OutputText(), types, whole.OutputText())
	}
	if cached := streamed.Usage.InputTokensDetails.CachedTokens; cached == 0 || streamed.Usage.InputTokens != whole.Usage.InputTokens {
		t.Errorf("the repeated prompt: usage %s, want its tokens cached", streamed.Usage.RawJSON())
	}

	// A forced call, and its output sent back.
	call := rsdk.ResponseNewParams{
		Model:           "stories",
		Input:           rsdk.ResponseNewParamsInputUnion{OfString: openai.String("What is the weather in Paris?")},
		Tools:           []rsdk.ToolUnionParam{weatherFunction()},
		ToolChoice:      rsdk.ResponseNewParamsToolChoiceUnion{OfFunctionTool: &rsdk.ToolChoiceFunctionParam{Name: "get_weather"}},
		MaxOutputTokens: openai.Int(200),
		Temperature:     openai.Float(0),
	}
	called, err := client.Responses.New(ctx, call)
	if err != nil {
		t.Fatal(err)
	}
	servetest.UnknownFields(t, "response", reflect.ValueOf(*called))
	if len(called.Output) != 1 || called.Output[0].Type != "function_call" {
		t.Fatalf("forced call: %s", called.RawJSON())
	}
	fc := called.Output[0].AsFunctionCall()
	if fc.Name != "get_weather" || fc.CallID == "" {
		t.Errorf("call %s", fc.RawJSON())
	}
	checkWeatherInput(t, json.RawMessage(fc.Arguments))
	streamedCall, _ := streamResponse(t, client, call)
	if len(streamedCall.Output) != 1 || streamedCall.Output[0].AsFunctionCall().Arguments != fc.Arguments {
		t.Errorf("streamed call %s, whole %s", streamedCall.RawJSON(), fc.RawJSON())
	}

	// Stored by default: the call's output continues it.
	next := rsdk.ResponseNewParams{
		Model:              "stories",
		PreviousResponseID: openai.String(called.ID),
		Input:              rsdk.ResponseNewParamsInputUnion{OfInputItemList: rsdk.ResponseInputParam{callOutput(fc.CallID, `{"forecast": "sunny"}`)}},
		MaxOutputTokens:    openai.Int(8),
		Temperature:        openai.Float(0),
	}
	answer, err := client.Responses.New(ctx, next)
	if err != nil {
		t.Fatal(err)
	}
	if answer.Usage.InputTokens <= called.Usage.InputTokens || len(answer.Output) == 0 {
		t.Errorf("continued: %d prompt tokens after %d: it did not carry the conversation: %s", answer.Usage.InputTokens, called.Usage.InputTokens, answer.RawJSON())
	}
	got, err := client.Responses.Get(ctx, called.ID, rsdk.ResponseGetParams{})
	if err != nil || got.ID != called.ID || len(got.Output) != 1 {
		t.Fatalf("get: %v %v", got, err)
	}
	if err := client.Responses.Delete(ctx, called.ID); err != nil {
		t.Fatal(err)
	}
	_, err = client.Responses.Get(ctx, called.ID, rsdk.ResponseGetParams{})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Errorf("get after delete: %v, want 404", err)
	}
	_, err = client.Responses.New(ctx, next)
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Param != "previous_response_id" {
		t.Errorf("continuing a deleted response: %v, want 404 naming previous_response_id", err)
	}
}

// callOutput is a function_call_output input item.
func callOutput(callID, output string) rsdk.ResponseInputItemUnionParam {
	item := rsdk.ResponseInputItemParamOfFunctionCallOutput(output)
	item.OfFunctionCallOutput.CallID = openai.String(callID)
	return item
}

// TestResponsesConversation: previous_response_id renders the stored turn
// again: the continued request's prompt is exactly as long as the same
// conversation sent whole, as items, without the store. As OpenAI's,
// the first request's instructions are not carried over.
func TestResponsesConversation(t *testing.T) {
	ts := startModel(t, testmodel.Stories260K, engine.Config{Parallel: 1})
	client := sdkClient(ts)
	ctx := context.Background()
	first, err := client.Responses.New(ctx, rsdk.ResponseNewParams{
		Model:           "stories",
		Instructions:    openai.String("You tell stories."),
		Input:           rsdk.ResponseNewParamsInputUnion{OfString: openai.String("Tell me a story.")},
		MaxOutputTokens: openai.Int(12),
		Temperature:     openai.Float(0),
		Store:           openai.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	servetest.UnknownFields(t, "response", reflect.ValueOf(*first))
	// Streamed, through the accumulator, continuing the stored one.
	next, _ := streamResponse(t, client, rsdk.ResponseNewParams{
		Model:              "stories",
		PreviousResponseID: openai.String(first.ID),
		Input:              rsdk.ResponseNewParamsInputUnion{OfString: openai.String("Go on.")},
		MaxOutputTokens:    openai.Int(4),
		Temperature:        openai.Float(0),
		Store:              openai.Bool(false),
	})
	whole, err := client.Responses.New(ctx, rsdk.ResponseNewParams{
		Model: "stories",
		Input: rsdk.ResponseNewParamsInputUnion{OfInputItemList: rsdk.ResponseInputParam{
			rsdk.ResponseInputItemParamOfMessage("Tell me a story.", rsdk.EasyInputMessageRoleUser),
			rsdk.ResponseInputItemParamOfMessage(first.OutputText(), rsdk.EasyInputMessageRoleAssistant),
			rsdk.ResponseInputItemParamOfMessage("Go on.", rsdk.EasyInputMessageRoleUser),
		}},
		MaxOutputTokens: openai.Int(4),
		Temperature:     openai.Float(0),
		Store:           openai.Bool(false),
	})
	if err != nil {
		t.Fatal(err)
	}
	if next.Usage.InputTokens != whole.Usage.InputTokens || next.Usage.InputTokens <= first.Usage.OutputTokens {
		t.Errorf("continued: %d prompt tokens; the same conversation sent whole: %d; the first turn: %d + %d",
			next.Usage.InputTokens, whole.Usage.InputTokens, first.Usage.InputTokens, first.Usage.OutputTokens)
	}
	// The whole request found the continued one's prompt in the cache,
	// and says so exactly: all of it but the token evaluated for logits.
	if cached := whole.Usage.InputTokensDetails.CachedTokens; cached != whole.Usage.InputTokens-1 {
		t.Errorf("the repeated conversation: %d of %d prompt tokens cached", cached, whole.Usage.InputTokens)
	}
	// A response stored with store false is not found.
	if _, err := client.Responses.Get(ctx, next.ID, rsdk.ResponseGetParams{}); apiError(t, err).StatusCode != http.StatusNotFound {
		t.Errorf("get of an unstored response: %v, want 404", err)
	}
}

// TestResponsesKeys: a stored response belongs to the key that made it:
// another key can neither read, delete nor continue it.
func TestResponsesKeys(t *testing.T) {
	const otherKey = "sk-corral-other-9876543210"
	ts := e2etest.Start(t, testmodel.Stories260K, e2etest.Options{Engine: engine.Config{Parallel: 1},
		Server: server.Config{Policy: e2etest.KeyPolicy(t, nil, nil, e2etest.APIKey+" name=alice", otherKey+" name=bob")}})
	client := func(key string) openai.Client {
		return openai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0), option.WithHTTPClient(ts.Client))
	}
	alice, bob := client(e2etest.APIKey), client(otherKey)
	ctx := context.Background()
	p := rsdk.ResponseNewParams{
		Model:           "stories",
		Input:           rsdk.ResponseNewParamsInputUnion{OfString: openai.String("Tell me a story.")},
		MaxOutputTokens: openai.Int(4),
		Temperature:     openai.Float(0),
	}
	resp, err := alice.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := alice.Responses.Get(ctx, resp.ID, rsdk.ResponseGetParams{})
	if err != nil || got.ID != resp.ID || got.OutputText() != resp.OutputText() || got.Usage.InputTokens != resp.Usage.InputTokens {
		t.Fatalf("alice's get: %v %v", got, err)
	}
	servetest.UnknownFields(t, "stored response", reflect.ValueOf(*got))
	if _, err := bob.Responses.Get(ctx, resp.ID, rsdk.ResponseGetParams{}); apiError(t, err).StatusCode != http.StatusNotFound {
		t.Errorf("bob's get: %v, want 404", err)
	}
	if err := bob.Responses.Delete(ctx, resp.ID); apiError(t, err).StatusCode != http.StatusNotFound {
		t.Errorf("bob's delete: %v, want 404", err)
	}
	p.PreviousResponseID = openai.String(resp.ID)
	if _, err := bob.Responses.New(ctx, p); apiError(t, err).StatusCode != http.StatusNotFound || apiError(t, err).Param != "previous_response_id" {
		t.Errorf("bob continuing alice's: %v, want 404 naming previous_response_id", err)
	}
	if _, err := alice.Responses.New(ctx, p); err != nil {
		t.Errorf("alice continuing hers: %v", err)
	}
	// Nor refer to its items.
	ref := rsdk.ResponseNewParams{
		Model: "stories",
		Input: rsdk.ResponseNewParamsInputUnion{OfInputItemList: rsdk.ResponseInputParam{
			rsdk.ResponseInputItemParamOfItemReference(resp.Output[0].ID), rsdk.ResponseInputItemParamOfMessage("Go on.", rsdk.EasyInputMessageRoleUser)}},
		MaxOutputTokens: openai.Int(4),
		Temperature:     openai.Float(0),
	}
	if _, err := bob.Responses.New(ctx, ref); apiError(t, err).StatusCode != http.StatusNotFound || apiError(t, err).Param != "input[0].id" {
		t.Errorf("bob referring to alice's item: %v, want 404 naming input[0].id", err)
	}
	if _, err := alice.Responses.New(ctx, ref); err != nil {
		t.Errorf("alice referring to her item: %v", err)
	}

	// OpenAI's deletion object, and nothing else.
	req, _ := http.NewRequest(http.MethodDelete, ts.URL+"/v1/responses/"+resp.ID, nil)
	req.Header.Set("Authorization", "Bearer "+e2etest.APIKey)
	hr, err := ts.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer hr.Body.Close()
	var deleted struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Deleted bool   `json:"deleted"`
	}
	dec := json.NewDecoder(hr.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&deleted); err != nil || hr.StatusCode != http.StatusOK || deleted.ID != resp.ID || deleted.Object != "response.deleted" || !deleted.Deleted {
		t.Errorf("delete: %d %+v %v", hr.StatusCode, deleted, err)
	}
	if _, err := alice.Responses.Get(ctx, resp.ID, rsdk.ResponseGetParams{}); apiError(t, err).StatusCode != http.StatusNotFound {
		t.Errorf("alice's get after her delete: %v, want 404", err)
	}
}

// TestResponsesFormat: text.format json_schema forces an answer of the
// schema, whole and streamed; a built-in tool merely offered is left out
// (and logged), which the answer does not notice.
func TestResponsesFormat(t *testing.T) {
	log, logs := e2etest.NewLogger()
	ts := e2etest.Start(t, testmodel.Stories260K, e2etest.Options{Engine: engine.Config{Parallel: 1},
		Server: server.Config{Logger: log}})
	client := sdkClient(ts)
	p := rsdk.ResponseNewParams{
		Model: "stories",
		Input: rsdk.ResponseNewParamsInputUnion{OfString: openai.String("What is the weather in Paris?")},
		Text: rsdk.ResponseTextConfigParam{Format: rsdk.ResponseFormatTextConfigUnionParam{OfJSONSchema: &rsdk.ResponseFormatTextJSONSchemaConfigParam{
			Name:   "weather",
			Strict: openai.Bool(true),
			Schema: map[string]any{
				"type": "object",
				"properties": map[string]any{
					"city": map[string]any{"type": "string", "enum": []string{"Paris", "Tokyo"}},
					"days": map[string]any{"type": "integer", "minimum": 1, "maximum": 7},
				},
				"required":             []string{"city", "days"},
				"additionalProperties": false,
			},
		}}},
		Tools:           []rsdk.ToolUnionParam{rsdk.ToolParamOfWebSearch(rsdk.WebSearchToolTypeWebSearch)},
		MaxOutputTokens: openai.Int(200),
		Temperature:     openai.Float(0),
		Store:           openai.Bool(false),
	}
	whole, err := client.Responses.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	servetest.UnknownFields(t, "response", reflect.ValueOf(*whole))
	if whole.Status != "completed" {
		t.Fatalf("status %q: %s", whole.Status, whole.RawJSON())
	}
	checkWeatherInput(t, json.RawMessage(whole.OutputText()))
	streamed, _ := streamResponse(t, client, p)
	if streamed.OutputText() != whole.OutputText() {
		t.Errorf("streamed %q, whole %q", streamed.OutputText(), whole.OutputText())
	}
	recs := logs.Records(t, "responses: offered tools the model does not see")
	if len(recs) != 2 || fmt.Sprint(recs[0]["types"]) != "[web_search]" {
		t.Errorf("log of the dropped tool: %v", recs)
	}
}

// TestResponsesErrors: what corral refuses comes back in OpenAI's error
// envelope with the field at fault, before any stream begins.
func TestResponsesErrors(t *testing.T) {
	ts := startModel(t, testmodel.Stories260K, engine.Config{Parallel: 1})
	client := sdkClient(ts)
	ctx := context.Background()
	base := func() rsdk.ResponseNewParams {
		return rsdk.ResponseNewParams{
			Model:           "stories",
			Input:           rsdk.ResponseNewParamsInputUnion{OfString: openai.String("Hello")},
			MaxOutputTokens: openai.Int(4),
		}
	}
	image := base()
	image.Input = rsdk.ResponseNewParamsInputUnion{OfInputItemList: rsdk.ResponseInputParam{
		rsdk.ResponseInputItemParamOfMessage(rsdk.ResponseInputMessageContentListParam{
			rsdk.ResponseInputContentParamOfInputImage(rsdk.ResponseInputImageDetailAuto)}, rsdk.EasyInputMessageRoleUser)}}
	hosted := base()
	hosted.Tools = []rsdk.ToolUnionParam{rsdk.ToolParamOfWebSearch(rsdk.WebSearchToolTypeWebSearch)}
	hosted.ToolChoice = rsdk.ResponseNewParamsToolChoiceUnion{OfHostedTool: &rsdk.ToolChoiceTypesParam{Type: rsdk.ToolChoiceTypesTypeWebSearchPreview}}
	background := base()
	background.Background = openai.Bool(true)
	temperature := base()
	temperature.Temperature = openai.Float(-1)
	missing := base()
	missing.PreviousResponseID = openai.String("resp_missing")
	for _, c := range []struct {
		name   string
		p      rsdk.ResponseNewParams
		status int
		param  string
	}{
		{"input_image without image_url", image, 400, "input[0].content[0].image_url"},
		{"hosted tool_choice", hosted, 400, "tool_choice"},
		{"background", background, 400, "background"},
		{"temperature", temperature, 400, "temperature"},
		{"previous_response_id", missing, 404, "previous_response_id"},
	} {
		for _, stream := range []bool{false, true} {
			var err error
			if stream {
				s := client.Responses.NewStreaming(ctx, c.p)
				for s.Next() {
					t.Errorf("%s, streamed: event %s", c.name, s.Current().Type)
				}
				err = s.Err()
				s.Close()
			} else {
				_, err = client.Responses.New(ctx, c.p)
			}
			e := apiError(t, err)
			if e.StatusCode != c.status || e.Param != c.param || e.Message == "" || e.Type != "invalid_request_error" {
				t.Errorf("%s (stream %v): status %d, type %q, param %q, message %q; want %d naming %s",
					c.name, stream, e.StatusCode, e.Type, e.Param, e.Message, c.status, c.param)
			}
		}
	}
}

// TestResponsesReasoning: a model that reasons (the server's reasoning
// budget closes it) answers with a reasoning item, then the message, the
// same whole and streamed; the reasoning item sent back is rendered as
// the assistant's reasoning. reasoning.effort reaches a template that
// reads reasoning_effort.
func TestResponsesReasoning(t *testing.T) {
	eight := 8
	client := sdkClient(startThinking(t, servedmodel.Options{ReasoningBudget: &eight}))
	ctx := context.Background()
	p := rsdk.ResponseNewParams{
		Model:           "stories",
		Input:           rsdk.ResponseNewParamsInputUnion{OfString: openai.String(sdkPrompt)},
		MaxOutputTokens: openai.Int(40),
		Temperature:     openai.Float(0),
		Store:           openai.Bool(false),
	}
	whole, err := client.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	servetest.UnknownFields(t, "response", reflect.ValueOf(*whole))
	if len(whole.Output) != 2 || whole.Output[0].Type != "reasoning" || whole.Output[1].Type != "message" {
		t.Fatalf("whole: %s", whole.RawJSON())
	}
	reasoning := whole.Output[0].AsReasoning()
	if len(reasoning.Content) != 1 || reasoning.Content[0].Text == "" || strings.Contains(reasoning.Content[0].Text+whole.OutputText(), "think>") {
		t.Fatalf("reasoning %s, text %q", reasoning.RawJSON(), whole.OutputText())
	}
	streamed, types := streamResponse(t, client, p)
	if len(streamed.Output) != 2 || streamed.Output[0].AsReasoning().Content[0].Text != reasoning.Content[0].Text || streamed.OutputText() != whole.OutputText() {
		t.Errorf("streamed %s\nwhole %s", streamed.RawJSON(), whole.RawJSON())
	}
	if !slices.Contains(types, "response.reasoning_text.delta") {
		t.Errorf("events %v: no response.reasoning_text.delta", types)
	}

	// The output sent back as input, with and without its reasoning item:
	// the reasoning is rendered in the assistant's turn.
	r, m := reasoning.ToParam(), whole.Output[1].AsMessage().ToParam()
	user := rsdk.ResponseInputItemParamOfMessage("Go on.", rsdk.EasyInputMessageRoleUser)
	first := rsdk.ResponseInputItemParamOfMessage(sdkPrompt, rsdk.EasyInputMessageRoleUser)
	p.MaxOutputTokens = openai.Int(1)
	p.Input = rsdk.ResponseNewParamsInputUnion{OfInputItemList: rsdk.ResponseInputParam{first, {OfReasoning: &r}, {OfOutputMessage: &m}, user}}
	withReasoning, err := client.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	p.Input = rsdk.ResponseNewParamsInputUnion{OfInputItemList: rsdk.ResponseInputParam{first, {OfOutputMessage: &m}, user}}
	without, err := client.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if withReasoning.Usage.InputTokens <= without.Usage.InputTokens {
		t.Errorf("the reasoning item sent back: %d prompt tokens, without it %d", withReasoning.Usage.InputTokens, without.Usage.InputTokens)
	}

	// reasoning.effort, on a template that writes it into the prompt.
	tpl, err := chat.Parse(strings.Replace(thinkTemplate, "<|im_start|>assistant\n<think>",
		"{% if reasoning_effort is defined %}Effort: {{ reasoning_effort }}\n{% endif %}<|im_start|>assistant\n<think>", 1))
	if err != nil {
		t.Fatal(err)
	}
	client = sdkClient(startThinkingTemplate(t, tpl))
	p.MaxOutputTokens = openai.Int(1)
	plain, err := client.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	p.Reasoning = shared.ReasoningParam{Effort: shared.ReasoningEffortHigh}
	high, err := client.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if high.Usage.InputTokens <= plain.Usage.InputTokens || high.Reasoning.Effort != shared.ReasoningEffortHigh {
		t.Errorf("effort high: %d prompt tokens, none: %d; reasoning %s", high.Usage.InputTokens, plain.Usage.InputTokens, high.Reasoning.RawJSON())
	}
}

// TestResponsesParallelToolCalls: tool_choice required writes calls one
// after another until the budget, unless parallel_tool_calls is false:
// then one call, and the response is complete.
func TestResponsesParallelToolCalls(t *testing.T) {
	client := sdkClient(startModel(t, testmodel.Stories260K, engine.Config{Parallel: 1}))
	calls := func(parallel bool) *rsdk.Response {
		t.Helper()
		r, err := client.Responses.New(context.Background(), rsdk.ResponseNewParams{
			Model:             "stories",
			Input:             rsdk.ResponseNewParamsInputUnion{OfString: openai.String("What is the weather in Paris?")},
			Tools:             []rsdk.ToolUnionParam{weatherFunction()},
			ToolChoice:        rsdk.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(rsdk.ToolChoiceOptionsRequired)},
			ParallelToolCalls: openai.Bool(parallel),
			MaxOutputTokens:   openai.Int(300),
			Temperature:       openai.Float(0),
			Store:             openai.Bool(false),
		})
		if err != nil {
			t.Fatal(err)
		}
		servetest.UnknownFields(t, "response", reflect.ValueOf(*r))
		for _, item := range r.Output {
			if item.Type != "function_call" || item.AsFunctionCall().Name != "get_weather" {
				t.Fatalf("parallel %v: %s", parallel, r.RawJSON())
			}
		}
		return r
	}
	if r := calls(true); len(r.Output) < 2 {
		t.Errorf("parallel: %d calls, want several: %s", len(r.Output), r.RawJSON())
	}
	one := calls(false)
	if len(one.Output) != 1 || one.Status != "completed" {
		t.Errorf("not parallel: %s", one.RawJSON())
	}
	checkWeatherInput(t, json.RawMessage(one.Output[0].AsFunctionCall().Arguments))
}

// TestResponsesStoreBounds: the server's store bounds (corral serve's
// --responses-ttl, --responses-store-bytes) apply: a response past its
// time is gone; one larger than the store is answered, not kept, and
// the log says so.
func TestResponsesStoreBounds(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	p := rsdk.ResponseNewParams{
		Model:           "stories",
		Input:           rsdk.ResponseNewParamsInputUnion{OfString: openai.String(sdkPrompt)},
		MaxOutputTokens: openai.Int(4),
		Temperature:     openai.Float(0),
	}
	ctx := context.Background()
	ts := e2etest.Start(t, testmodel.Stories260K, e2etest.Options{Engine: engine.Config{Parallel: 1},
		Server: server.Config{ResponsesStore: responses.StoreOptions{TTL: time.Minute, Now: clock}}})
	client := sdkClient(ts)
	resp, err := client.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Responses.Get(ctx, resp.ID, rsdk.ResponseGetParams{}); err != nil {
		t.Fatalf("get within the TTL: %v", err)
	}
	mu.Lock()
	now = now.Add(time.Minute + time.Second)
	mu.Unlock()
	if _, err := client.Responses.Get(ctx, resp.ID, rsdk.ResponseGetParams{}); apiError(t, err).StatusCode != http.StatusNotFound {
		t.Errorf("get past the TTL: %v, want 404", err)
	}

	log, logs := e2etest.NewLogger()
	ts = e2etest.Start(t, testmodel.Stories260K, e2etest.Options{Engine: engine.Config{Parallel: 1},
		Server: server.Config{Logger: log, ResponsesStore: responses.StoreOptions{MaxBytes: 64}}})
	small := sdkClient(ts)
	resp, err = small.Responses.New(ctx, p)
	if err != nil || resp.OutputText() == "" {
		t.Fatalf("a response too large to store: %v", err)
	}
	if _, err := small.Responses.Get(ctx, resp.ID, rsdk.ResponseGetParams{}); apiError(t, err).StatusCode != http.StatusNotFound {
		t.Errorf("get of a response larger than the store: %v, want 404", err)
	}
	if recs := logs.Records(t, "responses: not stored"); len(recs) != 1 || recs[0]["id"] != resp.ID {
		t.Errorf("log of the response not stored: %v", recs)
	}
}

// referenceItems, bigReasoningItem and junkUserMessage are the pieces of
// the expansion requests: n references to each of ids in turn, a
// reasoning item of n bytes of text, a user message with an unknown field
// of n bytes.
func referenceItems(n int, ids ...string) string {
	refs := make([]string, 0, n*len(ids))
	for range n {
		for _, id := range ids {
			refs = append(refs, `{"type":"item_reference","id":"`+id+`"}`)
		}
	}
	return "[" + strings.Join(refs, ",") + "]"
}

func bigReasoningItem(id string, n int) string {
	return `{"type":"reasoning","id":"` + id + `","summary":[],"content":[{"type":"reasoning_text","text":"` + strings.Repeat("r", n) + `"}]}`
}

func junkUserMessage(id string, n int) string {
	return `{"type":"message","id":"` + id + `","role":"user","content":"Tell me a story.","junk":"` + strings.Repeat("j", n) + `"}`
}

// TestResponsesExpansion: a small request that refers to large stored
// items, or continues a chain of stored responses, counts what it
// expands to against --max-prompt-bytes, and gets a 400 naming it
// before it is built: 200 references (9 KB) to a stored reasoning item of
// 1 MB took 400 MB, and 8,000 of them killed the server (issue 31).
func TestResponsesExpansion(t *testing.T) {
	ts := startModel(t, testmodel.Stories260K, engine.Config{Parallel: 1})
	post := func(body string) (int, *wire.ErrorObject, string) {
		t.Helper()
		resp, b := ts.Post(t, "/v1/responses", json.RawMessage(body))
		var out struct {
			ID    string            `json:"id"`
			Error *wire.ErrorObject `json:"error"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%d: %v: %.300s", resp.StatusCode, err, b)
		}
		return resp.StatusCode, out.Error, out.ID
	}
	wantLimit := func(what string, code int, e *wire.ErrorObject) {
		t.Helper()
		if code != http.StatusBadRequest || e == nil || e.Code == nil || *e.Code != "limit_exceeded" || e.Param == nil ||
			!strings.HasPrefix(*e.Param, "input[") || !strings.Contains(e.Message, "corral serve --max-prompt-bytes") || e.Type != "invalid_request_error" {
			t.Errorf("%s: %d %+v, want a 400 limit_exceeded at an input item naming --max-prompt-bytes", what, code, e)
		}
	}
	const user = `{"role":"user","content":"Tell me a story."}`
	if code, e, _ := post(`{"model":"stories","max_output_tokens":1,"input":[` + bigReasoningItem("rs_big", 1<<20) + `,` + user + `]}`); code != http.StatusOK {
		t.Fatalf("storing 1 MB of reasoning: %d %+v", code, e)
	}
	var code int
	var e *wire.ErrorObject
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	code, e, _ = post(`{"model":"stories","max_output_tokens":1,"input":` + referenceItems(200, "rs_big") + `}`)
	runtime.ReadMemStats(&after)
	wantLimit("200 references to 1 MB", code, e)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("200 references to 1 MB: %d KB allocated", alloc>>10)
	if alloc > 64<<20 {
		t.Errorf("200 references to 1 MB: %d MB allocated", alloc>>20)
	}

	// Three stored messages of 4 MB each (an unknown field), together.
	for i := range 3 {
		if code, e, _ := post(`{"model":"stories","max_output_tokens":1,"input":[` + junkUserMessage(fmt.Sprint("msg_junk_", i), 4e6) + `]}`); code != http.StatusOK {
			t.Fatalf("storing a message of 4 MB: %d %+v", code, e)
		}
	}
	code, e, _ = post(`{"model":"stories","max_output_tokens":1,"input":` + referenceItems(1, "msg_junk_0", "msg_junk_1", "msg_junk_2") + `}`)
	wantLimit("three stored items of 4 MB", code, e)
	if code, e, _ := post(`{"model":"stories","max_output_tokens":1,"input":` + referenceItems(1, "msg_junk_0", "msg_junk_1") + `}`); code != http.StatusOK {
		t.Errorf("two stored items of 4 MB: %d %+v", code, e)
	}

	// A chain of responses, each adding 1 MB of reasoning.
	prev, refused := "", false
	for i := range 12 {
		body := `{"model":"stories","max_output_tokens":1,"input":[` + bigReasoningItem(fmt.Sprint("rs_", i), 1<<20) + `,` + user + `]`
		if prev != "" {
			body += `,"previous_response_id":"` + prev + `"`
		}
		code, e, id := post(body + `}`)
		if code == http.StatusOK {
			prev = id
			continue
		}
		if i < 7 {
			t.Errorf("turn %d of 1 MB: %d %+v", i, code, e)
		}
		wantLimit(fmt.Sprintf("turn %d of 1 MB", i), code, e)
		refused = true
		break
	}
	if !refused {
		t.Errorf("12 turns of 1 MB of reasoning each, all accepted")
	}
}
