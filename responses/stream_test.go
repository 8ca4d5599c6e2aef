package responses

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/respjson"
	sdk "github.com/openai/openai-go/v3/responses"

	"github.com/corral-llm/corral/wire"
)

// sdkServer serves body with status and content type to the official
// client, over real HTTP on loopback.
func sdkServer(t *testing.T, status int, contentType string, body []byte) openai.Client {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		w.Write(body)
	}))
	t.Cleanup(ts.Close)
	return openai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0))
}

// noExtraFields fails for every field the SDK did not know anywhere in
// v: each decoded struct records those in JSON.ExtraFields.
func noExtraFields(t *testing.T, where string, v any) {
	t.Helper()
	var walk func(path string, v reflect.Value)
	walk = func(path string, v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer, reflect.Interface:
			if !v.IsNil() {
				walk(path, v.Elem())
			}
		case reflect.Slice, reflect.Array:
			for i := 0; i < v.Len(); i++ {
				walk(path+"[]", v.Index(i))
			}
		case reflect.Struct:
			// A union: walk the variant its type names.
			if m := v.MethodByName("AsAny"); m.IsValid() && m.Type().NumIn() == 0 {
				if any := m.Call(nil)[0]; any.IsValid() && !(any.Kind() == reflect.Interface && any.IsNil()) {
					walk(path+"("+v.Type().Name()+")", any)
				}
			}
			if j := v.FieldByName("JSON"); j.IsValid() && j.Kind() == reflect.Struct {
				if x := j.FieldByName("ExtraFields"); x.IsValid() && x.Len() > 0 {
					for _, k := range x.MapKeys() {
						t.Errorf("%s: %s%s: field %q unknown to the SDK", where, v.Type().Name(), path, k.String())
					}
				}
			}
			for i := 0; i < v.NumField(); i++ {
				if f := v.Type().Field(i); f.IsExported() && f.Name != "JSON" {
					walk(path+"."+f.Name, v.Field(i))
				}
			}
		}
	}
	walk("", reflect.ValueOf(v))
}

func str(s string) *string { return &s }

// answer is an answer as the core delivers it.
type answer struct {
	deltas []wire.Delta
	end    End
	fail   string // Fail with this message instead of End
}

// encode runs a through a Stream for request body and returns the SSE
// bytes and the final response.
func encode(t *testing.T, body string, a answer) ([]byte, *Response) {
	t.Helper()
	r, e := Decode([]byte(body))
	if e != nil {
		t.Fatal(e)
	}
	tr, e := Translate(r, nil, Limits{})
	if e != nil {
		t.Fatal(e)
	}
	s := NewStream(NewResponse("resp_test", "corral", 1700000000, r, tr), tr.Namespaces)
	var out []byte
	add := func(evs []Event) {
		for _, ev := range evs {
			out = ev.AppendSSE(out)
		}
	}
	add(s.Start())
	for _, d := range a.deltas {
		add(s.Delta(d))
	}
	if a.fail != "" {
		add(s.Fail("server_error", a.fail))
	} else {
		add(s.End(a.end, 1700000001))
	}
	if evs := s.End(a.end, 1700000002); evs != nil {
		t.Errorf("a second end added %d events", len(evs))
	}
	return out, s.Response()
}

