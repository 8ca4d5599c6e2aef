package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	servedmodel "github.com/corral-llm/corral/model"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/toolcall"
	"github.com/corral-llm/corral/wire"
)

// Tool calls end to end: stories260K (its byte tokens can write any
// text; no chat template, so the chatml
// built-in and its Hermes format) is forced by tool_choice to call, and
// its answer comes back as OpenAI tool_calls, whole and streamed.

var weatherTool = map[string]any{
	"type": "function",
	"function": map[string]any{
		"name":        "get_weather",
		"description": "Weather forecast for a city.",
		"parameters": map[string]any{
			"type": "object",
			"properties": map[string]any{
				"city": map[string]any{"type": "string", "enum": []string{"Paris", "Tokyo", "Lima"}},
				"days": map[string]any{"type": "integer", "minimum": 1, "maximum": 7},
			},
			"required": []string{"city", "days"},
		},
	},
}

var timeTool = map[string]any{
	"type": "function",
	"function": map[string]any{
		"name": "get_time",
		"parameters": map[string]any{
			"type":       "object",
			"properties": map[string]any{"zone": map[string]any{"type": "string", "enum": []string{"UTC", "CET"}}},
			"required":   []string{"zone"},
		},
	},
}

// toolRequest asks for a chat completion with the two tools. Its
// max_tokens lets the byte tokens spell a whole call in the longest
// markup (DeepSeek's and Hy3's tokens, spelled in bytes, take hundreds).
func toolRequest(choice any, extra map[string]any) map[string]any {
	body := map[string]any{
		"model":       "tiny",
		"messages":    []map[string]string{{"role": "user", "content": "What is the weather in Paris?"}},
		"tools":       []any{weatherTool, timeTool},
		"tool_choice": choice,
		"max_tokens":  400, "temperature": 0,
	}
	for k, v := range extra {
		body[k] = v
	}
	return body
}

// checkCall checks that a call is one of the tools, with arguments that
// are a JSON object following its schema's enums.
func checkCall(t *testing.T, c wire.ToolCall) {
	t.Helper()
	if !strings.HasPrefix(c.ID, "call_") || c.Type != "function" {
		t.Errorf("call %+v: id or type", c)
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(c.Function.Arguments), &args); err != nil {
		t.Fatalf("call %s: arguments %q are not a JSON object: %v", c.Function.Name, c.Function.Arguments, err)
	}
	switch c.Function.Name {
	case "get_weather":
		days, _ := args["days"].(float64)
		if !slices.Contains([]any{"Paris", "Tokyo", "Lima"}, args["city"]) || days < 1 || days > 7 || days != float64(int(days)) {
			t.Errorf("get_weather arguments %s break the schema", c.Function.Arguments)
		}
	case "get_time":
		if !slices.Contains([]any{"UTC", "CET"}, args["zone"]) {
			t.Errorf("get_time arguments %s break the schema", c.Function.Arguments)
		}
	default:
		t.Errorf("call of unknown function %q", c.Function.Name)
	}
}

// streamCalls reads a chat stream and reassembles its content and calls
// the way OpenAI's clients do, checking that each call's id and name come
// once, first.
func streamCalls(t *testing.T, ts *e2etest.Server, body map[string]any) (content string, calls []wire.ToolCall, finish string) {
	t.Helper()
	body["stream"] = true
	events := e2etest.ReadEvents(t, ts.OpenStream(t, t.Context(), "/v1/chat/completions", body))
	if events[len(events)-1] != "[DONE]" {
		t.Fatalf("no [DONE]: %q", events)
	}
	var text strings.Builder
	for _, data := range events[:len(events)-1] {
		var c wire.ChatCompletionChunk
		unmarshal(t, data, &c)
		if len(c.Choices) != 1 {
			t.Fatalf("chunk %s", data)
		}
		ch := c.Choices[0]
		text.WriteString(ch.Delta.Text())
		for _, d := range ch.Delta.ToolCalls {
			if d.Index > len(calls) {
				t.Fatalf("call index %d skips one: %s", d.Index, data)
			}
			if d.Index == len(calls) {
				if d.ID == "" || d.Function.Name == "" {
					t.Fatalf("call %d starts without id and name: %s", d.Index, data)
				}
				calls = append(calls, wire.ToolCall{ID: d.ID, Type: d.Type, Function: wire.FunctionCall{Name: d.Function.Name}})
			} else if d.ID != "" || d.Function.Name != "" {
				t.Fatalf("call %d: id or name sent again: %s", d.Index, data)
			}
			calls[d.Index].Function.Arguments += d.Function.Arguments
		}
		if ch.FinishReason != nil {
			finish = *ch.FinishReason
		}
	}
	return text.String(), calls, finish
}

