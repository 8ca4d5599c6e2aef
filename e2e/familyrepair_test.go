package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	rsdk "github.com/openai/openai-go/v3/responses"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/internal/e2etest"
	servedmodel "github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/reasoning"
	"github.com/corral-llm/corral/toolcall"
	"github.com/corral-llm/corral/wire"
)

// Streamed repair in every tool-call format: a family's model is made to
// write a call that fails in its own markup (a city get_weather does not
// take; a function the request did not offer) while the request's tools
// are offered with tool_choice auto, and streams the answer through
// openai-go's chat completions, anthropic-sdk-go's Messages and
// openai-go's Responses. Each client must read one call that follows the
// offered schema, and no piece of the failed call nor any marker.

// failingTools are calls a family's model is made to write: each breaks
// the request's tools (familyParams), one by its arguments, one by its
// name.
var failingTools = map[string]wire.Tool{
	"arguments break the schema": {Type: "function", Function: wire.FunctionDef{Name: "get_weather", Parameters: json.RawMessage(
		`{"type": "object", "properties": {"city": {"type": "string", "enum": ["Oslo"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city", "days"]}`)}},
	"a function not offered": {Type: "function", Function: wire.FunctionDef{Name: "get_news", Parameters: json.RawMessage(
		`{"type": "object", "properties": {"topic": {"type": "string", "enum": ["Oslo"]}}, "required": ["topic"]}`)}},
}

// failingEngine steers a family's engine: a request without a grammar
// (the client's, tool_choice auto) is generated under the grammar of a
// call of bad, in format f, after closing a reasoning its prompt opened;
// a request with a grammar (the repair's) is left as it is.
type failingEngine struct {
	*engine.Engine
	f     toolcall.Format
	think reasoning.Format
	bad   wire.Tool

	mu      sync.Mutex
	repairs int
}

func (e *failingEngine) Submit(ctx context.Context, req engine.Request) (*engine.Stream, error) {
	if req.Grammar != "" {
		e.mu.Lock()
		e.repairs++
		e.mu.Unlock()
		return e.Engine.Submit(ctx, req)
	}
	g, err := e.f.Grammar([]wire.Tool{e.bad}, false, grammar.DefaultSchemaLimits)
	if err != nil {
		return nil, err
	}
	if e.think != nil && reasoning.Opened(e.think, req.Prompt) {
		g = grammar.WithPrefix(g, "", e.think.Close())
	}
	req.Grammar, req.Reasoning = g, nil
	return e.Engine.Submit(ctx, req)
}

func TestFamiliesRepairStreamed(t *testing.T) {
	models, _ := familyModels(t)
	for _, m := range models {
		if m.tools == nil {
			continue
		}
		t.Run(m.tools.Name(), func(t *testing.T) {
			t.Parallel()
			path, opt := m.synth(t)
			for kind, bad := range failingTools {
				fe := &failingEngine{f: m.tools, think: reasoning.Detect(m.src), bad: bad}
				ts := e2etest.Start(t, path, e2etest.Options{Engine: engine.Config{Parallel: 1, CtxSize: 16384}, Model: opt,
					WrapEngine: func(eng *engine.Engine) servedmodel.Engine { fe.Engine = eng; return fe }})
				for client, stream := range familyStreams {
					t.Run(kind+"/"+client, func(t *testing.T) {
						calls, pieces := stream(t, ts)
						if len(calls) != 1 {
							t.Fatalf("%d calls %+v, want the repaired one", len(calls), calls)
						}
						calls[0].ID, calls[0].Type = "call_x", "function"
						checkCall(t, calls[0])
						for _, p := range pieces {
							m.checkNoMarkers(t, "a piece", p)
							if strings.Contains(p, "Oslo") || strings.Contains(p, "get_news") {
								t.Errorf("the client was sent a piece of the failed call: %q", p)
							}
						}
					})
				}
				if fe.repairs != len(familyStreams) {
					t.Errorf("%s: %d repairs, want one per stream (%d)", kind, fe.repairs, len(familyStreams))
				}
			}
		})
	}
}

// repairMaxTokens bounds an answer and its repairs together: the failed
// call and the repaired one, in markup that a synthetic vocabulary
// spells in many tokens.
const repairMaxTokens = 2000

