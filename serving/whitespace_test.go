package serving_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/corral-llm/corral/anthropic"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/internal/servetest"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/llamacpp"
	"github.com/corral-llm/corral/ollama"
	"github.com/corral-llm/corral/openai"
	"github.com/corral-llm/corral/responses"
	"github.com/corral-llm/corral/serving"
)

// TestGrammarWhitespaceInEveryField: every field that asks for JSON under
// a grammar, in every dialect, gets compact JSON by default (the grammar
// has no rule "space"), whitespace between the tokens with
// Limits.GrammarWhitespace free (corral serve --grammar-whitespace free),
// and ": " with spaced.
func TestGrammarWhitespaceInEveryField(t *testing.T) {
	const schema = `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}`
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	var createResponse func(*serving.Core, http.ResponseWriter, *http.Request)
	for _, r := range responses.Routes(responses.NewStore(responses.StoreOptions{})) {
		if r.Method == http.MethodPost {
			createResponse = r.Handler
		}
	}
	for _, tc := range []struct {
		name string
		h    func(*serving.Core, http.ResponseWriter, *http.Request)
		body string
	}{
		{"response_format json_object", openai.ChatCompletions, `{` + msgs + `,"response_format":{"type":"json_object"}}`},
		{"response_format json_schema", openai.ChatCompletions, `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` + schema + `}}}`},
		{"completions response_format", openai.Completions, `{"prompt":"hi","response_format":{"type":"json_object","schema":` + schema + `}}`},
		{"forced tool", openai.ChatCompletions, `{` + msgs + `,"tool_choice":{"type":"function","function":{"name":"f"}},"tools":[{"type":"function","function":{"name":"f","parameters":` + schema + `}}]}`},
		{"required tools", openai.ChatCompletions, `{` + msgs + `,"tool_choice":"required","tools":[{"type":"function","function":{"name":"f","parameters":` + schema + `}},{"type":"function","function":{"name":"g"}}]}`},
		{"/completion json_schema", llamacpp.Completion, `{"prompt":"hi","json_schema":` + schema + `}`},
		{"/api/chat format json", ollama.Chat, `{` + msgs + `,"format":"json"}`},
		{"/api/chat format schema", ollama.Chat, `{` + msgs + `,"format":` + schema + `}`},
		{"/api/generate format", ollama.Generate, `{"prompt":"hi","format":` + schema + `}`},
		{"anthropic output_config.format", anthropic.Messages, `{"model":"tiny","max_tokens":8,` + msgs + `,"output_config":{"format":{"type":"json_schema","schema":` + schema + `}}}`},
		{"responses text.format json_object", createResponse, `{"input":"hi","text":{"format":{"type":"json_object"}}}`},
		{"responses text.format json_schema", createResponse, `{"input":"hi","text":{"format":{"type":"json_schema","name":"x","schema":` + schema + `}}}`},
	} {
		for _, ws := range []grammar.Whitespace{grammar.WhitespaceCompact, grammar.WhitespaceFree, grammar.WhitespaceSpaced} {
			fake := servetest.NewEngine()
			w := post(limitedAPI(t, fake, serving.Limits{GrammarWhitespace: ws}), tc.h, tc.body)
			if len(fake.Submitted) != 1 {
				t.Errorf("%s, %v: submitted %d requests: %d %.300s", tc.name, ws, len(fake.Submitted), w.Code, w.Body)
				continue
			}
			g := fake.Submitted[0].Grammar
			if g == "" {
				t.Errorf("%s, %v: no grammar", tc.name, ws)
				continue
			}
			if got, want := strings.Contains(g, "\nspace ::= "), ws == grammar.WhitespaceFree; got != want || strings.Contains(g, "space") != want {
				t.Errorf("%s, %v: the grammar allows whitespace: %v, want %v\n%s", tc.name, ws, got, want, g)
			}
			if got, want := strings.Contains(g, ": "), ws == grammar.WhitespaceSpaced; got != want {
				t.Errorf("%s, %v: the grammar writes \": \": %v, want %v\n%s", tc.name, ws, got, want, g)
			}
		}
	}
}

// TestForcedCallInFewTokens: a forced get_weather(city) call with
// max_tokens 64 on stories260K finishes with the call, its arguments
// compact JSON, under the default grammar. Under the old rule
// (--grammar-whitespace free) the same requests are cut off with no call:
// the model spends its tokens on `{ "city" : "…"`, a line break and 20
// spaces. Each request's call markup takes about 50 of the 64 tokens
// (stories260K's vocabulary of 512 spells it nearly a byte a token); the
// prompts and seeds are ones whose city is short.
func TestForcedCallInFewTokens(t *testing.T) {
	weather := map[string]any{"type": "function", "function": map[string]any{"name": "get_weather",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}}}
	for _, ws := range []grammar.Whitespace{grammar.WhitespaceCompact, grammar.WhitespaceFree} {
		a, _ := realModelAPI(t, testmodel.Stories260K, engine.Config{Parallel: 1}, serving.Options{Limits: serving.Limits{GrammarWhitespace: ws}})
		ts := keyServer(t, a, nil)
		for _, tc := range []struct {
			prompt string
			seed   int
		}{
			{"What is the weather in Paris?", 4},
			{"Tell me about the weather in Tokyo today.", 2},
			{"Lily wants to know if it is sunny where Tom lives.", 4},
		} {
			body := map[string]any{
				"messages": []map[string]string{{"role": "user", "content": tc.prompt}}, "max_tokens": 64, "seed": tc.seed,
				"tools": []any{weather}, "tool_choice": map[string]any{"type": "function", "function": map[string]string{"name": "get_weather"}},
			}
			status, b := keyed(t, ts, "", "/v1/chat/completions", body)
			if status != http.StatusOK {
				t.Fatalf("%v, %q: status %d: %s", ws, tc.prompt, status, b)
			}
			var res struct {
				Choices []struct {
					FinishReason string `json:"finish_reason"`
					Message      struct {
						ToolCalls []struct {
							Function struct{ Name, Arguments string }
						} `json:"tool_calls"`
					}
				}
				Usage struct {
					CompletionTokens int `json:"completion_tokens"`
				}
			}
			if err := json.Unmarshal(b, &res); err != nil || len(res.Choices) != 1 {
				t.Fatalf("%v, %q: %s: %v", ws, tc.prompt, b, err)
			}
			c := res.Choices[0]
			if ws == grammar.WhitespaceFree {
				// The old rule: cut off before the call ends.
				if c.FinishReason != "length" || len(c.Message.ToolCalls) != 0 {
					t.Errorf("free whitespace, %q: finish_reason %s, calls %+v in %d tokens; want it cut off (length), as before compact grammars",
						tc.prompt, c.FinishReason, c.Message.ToolCalls, res.Usage.CompletionTokens)
				}
				continue
			}
			if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 {
				t.Errorf("%q: finish_reason %s, calls %+v in %d tokens; want one call (tool_calls) within 64", tc.prompt, c.FinishReason, c.Message.ToolCalls, res.Usage.CompletionTokens)
				continue
			}
			f := c.Message.ToolCalls[0].Function
			var compact bytes.Buffer
			var args struct{ City *string }
			if f.Name != "get_weather" || json.Compact(&compact, []byte(f.Arguments)) != nil || compact.String() != f.Arguments ||
				json.Unmarshal([]byte(f.Arguments), &args) != nil || args.City == nil {
				t.Errorf("%q: call %s(%s), want get_weather with a city, in compact JSON", tc.prompt, f.Name, f.Arguments)
			}
		}
	}
}