func wholeCalls(t *testing.T, ts *e2etest.Server, body map[string]any) (wire.ChatChoice, string) {
	t.Helper()
	resp, b := ts.Post(t, "/v1/chat/completions", body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var c wire.ChatCompletion
	unmarshal(t, string(b), &c)
	if len(c.Choices) != 1 {
		t.Fatalf("choices: %s", b)
	}
	return c.Choices[0], string(b)
}

func TestToolChoiceForcesCalls(t *testing.T) {
	// chatml's own format, and the others as --tool-format would set them.
	for _, f := range toolcall.Names() {
		t.Run(f, func(t *testing.T) {
			opt := servedmodel.Options{}
			if f != "hermes" {
				opt.ToolFormat = f
			}
			ts := e2etest.Start(t, testmodel.Stories260K, e2etest.Options{Engine: engine.Config{Parallel: 2}, Model: opt})
			forceCalls(t, ts)
		})
	}
}

func forceCalls(t *testing.T, ts *e2etest.Server) {
	named := map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}
	for _, tc := range []struct {
		name   string
		choice any
		extra  map[string]any
		want   func(calls []wire.ToolCall) bool
	}{
		{"named", named, nil, func(c []wire.ToolCall) bool { return len(c) == 1 && c[0].Function.Name == "get_weather" }},
		// Parallel calls: the model may go on calling until max_tokens.
		{"required", "required", map[string]any{"max_tokens": 300}, func(c []wire.ToolCall) bool { return len(c) >= 1 }},
		{"required one call", "required", map[string]any{"parallel_tool_calls": false}, func(c []wire.ToolCall) bool { return len(c) == 1 }},
		{"allowed tools required", map[string]any{"type": "allowed_tools", "allowed_tools": map[string]any{
			"mode": "required", "tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_time"}}}}},
			map[string]any{"parallel_tool_calls": false}, func(c []wire.ToolCall) bool { return len(c) == 1 && c[0].Function.Name == "get_time" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			choice, raw := wholeCalls(t, ts, toolRequest(tc.choice, tc.extra))
			msg := choice.Message
			if !tc.want(msg.ToolCalls) {
				t.Fatalf("calls %+v: %s", msg.ToolCalls, raw)
			}
			for _, c := range msg.ToolCalls {
				checkCall(t, c)
			}
			if msg.Content != "" || !strings.Contains(raw, `"content":null`) || strings.Contains(raw, "tool_call>") {
				t.Errorf("content beside the calls: %s", raw)
			}
			if *choice.FinishReason != "tool_calls" && (tc.name != "required" || *choice.FinishReason != "length") {
				t.Errorf("finish_reason %q, want tool_calls", *choice.FinishReason)
			}

			content, calls, finish := streamCalls(t, ts, toolRequest(tc.choice, tc.extra))
			if content != "" || finish != *choice.FinishReason {
				t.Errorf("stream: content %q, finish %q", content, finish)
			}
			if finish == "length" && len(calls) == len(msg.ToolCalls)+1 {
				// The call cut off at max_tokens was streamed as far as it
				// went; the whole answer leaves it out.
				calls = calls[:len(msg.ToolCalls)]
			}
			if len(calls) != len(msg.ToolCalls) {
				t.Fatalf("stream: %d calls, whole: %d", len(calls), len(msg.ToolCalls))
			}
			for i, c := range calls {
				checkCall(t, c)
				// Greedy: the same call, with another id.
				if c.Function != msg.ToolCalls[i].Function {
					t.Errorf("stream call %d %+v, whole %+v", i, c.Function, msg.ToolCalls[i].Function)
				}
			}
		})
	}
}

