package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/registry"
	"github.com/corral-llm/corral/server"
)

// The official Go SDK, github.com/openai/openai-go/v3, against corral's
// OpenAI API over real HTTP on loopback, with a real engine and model.

// sdkClient is an SDK client for ts: no retries (a 503 must reach the
// test), and ts's HTTP client, whose idle connections the test's cleanup
// closes.
func sdkClient(ts *e2etest.Server) openai.Client {
	return openai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey("x"),
		option.WithMaxRetries(0), option.WithHTTPClient(ts.Client))
}

// ignoreEOS is corral's extension field, which the SDK's params lack.
var ignoreEOS = option.WithJSONSet("ignore_eos", true)

const sdkPrompt = "Tell me a story."

// sdkChat is a greedy chat request for n tokens.
func sdkChat(n int64) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:       "tiny",
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage(sdkPrompt)},
		MaxTokens:   openai.Int(n),
		Temperature: openai.Float(0),
		Seed:        openai.Int(42),
	}
}

// apiError returns err as the SDK's *openai.Error, failing t otherwise.
func apiError(t *testing.T, err error) *openai.Error {
	t.Helper()
	var e *openai.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want *openai.Error", err, err)
	}
	return e
}

// TestSDKChat checks a greedy chat completion, whole and streamed with
// usage, against what a plain HTTP request gets. Each greedy answer comes
// from a fresh server: on one server, the second request would find the
// prompt cached and compute the same answer in another order, where the
// tiny model's near-ties may flip a token.
func TestSDKChat(t *testing.T) {
	const n = 24
	raw := startServer(t, engine.Config{Parallel: 1})
	resp, b := raw.Post(t, "/v1/chat/completions", map[string]any{
		"model": "tiny", "messages": []map[string]string{{"role": "user", "content": sdkPrompt}},
		"max_tokens": n, "temperature": 0, "seed": 42, "ignore_eos": true,
	})
	if resp.StatusCode != 200 {
		t.Fatalf("raw POST: %d %s", resp.StatusCode, b)
	}
	var want chatCompletion
	unmarshal(t, string(b), &want)
	if len(want.Choices) != 1 || want.Choices[0].Message.Content == "" {
		t.Fatalf("raw POST: %s", b)
	}
	wantText := want.Choices[0].Message.Content

	t.Run("whole", func(t *testing.T) {
		ts := startServer(t, engine.Config{Parallel: 1})
		client := sdkClient(ts)
		c, err := client.Chat.Completions.New(context.Background(), sdkChat(n), ignoreEOS)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Choices) != 1 {
			t.Fatalf("%d choices in %s", len(c.Choices), c.RawJSON())
		}
		ch := c.Choices[0]
		if ch.Message.Content == "" || ch.Message.Content != wantText {
			t.Errorf("content %q\nwant %q (the raw POST's)", ch.Message.Content, wantText)
		}
		if ch.FinishReason != "length" || ch.Message.Role != "assistant" {
			t.Errorf("finish_reason %q, role %q; want length, assistant", ch.FinishReason, ch.Message.Role)
		}
		if u := c.Usage; u.CompletionTokens != n || u.PromptTokens <= 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
			t.Errorf("usage %+v, want %d completion tokens", u, n)
		}
		if c.Object != "chat.completion" || c.Model != "tiny" || c.ID == "" {
			t.Errorf("object %q, model %q, id %q", c.Object, c.Model, c.ID)
		}
	})

	t.Run("stream", func(t *testing.T) {
		ts := startServer(t, engine.Config{Parallel: 1})
		client := sdkClient(ts)
		p := sdkChat(n)
		p.StreamOptions.IncludeUsage = openai.Bool(true)
		stream := client.Chat.Completions.NewStreaming(context.Background(), p, ignoreEOS)
		defer stream.Close()
		var acc openai.ChatCompletionAccumulator
		var last openai.ChatCompletionChunk
		chunks := 0
		for stream.Next() {
			last = stream.Current()
			if !acc.AddChunk(last) {
				t.Fatalf("chunk %d not accumulated: %s", chunks, last.RawJSON())
			}
			chunks++
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if chunks < 2 || len(acc.Choices) != 1 {
			t.Fatalf("%d chunks, %d choices", chunks, len(acc.Choices))
		}
		if got := acc.Choices[0].Message.Content; got != wantText {
			t.Errorf("streamed content %q\nwant %q (the raw POST's)", got, wantText)
		}
		if fr := acc.Choices[0].FinishReason; fr != "length" {
			t.Errorf("finish_reason %q, want length", fr)
		}
		// The usage chunk is the last, with no choices.
		if len(last.Choices) != 0 || !last.JSON.Usage.Valid() || last.Usage.CompletionTokens != n || last.Usage.PromptTokens <= 0 {
			t.Errorf("last chunk %s, want usage with %d completion tokens", last.RawJSON(), n)
		}
		if acc.Usage.CompletionTokens != n {
			t.Errorf("accumulated usage %+v", acc.Usage)
		}
	})
}

