package serving_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	asdk "github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	ollama "github.com/ollama/ollama/api"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// streamedCall is what a client made of a streamed answer: its text, its
// calls, and every piece of text it was sent (to find markup in).
type streamedCall struct {
	content string
	calls   []wire.FunctionCall
	pieces  []string
	// offered are the tools as the client sent them, when its types
	// drop parts of a schema (Ollama's keep no minimum or maximum); nil:
	// weatherDef and timeDef as they are.
	offered []wire.Tool
}

// The four streaming clients, each through its official SDK, of the same
// request: tools weatherDef and timeDef, tool_choice auto, greedy.
var streamClients = []struct {
	name string
	run  func(t *testing.T, base string) streamedCall
}{
	{"openai-go chat", func(t *testing.T, base string) streamedCall {
		client := openai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey("x"), option.WithMaxRetries(0))
		p := openai.ChatCompletionNewParams{Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris?")},
			MaxTokens: openai.Int(300), Temperature: openai.Float(0)}
		st := client.Chat.Completions.NewStreaming(context.Background(), p, option.WithJSONSet("tools", []wire.Tool{weatherDef, timeDef}))
		var acc openai.ChatCompletionAccumulator
		var out streamedCall
		for st.Next() {
			ch := st.Current()
			acc.AddChunk(ch)
			for _, c := range ch.Choices {
				out.pieces = append(out.pieces, c.Delta.Content)
				for _, tc := range c.Delta.ToolCalls {
					out.pieces = append(out.pieces, tc.Function.Arguments)
				}
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		msg := acc.Choices[0].Message
		out.content = msg.Content
		for _, tc := range msg.ToolCalls {
			out.calls = append(out.calls, wire.FunctionCall{Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		return out
	}},
	{"anthropic-sdk-go messages", func(t *testing.T, base string) streamedCall {
		client := asdk.NewClient(aoption.WithBaseURL(base), aoption.WithAPIKey("x"), aoption.WithMaxRetries(0))
		var tools []map[string]any
		for _, d := range []wire.Tool{weatherDef, timeDef} {
			tools = append(tools, map[string]any{"name": d.Function.Name, "input_schema": d.Function.Parameters})
		}
		p := asdk.MessageNewParams{Model: "tiny", MaxTokens: 300, Messages: []asdk.MessageParam{asdk.NewUserMessage(asdk.NewTextBlock("What is the weather in Paris?"))}}
		st := client.Messages.NewStreaming(context.Background(), p, aoption.WithJSONSet("tools", tools), aoption.WithJSONSet("temperature", 0))
		var msg asdk.Message
		var out streamedCall
		for st.Next() {
			ev := st.Current()
			if err := msg.Accumulate(ev); err != nil {
				t.Fatal(err)
			}
			out.pieces = append(out.pieces, ev.Delta.Text, ev.Delta.PartialJSON)
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		for _, c := range msg.Content {
			switch c.Type {
			case "text":
				out.content += c.Text
			case "tool_use":
				out.calls = append(out.calls, wire.FunctionCall{Name: c.Name, Arguments: string(c.Input)})
			}
		}
		return out
	}},
	{"openai-go responses", func(t *testing.T, base string) streamedCall {
		client := openai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey("x"), option.WithMaxRetries(0))
		var tools []map[string]any
		for _, d := range []wire.Tool{weatherDef, timeDef} {
			tools = append(tools, map[string]any{"type": "function", "name": d.Function.Name, "parameters": d.Function.Parameters, "strict": false})
		}
		p := responses.ResponseNewParams{Model: "tiny", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("What is the weather in Paris?")},
			MaxOutputTokens: openai.Int(300), Temperature: openai.Float(0)}
		st := client.Responses.NewStreaming(context.Background(), p, option.WithJSONSet("tools", tools))
		acc := &responses.ResponseAccumulator{}
		var out streamedCall
		for st.Next() {
			ev := st.Current()
			var server responses.ResponsesServerEventUnion
			if err := json.Unmarshal([]byte(ev.RawJSON()), &server); err != nil {
				t.Fatal(err)
			}
			if err := acc.AddEvent(server); err != nil {
				t.Fatal(err)
			}
			out.pieces = append(out.pieces, ev.Delta)
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		resp, err := acc.ReconstructedResponse()
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range resp.Output {
			switch item.Type {
			case "message":
				for _, c := range item.Content {
					out.content += c.Text
				}
			case "function_call":
				out.calls = append(out.calls, wire.FunctionCall{Name: item.Name, Arguments: item.Arguments.OfString})
			}
		}
		return out
	}},
	{"ollama chat", func(t *testing.T, base string) streamedCall {
		u, err := http.NewRequest(http.MethodGet, base, nil)
		if err != nil {
			t.Fatal(err)
		}
		client := ollama.NewClient(u.URL, http.DefaultClient)
		var tools ollama.Tools
		b, _ := json.Marshal([]wire.Tool{weatherDef, timeDef})
		if err := json.Unmarshal(b, &tools); err != nil {
			t.Fatal(err)
		}
		var out streamedCall
		if b, err = json.Marshal(tools); err != nil || json.Unmarshal(b, &out.offered) != nil {
			t.Fatalf("tools %s: %v", b, err)
		}
		req := &ollama.ChatRequest{Model: "tiny", Messages: []ollama.Message{{Role: "user", Content: "What is the weather in Paris?"}}, Tools: tools,
			Options: map[string]any{"temperature": 0, "num_predict": 300}}
		err = client.Chat(context.Background(), req, func(r ollama.ChatResponse) error {
			out.content += r.Message.Content
			out.pieces = append(out.pieces, r.Message.Content)
			for _, tc := range r.Message.ToolCalls {
				args, _ := json.Marshal(tc.Function.Arguments)
				out.calls = append(out.calls, wire.FunctionCall{Name: tc.Function.Name, Arguments: string(args)})
				out.pieces = append(out.pieces, string(args))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}},
}

// A streamed answer whose call fails (markup that is not a call, a
// function not offered, arguments that break the schema) is repaired as
// a whole one is, in every dialect's stream: the client, through its
// official SDK, gets the text before the call and one valid call, and is
// never sent a piece of the failed markup.
func TestToolRepairStreamed(t *testing.T) {
	failures := []struct{ name, first string }{
		{"arguments break the schema", "Sure. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 2}}\n</tool_call> And more."},
		{"markup that is not a call", `Sure. <tool_call>{"name": get_weather}</tool_call> And more.`},
		{"a function not among the tools", `Sure. <tool_call>{"name": "get_news", "arguments": {}}</tool_call>`},
	}
	for _, client := range streamClients {
		for _, f := range failures {
			t.Run(client.name+"/"+f.name, func(t *testing.T) {
				_, se, ts := repairServer(t, serving.Options{}, func(n int) string {
					if n == 0 {
						return gbnfLiteral(f.first)
					}
					return ""
				})
				got := client.run(t, ts.URL)
				offered := got.offered
				if offered == nil {
					offered = []wire.Tool{weatherDef, timeDef}
				}
				if len(got.calls) != 1 || !serving.ValidCall(offered, got.calls[0].Name, got.calls[0].Arguments) {
					t.Errorf("calls %+v, want one valid call", got.calls)
				}
				if strings.TrimSpace(got.content) != "Sure." {
					t.Errorf("content %q, want the text before the call alone", got.content)
				}
				for _, p := range got.pieces {
					if strings.Contains(p, "tool_call") || strings.Contains(p, "Oslo") || strings.Contains(p, "get_news") || strings.Contains(p, "And more") {
						t.Errorf("the client was sent a piece of the failed call: %q", p)
					}
				}
				if n := len(se.requests()); n != 2 {
					t.Errorf("%d requests, want the answer and one repair", n)
				}
				if got := repairCount(t, ts, "repaired"); got != 1 {
					t.Errorf("repaired count %d, want 1", got)
				}
			})
		}
	}
}

// A streamed sound call goes out whole, as the model wrote it, with no
// repair; text around it streams as it comes.
func TestToolCallStreamedWhole(t *testing.T) {
	for _, client := range streamClients {
		t.Run(client.name, func(t *testing.T) {
			_, se, ts := repairServer(t, serving.Options{}, func(n int) string {
				return gbnfLiteral(`Sure. <tool_call>{"name": "get_time", "arguments": {"zone": "UTC"}}</tool_call>`)
			})
			got := client.run(t, ts.URL)
			if len(got.calls) != 1 || got.calls[0].Name != "get_time" || !strings.Contains(got.calls[0].Arguments, "UTC") {
				t.Errorf("calls %+v, want get_time(UTC)", got.calls)
			}
			if strings.TrimSpace(got.content) != "Sure." {
				t.Errorf("content %q", got.content)
			}
			if n := len(se.requests()); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
			if got := repairCount(t, ts, "repaired") + repairCount(t, ts, "failed"); got != 0 {
				t.Errorf("%d repairs, want none", got)
			}
		})
	}
}

// BenchmarkStreamTools streams a plain answer of 64 tokens from
// TinyStories656K (greedy, ignore_eos) with and without tools offered,
// and with tools and repair off: holding calls back must not slow a
// plain answer. It reports the time to the first content byte (ttfb-ms)
// and between content events (itl-ms), medians over b.N streams.
func BenchmarkStreamTools(b *testing.B) {
	for _, bc := range []struct {
		name   string
		tools  bool
		repair int
	}{{"no-tools", false, 0}, {"tools", true, 0}, {"tools-repair-off", true, -1}} {
		b.Run(bc.name, func(b *testing.B) {
			a, _ := realAPI(b, engine.Config{Parallel: 1}, serving.Options{ToolRepair: bc.repair})
			ts := keyServer(b, a, nil)
			body := map[string]any{"messages": []map[string]string{{"role": "user", "content": "Once upon a time"}},
				"stream": true, "max_tokens": 64, "temperature": 0, "ignore_eos": true}
			if bc.tools {
				body["tools"] = []wire.Tool{weatherDef, timeDef}
			}
			raw, _ := json.Marshal(body)
			var ttfb, itl []float64
			for b.Loop() {
				start := time.Now()
				resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", bytes.NewReader(raw))
				if err != nil {
					b.Fatal(err)
				}
				sc := bufio.NewScanner(resp.Body)
				var last time.Time
				for sc.Scan() {
					if !strings.Contains(sc.Text(), `"content":"`) || strings.Contains(sc.Text(), `"content":""`) {
						continue
					}
					now := time.Now()
					if last.IsZero() {
						ttfb = append(ttfb, float64(now.Sub(start))/1e6)
					} else {
						itl = append(itl, float64(now.Sub(last))/1e6)
					}
					last = now
				}
				resp.Body.Close()
			}
			b.ReportMetric(median(ttfb), "ttfb-ms")
			b.ReportMetric(median(itl), "itl-ms")
		})
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// TestHeldStreamKeepsAlive: a stream that holds back a failed call pings
// its client whenever the keep-alive interval passes without a write,
// both while the held call's tokens come and while its repair runs; and
// the repaired call still comes whole. The keep-alive clock is the test's:
// it stands still but for the phase under test, where every reading is
// an hour after the last.
func TestHeldStreamKeepsAlive(t *testing.T) {
	const first = "Sure. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 2}}\n</tool_call> And more."
	for _, phase := range []string{"held", "repair"} {
		t.Run(phase, func(t *testing.T) {
			var hours atomic.Int64
			var ticking atomic.Bool
			base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			t.Cleanup(serving.SetClock(func() time.Time {
				if ticking.Load() {
					return base.Add(time.Duration(hours.Add(1)) * time.Hour)
				}
				return base.Add(time.Duration(hours.Load()) * time.Hour)
			}))
			ticking.Store(phase == "held")
			_, se, ts := repairServer(t, serving.Options{}, func(n int) string {
				if n == 1 { // the repair: the phase under test changes
					ticking.Store(phase == "repair")
				}
				if n == 0 {
					return gbnfLiteral(first)
				}
				return ""
			})
			status, b := keyed(t, ts, "", "/v1/chat/completions", repairBody(true))
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, b)
			}
			if n := len(se.requests()); n != 2 {
				t.Fatalf("%d requests, want the answer and one repair", n)
			}
			if n := strings.Count(string(b), ": ping\n"); n == 0 {
				t.Errorf("no ping while the %s phase ran with nothing else written:\n%s", phase, b)
			}
			if !bytes.Contains(b, []byte(`"name":"get_weather"`)) || bytes.Contains(b, []byte("Oslo")) {
				t.Errorf("the stream did not end with the repaired call alone:\n%s", b)
			}
		})
	}
}