// With tool_choice auto nothing forces a call; TinyStories tells a story,
// which comes back as content.
func TestToolChoiceAutoAnswersText(t *testing.T) {
	ts := startModel(t, testmodel.Stories260K, engine.Config{Parallel: 1})
	choice, raw := wholeCalls(t, ts, toolRequest("auto", map[string]any{"max_tokens": 16}))
	if len(choice.Message.ToolCalls) != 0 || choice.Message.Content == "" || *choice.FinishReason == "tool_calls" {
		t.Fatalf("auto: %s", raw)
	}
	content, calls, finish := streamCalls(t, ts, toolRequest("auto", map[string]any{"max_tokens": 16}))
	if len(calls) != 0 || content != choice.Message.Content || finish != *choice.FinishReason {
		t.Fatalf("auto stream: content %q calls %+v finish %q; whole %s", content, calls, finish, raw)
	}
}

// A conversation carrying an assistant's calls and the tools' results
// renders and is answered; a forced call can follow it.
func TestToolRoundTrip(t *testing.T) {
	ts := startModel(t, testmodel.Stories260K, engine.Config{Parallel: 1})
	first, raw := wholeCalls(t, ts, toolRequest("required", map[string]any{"parallel_tool_calls": false}))
	if len(first.Message.ToolCalls) != 1 {
		t.Fatalf("first turn: %s", raw)
	}
	call := first.Message.ToolCalls[0]
	msgs := []any{
		map[string]any{"role": "user", "content": "What is the weather in Paris?"},
		map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{call}},
		map[string]any{"role": "tool", "tool_call_id": call.ID, "content": `{"forecast": "sun"}`},
	}
	body := toolRequest("auto", map[string]any{"messages": msgs, "max_tokens": 8})
	second, raw := wholeCalls(t, ts, body)
	if second.FinishReason == nil || second.Message.Role != "assistant" {
		t.Fatalf("second turn: %s", raw)
	}
	body = toolRequest(map[string]any{"type": "function", "function": map[string]any{"name": "get_time"}}, map[string]any{"messages": msgs})
	third, raw := wholeCalls(t, ts, body)
	if len(third.Message.ToolCalls) != 1 || third.Message.ToolCalls[0].Function.Name != "get_time" {
		t.Fatalf("third turn: %s", raw)
	}
}

