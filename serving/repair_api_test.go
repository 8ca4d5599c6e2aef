package serving_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/toolcall"
	"github.com/corral-llm/corral/wire"
)

// scriptEngine is a real engine whose answers a test steers: Submit
// records each request and, while script has a grammar for it (by the
// request's number), generates under that grammar instead of the
// request's own, so that a model that writes what it likes writes the
// markup the test wants.
type scriptEngine struct {
	*engine.Engine
	script func(n int) string // "" keeps the request's grammar

	mu        sync.Mutex
	submitted []engine.Request
}

func (e *scriptEngine) Submit(ctx context.Context, req engine.Request) (*engine.Stream, error) {
	e.mu.Lock()
	n := len(e.submitted)
	e.submitted = append(e.submitted, req)
	e.mu.Unlock()
	if g := e.script(n); g != "" {
		req.Grammar = g
	}
	return e.Engine.Submit(ctx, req)
}

func (e *scriptEngine) requests() []engine.Request {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.submitted)
}

// repairServer serves stories260K (its byte tokens write any text; no
// chat template: the chatml built-in and its hermes calls) as "tiny"
// through a scriptEngine.
func repairServer(t *testing.T, opt serving.Options, script func(n int) string) (*serving.Core, *scriptEngine, *httptest.Server) {
	t.Helper()
	path := testmodel.Path(t, testmodel.Stories260K)
	eng, err := engine.New(context.Background(), engine.Config{ModelPath: path, Name: "tiny", Threads: 1, Parallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	se := &scriptEngine{Engine: eng, script: script}
	a := serveModel(t, eng, se, path, model.Options{}, opt)
	return a, se, keyServer(t, a, nil)
}

// gbnfLiteral is a grammar whose one answer is s.
func gbnfLiteral(s string) string {
	b, _ := json.Marshal(s) // GBNF's string escapes are JSON's for this text
	return "root ::= " + string(b)
}

var (
	weatherDef = wire.Tool{Type: "function", Function: wire.FunctionDef{Name: "get_weather",
		Parameters: json.RawMessage(`{"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]},
			"days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city", "days"], "additionalProperties": false}`)}}
	timeDef = wire.Tool{Type: "function", Function: wire.FunctionDef{Name: "get_time",
		Parameters: json.RawMessage(`{"type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["zone"]}`)}}
)

// repairBody asks for a whole chat completion with tool_choice auto.
func repairBody(stream bool) map[string]any {
	return map[string]any{
		"model":    "tiny",
		"messages": []map[string]string{{"role": "user", "content": "What is the weather in Paris?"}},
		"tools":    []wire.Tool{weatherDef, timeDef},
		"stream":   stream, "max_tokens": 300, "temperature": 0,
	}
}

func postChat(t *testing.T, ts *httptest.Server, body any) wire.ChatCompletion {
	t.Helper()
	status, b := keyed(t, ts, "", "/v1/chat/completions", body)
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, b)
	}
	var c wire.ChatCompletion
	if err := json.Unmarshal(b, &c); err != nil || len(c.Choices) != 1 {
		t.Fatalf("%v: %s", err, b)
	}
	return c
}

// repairCount is the value of corral_tool_call_repairs_total for the
// outcome, 0 when the series is absent.
func repairCount(t *testing.T, ts *httptest.Server, outcome string) int {
	t.Helper()
	return metricValue(t, ts, fmt.Sprintf(`corral_tool_call_repairs_total{model_name="tiny",outcome=%q}`, outcome))
}

// metricValue is the value of the series (its name and labels as
// /metrics writes them), 0 when it is absent.
func metricValue(t *testing.T, ts *httptest.Server, series string) int {
	t.Helper()
	_, b := keyed(t, ts, "", "/metrics", nil)
	prefix := series + " "
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			var n int
			fmt.Sscan(v, &n)
			return n
		}
	}
	return 0
}

// A call whose arguments break the schema, and markup that is not a
// call, are written again from where their markup began, under the
// grammar of one call (of the function named, when it is one of the
// tools); the text before them stays, the text after them goes.
func TestToolRepair(t *testing.T) {
	for _, tc := range []struct {
		name, first string
		tools       []wire.Tool // the repair's grammar is of these
	}{
		{"arguments break the schema", `Sure. <tool_call>
{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}
</tool_call> And more.`, []wire.Tool{weatherDef}},
		{"markup that is not a call", `Sure. <tool_call>{"name": get_weather}</tool_call> And more.`, []wire.Tool{weatherDef, timeDef}},
		{"a function not among the tools", `Sure. <tool_call>{"name": "get_news", "arguments": {}}</tool_call>`, []wire.Tool{weatherDef, timeDef}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, se, ts := repairServer(t, serving.Options{}, func(n int) string {
				if n == 0 {
					return gbnfLiteral(tc.first)
				}
				return ""
			})
			c := postChat(t, ts, repairBody(false))
			msg := c.Choices[0].Message
			if len(msg.ToolCalls) != 1 || *c.Choices[0].FinishReason != "tool_calls" {
				t.Fatalf("not repaired: %+v", c.Choices[0])
			}
			call := msg.ToolCalls[0].Function
			var args struct {
				City string `json:"city"`
				Days int    `json:"days"`
				Zone string `json:"zone"`
			}
			if err := json.Unmarshal([]byte(call.Arguments), &args); err != nil {
				t.Fatalf("arguments %q: %v", call.Arguments, err)
			}
			if !serving.ValidCall([]wire.Tool{weatherDef, timeDef}, call.Name, call.Arguments) {
				t.Errorf("repaired call %+v breaks its schema", call)
			}
			if msg.Content != "Sure." {
				t.Errorf("content %q, want the text before the call alone", msg.Content)
			}
			reqs := se.requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests, want the answer and one repair", len(reqs))
			}
			want, err := toolcall.Hermes.Grammar(tc.tools, false, a.Limits().SchemaLimits())
			if err != nil {
				t.Fatal(err)
			}
			if reqs[1].Prompt != reqs[0].Prompt+"Sure." || reqs[1].Grammar != want {
				t.Errorf("repair prompt ends %q, grammar %q; want the answer's text before the call and %q",
					reqs[1].Prompt[max(0, len(reqs[1].Prompt)-40):], reqs[1].Grammar, want)
			}
			if reqs[1].MaxTokens <= 0 || reqs[1].MaxTokens >= 300 {
				t.Errorf("repair max tokens %d, want what the answer left", reqs[1].MaxTokens)
			}
			if first := 300 - reqs[1].MaxTokens; c.Usage.CompletionTokens <= first {
				t.Errorf("usage %+v counts the first answer's %d tokens alone", c.Usage, first)
			}
			if got := repairCount(t, ts, "repaired"); got != 1 {
				t.Errorf("repaired count %d, want 1", got)
			}
			if got := repairCount(t, ts, "failed"); got != 0 {
				t.Errorf("failed count %d, want 0", got)
			}
			// The first request found nothing cached: the repair found
			// the prompt it shares with it.
			if got := metricValue(t, ts, `corral_prompt_tokens_cached_total{model_name="tiny"}`); got < c.Usage.PromptTokens {
				t.Errorf("%d prompt tokens cached, want the repair to find the %d of the prompt", got, c.Usage.PromptTokens)
			}
		})
	}
}