// streamed decodes a stream with the SDK, checks what every stream must
// hold, and feeds the SDK's accumulator.
func streamed(t *testing.T, body []byte) ([]sdk.ResponseStreamEventUnion, *sdk.ResponseAccumulator) {
	t.Helper()
	client := sdkServer(t, 200, "text/event-stream", body)
	stream := client.Responses.NewStreaming(context.Background(), sdk.ResponseNewParams{Model: "corral", Input: sdk.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	var evs []sdk.ResponseStreamEventUnion
	acc := &sdk.ResponseAccumulator{}
	for stream.Next() {
		ev := stream.Current()
		if ev.SequenceNumber != int64(len(evs)) {
			t.Errorf("event %d (%s): sequence_number %d", len(evs), ev.Type, ev.SequenceNumber)
		}
		noExtraFields(t, ev.Type, ev.AsAny())
		var server sdk.ResponsesServerEventUnion
		if err := json.Unmarshal([]byte(ev.RawJSON()), &server); err != nil {
			t.Fatalf("%s: %v", ev.Type, err)
		}
		err := acc.AddEvent(server)
		var protocol *sdk.ResponseProtocolError
		switch {
		case ev.Type == "error" && !errors.As(err, &protocol):
			t.Errorf("accumulator took an error event: %v", err)
		case ev.Type != "error" && err != nil:
			t.Errorf("accumulator refused %s: %v", ev.Type, err)
		}
		evs = append(evs, ev)
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	return evs, acc
}

func types(evs []sdk.ResponseStreamEventUnion) string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = strings.TrimPrefix(ev.Type, "response.")
	}
	return strings.Join(out, " ")
}

// TestStreamText: reasoning then text, decoded by openai-go's stream and
// accumulator, with exact usage.
func TestStreamText(t *testing.T) {
	body, resp := encode(t, `{"input":"hi","reasoning":{"effort":"low"},"instructions":"sys","max_output_tokens":50}`, answer{
		deltas: []wire.Delta{{ReasoningContent: str("Let me ")}, {ReasoningContent: str("think.")}, {Content: str("Hello")}, {Content: str(", world")}},
		end:    End{FinishReason: "stop", Usage: TokenUsage{PromptTokens: 20, CachedPromptTokens: 12, CompletionTokens: 9, ReasoningTokens: 4}},
	})
	evs, acc := streamed(t, body)
	want := "created in_progress " +
		"output_item.added content_part.added reasoning_text.delta reasoning_text.delta reasoning_text.done content_part.done output_item.done " +
		"output_item.added content_part.added output_text.delta output_text.delta output_text.done content_part.done output_item.done completed"
	if got := types(evs); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
	created := evs[0].AsResponseCreated().Response
	if created.ID != "resp_test" || created.Status != "in_progress" || len(created.Output) != 0 || created.Instructions.OfString != "sys" || created.MaxOutputTokens != 50 {
		t.Errorf("created %s", created.RawJSON())
	}
	rs := evs[8].AsResponseOutputItemDone().Item.AsReasoning()
	if rs.Type != "reasoning" || len(rs.Content) != 1 || rs.Content[0].Text != "Let me think." || rs.Status != "completed" {
		t.Errorf("reasoning item %s", rs.RawJSON())
	}
	if d := evs[13].AsResponseOutputTextDone(); d.Text != "Hello, world" || d.OutputIndex != 1 || d.ItemID != evs[9].AsResponseOutputItemAdded().Item.ID {
		t.Errorf("text done %s", d.RawJSON())
	}
	msg := evs[15].AsResponseOutputItemDone().Item.AsMessage() // where Codex reads the answer
	if len(msg.Content) != 1 || msg.Content[0].Text != "Hello, world" || msg.Status != "completed" || msg.Role != "assistant" {
		t.Errorf("message item %s", msg.RawJSON())
	}
	done := evs[16].AsResponseCompleted().Response
	if done.Status != "completed" || done.OutputText() != "Hello, world" || len(done.Output) != 2 || done.CompletedAt != 1700000001 {
		t.Errorf("completed %s", done.RawJSON())
	}
	u := done.Usage
	if u.InputTokens != 20 || u.InputTokensDetails.CachedTokens != 12 || u.OutputTokens != 9 || u.OutputTokensDetails.ReasoningTokens != 4 || u.TotalTokens != 29 {
		t.Errorf("usage %s", u.RawJSON())
	}
	snap := acc.Snapshot()
	if snap.TerminalEvent != "response.completed" || snap.ResponseID != "resp_test" || snap.OutputText() != "Hello, world" {
		t.Errorf("accumulated %+v", snap)
	}
	rec, err := acc.ReconstructedResponse()
	if err != nil || rec.OutputText() != "Hello, world" {
		t.Errorf("reconstructed: %v", err)
	}
	whole, _ := json.Marshal(resp)
	if !strings.Contains(string(evs[16].RawJSON()), string(whole)) {
		t.Errorf("Response() differs from the completed event's:\n%s\n%s", whole, evs[16].RawJSON())
	}
}

// TestStreamCalls: two function calls, one in a namespace, after text.
func TestStreamCalls(t *testing.T) {
	body, _ := encode(t, `{"input":"hi","tools":[{"type":"function","name":"exec_command"},{"type":"namespace","name":"multi_agent_v1","tools":[{"type":"function","name":"spawn_agent"}]},{"type":"web_search"}]}`, answer{
		deltas: []wire.Delta{
			{Content: str("Running.")},
			{ToolCalls: []wire.ToolCallDelta{{Index: 0, ID: "call_a", Type: "function", Function: wire.FunctionCall{Name: "exec_command"}}}},
			{ToolCalls: []wire.ToolCallDelta{{Index: 0, Function: wire.FunctionCall{Arguments: `{"cmd":`}}}},
			{ToolCalls: []wire.ToolCallDelta{{Index: 0, Function: wire.FunctionCall{Arguments: `"echo hello"}`}}}},
			{ToolCalls: []wire.ToolCallDelta{{Index: 1, ID: "call_b", Type: "function", Function: wire.FunctionCall{Name: "spawn_agent", Arguments: `{}`}}}},
		},
		end: End{FinishReason: "tool_calls", Usage: TokenUsage{PromptTokens: 5, CompletionTokens: 7}},
	})
	evs, acc := streamed(t, body)
	want := "created in_progress output_item.added content_part.added output_text.delta output_text.done content_part.done output_item.done " +
		"output_item.added function_call_arguments.delta function_call_arguments.delta function_call_arguments.done output_item.done " +
		"output_item.added function_call_arguments.delta function_call_arguments.done output_item.done completed"
	if got := types(evs); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
	added := evs[8].AsResponseOutputItemAdded().Item.AsFunctionCall()
	if added.CallID != "call_a" || added.Name != "exec_command" || added.Status != "in_progress" {
		t.Errorf("call added %s", added.RawJSON())
	}
	done := evs[len(evs)-1].AsResponseCompleted().Response
	var calls []sdk.ResponseFunctionToolCall
	for _, it := range done.Output {
		if it.Type == "function_call" {
			calls = append(calls, it.AsFunctionCall())
		}
	}
	if len(calls) != 2 || calls[0].Arguments != `{"cmd":"echo hello"}` || calls[0].Namespace != "" ||
		calls[1].CallID != "call_b" || calls[1].Name != "spawn_agent" || calls[1].Namespace != "multi_agent_v1" || calls[1].Arguments != "{}" {
		t.Errorf("calls %+v", calls)
	}
	if string(done.Tools[2].Type) != "web_search" || done.ToolChoice.OfToolChoiceMode != "auto" {
		t.Errorf("tools and choice echoed: %s", done.RawJSON())
	}
	snap := acc.Snapshot()
	if len(snap.Output) != 3 || snap.Output[1].Arguments != `{"cmd":"echo hello"}` || snap.Output[2].CallID != "call_b" || snap.Output[2].Name != "spawn_agent" {
		t.Errorf("accumulated %+v", snap.Output)
	}
}

// TestStreamIncomplete: an answer cut off by max_output_tokens.
func TestStreamIncomplete(t *testing.T) {
	body, _ := encode(t, `{"input":"hi","max_output_tokens":2}`, answer{
		deltas: []wire.Delta{{Content: str("Hel")}},
		end:    End{FinishReason: "length", Usage: TokenUsage{PromptTokens: 3, CompletionTokens: 2}},
	})
	evs, acc := streamed(t, body)
	last := evs[len(evs)-1]
	r := last.AsResponseIncomplete().Response
	if last.Type != "response.incomplete" || r.Status != "incomplete" || r.IncompleteDetails.Reason != "max_output_tokens" || r.Usage.OutputTokens != 2 {
		t.Errorf("last %s", last.RawJSON())
	}
	if it := r.Output[0].AsMessage(); it.Status != "incomplete" || it.Content[0].Text != "Hel" {
		t.Errorf("item %s", it.RawJSON())
	}
	if acc.Snapshot().TerminalEvent != "response.incomplete" {
		t.Errorf("accumulator: %+v", acc.Snapshot())
	}
}

// TestStreamFailed: a failure after the stream began, and an error event.
func TestStreamFailed(t *testing.T) {
	body, _ := encode(t, `{"input":"hi"}`, answer{deltas: []wire.Delta{{Content: str("Hel")}}, fail: "the model crashed"})
	evs, acc := streamed(t, body)
	last := evs[len(evs)-1]
	r := last.AsResponseFailed().Response
	if last.Type != "response.failed" || r.Status != "failed" || r.Error.Code != "server_error" || r.Error.Message != "the model crashed" {
		t.Errorf("last %s", last.RawJSON())
	}
	if _, err := acc.ReconstructedResponse(); err != nil {
		t.Errorf("accumulator: %v", err)
	}

	s := NewStream(&Response{ID: "resp_x", Object: "response", Output: []Item{}}, nil)
	ev := s.ErrorEvent(&Error{Status: 400, Param: "input", Message: "bad input"})
	evs, _ = streamed(t, ev.AppendSSE(nil))
	if len(evs) != 1 {
		t.Fatalf("%d events", len(evs))
	}
	e := evs[0].AsError()
	if e.Type != "error" || e.Message != "bad input" || e.Param != "input" || e.Code != "invalid_request_error" {
		t.Errorf("error event %s", e.RawJSON())
	}
}

// TestWhole: the non-streamed response, decoded by client.Responses.New.
func TestWhole(t *testing.T) {
	_, resp := encode(t, `{"input":"hi","text":{"format":{"type":"json_schema","name":"s","schema":{"type":"object"}}},"temperature":0.2,"metadata":{"k":"v"},"user":"u"}`, answer{
		deltas: []wire.Delta{{ReasoningContent: str("hmm")}, {Content: str(`{"a":1}`)}},
		end:    End{FinishReason: "stop", Usage: TokenUsage{PromptTokens: 10, CachedPromptTokens: 10, CompletionTokens: 3}},
	})
	body, err := json.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	client := sdkServer(t, 200, "application/json", body)
	got, err := client.Responses.New(context.Background(), sdk.ResponseNewParams{Model: "corral", Input: sdk.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	noExtraFields(t, "response", got)
	if got.ID != "resp_test" || got.OutputText() != `{"a":1}` || got.Status != "completed" || got.Temperature != 0.2 || got.Metadata["k"] != "v" || got.JSON.User.Raw() != `"u"` {
		t.Errorf("response %s", got.RawJSON())
	}
	if got.Text.Format.Type != "json_schema" || got.Text.Format.Name != "s" {
		t.Errorf("text %s", got.Text.RawJSON())
	}
	if got.Usage.InputTokensDetails.CachedTokens != 10 || got.Usage.TotalTokens != 13 {
		t.Errorf("usage %s", got.Usage.RawJSON())
	}
	if got.JSON.Error.Raw() != respjson.Null || got.JSON.IncompleteDetails.Raw() != respjson.Null {
		t.Errorf("error %q, incomplete_details %q, want null", got.JSON.Error.Raw(), got.JSON.IncompleteDetails.Raw())
	}
}

// TestErrorEnvelope: a refused request, before any stream, as the SDK
// reports it.
func TestErrorEnvelope(t *testing.T) {
	_, e := translate(t, `{"input":[{"role":"user","content":[{"type":"input_file","file_id":"x"}]}]}`)
	body, _ := json.Marshal(e.Envelope())
	client := sdkServer(t, e.Status, "application/json", body)
	_, err := client.Responses.New(context.Background(), sdk.ResponseNewParams{Model: "corral"})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("error %v", err)
	}
	if apiErr.StatusCode != 400 || apiErr.Param != "input[0].content[0].type" || apiErr.Type != "invalid_request_error" || !strings.Contains(apiErr.Message, "input_file") {
		t.Errorf("error %d %q %q %q", apiErr.StatusCode, apiErr.Param, apiErr.Type, apiErr.Message)
	}
}

// TestStreamCodex answers Codex's captured request with a call of its
// exec_command tool, as the SDK decodes it: the tools Codex sent are
// echoed in the response, and all of it is known to the SDK.
func TestStreamCodex(t *testing.T) {
	b, err := os.ReadFile("../testdata/agents/codex-tool-01-v1-responses.json")
	if err != nil {
		t.Fatal(err)
	}
	var capture struct {
		Body json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal(b, &capture); err != nil {
		t.Fatal(err)
	}
	body, _ := encode(t, string(capture.Body), answer{
		deltas: []wire.Delta{{ToolCalls: []wire.ToolCallDelta{{Index: 0, ID: "call_1", Type: "function", Function: wire.FunctionCall{Name: "exec_command", Arguments: `{"cmd":"echo hello"}`}}}}},
		end:    End{FinishReason: "tool_calls", Usage: TokenUsage{PromptTokens: 9000, CachedPromptTokens: 8990, CompletionTokens: 12}},
	})
	evs, _ := streamed(t, body)
	done := evs[len(evs)-1].AsResponseCompleted().Response
	if len(done.Tools) != 9 || len(done.Output) != 1 || done.Output[0].AsFunctionCall().Name != "exec_command" {
		t.Errorf("completed %d tools, output %s", len(done.Tools), done.JSON.Output.Raw())
	}
}