func TestToolBadRequests(t *testing.T) {
	ts := startModel(t, testmodel.Stories260K, engine.Config{Parallel: 1})
	unknown := map[string]any{"type": "function", "function": map[string]any{"name": "nope"}}
	badSchema := map[string]any{"type": "function", "function": map[string]any{"name": "f", "parameters": map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"$ref": "#/$defs/missing"}}}}}
	for _, tc := range []struct {
		name  string
		body  map[string]any
		param string
	}{
		{"unknown named function", toolRequest(unknown, nil), "tool_choice"},
		{"bad choice string", toolRequest("always", nil), "tool_choice"},
		{"bad choice object", toolRequest(map[string]any{"type": "function"}, nil), "tool_choice"},
		{"allowed tools naming an unknown function", toolRequest(map[string]any{"type": "allowed_tools", "allowed_tools": map[string]any{
			"mode": "required", "tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "nope"}}}}}, nil), "tool_choice"},
		{"allowed tools bad mode", toolRequest(map[string]any{"type": "allowed_tools", "allowed_tools": map[string]any{
			"mode": "always", "tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_time"}}}}}, nil), "tool_choice"},
		{"required without tools", toolRequest("required", map[string]any{"tools": nil}), "tool_choice"},
		{"tool type", toolRequest("auto", map[string]any{"tools": []any{map[string]any{"type": "retrieval", "function": map[string]any{"name": "f"}}}}), "tools[0].type"},
		{"function name", toolRequest("auto", map[string]any{"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "a b"}}}}), "tools[0].function.name"},
		{"duplicate name", toolRequest("auto", map[string]any{"tools": []any{weatherTool, weatherTool}}), "tools[1].function.name"},
		{"parameters not a schema", toolRequest("auto", map[string]any{"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "f", "parameters": []int{1}}}}}), "tools[0].function.parameters"},
		{"schema the grammar cannot express", toolRequest("required", map[string]any{"tools": []any{badSchema}}), "tools"},
		{"forced call and response_format", toolRequest("required", map[string]any{"response_format": map[string]any{"type": "json_object"}}), "tool_choice"},
		{"paced answer with tools", toolRequest("auto", map[string]any{"stream": true, "chunking": map[string]any{}}), "chunking"},
		{"assistant message without content or calls", toolRequest("auto", map[string]any{"messages": []any{map[string]any{"role": "assistant"}}}), "messages"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := ts.Post(t, "/v1/chat/completions", tc.body)
			var e struct {
				Error struct {
					Type  string `json:"type"`
					Param string `json:"param"`
				} `json:"error"`
			}
			unmarshal(t, string(b), &e)
			if resp.StatusCode != http.StatusBadRequest || e.Error.Type != "invalid_request_error" || e.Error.Param != tc.param {
				t.Fatalf("status %d %s, want 400 naming %s", resp.StatusCode, b, tc.param)
			}
		})
	}
	// The server still answers.
	if choice, raw := wholeCalls(t, ts, toolRequest("none", map[string]any{"max_tokens": 4})); len(choice.Message.ToolCalls) != 0 {
		t.Fatalf("tool_choice none: %s", raw)
	}
}

// Ollama's /api/chat reads the calls of an answer when the request has
// tools, and gives their arguments as a JSON object. Ollama has no
// tool_choice: the test makes the model call with "format", a schema of
// the JSON format's call object.
func TestOllamaToolCalls(t *testing.T) {
	ts := e2etest.Start(t, testmodel.Stories260K, e2etest.Options{Engine: engine.Config{Parallel: 1},
		Model: servedmodel.Options{ToolFormat: "json"}})
	callSchema := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"name":      map[string]any{"const": "get_weather"},
			"arguments": weatherTool["function"].(map[string]any)["parameters"],
		},
		"required": []string{"name", "arguments"},
	}
	body := func(stream bool) map[string]any {
		return map[string]any{
			"model":    "tiny",
			"messages": []map[string]string{{"role": "user", "content": "What is the weather in Paris?"}},
			"tools":    []any{weatherTool},
			"format":   callSchema,
			"stream":   stream,
			"options":  map[string]any{"temperature": 0, "num_predict": 120},
		}
	}
	type ollamaCall struct {
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	}
	type object struct {
		Message struct {
			Content   string       `json:"content"`
			ToolCalls []ollamaCall `json:"tool_calls"`
		} `json:"message"`
		Done bool `json:"done"`
	}
	resp, b := ts.Post(t, "/api/chat", body(false))
	var whole object
	unmarshal(t, string(b), &whole)
	if resp.StatusCode != http.StatusOK || len(whole.Message.ToolCalls) != 1 || whole.Message.Content != "" {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	call := whole.Message.ToolCalls[0]
	var args map[string]any
	if err := json.Unmarshal(call.Function.Arguments, &args); err != nil || call.Function.Name != "get_weather" || args["city"] == nil {
		t.Fatalf("call %s: arguments are not an object: %v", b, err)
	}

	resp, b = ts.Post(t, "/api/chat", body(true))
	var calls []ollamaCall
	var content strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var o object
		unmarshal(t, line, &o)
		content.WriteString(o.Message.Content)
		calls = append(calls, o.Message.ToolCalls...)
	}
	if resp.StatusCode != http.StatusOK || content.Len() != 0 || len(calls) != 1 || string(calls[0].Function.Arguments) != string(call.Function.Arguments) {
		t.Fatalf("stream %s; whole call %s", b, call.Function.Arguments)
	}
}

// Logprobs of an answer read for tool calls: one entry per generated
// token, whole or streamed, though the stream holds back call markup.
func TestToolCallsWithLogprobs(t *testing.T) {
	ts := startModel(t, testmodel.Stories260K, engine.Config{Parallel: 1})
	named := map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}
	extra := map[string]any{"logprobs": true, "top_logprobs": 2}
	resp, b := ts.Post(t, "/v1/chat/completions", toolRequest(named, extra))
	var whole wire.ChatCompletion
	unmarshal(t, string(b), &whole)
	if resp.StatusCode != http.StatusOK || len(whole.Choices[0].Message.ToolCalls) != 1 || whole.Choices[0].Logprobs == nil {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	want := whole.Usage.CompletionTokens
	if got := len(whole.Choices[0].Logprobs.Content); got != want {
		t.Fatalf("%d entries for %d tokens", got, want)
	}
	body := toolRequest(named, extra)
	body["stream"] = true
	entries := 0
	for _, data := range e2etest.ReadEvents(t, ts.OpenStream(t, t.Context(), "/v1/chat/completions", body)) {
		if data == "[DONE]" {
			break
		}
		var c wire.ChatCompletionChunk
		unmarshal(t, data, &c)
		if lp := c.Choices[0].Logprobs; lp != nil {
			entries += len(lp.Content)
		}
	}
	if entries != want {
		t.Fatalf("stream: %d entries, want %d", entries, want)
	}
}

// A forced call cut off by max_tokens, even inside its opening marker,
// leaves no markup in the content, whole or streamed.
func TestToolCallCutOff(t *testing.T) {
	ts := startModel(t, testmodel.Stories260K, engine.Config{Parallel: 1})
	named := map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}
	for _, n := range []int{2, 6, 20} {
		choice, raw := wholeCalls(t, ts, toolRequest(named, map[string]any{"max_tokens": n}))
		if choice.Message.Content != "" || len(choice.Message.ToolCalls) != 0 || *choice.FinishReason != "length" {
			t.Errorf("max_tokens %d: %s", n, raw)
		}
		content, _, finish := streamCalls(t, ts, toolRequest(named, map[string]any{"max_tokens": n}))
		if content != "" || finish != "length" {
			t.Errorf("max_tokens %d streamed: content %q, finish %q", n, content, finish)
		}
	}
}

// The vocabulary of tinystories-656k has no "{": asked for a tool call or
// JSON, every dialect answers 400 grammar_unsatisfiable naming the field
// that asked, never a 500; whole or streamed, since the grammar's start
// is checked before anything is generated. A grammar that gets stuck
// mid-answer ends the same way, or, once a stream has sent text, with
// an error event.
func TestGrammarTheVocabularyCannotWrite(t *testing.T) {
	ts := startModel(t, testmodel.TinyStories656K, engine.Config{Parallel: 1})
	named := map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}
	// A JSON string that must contain "{": the answer gets as far as `"a`.
	stuck := map[string]any{"enum": []string{"a{", "b{"}}
	stuckFormat := map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "s", "schema": stuck}}
	ask := func(extra map[string]any) map[string]any {
		body := map[string]any{"model": "tiny", "messages": []map[string]string{{"role": "user", "content": "Hi"}}, "max_tokens": 16, "temperature": 0}
		for k, v := range extra {
			body[k] = v
		}
		return body
	}
	type envelope struct {
		Error wire.ErrorObject `json:"error"`
	}
	for _, tc := range []struct {
		name, path string
		body       map[string]any
		param      string
		ollama     bool
	}{
		{"named function", "/v1/chat/completions", toolRequest(named, nil), "tool_choice", false},
		{"named function streamed", "/v1/chat/completions", toolRequest(named, map[string]any{"stream": true}), "tool_choice", false},
		{"required", "/v1/chat/completions", toolRequest("required", nil), "tool_choice", false},
		{"json_object", "/v1/chat/completions", ask(map[string]any{"response_format": map[string]any{"type": "json_object"}}), "response_format", false},
		{"json_schema stuck mid-answer", "/v1/chat/completions", ask(map[string]any{"response_format": stuckFormat}), "response_format", false},
		{"completions json_schema", "/v1/completions", map[string]any{"prompt": "Hi", "max_tokens": 8, "response_format": map[string]any{"type": "json_object"}}, "response_format", false},
		{"llama.cpp json_schema", "/completion", map[string]any{"prompt": "Hi", "n_predict": 8, "json_schema": map[string]any{"type": "object"}}, "json_schema", false},
		{"llama.cpp grammar", "/completion", map[string]any{"prompt": "Hi", "n_predict": 8, "grammar": `root ::= "x{"`}, "grammar", false},
		{"llama.cpp grammar stuck mid-answer", "/completion", map[string]any{"prompt": "Hi", "n_predict": 8, "temperature": 0, "grammar": `root ::= ("a" | "b") "{"`}, "grammar", false},
		{"ollama chat json", "/api/chat", map[string]any{"model": "tiny", "messages": []map[string]string{{"role": "user", "content": "Hi"}}, "format": "json", "stream": false}, "format", true},
		{"ollama generate stuck mid-answer", "/api/generate", map[string]any{"model": "tiny", "prompt": "Hi", "format": stuck, "stream": false, "options": map[string]any{"temperature": 0}}, "format", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := ts.Post(t, tc.path, tc.body)
			if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("status %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
			}
			msg := ""
			if tc.ollama {
				var e struct {
					Error string `json:"error"`
				}
				unmarshal(t, string(b), &e)
				msg = e.Error
			} else {
				var e envelope
				unmarshal(t, string(b), &e)
				if e.Error.Type != "invalid_request_error" || e.Error.Code == nil || *e.Error.Code != "grammar_unsatisfiable" || e.Error.Param == nil || *e.Error.Param != tc.param {
					t.Fatalf("%s, want invalid_request_error, grammar_unsatisfiable, param %s", b, tc.param)
				}
				msg = e.Error.Message
			}
			if !strings.Contains(msg, "vocabulary cannot write") || !strings.Contains(msg, "'"+tc.param+"'") || !strings.Contains(msg, `"{`) {
				t.Fatalf("message %q: want it to name the vocabulary, '%s' and the \"{\" it cannot write", msg, tc.param)
			}
		})
	}

	// Streamed, an answer stuck after its first bytes ends with an error
	// event: OpenAI's envelope then [DONE], llama.cpp's envelope, Ollama's
	// {"error": ...} line.
	t.Run("streams", func(t *testing.T) {
		body := ask(map[string]any{"response_format": stuckFormat, "stream": true})
		events := e2etest.ReadEvents(t, ts.OpenStream(t, t.Context(), "/v1/chat/completions", body))
		if len(events) < 3 || events[len(events)-1] != "[DONE]" {
			t.Fatalf("events %q", events)
		}
		if code, msg := errorCode(t, []byte(events[len(events)-2])); code != "grammar_unsatisfiable" || !strings.Contains(msg, "'response_format'") {
			t.Fatalf("last event %s", events[len(events)-2])
		}
		var text strings.Builder
		for _, data := range events[:len(events)-2] {
			var c wire.ChatCompletionChunk
			unmarshal(t, data, &c)
			text.WriteString(c.Choices[0].Delta.Text())
		}
		if got := text.String(); got != `"a` && got != `"b` {
			t.Fatalf("streamed text %q before the error", got)
		}

		events = e2etest.ReadEvents(t, ts.OpenStream(t, t.Context(), "/completion",
			map[string]any{"prompt": "Hi", "n_predict": 8, "temperature": 0, "stream": true, "grammar": `root ::= ("a" | "b") "{"`}))
		if len(events) < 2 {
			t.Fatalf("events %q", events)
		}
		if code, _ := errorCode(t, []byte(events[len(events)-1])); code != "grammar_unsatisfiable" {
			t.Fatalf("last event %s", events[len(events)-1])
		}

		resp, b := ts.Post(t, "/api/generate", map[string]any{"model": "tiny", "prompt": "Hi", "format": stuck, "options": map[string]any{"temperature": 0}})
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		var last struct {
			Error string `json:"error"`
		}
		unmarshal(t, lines[len(lines)-1], &last)
		if resp.StatusCode != http.StatusOK || len(lines) < 2 || !strings.Contains(last.Error, "vocabulary cannot write") {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
	})

	// The server still answers.
	if resp, b := ts.Post(t, "/completion", map[string]any{"prompt": "Hi", "n_predict": 4}); resp.StatusCode != http.StatusOK {
		t.Fatalf("afterwards: %d %s", resp.StatusCode, b)
	}
}

