package chat

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/wire"
)

// An assistant's reasoning sent back (reasoning_content) reaches the
// template under the names templates read: Qwen3's template writes it
// back in <think> tags within the turn of tool calls it belongs to.
func TestReasoningContentReachesTemplate(t *testing.T) {
	tpl, err := Parse(testmodel.Template(t, "Qwen-Qwen3-0.6B"))
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{
		{Role: "user", Content: json.RawMessage(`"Weather in Paris?"`)},
		{Role: "assistant", ReasoningContent: "I should call get_weather.", ToolCalls: []wire.ToolCall{
			{ID: "call_1", Type: "function", Function: wire.FunctionCall{Name: "get_weather", Arguments: `{"city": "Paris"}`}}}},
		{Role: "tool", ToolCallID: "call_1", Content: json.RawMessage(`"sunny"`)},
	}
	out, err := tpl.Render(msgs, Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "<|im_start|>assistant\n<think>\nI should call get_weather.\n</think>\n\n") {
		t.Fatalf("reasoning not rendered:\n%s", out)
	}
	// Templates that check a name with "in" see only what was sent.
	msgs[1].ReasoningContent = ""
	if out, err = tpl.Render(msgs, Options{AddGenerationPrompt: true}); err != nil || strings.Contains(out, "get_weather.\n</think>") {
		t.Fatalf("without reasoning: %v\n%s", err, out)
	}
}
