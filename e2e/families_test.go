package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	servedmodel "github.com/corral-llm/corral/model"

	ollama "github.com/ollama/ollama/api"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/internal/testsynth"
	"github.com/corral-llm/corral/reasoning"
	"github.com/corral-llm/corral/toolcall"
	"github.com/corral-llm/corral/wire"
)

// Every model family end to end, through the official clients: for each
// tool-call format (but the JSON fallback) and each reasoning format that
// a real chat template of ../shared/templates implies, a tiny synthetic
// model with random weights carries that template, and its markup as
// control tokens, behind the real server. A named tool_choice forces a
// call, which openai-go reads whole and streamed (its accumulator); a
// prompt that opens the reasoning, closed by a thinking budget, and a
// response_format that forces what follows, gives the reasoning apart
// from the content, through openai-go and Ollama's client. Ollama's
// client forces the call too, with corral's tool_choice on /api/chat
// (added to its requests' JSON: its types lack the field).

// untemplated are the tool-call formats no real template implies:
// pythonic, which --tool-format sets (Llama 3.2's and 3.3's templates
// are llama3's, which reads it too).
var untemplated = []string{toolcall.JSON.Name(), "pythonic"}

// familyModel is a real template that represents formats in the test.
type familyModel struct {
	file   string // the template's file name
	src    string
	tools  toolcall.Format  // nil: not the tool-call format's representative
	think  reasoning.Format // nil: not the reasoning format's representative
	kwargs map[string]any   // chat_template_kwargs that open the reasoning
}

// templateOptions are the model options of the templates that need
// more than the defaults: Kimi K2-Instruct's appends to a list as it
// renders calls, which --chat-template-mutable allows. (Command R+'s
// tool_use template, which renders only with tools offered, and
// FireFunction v2's, which reads the tools as functions, load as they
// are.)
var templateOptions = map[string]func(src string) (servedmodel.Options, error){
	"Kimi-K2-Instruct.jinja": func(string) (servedmodel.Options, error) {
		return servedmodel.Options{ChatTemplateMutable: true}, nil
	},
}

// thinkKwargs are the template variables tried, in order, to make a
// template's generation prompt open the reasoning.
var thinkKwargs = []map[string]any{nil, {"enable_thinking": true}, {"thinking": true}, {"reasoning_effort": "high"}}

// familyModels picks, in the templates' name order, the first template of
// each tool-call format but JSON, and the first whose prompt can open the
// reasoning of each reasoning format.
func familyModels(t *testing.T) (models []*familyModel, unopened []string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(testmodel.TemplatesDir(), "*.jinja"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no templates in %s: %v", testmodel.TemplatesDir(), err)
	}
	toolsDone, thinkDone, thinkSeen := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m := &familyModel{file: filepath.Base(f), src: string(b)}
		if tf := toolcall.Detect(m.src); tf != toolcall.JSON && !toolsDone[tf.Name()] {
			toolsDone[tf.Name()], m.tools = true, tf
		}
		if rf := reasoning.Detect(m.src); rf != nil && !thinkDone[rf.Name()] {
			thinkSeen[rf.Name()] = true
			if kw, ok := opensReasoning(t, m.src, rf); ok {
				thinkDone[rf.Name()], m.think, m.kwargs = true, rf, kw
			}
		}
		if m.tools != nil || m.think != nil {
			models = append(models, m)
		}
	}
	for name := range thinkSeen {
		if !thinkDone[name] {
			unopened = append(unopened, name)
		}
	}
	slices.Sort(unopened)
	return models, unopened
}

// opensReasoning returns the first of thinkKwargs under which src's
// generation prompt opens f's reasoning.
func opensReasoning(t *testing.T, src string, f reasoning.Format) (map[string]any, bool) {
	tpl, err := chat.Parse(src)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	for _, kw := range thinkKwargs {
		p, err := tpl.Render([]chat.Message{{Role: "user", Content: json.RawMessage(`"Hi"`)}},
			chat.Options{AddGenerationPrompt: true, Kwargs: kw, BOSToken: "<s>", EOSToken: "</s>"})
		if err == nil && reasoning.Opened(f, p) {
			return kw, true
		}
	}
	return nil, false
}

// synth writes a synthetic model that carries m's template, and gives
// the model options it is served with (templateOptions).
func (m *familyModel) synth(t *testing.T) (string, servedmodel.Options) {
	t.Helper()
	path := testsynth.Template(t, m.src, m.specialMarkers())
	var opt servedmodel.Options
	if o := templateOptions[m.file]; o != nil {
		var err error
		if opt, err = o(m.src); err != nil {
			t.Fatal(err)
		}
	}
	return path, opt
}