// In tool_choice auto, a call whose arguments break its schema is written
// again under the tool-call grammar (corral serve's --tool-repair, 1 by
// default), and given back as written with --tool-repair 0. The test
// makes the model write the bad call with response_format: a schema of
// the json format's call object whose arguments name a city the tool's
// enum does not have.
func TestToolRepairArguments(t *testing.T) {
	badCall := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"name": map[string]any{"const": "get_weather"},
			"arguments": map[string]any{
				"type":                 "object",
				"properties":           map[string]any{"city": map[string]any{"const": "Oslo"}, "days": map[string]any{"const": 2}},
				"required":             []string{"city", "days"},
				"additionalProperties": false,
			},
		},
		"required":             []string{"name", "arguments"},
		"additionalProperties": false,
	}
	body := e2etest.Marshal(t, toolRequest("auto", map[string]any{
		"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "call", "schema": badCall}},
	}))
	for _, repair := range []string{"1", "0"} {
		t.Run("tool-repair "+repair, func(t *testing.T) {
			c := e2etest.StartChild(t, testmodel.Stories260K, "-np", "1", "-t", "1", "--tool-format", "json", "--tool-repair", repair)
			code, b := c.Request(t, http.MethodPost, "/v1/chat/completions", body)
			var resp wire.ChatCompletion
			unmarshal(t, string(b), &resp)
			if code != http.StatusOK || len(resp.Choices) != 1 || len(resp.Choices[0].Message.ToolCalls) != 1 {
				t.Fatalf("status %d: %s", code, b)
			}
			call := resp.Choices[0].Message.ToolCalls[0]
			if call.Function.Name != "get_weather" {
				t.Fatalf("call %+v", call)
			}
			_, metrics := c.Request(t, http.MethodGet, "/metrics", nil)
			repaired := strings.Contains(string(metrics), `outcome="repaired"} 1`)
			if repair == "0" {
				if !strings.Contains(call.Function.Arguments, "Oslo") || repaired {
					t.Fatalf("--tool-repair 0 changed the call: %s", b)
				}
				return
			}
			checkCall(t, call)
			if !repaired {
				t.Errorf("no repair counted:\n%s", metrics)
			}
		})
	}
}