// familyStreams stream familyParams' request (tool_choice auto) through
// each client and return the calls it read and every piece of text it
// was sent.
var familyStreams = map[string]func(t *testing.T, ts *e2etest.Server) ([]wire.ToolCall, []string){
	"openai-go chat": func(t *testing.T, ts *e2etest.Server) ([]wire.ToolCall, []string) {
		p := familyParams()
		p.ToolChoice, p.MaxTokens = oai.ChatCompletionToolChoiceOptionUnionParam{}, oai.Int(repairMaxTokens)
		client := sdkClient(ts)
		st := client.Chat.Completions.NewStreaming(t.Context(), p)
		defer st.Close()
		var acc oai.ChatCompletionAccumulator
		var pieces []string
		for st.Next() {
			ch := st.Current()
			acc.AddChunk(ch)
			for _, c := range ch.Choices {
				pieces = append(pieces, c.Delta.Content, c.Delta.JSON.ExtraFields["reasoning_content"].Raw())
				for _, tc := range c.Delta.ToolCalls {
					pieces = append(pieces, tc.Function.Name, tc.Function.Arguments)
				}
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		var calls []wire.ToolCall
		for _, c := range acc.Choices[0].Message.ToolCalls {
			calls = append(calls, wire.ToolCall{Function: wire.FunctionCall{Name: c.Function.Name, Arguments: c.Function.Arguments}})
		}
		return calls, pieces
	},
	"anthropic-sdk-go messages": func(t *testing.T, ts *e2etest.Server) ([]wire.ToolCall, []string) {
		var tools []map[string]any
		for _, tu := range familyParams().Tools {
			f := tu.GetFunction()
			tools = append(tools, map[string]any{"name": f.Name, "description": f.Description.Value, "input_schema": f.Parameters})
		}
		p := sdk.MessageNewParams{Model: claudeModel, MaxTokens: repairMaxTokens,
			Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("What is the weather in Paris?"))}}
		client := anthropicClient(ts)
		st := client.Messages.NewStreaming(t.Context(), p, aoption.WithJSONSet("tools", tools), anthropicGreedy)
		defer st.Close()
		var msg sdk.Message
		var pieces []string
		for st.Next() {
			ev := st.Current()
			if err := msg.Accumulate(ev); err != nil {
				t.Fatal(err)
			}
			pieces = append(pieces, ev.Delta.Text, ev.Delta.Thinking, ev.Delta.PartialJSON, ev.ContentBlock.Name)
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		var calls []wire.ToolCall
		for _, c := range msg.Content {
			if c.Type == "tool_use" {
				calls = append(calls, wire.ToolCall{Function: wire.FunctionCall{Name: c.Name, Arguments: string(c.Input)}})
			}
		}
		return calls, pieces
	},
	"openai-go responses": func(t *testing.T, ts *e2etest.Server) ([]wire.ToolCall, []string) {
		var tools []map[string]any
		for _, tu := range familyParams().Tools {
			f := tu.GetFunction()
			tools = append(tools, map[string]any{"type": "function", "name": f.Name, "description": f.Description.Value, "parameters": f.Parameters, "strict": false})
		}
		p := rsdk.ResponseNewParams{Model: "tiny", Input: rsdk.ResponseNewParamsInputUnion{OfString: oai.String("What is the weather in Paris?")},
			MaxOutputTokens: oai.Int(repairMaxTokens), Temperature: oai.Float(0)}
		client := sdkClient(ts)
		st := client.Responses.NewStreaming(t.Context(), p, option.WithJSONSet("tools", tools))
		defer st.Close()
		acc := &rsdk.ResponseAccumulator{}
		var pieces []string
		for st.Next() {
			ev := st.Current()
			var server rsdk.ResponsesServerEventUnion
			if err := json.Unmarshal([]byte(ev.RawJSON()), &server); err != nil {
				t.Fatal(err)
			}
			if err := acc.AddEvent(server); err != nil {
				t.Fatal(err)
			}
			pieces = append(pieces, ev.Delta, ev.Item.Name)
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		resp, err := acc.ReconstructedResponse()
		if err != nil {
			t.Fatal(err)
		}
		var calls []wire.ToolCall
		for _, item := range resp.Output {
			if item.Type == "function_call" {
				calls = append(calls, wire.ToolCall{Function: wire.FunctionCall{Name: item.Name, Arguments: item.Arguments.OfString}})
			}
		}
		return calls, pieces
	},
}