// specialMarkers are the markers of m's formats shaped like one token,
// <…> or […]: real models write those as special tokens. The others
// ("Action:", "functools[", "<function=" and the like) are text.
func (m *familyModel) specialMarkers() []string {
	var all, out []string
	if f := toolcall.Detect(m.src); f != nil {
		all = append(all, f.Markers()...)
	}
	if f := reasoning.Detect(m.src); f != nil {
		all = append(all, f.Markers()...)
	}
	for _, mk := range all {
		token := strings.HasPrefix(mk, "<") && strings.HasSuffix(mk, ">") || strings.HasPrefix(mk, "[") && strings.HasSuffix(mk, "]")
		if token && !strings.Contains(mk, " ") && !slices.Contains(out, mk) {
			out = append(out, mk)
		}
	}
	return out
}

// markup is every marker of m's formats, which no content or reasoning
// may hold.
func (m *familyModel) markup() []string {
	var out []string
	if f := toolcall.Detect(m.src); f != nil {
		out = append(out, f.Markers()...)
	}
	if f := reasoning.Detect(m.src); f != nil {
		out = append(out, f.Markers()...)
		out = append(out, f.Start(), f.End())
	}
	return out
}

// checkNoMarkers fails t when text holds one of m's markers.
func (m *familyModel) checkNoMarkers(t *testing.T, what, text string) {
	t.Helper()
	for _, mk := range m.markup() {
		if mk != "" && strings.Contains(text, mk) {
			t.Errorf("%s %q holds the marker %q", what, text, mk)
		}
	}
}

func TestFamiliesEndToEnd(t *testing.T) {
	models, unopened := familyModels(t)
	var tools, think []string
	for _, m := range models {
		if m.tools != nil {
			tools = append(tools, m.tools.Name()+" ("+m.file+")")
		}
		if m.think != nil {
			think = append(think, m.think.Name()+" ("+m.file+")")
		}
	}
	for _, name := range toolcall.Names() {
		if !slices.ContainsFunc(models, func(m *familyModel) bool { return m.tools != nil && m.tools.Name() == name }) && !slices.Contains(untemplated, name) {
			t.Errorf("no real template implies the tool-call format %s", name)
		}
	}
	t.Logf("tool-call formats: %s", strings.Join(tools, ", "))
	t.Logf("reasoning formats: %s; not opened by any template's prompt: %s", strings.Join(think, ", "), strings.Join(unopened, ", "))
	for _, m := range models {
		t.Run(strings.TrimSuffix(m.file, ".jinja"), func(t *testing.T) {
			t.Parallel()
			path, opt := m.synth(t)
			ts := e2etest.Start(t, path, e2etest.Options{Engine: engine.Config{Parallel: 1, CtxSize: 16384}, Model: opt})
			if m.tools != nil {
				t.Run("tools "+m.tools.Name(), func(t *testing.T) { familyCalls(t, ts, m) })
				t.Run("ollama tools "+m.tools.Name(), func(t *testing.T) { familyOllamaCalls(t, ts, m) })
			}
			if m.think != nil {
				t.Run("reasoning "+m.think.Name(), func(t *testing.T) { familyReasoning(t, ts, m) })
			}
		})
	}
}

// familyParams is a chat request with get_weather and get_time, whose
// tool_choice names get_weather. The tools and their parameters have
// descriptions, which some templates print (with "+", which fails on an
// undefined value in Jinja as in corral).
func familyParams() oai.ChatCompletionNewParams {
	return oai.ChatCompletionNewParams{
		Model:    "tiny",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("What is the weather in Paris?")},
		Tools: []oai.ChatCompletionToolUnionParam{
			oai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
				Name:        "get_weather",
				Description: oai.String("Weather forecast for a city."),
				Parameters: oai.FunctionParameters{
					"type": "object",
					"properties": map[string]any{
						"city": map[string]any{"type": "string", "enum": []string{"Paris", "Tokyo", "Lima"}, "description": "The city."},
						"days": map[string]any{"type": "integer", "minimum": 1, "maximum": 7, "description": "Days ahead."},
					},
					"required": []string{"city", "days"},
				},
			}),
			oai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
				Name:        "get_time",
				Description: oai.String("The time in a zone."),
				Parameters: oai.FunctionParameters{
					"type":       "object",
					"properties": map[string]any{"zone": map[string]any{"type": "string", "enum": []string{"UTC", "CET"}, "description": "The zone."}},
					"required":   []string{"zone"},
				},
			}),
		},
		ToolChoice: oai.ChatCompletionToolChoiceOptionUnionParam{OfFunctionToolChoice: &oai.ChatCompletionNamedToolChoiceParam{
			Function: oai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"},
		}},
		MaxTokens:   oai.Int(300),
		Temperature: oai.Float(0),
	}
}