// A repair that fails too is tried again, ToolRepair times in all; then
// the answer comes back as the model first wrote it, its markup as
// content, streamed or not. With repair off (a negative ToolRepair), or
// an answer without failed calls, the answer is the first one.
func TestToolRepairBounded(t *testing.T) {
	broken := `Sure. <tool_call>{"name": get_weather}</tool_call>`
	always := func(int) string { return gbnfLiteral(broken) }
	for _, tc := range []struct {
		name     string
		repairs  int // serving.Options.ToolRepair
		stream   bool
		script   func(int) string
		requests int
		failed   int // the failed count after the request
	}{
		{"two repairs fail", 2, false, always, 3, 1},
		{"the default repair fails", 0, false, always, 2, 1},
		{"repair off", -1, false, always, 1, 0},
		{"streamed", 0, true, always, 2, 1},
		{"text", 0, false, func(int) string { return gbnfLiteral("Once upon a time.") }, 1, 0},
		{"a sound call", 0, false, func(int) string {
			return gbnfLiteral(`<tool_call>{"name": "get_time", "arguments": {"zone": "UTC"}}</tool_call>`)
		}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, se, ts := repairServer(t, serving.Options{ToolRepair: tc.repairs}, tc.script)
			var content string
			var calls int
			if tc.stream {
				status, b := keyed(t, ts, "", "/v1/chat/completions", repairBody(true))
				if status != http.StatusOK {
					t.Fatalf("status %d: %s", status, b)
				}
				for _, line := range strings.Split(string(b), "\n") {
					data, ok := strings.CutPrefix(line, "data: ")
					if !ok || data == "[DONE]" {
						continue
					}
					var c wire.ChatCompletionChunk
					if err := json.Unmarshal([]byte(data), &c); err != nil {
						t.Fatal(err)
					}
					for _, ch := range c.Choices {
						content += ch.Delta.Text()
						calls += len(ch.Delta.ToolCalls)
					}
				}
			} else {
				c := postChat(t, ts, repairBody(false))
				content, calls = c.Choices[0].Message.Content, len(c.Choices[0].Message.ToolCalls)
			}
			if n := len(se.requests()); n != tc.requests {
				t.Errorf("%d requests, want %d", n, tc.requests)
			}
			if tc.script(0) == always(0) && (content != broken || calls != 0) {
				t.Errorf("content %q and %d calls, want the markup as content", content, calls)
			}
			if got := repairCount(t, ts, "failed"); got != tc.failed {
				t.Errorf("failed count %d, want %d", got, tc.failed)
			}
			if got := repairCount(t, ts, "repaired"); got != 0 {
				t.Errorf("repaired count %d, want 0", got)
			}
		})
	}
}

// Ollama's /api/chat repairs a whole answer's calls the same way.
func TestToolRepairOllama(t *testing.T) {
	_, se, ts := repairServer(t, serving.Options{}, func(n int) string {
		if n == 0 {
			return gbnfLiteral(`<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>`)
		}
		return ""
	})
	body := map[string]any{
		"model":    "tiny",
		"messages": []map[string]string{{"role": "user", "content": "What is the weather in Paris?"}},
		"tools":    []wire.Tool{weatherDef, timeDef},
		"stream":   false,
		"options":  map[string]any{"temperature": 0, "num_predict": 300},
	}
	status, b := keyed(t, ts, "", "/api/chat", body)
	var resp struct {
		Message struct {
			ToolCalls []struct {
				Function struct {
					Name      string          `json:"name"`
					Arguments json.RawMessage `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
	}
	if err := json.Unmarshal(b, &resp); err != nil || status != http.StatusOK || len(resp.Message.ToolCalls) != 1 {
		t.Fatalf("status %d, %v: %s", status, err, b)
	}
	if call := resp.Message.ToolCalls[0].Function; call.Name != "get_weather" || !serving.ValidCall([]wire.Tool{weatherDef}, call.Name, string(call.Arguments)) {
		t.Errorf("call %s(%s) is not the repaired call", call.Name, call.Arguments)
	}
	if n := len(se.requests()); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}
