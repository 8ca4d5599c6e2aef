package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	rsdk "github.com/openai/openai-go/v3/responses"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
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
		sdkUnknownFields(t, ev.Type, reflect.ValueOf(ev.AsAny()))
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
	sdkUnknownFields(t, "response", reflect.ValueOf(*whole))
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
	sdkUnknownFields(t, "response", reflect.ValueOf(*called))
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