// checkSDKCall checks a call the SDK read: get_weather, arguments
// following its schema (checkCall).
func checkSDKCall(t *testing.T, c oai.ChatCompletionMessageToolCallUnion) {
	t.Helper()
	if c.Function.Name != "get_weather" {
		t.Errorf("call of %q, want get_weather", c.Function.Name)
	}
	checkCall(t, wire.ToolCall{ID: c.ID, Type: c.Type, Function: wire.FunctionCall{Name: c.Function.Name, Arguments: c.Function.Arguments}})
}

// familyBudget closes a reasoning the prompt opened (the forced call's
// grammar lets it go on, and random weights would not close it).
var familyBudget = option.WithJSONSet("thinking_budget", 4)

// familyCalls forces a call of get_weather, whole and streamed.
func familyCalls(t *testing.T, ts *e2etest.Server, m *familyModel) {
	client := sdkClient(ts)
	c, err := client.Chat.Completions.New(t.Context(), familyParams(), familyBudget)
	if err != nil {
		t.Fatalf("%v: %s", err, apiError(t, err).RawJSON())
	}
	ch := c.Choices[0]
	if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 || ch.Message.Content != "" {
		t.Fatalf("whole: %s", c.RawJSON())
	}
	m.checkNoMarkers(t, "whole content", ch.Message.Content)
	call := ch.Message.ToolCalls[0]
	checkSDKCall(t, call)
	// reasoning_content (the reasoning a prompt opened, before the call)
	// is corral's, which the SDK's types lack.
	extra := maps.Clone(ch.Message.JSON.ExtraFields)
	delete(extra, "reasoning_content")
	if fc := call.AsFunction(); len(extra) != 0 || len(fc.JSON.ExtraFields) != 0 || len(call.Function.JSON.ExtraFields) != 0 {
		t.Errorf("fields the SDK does not know: %v %v %v", extra, fc.JSON.ExtraFields, call.Function.JSON.ExtraFields)
	}

	stream := client.Chat.Completions.NewStreaming(t.Context(), familyParams(), familyBudget)
	defer stream.Close()
	var acc oai.ChatCompletionAccumulator
	finished := 0
	for stream.Next() {
		chunk := stream.Current()
		if !acc.AddChunk(chunk) {
			t.Fatalf("chunk not accumulated: %s", chunk.RawJSON())
		}
		for _, c := range chunk.Choices {
			m.checkNoMarkers(t, "streamed content", c.Delta.Content)
		}
		if _, ok := acc.JustFinishedToolCall(); ok {
			finished++
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	got := acc.Choices[0]
	if got.FinishReason != "tool_calls" || len(got.Message.ToolCalls) != 1 || got.Message.Content != "" || finished != 1 {
		t.Fatalf("streamed: finish %q, content %q, calls %+v, JustFinishedToolCall %d times", got.FinishReason, got.Message.Content, got.Message.ToolCalls, finished)
	}
	checkSDKCall(t, got.Message.ToolCalls[0])
}

// withFields is a transport that adds fields to each JSON request body:
// corral's extensions that a client's types lack (Ollama's tool_choice).
type withFields struct {
	base   http.RoundTripper
	fields map[string]any
}

func (w withFields) RoundTrip(r *http.Request) (*http.Response, error) {
	var body map[string]any
	if r.Body == nil || json.NewDecoder(r.Body).Decode(&body) != nil {
		return nil, fmt.Errorf("%s %s: no JSON body to add fields to", r.Method, r.URL)
	}
	maps.Copy(body, w.fields)
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	return w.base.RoundTrip(r)
}

// familyOllamaCalls forces a call of get_weather through Ollama's Go
// client, streamed and whole, with corral's tool_choice (which the
// client's types lack, added to its requests' JSON). Ollama's types keep
// a parameter's enum but not its minimum or maximum: the city is checked.
func familyOllamaCalls(t *testing.T, ts *e2etest.Server, m *familyModel) {
	u, err := url.Parse(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	choice := map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}
	client := ollama.NewClient(u, &http.Client{Transport: withFields{ts.Client.Transport, map[string]any{"tool_choice": choice}}})
	var tools ollama.Tools
	b, _ := json.Marshal(familyParams().Tools)
	if err := json.Unmarshal(b, &tools); err != nil {
		t.Fatal(err)
	}
	for _, stream := range []bool{true, false} {
		req := &ollama.ChatRequest{Model: "tiny", Messages: []ollama.Message{{Role: "user", Content: "What is the weather in Paris?"}}, Tools: tools,
			Stream: &stream, Options: map[string]any{"temperature": 0, "num_predict": 300, "thinking_budget": 4}}
		var calls []ollama.ToolCall
		var done string
		err := client.Chat(t.Context(), req, func(r ollama.ChatResponse) error {
			m.checkNoMarkers(t, "content", r.Message.Content)
			calls = append(calls, r.Message.ToolCalls...)
			if r.Done {
				done = r.DoneReason
			}
			return nil
		})
		if err != nil {
			t.Fatalf("stream %v: %v", stream, err)
		}
		if len(calls) != 1 || calls[0].Function.Name != "get_weather" || done != "stop" {
			t.Fatalf("stream %v: calls %+v, done %q; want one call of get_weather", stream, calls, done)
		}
		if city, _ := calls[0].Function.Arguments.ToMap()["city"].(string); !slices.Contains([]string{"Paris", "Tokyo", "Lima"}, city) {
			t.Errorf("stream %v: arguments %v break the schema", stream, calls[0].Function.Arguments)
		}
	}
}

// citySchema is the answer's schema under response_format: its text is
// decided, so that markup in it can only come from the reasoning's.
var citySchema = map[string]any{
	"type":                 "object",
	"properties":           map[string]any{"city": map[string]any{"type": "string", "enum": []string{"Paris"}}},
	"required":             []string{"city"},
	"additionalProperties": false,
}

// familyReasoning asks for an answer whose prompt opens the reasoning,
// whose budget closes it, and whose response_format (Ollama: format)
// forces what follows: the reasoning comes apart from the content,
// through openai-go (reasoning_content, from the raw JSON) and Ollama's
// client (thinking), whole and streamed.
func familyReasoning(t *testing.T, ts *e2etest.Server, m *familyModel) {
	const maxTokens = 80
	check := func(how, r, c string) {
		t.Helper()
		var answer struct{ City string }
		if err := json.Unmarshal([]byte(c), &answer); err != nil || answer.City != "Paris" {
			t.Errorf("%s: content %q is not the forced answer: %v", how, c, err)
		}
		if r == "" || strings.Contains(r, m.think.Start()) || strings.Contains(r, m.think.End()) {
			t.Errorf("%s: reasoning %q empty or holding its markers %q, %q", how, r, m.think.Start(), m.think.End())
		}
	}
	params := oai.ChatCompletionNewParams{
		Model:       "tiny",
		Messages:    []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Where is the Eiffel tower?")},
		MaxTokens:   oai.Int(maxTokens),
		Temperature: oai.Float(0),
		ResponseFormat: oai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "city", Schema: citySchema},
		}},
	}
	opts := []option.RequestOption{option.WithJSONSet("thinking_budget", 6)}
	if m.kwargs != nil {
		opts = append(opts, option.WithJSONSet("chat_template_kwargs", m.kwargs))
	}
	client := sdkClient(ts)
	c, err := client.Chat.Completions.New(t.Context(), params, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var r string
	if err := json.Unmarshal([]byte(c.Choices[0].Message.JSON.ExtraFields["reasoning_content"].Raw()), &r); err != nil {
		t.Fatalf("reasoning_content in %s: %v", c.RawJSON(), err)
	}
	check("openai-go whole", r, c.Choices[0].Message.Content)

	stream := client.Chat.Completions.NewStreaming(t.Context(), params, opts...)
	defer stream.Close()
	var sr, sc strings.Builder
	for stream.Next() {
		ch := stream.Current()
		if len(ch.Choices) == 0 {
			continue
		}
		if raw := ch.Choices[0].Delta.JSON.ExtraFields["reasoning_content"].Raw(); raw != "" {
			var piece string
			if err := json.Unmarshal([]byte(raw), &piece); err != nil {
				t.Fatalf("chunk %s: %v", ch.RawJSON(), err)
			}
			sr.WriteString(piece)
		}
		sc.WriteString(ch.Choices[0].Delta.Content)
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	check("openai-go streamed", sr.String(), sc.String())

	// Ollama's "think" sets whichever of the template's variables it reads.
	base, err := url.Parse(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	oc := ollama.NewClient(base, ts.Client)
	think := &ollama.ThinkValue{Value: true}
	if m.kwargs["reasoning_effort"] != nil {
		think.Value = "high"
	}
	format, err := json.Marshal(citySchema)
	if err != nil {
		t.Fatal(err)
	}
	for _, streamed := range []bool{false, true} {
		req := &ollama.ChatRequest{Model: "tiny", Messages: []ollama.Message{{Role: "user", Content: "Where is the Eiffel tower?"}},
			Stream: &streamed, Think: think, Format: format,
			Options: map[string]any{"temperature": 0, "num_predict": maxTokens, "thinking_budget": 6}}
		var thinking, content strings.Builder
		if err := oc.Chat(context.Background(), req, func(r ollama.ChatResponse) error {
			thinking.WriteString(r.Message.Thinking)
			content.WriteString(r.Message.Content)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		how := "ollama whole"
		if streamed {
			how = "ollama streamed"
		}
		check(how, thinking.String(), content.String())
	}
}
