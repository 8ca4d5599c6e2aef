package chat

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/corral-llm/corral/wire"
)

// The testdata/*.jinja files are the chat templates of public Hugging Face
// instruct models (tokenizer_config.json's chat_template); the expected
// strings are what transformers' apply_chat_template renders for them.

var today = time.Date(2026, 11, 21, 9, 30, 0, 0, time.UTC)

// weatherTool is a function tool whose fields are not in sorted order, so
// that tojson output shows the order is kept.
func weatherTool(t *testing.T) []wire.Tool {
	t.Helper()
	var tools []wire.Tool
	err := json.Unmarshal([]byte(`[{"type": "function", "function": {
		"name": "get_weather", "description": "Get the current weather",
		"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]`), &tools)
	if err != nil {
		t.Fatal(err)
	}
	return tools
}

// toolConversation asks for the weather, calls a tool and answers.
func toolConversation() []Message {
	call := wire.ToolCall{ID: "call_1", Type: "function"}
	call.Function.Name = "get_weather"
	call.Function.Arguments = `{"city": "Paris"}`
	return []Message{
		msg("system", "Be brief."),
		msg("user", "Weather in Paris?"),
		{Role: "assistant", ToolCalls: []wire.ToolCall{call}},
		{Role: "tool", ToolCallID: "call_1", Content: json.RawMessage(`"22C"`)},
		msg("assistant", "It is 22C."),
	}
}

func TestSmolLM2(t *testing.T) {
	tpl := mustParseFile(t, "smollm2-instruct.jinja")
	msgs := []Message{msg("user", "Hi!"), msg("assistant", "Hello."), msg("user", "Bye")}
	got := mustRender(t, tpl, msgs, Options{AddGenerationPrompt: true})
	want := "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n" +
		"<|im_start|>user\nHi!<|im_end|>\n" +
		"<|im_start|>assistant\nHello.<|im_end|>\n" +
		"<|im_start|>user\nBye<|im_end|>\n" +
		"<|im_start|>assistant\n"
	if got != want {
		t.Errorf("default system prompt:\n got %q\nwant %q", got, want)
	}

	got = mustRender(t, tpl, conversation, Options{})
	want = "<|im_start|>system\nYou are terse.<|im_end|>\n" +
		"<|im_start|>user\nHi!<|im_end|>\n" +
		"<|im_start|>assistant\nHello.<|im_end|>\n" +
		"<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
	if got != want {
		t.Errorf("own system prompt:\n got %q\nwant %q", got, want)
	}
}

func TestLlama32(t *testing.T) {
	tpl := mustParseFile(t, "llama3.2-instruct.jinja")
	opt := Options{AddGenerationPrompt: true, BOSToken: "<|begin_of_text|>", Now: today}
	got := mustRender(t, tpl, conversation, opt)
	want := "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" +
		"Cutting Knowledge Date: December 2023\nToday Date: 21 Nov 2026\n\nYou are terse.<|eot_id|>" +
		"<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>" +
		"<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>" +
		"<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>" +
		"<|start_header_id|>assistant<|end_header_id|>\n\n"
	if got != want {
		t.Errorf("plain:\n got %q\nwant %q", got, want)
	}

	opt.Tools = weatherTool(t)
	got = mustRender(t, tpl, toolConversation(), opt)
	want = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" +
		"Environment: ipython\nCutting Knowledge Date: December 2023\nToday Date: 21 Nov 2026\n\nBe brief.<|eot_id|>" +
		"<|start_header_id|>user<|end_header_id|>\n\n" +
		"Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\n" +
		`Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.Do not use variables.` + "\n\n" +
		`{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {
                    "type": "string"
                }
            },
            "required": [
                "city"
            ]
        }
    }
}` + "\n\nWeather in Paris?<|eot_id|>" +
		"<|start_header_id|>assistant<|end_header_id|>\n\n" + `{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>` +
		// A string is iterable in Jinja, so the template JSON-quotes tool output.
		"<|start_header_id|>ipython<|end_header_id|>\n\n\"22C\"<|eot_id|>" +
		"<|start_header_id|>assistant<|end_header_id|>\n\nIt is 22C.<|eot_id|>" +
		"<|start_header_id|>assistant<|end_header_id|>\n\n"
	if got != want {
		t.Errorf("tools:\n got %q\nwant %q", got, want)
	}

	call := toolConversation()[2]
	call.ToolCalls = append(call.ToolCalls, call.ToolCalls[0])
	_, err := tpl.Render([]Message{msg("user", "Weather?"), call}, opt)
	var raised *RaiseError
	if !errors.As(err, &raised) || raised.Message != "This model only supports single tool-calls at once!" {
		t.Errorf("two tool calls: err = %v, want the template's raise_exception", err)
	}
}

func TestQwen25(t *testing.T) {
	tpl := mustParseFile(t, "qwen2.5-instruct.jinja")
	msgs := []Message{msg("user", "Hi!")}
	got := mustRender(t, tpl, msgs, Options{AddGenerationPrompt: true})
	want := "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n" +
		"<|im_start|>user\nHi!<|im_end|>\n" +
		"<|im_start|>assistant\n"
	if got != want {
		t.Errorf("plain:\n got %q\nwant %q", got, want)
	}

	got = mustRender(t, tpl, toolConversation(), Options{AddGenerationPrompt: true, Tools: weatherTool(t)})
	want = "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
		"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
		`{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}` +
		"\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
		"<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\nWeather in Paris?<|im_end|>\n" +
		"<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\n<tool_response>\n22C\n</tool_response><|im_end|>\n" +
		"<|im_start|>assistant\nIt is 22C.<|im_end|>\n" +
		"<|im_start|>assistant\n"
	if got != want {
		t.Errorf("tools:\n got %q\nwant %q", got, want)
	}
}

func TestMistralRaise(t *testing.T) {
	tpl := mustParseFile(t, "mistral-7b-instruct-v0.1.jinja")
	opt := Options{BOSToken: "<s>", EOSToken: "</s>"}
	got := mustRender(t, tpl, []Message{msg("user", "Hi!"), msg("assistant", "Hello."), msg("user", "Bye")}, opt)
	if want := "<s>[INST] Hi! [/INST]Hello.</s>[INST] Bye [/INST]"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}

	for _, msgs := range [][]Message{
		conversation, // a system message breaks the alternation
		{msg("user", "a"), msg("user", "b")},
	} {
		_, err := tpl.Render(msgs, opt)
		var raised *RaiseError
		if !errors.As(err, &raised) {
			t.Fatalf("err = %v, want a *RaiseError", err)
		}
		if raised.Message != "Conversation roles must alternate user/assistant/user/assistant/..." {
			t.Errorf("raised %q", raised.Message)
		}
		if !errors.Is(err, ErrInvalidMessages) {
			t.Errorf("errors.Is(%v, ErrInvalidMessages) = false", err)
		}
	}
}