// TestSDKAbort cancels a stream's context after its first chunk: the slot
// frees, and the request generated far fewer tokens than it asked for.
func TestSDKAbort(t *testing.T) {
	const n = 8000
	ts := startServer(t, engine.Config{CtxSize: 8192, Parallel: 1})
	client := sdkClient(ts)
	generated := func() float64 { return ts.Metrics(t)["corral_tokens_generated_total"] }
	before := generated()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := sdkChat(n)
	stream := client.Chat.Completions.NewStreaming(ctx, p, ignoreEOS)
	if !stream.Next() {
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	cancel()
	for stream.Next() { // what was already read, then the cancellation
	}
	if err := stream.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("stream error %v, want context.Canceled", err)
	}
	if err := stream.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	e2etest.WaitFor(t, "the slot to be released", func() bool { return busySlots(t, ts) == 0 })
	if got := generated() - before; got >= n/2 {
		t.Errorf("%v tokens generated of %d asked: the request was not cancelled", got, n)
	}
}

// TestSDKCompletions checks /v1/completions through the SDK against the
// model's greedy golden.
func TestSDKCompletions(t *testing.T) {
	g := golden[0]
	ts := startServer(t, engine.Config{Parallel: 1})
	client := sdkClient(ts)
	c, err := client.Completions.New(context.Background(), openai.CompletionNewParams{
		Model:       "tiny",
		Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String(g.Prompt)},
		MaxTokens:   openai.Int(int64(g.N)),
		Temperature: openai.Float(0),
	}, ignoreEOS)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Choices) != 1 {
		t.Fatalf("%d choices in %s", len(c.Choices), c.RawJSON())
	}
	if got := c.Choices[0].Text; got != g.Want {
		t.Errorf("text %q\nwant %q", got, g.Want)
	}
	if fr := c.Choices[0].FinishReason; fr != openai.CompletionChoiceFinishReasonLength {
		t.Errorf("finish_reason %q, want length", fr)
	}
	if u := c.Usage; u.CompletionTokens != int64(g.N) || u.PromptTokens <= 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("usage %+v, want %d completion tokens", u, g.N)
	}
	if c.Object != "text_completion" || c.Model != "tiny" {
		t.Errorf("object %q, model %q", c.Object, c.Model)
	}
}

// TestSDKErrors checks that corral's errors reach the SDK as *openai.Error
// with OpenAI's status, code and param.
func TestSDKErrors(t *testing.T) {
	t.Run("400", func(t *testing.T) {
		ts := startServer(t, engine.Config{Parallel: 1})
		client := sdkClient(ts)
		p := sdkChat(4)
		p.Temperature = openai.Float(-1)
		_, err := client.Chat.Completions.New(context.Background(), p)
		e := apiError(t, err)
		if e.StatusCode != 400 || e.Type != "invalid_request_error" || e.Param != "temperature" || !strings.Contains(e.Message, "temperature") {
			t.Errorf("temperature -1: status %d, type %q, param %q, message %q", e.StatusCode, e.Type, e.Param, e.Message)
		}

		p = sdkChat(4)
		p.N = openai.Int(2)
		_, err = client.Chat.Completions.New(context.Background(), p)
		e = apiError(t, err)
		if e.StatusCode != 400 || e.Param != "n" || !strings.Contains(e.Message, "'n'") {
			t.Errorf("n 2: status %d, param %q, message %q", e.StatusCode, e.Param, e.Message)
		}

		_, err = client.Completions.New(context.Background(), openai.CompletionNewParams{
			Model:  "tiny",
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Hello")},
			Echo:   openai.Bool(true),
		})
		e = apiError(t, err)
		if e.StatusCode != 400 || e.Param != "echo" || !strings.Contains(e.Message, "echo") {
			t.Errorf("echo: status %d, param %q, message %q", e.StatusCode, e.Param, e.Message)
		}
	})

	t.Run("404", func(t *testing.T) {
		ms := startModels(t, registry.Config{StrictNames: true, KeepAlive: -1}, spec(t, "tiny", testmodel.TinyStories656K, 1))
		client := sdkClient(ms.Server)
		p := sdkChat(4)
		p.Model = "no-such-model"
		_, err := client.Chat.Completions.New(context.Background(), p)
		e := apiError(t, err)
		if e.StatusCode != 404 || e.Code != "model_not_found" || e.Param != "model" {
			t.Errorf("unknown model: status %d, code %q, param %q, message %q", e.StatusCode, e.Code, e.Param, e.Message)
		}
		// The SDK's stream reports the error too, before any chunk.
		stream := client.Chat.Completions.NewStreaming(context.Background(), p)
		if stream.Next() {
			t.Errorf("a chunk from an unknown model: %s", stream.Current().RawJSON())
		}
		if e := apiError(t, stream.Err()); e.StatusCode != 404 || e.Code != "model_not_found" {
			t.Errorf("unknown model, streamed: status %d, code %q", e.StatusCode, e.Code)
		}
		stream.Close()
	})

	t.Run("503 queue full", func(t *testing.T) {
		ts := startServer(t, engine.Config{CtxSize: 8192, Parallel: 1, MaxQueue: 1})
		client := sdkClient(ts)
		// A long stream holds the only slot...
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		holder := client.Chat.Completions.NewStreaming(ctx, sdkChat(8000), ignoreEOS)
		defer holder.Close()
		if !holder.Next() {
			t.Fatalf("no first chunk: %v", holder.Err())
		}
		// ...one request fills the queue...
		queued := make(chan error, 1)
		go func() {
			_, err := client.Chat.Completions.New(context.Background(), sdkChat(4))
			queued <- err
		}()
		e2etest.WaitFor(t, "a queued request", func() bool { return ts.Metrics(t)["corral_queue_depth"] == 1 })
		// ...and the next is refused.
		_, err := client.Chat.Completions.New(context.Background(), sdkChat(4))
		e := apiError(t, err)
		if e.StatusCode != 503 || e.Code != "queue_full" || e.Response.Header.Get("Retry-After") == "" {
			t.Errorf("queue full: status %d, code %q, Retry-After %q, message %q", e.StatusCode, e.Code, e.Response.Header.Get("Retry-After"), e.Message)
		}
		cancel()
		if err := <-queued; err != nil {
			t.Errorf("the queued request: %v", err)
		}
	})

	t.Run("503 draining", func(t *testing.T) {
		ts := startWith(t, engine.Config{Parallel: 1}, server.Config{})
		client := sdkClient(ts)
		ts.Drain()
		_, err := client.Completions.New(context.Background(), openai.CompletionNewParams{
			Model:     "tiny",
			Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("Hello")},
			MaxTokens: openai.Int(4),
		})
		e := apiError(t, err)
		if e.StatusCode != 503 || e.Code != "unavailable" {
			t.Errorf("draining: status %d, code %q, message %q", e.StatusCode, e.Code, e.Message)
		}
	})
}

// TestSDKModels lists the models through the SDK.
func TestSDKModels(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 1})
	client := sdkClient(ts)
	page, err := client.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	found := false
	for _, m := range page.Data {
		ids = append(ids, m.ID)
		if m.ID == "tiny" {
			found = true
			if m.Object != "model" {
				t.Errorf("object %q, want model", m.Object)
			}
		}
	}
	if !found {
		t.Errorf("models %q lack tiny", ids)
	}
	// The auto-pager walks the same list and stops.
	iter := client.Models.ListAutoPaging(context.Background())
	n := 0
	for iter.Next() {
		n++
	}
	if err := iter.Err(); err != nil || n != len(page.Data) {
		t.Errorf("auto-paging: %d models, %v; want %d", n, err, len(page.Data))
	}
}

// TestSDKTools forces a call with a named tool_choice, whole and
// streamed through the SDK's accumulator, and sends the tool's result
// back for the next turn.
func TestSDKTools(t *testing.T) {
	ts := startModel(t, testmodel.Stories260K, engine.Config{Parallel: 1})
	client := sdkClient(ts)
	ctx := context.Background()
	p := openai.ChatCompletionNewParams{
		Model:    "tiny",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris?")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name:        "get_weather",
			Description: openai.String("Weather forecast for a city."),
			Parameters: openai.FunctionParameters{
				"type": "object",
				"properties": map[string]any{
					"city": map[string]any{"type": "string", "enum": []string{"Paris", "Tokyo"}},
					"days": map[string]any{"type": "integer", "minimum": 1, "maximum": 7},
				},
				"required": []string{"city", "days"},
			},
		})},
		ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfFunctionToolChoice: &openai.ChatCompletionNamedToolChoiceParam{
			Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"},
		}},
		MaxTokens:   openai.Int(120),
		Temperature: openai.Float(0),
	}
	c, err := client.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	ch := c.Choices[0]
	if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 || ch.Message.Content != "" {
		t.Fatalf("answer %s", c.RawJSON())
	}
	call := ch.Message.ToolCalls[0]
	var args struct {
		City string `json:"city"`
		Days int    `json:"days"`
	}
	if err := json.Unmarshal([]byte(call.Function.Arguments), &args); err != nil || call.Function.Name != "get_weather" || args.City == "" || args.Days < 1 {
		t.Fatalf("call %s: %v", call.RawJSON(), err)
	}
	if fc := call.AsFunction(); len(ch.Message.JSON.ExtraFields) != 0 || len(fc.JSON.ExtraFields) != 0 || len(call.Function.JSON.ExtraFields) != 0 {
		t.Errorf("fields the SDK does not know: %v %v %v", ch.Message.JSON.ExtraFields, fc.JSON.ExtraFields, call.Function.JSON.ExtraFields)
	}

	stream := client.Chat.Completions.NewStreaming(ctx, p)
	var acc openai.ChatCompletionAccumulator
	finished := 0
	for stream.Next() {
		if !acc.AddChunk(stream.Current()) {
			t.Fatalf("chunk not accumulated: %s", stream.Current().RawJSON())
		}
		if tc, ok := acc.JustFinishedToolCall(); ok {
			finished++
			if tc.Name != "get_weather" || tc.Arguments != call.Function.Arguments {
				t.Errorf("streamed call %+v, whole %+v", tc, call.Function)
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	stream.Close()
	got := acc.Choices[0].Message.ToolCalls
	if len(got) != 1 || got[0].Function.Arguments != call.Function.Arguments || acc.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("streamed %+v, finish %q", got, acc.Choices[0].FinishReason)
	}
	if finished != 1 {
		t.Errorf("JustFinishedToolCall fired %d times", finished)
	}

	// The result goes back; tool_choice none answers in text.
	p.Messages = append(p.Messages, ch.Message.ToParam(), openai.ToolMessage(`{"forecast": "sunny"}`, call.ID))
	p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}
	p.MaxTokens = openai.Int(8)
	c, err = client.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Choices[0].Message.ToolCalls) != 0 || c.Choices[0].Message.Content == "" {
		t.Fatalf("second turn %s", c.RawJSON())
	}
}

// TestSDKEmbeddings: client.Embeddings.New, float and base64 (which the
// SDK decodes), gives the same unit vectors, with no field the SDK does
// not know; a model that cannot embed is an *openai.Error 400.
func TestSDKEmbeddings(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 1, Pooling: "mean"})
	client := sdkClient(ts)
	texts := []string{"Once upon a time", "The dog barked at the cat."}
	var got [2][][]float64
	for i, format := range []openai.EmbeddingNewParamsEncodingFormat{openai.EmbeddingNewParamsEncodingFormatFloat, openai.EmbeddingNewParamsEncodingFormatBase64} {
		res, err := client.Embeddings.New(context.Background(), openai.EmbeddingNewParams{
			Model: "tiny", Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts},
			EncodingFormat: format, Dimensions: openai.Int(int64(ts.Info.EmbeddingSize)), User: openai.String("u1"),
		})
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if len(res.JSON.ExtraFields) != 0 || len(res.Usage.JSON.ExtraFields) != 0 {
			t.Errorf("%s: unknown fields %v %v", format, res.JSON.ExtraFields, res.Usage.JSON.ExtraFields)
		}
		if res.Object != "list" || res.Model != "tiny" || len(res.Data) != len(texts) || res.Usage.PromptTokens == 0 || res.Usage.TotalTokens != res.Usage.PromptTokens {
			t.Fatalf("%s: response %s", format, res.RawJSON())
		}
		for j, d := range res.Data {
			if len(d.JSON.ExtraFields) != 0 || d.Index != int64(j) || d.Object != "embedding" || len(d.Embedding) != ts.Info.EmbeddingSize {
				t.Fatalf("%s: data[%d]: %s", format, j, d.RawJSON())
			}
			n := 0.0
			for _, x := range d.Embedding {
				n += x * x
			}
			if math.Abs(n-1) > 1e-5 {
				t.Errorf("%s: data[%d] has squared norm %v", format, j, n)
			}
			got[i] = append(got[i], d.Embedding)
		}
	}
	for j := range texts {
		for k := range got[0][j] {
			if math.Abs(got[0][j][k]-got[1][j][k]) > 1e-4 {
				t.Fatalf("data[%d][%d]: float %v, base64 %v", j, k, got[0][j][k], got[1][j][k])
			}
		}
	}

	none := startServer(t, engine.Config{Parallel: 1})
	noneClient := sdkClient(none)
	_, err := noneClient.Embeddings.New(context.Background(), openai.EmbeddingNewParams{
		Model: "tiny", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hi")},
	})
	if e := apiError(t, err); e.StatusCode != 400 || e.Code != "model_not_embedding" {
		t.Errorf("pooling none: %d %s %s", e.StatusCode, e.Code, e.Message)
	}
}

// TestSDKLogprobs: the SDK decodes chat and completions logprobs, whole
// and streamed, into its types with no field it does not know.
func TestSDKLogprobs(t *testing.T) {
	const n, top = 12, 3
	t.Run("chat", func(t *testing.T) {
		ts := startServer(t, engine.Config{Parallel: 1})
		client := sdkClient(ts)
		p := sdkChat(n)
		p.Logprobs, p.TopLogprobs = openai.Bool(true), openai.Int(top)
		c, err := client.Chat.Completions.New(context.Background(), p, ignoreEOS)
		if err != nil {
			t.Fatal(err)
		}
		lp := c.Choices[0].Logprobs
		if !c.Choices[0].JSON.Logprobs.Valid() || len(lp.Content) != n || len(lp.JSON.ExtraFields) != 0 || lp.JSON.Refusal.Raw() != "null" {
			t.Fatalf("logprobs %s", lp.RawJSON())
		}
		var text strings.Builder
		for i, e := range lp.Content {
			text.WriteString(e.Token)
			if len(e.JSON.ExtraFields) != 0 || len(e.TopLogprobs) != top || len(e.Bytes) != len(e.Token) {
				t.Fatalf("entry %d: %s", i, e.RawJSON())
			}
			for _, a := range e.TopLogprobs {
				if len(a.JSON.ExtraFields) != 0 || !a.JSON.Bytes.Valid() {
					t.Fatalf("entry %d: alternative %s", i, a.RawJSON())
				}
			}
			if e.TopLogprobs[0].Token != e.Token || e.TopLogprobs[0].Logprob != e.Logprob {
				t.Fatalf("entry %d: greedy token not the most likely: %s", i, e.RawJSON())
			}
		}
		if text.String() != c.Choices[0].Message.Content {
			t.Fatalf("tokens join to %q, content %q", text.String(), c.Choices[0].Message.Content)
		}

		ts = startServer(t, engine.Config{Parallel: 1})
		client = sdkClient(ts)
		stream := client.Chat.Completions.NewStreaming(context.Background(), p, ignoreEOS)
		defer stream.Close()
		var streamed []openai.ChatCompletionTokenLogprob
		for stream.Next() {
			for _, ch := range stream.Current().Choices {
				if len(ch.Logprobs.JSON.ExtraFields) != 0 {
					t.Fatalf("chunk logprobs %s", ch.Logprobs.RawJSON())
				}
				streamed = append(streamed, ch.Logprobs.Content...)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(streamed) != n {
			t.Fatalf("%d streamed entries, want %d", len(streamed), n)
		}
		for i, e := range streamed {
			if e.RawJSON() != lp.Content[i].RawJSON() {
				t.Fatalf("streamed entry %d: %s, want %s", i, e.RawJSON(), lp.Content[i].RawJSON())
			}
		}
	})
	t.Run("completions", func(t *testing.T) {
		g := golden[0]
		ts := startServer(t, engine.Config{Parallel: 1})
		client := sdkClient(ts)
		c, err := client.Completions.New(context.Background(), openai.CompletionNewParams{
			Model:       "tiny",
			Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String(g.Prompt)},
			MaxTokens:   openai.Int(int64(g.N)),
			Temperature: openai.Float(0),
			Logprobs:    openai.Int(2),
		}, ignoreEOS)
		if err != nil {
			t.Fatal(err)
		}
		lp := c.Choices[0].Logprobs
		if len(lp.JSON.ExtraFields) != 0 || len(lp.Tokens) != g.N || len(lp.TokenLogprobs) != g.N || len(lp.TopLogprobs) != g.N || len(lp.TextOffset) != g.N {
			t.Fatalf("logprobs %s", lp.RawJSON())
		}
		if strings.Join(lp.Tokens, "") != g.Want || c.Choices[0].Text != g.Want {
			t.Fatalf("tokens %q, text %q; want %q", lp.Tokens, c.Choices[0].Text, g.Want)
		}
		for i, tok := range lp.Tokens {
			if m := lp.TopLogprobs[i]; len(m) != 2 || float32(m[tok]) != float32(lp.TokenLogprobs[i]) {
				t.Fatalf("token %d %q (%g): top %v", i, tok, lp.TokenLogprobs[i], m)
			}
		}
	})
}
