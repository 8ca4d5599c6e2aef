package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	ollama "github.com/ollama/ollama/api"
	"github.com/openai/openai-go/v3"
	rsdk "github.com/openai/openai-go/v3/responses"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/internal/testsynth"
	servedmodel "github.com/corral-llm/corral/model"
)

// Images and sounds through the other dialects (Anthropic's Messages,
// the Responses API, Ollama's /api/chat and /api/generate, llama-server's
// /completion), each spoken by its own client where there is one, on the
// synthetic multimodal pairs. Where a dialect renders the same prompt as
// the OpenAI chat API, its answer is that API's (TestSDKChatMedia pins
// those to llama-server's); /completion's are llama-server's own.

// imageChatTokens is the prompt of imageChatAnswer: BOS, the template's
// turn, "Describe", the image (its 16 cells and their delimiters), " the
// image.", the turn's end and the model's.
const imageChatTokens = 49

// gemma3ImageCells is what the gemma3 projector makes of an image.
const gemma3ImageCells = 16

// mediaFile is a file of testdata/media.
func mediaFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testsynth.MediaDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// otherPNG is a 64×64 PNG of one colour: another image than the test's
// gradient, of the same size.
func otherPNG(t *testing.T) []byte {
	t.Helper()
	m := image.NewRGBA(image.Rect(0, 0, 64, 64))
	for i := range 64 * 64 {
		m.Set(i%64, i/64, color.RGBA{200, 30, 90, 255})
	}
	var b bytes.Buffer
	if err := png.Encode(&b, m); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// openAIAnswer is corral's OpenAI chat answer to parts in one user
// message (greedy, n tokens, no ignore_eos: the dialects without it are
// compared with it), and its prompt tokens.
func openAIAnswer(t *testing.T, ts *e2etest.Server, n int64, parts ...openai.ChatCompletionContentPartUnionParam) (string, int64) {
	t.Helper()
	client := sdkClient(ts)
	res, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(parts)},
		MaxTokens: openai.Int(n), Temperature: openai.Float(0),
	})
	if err != nil {
		t.Fatal(err)
	}
	return res.Choices[0].Message.Content, res.Usage.PromptTokens
}

// pngPart is the test image as an OpenAI image_url part.
func pngPart(t *testing.T) openai.ChatCompletionContentPartUnionParam {
	return openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "data:image/png;base64," + mediaBase64(t, "gradient-64.png")})
}

// TestAnthropicSDKImage: anthropic-sdk-go sends an image block between
// two text blocks, whole and streamed: the prompt is the OpenAI chat
// API's for the same parts (found in the cache the OpenAI request left,
// all but its last token, the image's cells included), and so is the
// answer; count_tokens counts it, the cells included. With another
// image in its place, the cache serves only the text before it.
func TestAnthropicSDKImage(t *testing.T) {
	ts := mediaServer(t, "gemma3", engine.Config{})
	want, wantPrompt := openAIAnswer(t, ts, 12, openai.TextContentPart("Describe"), pngPart(t), openai.TextContentPart(" the image."))
	if wantPrompt != imageChatTokens {
		t.Fatalf("the OpenAI API's prompt has %d tokens; want %d", wantPrompt, imageChatTokens)
	}
	client := anthropicClient(ts)
	ctx := context.Background()
	msgs := func(img []byte) []sdk.MessageParam {
		return []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("Describe"),
			sdk.NewImageBlockBase64("image/png", base64.StdEncoding.EncodeToString(img)), sdk.NewTextBlock(" the image."))}
	}
	gradient := mediaFile(t, "gradient-64.png")
	p := sdk.MessageNewParams{Model: claudeModel, MaxTokens: 12, Messages: msgs(gradient)}

	// The OpenAI API's request left its prompt in the cache: this one's
	// is the same, all of it but the last token (the image's cells
	// included) read from there.
	whole, err := client.Messages.New(ctx, p, anthropicGreedy)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := text(*whole)
	if u := whole.Usage; got != want || u.InputTokens+u.CacheReadInputTokens != imageChatTokens || u.CacheReadInputTokens != imageChatTokens-1 {
		t.Errorf("whole: %q, usage %s; want %q, %d of %d prompt tokens cached", got, u.RawJSON(), want, imageChatTokens-1, imageChatTokens)
	}
	count, err := client.Messages.CountTokens(ctx, sdk.MessageCountTokensParams{Model: claudeModel, Messages: msgs(gradient)})
	if err != nil {
		t.Fatal(err)
	}
	if count.InputTokens != imageChatTokens {
		t.Errorf("count_tokens: %d; want %d, the image's cells included", count.InputTokens, imageChatTokens)
	}
	streamed, _ := streamMessage(t, client, p, anthropicGreedy)
	got, _ = text(streamed)
	if u := streamed.Usage; got != want || u.InputTokens+u.CacheReadInputTokens != imageChatTokens || u.CacheReadInputTokens != imageChatTokens-1 {
		t.Errorf("streamed: %q, usage %s; want %q, %d of %d prompt tokens cached", got, u.RawJSON(), want, imageChatTokens-1, imageChatTokens)
	}
	if n := ts.Metrics(t)["corral_prompt_tokens_cached_total"]; n != 2*(imageChatTokens-1) {
		t.Errorf("corral_prompt_tokens_cached_total %v; want %d", n, 2*(imageChatTokens-1))
	}

	// Another image in its place: only what comes before it is cached.
	p.Messages = msgs(otherPNG(t))
	other, err := client.Messages.New(ctx, p, anthropicGreedy)
	if err != nil {
		t.Fatal(err)
	}
	if u := other.Usage; u.InputTokens+u.CacheReadInputTokens != imageChatTokens || u.CacheReadInputTokens == 0 || u.CacheReadInputTokens >= imageChatTokens-1-gemma3ImageCells {
		t.Errorf("another image: usage %s; want the text before the image cached, not the image", u.RawJSON())
	}
}

// TestMediaToolResults: a tool's screenshot, an image in an Anthropic
// tool_result (after a tool_use turn) and in a Responses
// function_call_output, renders as the same image in the OpenAI chat
// API's tool message does: the prompts and answers are the same, whole
// and streamed. The model is served with ChatML, since Gemma 2's
// template has no tool turns; the image adds its cells to the prompt.
func TestMediaToolResults(t *testing.T) {
	ts := mediaServerWith(t, "gemma3", e2etest.Options{Model: servedmodel.Options{ChatTemplate: "chatml"}})
	ctx := context.Background()
	b64 := mediaBase64(t, "gradient-64.png")
	const n = 12
	// OpenAI's chat API: the reference (sent as JSON: openai-go's tool
	// messages take text parts only).
	reference := func(toolContent string) (string, int) {
		t.Helper()
		resp, b := ts.Post(t, "/v1/chat/completions", json.RawMessage(`{"model":"tiny","max_tokens":12,"temperature":0,"messages":[
			{"role":"user","content":"Take a screenshot."},
			{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"screenshot","arguments":"{}"}}]},
			{"role":"tool","tool_call_id":"call_1","content":`+toolContent+`}]}`))
		var c chatCompletion
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &c) != nil || len(c.Choices) != 1 || c.Usage == nil {
			t.Fatalf("/v1/chat/completions: %d %s", resp.StatusCode, b)
		}
		return c.Choices[0].Message.Content, c.Usage.PromptTokens
	}
	want, prompt := reference(`[{"type":"text","text":"Here it is:"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + b64 + `"}}]`)
	if _, textOnly := reference(`"Here it is:"`); prompt-textOnly < gemma3ImageCells {
		t.Fatalf("the image adds %d prompt tokens; want its %d cells at least", prompt-textOnly, gemma3ImageCells)
	}

	t.Run("anthropic", func(t *testing.T) {
		client := anthropicClient(ts)
		result := sdk.ToolResultBlockParam{ToolUseID: "call_1", Content: []sdk.ToolResultBlockParamContentUnion{
			{OfText: &sdk.TextBlockParam{Text: "Here it is:"}},
			{OfImage: &sdk.ImageBlockParam{Source: sdk.ImageBlockParamSourceUnion{OfBase64: &sdk.Base64ImageSourceParam{Data: b64, MediaType: "image/png"}}}},
		}}
		msgs := []sdk.MessageParam{
			sdk.NewUserMessage(sdk.NewTextBlock("Take a screenshot.")),
			sdk.NewAssistantMessage(sdk.NewToolUseBlock("call_1", map[string]any{}, "screenshot")),
			sdk.NewUserMessage(sdk.ContentBlockParamUnion{OfToolResult: &result}),
		}
		p := sdk.MessageNewParams{Model: claudeModel, MaxTokens: n, Messages: msgs}
		whole, err := client.Messages.New(ctx, p, anthropicGreedy)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := text(*whole)
		if u := whole.Usage; got != want || int(u.InputTokens+u.CacheReadInputTokens) != prompt {
			t.Errorf("whole: %q, usage %s; the OpenAI API's: %q from %d prompt tokens", got, u.RawJSON(), want, prompt)
		}
		streamed, _ := streamMessage(t, client, p, anthropicGreedy)
		if got, _ := text(streamed); got != want {
			t.Errorf("streamed: %q; want %q", got, want)
		}
		count, err := client.Messages.CountTokens(ctx, sdk.MessageCountTokensParams{Model: claudeModel, Messages: msgs})
		if err != nil || int(count.InputTokens) != prompt {
			t.Errorf("count_tokens: %v, %v; want %d", count, err, prompt)
		}
	})

	t.Run("responses", func(t *testing.T) {
		client := sdkClient(ts)
		output := rsdk.ResponseInputItemParamOfFunctionCallOutput(rsdk.ResponseFunctionCallOutputItemListParam{
			{OfInputText: &rsdk.ResponseInputTextContentParam{Text: "Here it is:"}},
			{OfInputImage: &rsdk.ResponseInputImageContentParam{ImageURL: openai.String("data:image/png;base64," + b64), Detail: "high"}},
		})
		output.OfFunctionCallOutput.CallID = openai.String("call_1")
		p := rsdk.ResponseNewParams{
			Model: "tiny", MaxOutputTokens: openai.Int(n), Temperature: openai.Float(0), Store: openai.Bool(false),
			Input: rsdk.ResponseNewParamsInputUnion{OfInputItemList: rsdk.ResponseInputParam{
				rsdk.ResponseInputItemParamOfMessage("Take a screenshot.", rsdk.EasyInputMessageRoleUser),
				rsdk.ResponseInputItemParamOfFunctionCall("{}", "call_1", "screenshot"),
				output,
			}},
		}
		whole, err := client.Responses.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if whole.OutputText() != want || int(whole.Usage.InputTokens) != prompt {
			t.Errorf("whole: %q from %d prompt tokens; the OpenAI API's: %q from %d", whole.OutputText(), whole.Usage.InputTokens, want, prompt)
		}
		streamed, _ := streamResponse(t, client, p)
		if streamed.OutputText() != want {
			t.Errorf("streamed: %q; want %q", streamed.OutputText(), want)
		}
	})
}

// TestResponsesSDKImage: openai-go's Responses client sends input_image
// (a data URL; detail ignored) between input_text parts, whole and
// streamed: the OpenAI chat API's prompt and answer. Stored, the
// response is continued with previous_response_id: the image is in the
// continued prompt as in the same conversation sent whole.
func TestResponsesSDKImage(t *testing.T) {
	ts := mediaServer(t, "gemma3", engine.Config{})
	want, _ := openAIAnswer(t, ts, 12, openai.TextContentPart("Describe"), pngPart(t), openai.TextContentPart(" the image."))
	client := sdkClient(ts)
	ctx := context.Background()
	url := "data:image/png;base64," + mediaBase64(t, "gradient-64.png")
	user := rsdk.ResponseInputItemParamOfMessage(rsdk.ResponseInputMessageContentListParam{
		{OfInputText: &rsdk.ResponseInputTextParam{Text: "Describe"}},
		{OfInputImage: &rsdk.ResponseInputImageParam{ImageURL: openai.String(url), Detail: rsdk.ResponseInputImageDetailLow}},
		{OfInputText: &rsdk.ResponseInputTextParam{Text: " the image."}},
	}, rsdk.EasyInputMessageRoleUser)
	p := rsdk.ResponseNewParams{Model: "tiny", MaxOutputTokens: openai.Int(12), Temperature: openai.Float(0),
		Input: rsdk.ResponseNewParamsInputUnion{OfInputItemList: rsdk.ResponseInputParam{user}}}

	whole, err := client.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if whole.OutputText() != want || whole.Usage.InputTokens != imageChatTokens {
		t.Errorf("whole: %q from %d prompt tokens; the OpenAI API's: %q from %d", whole.OutputText(), whole.Usage.InputTokens, want, imageChatTokens)
	}
	streamed, _ := streamResponse(t, client, p)
	if streamed.OutputText() != want {
		t.Errorf("streamed: %q; want %q", streamed.OutputText(), want)
	}

	// Continued from the store, and the same conversation sent whole.
	next := rsdk.ResponseInputItemParamOfMessage("Again.", rsdk.EasyInputMessageRoleUser)
	continued, err := client.Responses.New(ctx, rsdk.ResponseNewParams{Model: "tiny", MaxOutputTokens: openai.Int(4), Temperature: openai.Float(0),
		PreviousResponseID: openai.String(whole.ID), Input: rsdk.ResponseNewParamsInputUnion{OfInputItemList: rsdk.ResponseInputParam{next}}})
	if err != nil {
		t.Fatal(err)
	}
	sent, err := client.Responses.New(ctx, rsdk.ResponseNewParams{Model: "tiny", MaxOutputTokens: openai.Int(4), Temperature: openai.Float(0), Store: openai.Bool(false),
		Input: rsdk.ResponseNewParamsInputUnion{OfInputItemList: rsdk.ResponseInputParam{user,
			rsdk.ResponseInputItemParamOfMessage(whole.OutputText(), rsdk.EasyInputMessageRoleAssistant), next}}})
	if err != nil {
		t.Fatal(err)
	}
	if continued.Usage.InputTokens != sent.Usage.InputTokens || continued.OutputText() != sent.OutputText() || continued.Usage.InputTokens < imageChatTokens+gemma3ImageCells {
		t.Errorf("continued: %q from %d prompt tokens; sent whole: %q from %d", continued.OutputText(), continued.Usage.InputTokens, sent.OutputText(), sent.Usage.InputTokens)
	}
}

// ollamaClient is Ollama's client for ts.
func ollamaClient(t *testing.T, ts *e2etest.Server) *ollama.Client {
	t.Helper()
	base, err := url.Parse(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	return ollama.NewClient(base, ts.Client)
}

// TestOllamaImages: Ollama's client sends "images" on /api/chat and
// /api/generate, whole and streamed. Ollama puts a message's images
// where its content says "[img]", the others before it: "Describe[img]
// the image." is the OpenAI chat API's prompt of the image between the
// two texts, and its answer llama-server's (ignore_eos, as
// TestSDKChatMedia); an image before "Describe the image." is the OpenAI
// API's image part first. A raw prompt places images[N] at its
// "[img-N]": llama-server's /completion answer to the same text.
func TestOllamaImages(t *testing.T) {
	ts := mediaServer(t, "gemma3", engine.Config{})
	c := ollamaClient(t, ts)
	ctx := context.Background()
	img := ollama.ImageData(mediaFile(t, "gradient-64.png"))

	chat := func(stream bool, content string) (string, ollama.Metrics) {
		t.Helper()
		var b strings.Builder
		var last ollama.ChatResponse
		err := c.Chat(ctx, &ollama.ChatRequest{Model: "tiny", Stream: &stream, Options: greedy(12),
			Messages: []ollama.Message{{Role: "user", Content: content, Images: []ollama.ImageData{img}}}}, func(r ollama.ChatResponse) error {
			b.WriteString(r.Message.Content)
			last = r
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return b.String(), last.Metrics
	}
	generate := func(stream, raw bool, prompt string) (string, ollama.Metrics) {
		t.Helper()
		var b strings.Builder
		var last ollama.GenerateResponse
		err := c.Generate(ctx, &ollama.GenerateRequest{Model: "tiny", Stream: &stream, Raw: raw, Prompt: prompt, Options: greedy(12),
			Images: []ollama.ImageData{img}}, func(r ollama.GenerateResponse) error {
			b.WriteString(r.Response)
			last = r
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return b.String(), last.Metrics
	}
	for _, stream := range []bool{false, true} {
		if got, m := chat(stream, "Describe[img] the image."); got != imageChatAnswer || m.PromptEvalCount != imageChatTokens {
			t.Errorf("chat (stream %v), [img] in the content: %q from %d prompt tokens; llama-server: %q from %d", stream, got, m.PromptEvalCount, imageChatAnswer, imageChatTokens)
		}
		if got, m := generate(stream, false, "Describe[img] the image."); got != imageChatAnswer || m.PromptEvalCount != imageChatTokens {
			t.Errorf("generate (stream %v): %q from %d prompt tokens; llama-server: %q from %d", stream, got, m.PromptEvalCount, imageChatAnswer, imageChatTokens)
		}
	}

	// No [img]: the image goes before the content.
	before, prompt := openAIAnswer(t, ts, 12, pngPart(t), openai.TextContentPart("Describe the image."))
	for _, stream := range []bool{false, true} {
		// Compared without ignore_eos, as openAIAnswer asks.
		var b strings.Builder
		var last ollama.ChatResponse
		opts := greedy(12)
		delete(opts, "ignore_eos")
		err := c.Chat(ctx, &ollama.ChatRequest{Model: "tiny", Stream: &stream, Options: opts,
			Messages: []ollama.Message{{Role: "user", Content: "Describe the image.", Images: []ollama.ImageData{img}}}}, func(r ollama.ChatResponse) error {
			b.WriteString(r.Message.Content)
			last = r
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if b.String() != before || int64(last.PromptEvalCount) != prompt {
			t.Errorf("chat (stream %v), the image before the content: %q from %d prompt tokens; the OpenAI API's %q from %d", stream, b.String(), last.PromptEvalCount, before, prompt)
		}
	}

	// Raw: llama-server's /completion answer to the same prompt.
	g := testmodel.MediaGoldens[0]
	want := detokenize(t, ts, g.Alone)
	raw := strings.ReplaceAll(g.Prompt, testmodel.MediaMarker, "[img-0]")
	for _, stream := range []bool{false, true} {
		if got, m := generate(stream, true, raw); got != want || m.PromptEvalCount != g.PromptTokens {
			t.Errorf("raw generate (stream %v) %q: %q from %d prompt tokens; llama-server: %q from %d", stream, raw, got, m.PromptEvalCount, want, g.PromptTokens)
		}
	}
}

// detokenize is the text of toks, as the served model spells them.
func detokenize(t *testing.T, ts *e2etest.Server, toks []int32) string {
	t.Helper()
	resp, b := ts.Post(t, "/detokenize", map[string]any{"tokens": toks})
	var out struct {
		Content string `json:"content"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &out) != nil {
		t.Fatalf("/detokenize: %d %s", resp.StatusCode, b)
	}
	return out.Content
}

// TestCompletionMediaGoldens: llama-server's /completion prompt object,
// {"prompt_string", "multimodal_data"}, with its <__media__> markers,
// gives llama-server's own tokens (testmodel.MediaGoldens: images on
// gemma3, a sound on qwen2a), from as many prompt tokens, whole and
// streamed.
func TestCompletionMediaGoldens(t *testing.T) {
	servers := map[string]*e2etest.Server{}
	for _, g := range testmodel.MediaGoldens {
		ts := servers[g.Kind]
		if ts == nil {
			ts = mediaServer(t, g.Kind, engine.Config{BatchSize: 512})
			servers[g.Kind] = ts
		}
		data := make([]string, len(g.Media))
		for i, name := range g.Media {
			data[i] = mediaBase64(t, name)
		}
		body := map[string]any{"prompt": map[string]any{"prompt_string": g.Prompt, "multimodal_data": data},
			"n_predict": g.N, "temperature": 0, "ignore_eos": true, "n_probs": 1, "cache_prompt": false}
		resp, b := ts.Post(t, "/completion", body)
		var whole struct {
			llamaCompletion
			Probs []struct {
				ID int32 `json:"id"`
			} `json:"completion_probabilities"`
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %q: %d %s", g.Kind, g.Prompt, resp.StatusCode, b)
		}
		unmarshal(t, string(b), &whole)
		var ids []int32
		for _, p := range whole.Probs {
			ids = append(ids, p.ID)
		}
		if !slices.Equal(ids, g.Alone) || whole.TokensEvaluated != g.PromptTokens {
			t.Errorf("%s %q: %v from %d prompt tokens; llama-server: %v from %d", g.Kind, g.Prompt, ids, whole.TokensEvaluated, g.Alone, g.PromptTokens)
		}
		if want := detokenize(t, ts, g.Alone); whole.Content != want {
			t.Errorf("%s %q: %q; llama-server: %q", g.Kind, g.Prompt, whole.Content, want)
		}
		body["stream"] = true
		delete(body, "n_probs")
		got, final := llamaStream(t, ts.OpenStream(t, context.Background(), "/completion", body))
		if got != whole.Content || final.TokensEvaluated != g.PromptTokens {
			t.Errorf("%s %q streamed: %q from %d prompt tokens; whole: %q", g.Kind, g.Prompt, got, final.TokensEvaluated, whole.Content)
		}
	}
}

// dialectError is an error response as its dialect shapes it: the
// message and, where the shape has them, the param and code.
type dialectError struct {
	status              int
	message, param, typ string
}

// readError reads the error of a response of dialect.
func readError(t *testing.T, dialect string, status int, b []byte) dialectError {
	t.Helper()
	e := dialectError{status: status}
	switch dialect {
	case "anthropic":
		var env struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &env) != nil || env.Type != "error" || env.Error.Type == "" {
			t.Errorf("not Anthropic's error shape: %s", b)
		}
		e.message, e.typ = env.Error.Message, env.Error.Type
	case "ollama":
		var env map[string]any
		if json.Unmarshal(b, &env) != nil || len(env) != 1 || env["error"] == nil {
			t.Errorf("not Ollama's error shape: %s", b)
		}
		e.message, _ = env["error"].(string)
	default:
		obj, param, _ := openAIError(t, b)
		e.message, e.param, e.typ = obj.Message, param, obj.Type
	}
	return e
}

// TestDialectMediaRefused: each dialect refuses bad media with a 400 in
// its own error shape that names the field at fault (Anthropic's and
// Ollama's shapes have no param: the message names it): bytes that are
// not what the media type says, truncated data, a URL to fetch, a file
// to look up, an unsupported block or part, more than --max-media
// images, an image for a model without a projector. None reaches the
// engine.
func TestDialectMediaRefused(t *testing.T) {
	pngBytes := mediaFile(t, "gradient-64.png")
	b64 := base64.StdEncoding.EncodeToString(pngBytes)
	half := base64.StdEncoding.EncodeToString(pngBytes[:len(pngBytes)/2])
	wav := mediaBase64(t, "sine-440-1s.wav")
	ts := mediaServer(t, "gemma3", engine.Config{})
	text := startServer(t, engine.Config{})

	// Requests of each dialect with the given image fields.
	anthropic := func(blocks ...string) any {
		return json.RawMessage(`{"model":"m","max_tokens":2,"messages":[{"role":"user","content":[{"type":"text","text":"See"},` + strings.Join(blocks, ",") + `]}]}`)
	}
	anthropicImage := func(mediaType, data string) string {
		return `{"type":"image","source":{"type":"base64","media_type":"` + mediaType + `","data":"` + data + `"}}`
	}
	responses := func(parts ...string) any {
		return json.RawMessage(`{"model":"tiny","max_output_tokens":2,"store":false,"input":[{"role":"user","content":[{"type":"input_text","text":"See"},` + strings.Join(parts, ",") + `]}]}`)
	}
	responsesImage := func(url string) string { return `{"type":"input_image","image_url":"` + url + `"}` }
	ollamaChat := func(images ...string) any {
		return map[string]any{"model": "tiny", "stream": false, "options": map[string]any{"num_predict": 2},
			"messages": []map[string]any{{"role": "user", "content": "See", "images": images}}}
	}
	ollamaGenerate := func(raw bool, prompt string, images ...string) any {
		return map[string]any{"model": "tiny", "stream": false, "raw": raw, "prompt": prompt, "images": images, "options": map[string]any{"num_predict": 2}}
	}
	completion := func(prompt string, data ...string) any {
		return map[string]any{"n_predict": 2, "prompt": map[string]any{"prompt_string": prompt, "multimodal_data": data}}
	}
	many := func(f func(int) string) []string {
		out := make([]string, 17)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}

	type refusal struct {
		name, dialect, path string
		body                any
		says                []string // what the message says, the field's name first
		param               string   // the param, where the shape has one
	}
	refusals := []refusal{
		{"wrong media type", "anthropic", "/v1/messages", anthropic(anthropicImage("image/jpeg", b64)), []string{"messages.0.content.1.source.data", "image/jpeg but its bytes are png"}, ""},
		{"truncated", "anthropic", "/v1/messages", anthropic(anthropicImage("image/png", half)), []string{"messages.0.content.1.source.data", "PNG"}, ""},
		{"URL", "anthropic", "/v1/messages", anthropic(`{"type":"image","source":{"type":"url","url":"https://example.com/cat.png"}}`), []string{"messages.0.content.1.source.url", "fetches no URLs", "--allowed-media-domains"}, ""},
		{"file", "anthropic", "/v1/messages", anthropic(`{"type":"image","source":{"type":"file","file_id":"file_1"}}`), []string{"messages.0.content.1.source.file_id", "not supported"}, ""},
		{"document", "anthropic", "/v1/messages", anthropic(`{"type":"document","source":{"type":"text","media_type":"text/plain","data":"x"}}`), []string{"messages.0.content.1", "document blocks are not supported"}, ""},
		{"too many", "anthropic", "/v1/messages", anthropic(many(func(int) string { return anthropicImage("image/png", b64) })...), []string{"messages", "--max-media"}, ""},
		{"count_tokens", "anthropic", "/v1/messages/count_tokens", anthropic(anthropicImage("image/gif", b64)), []string{"messages.0.content.1.source.data", "image/gif"}, ""},

		{"wrong media type", "responses", "/v1/responses", responses(responsesImage("data:image/jpeg;base64," + b64)), []string{"input[0].content[1].image_url", "image/jpeg but its bytes are png"}, "input[0].content[1].image_url"},
		{"truncated", "responses", "/v1/responses", responses(responsesImage("data:image/png;base64," + half)), []string{"input[0].content[1].image_url", "PNG"}, "input[0].content[1].image_url"},
		{"URL", "responses", "/v1/responses", responses(responsesImage("https://example.com/cat.png")), []string{"input[0].content[1].image_url", "fetches no URLs", "--allowed-media-domains"}, "input[0].content[1].image_url"},
		{"file_id", "responses", "/v1/responses", responses(`{"type":"input_image","file_id":"file_1","detail":"auto"}`), []string{"input[0].content[1].file_id", "Files API"}, "input[0].content[1].file_id"},
		{"input_file", "responses", "/v1/responses", responses(`{"type":"input_file","file_data":"x","filename":"a.pdf"}`), []string{"input_file"}, "input[0].content[1].type"},
		{"too many", "responses", "/v1/responses", responses(many(func(int) string { return responsesImage("data:image/png;base64," + b64) })...), []string{"input", "--max-media"}, "input"},

		{"not an image", "ollama", "/api/chat", ollamaChat(wav), []string{"messages[0].images[0]", "not recognised"}, ""},
		{"truncated", "ollama", "/api/chat", ollamaChat(half), []string{"messages[0].images[0]", "PNG"}, ""},
		{"data URL", "ollama", "/api/chat", ollamaChat("data:image/png;base64," + b64), []string{"messages[0].images[0]", "data URL"}, ""},
		{"too many", "ollama", "/api/chat", ollamaChat(many(func(int) string { return b64 })...), []string{"images", "--max-media"}, ""},
		{"not base64", "ollama", "/api/generate", ollamaGenerate(false, "See", "@@@@"), []string{"images[0]", "base64"}, ""},
		{"raw tag of no image", "ollama", "/api/generate", ollamaGenerate(true, "[img-0] and [img-1]", b64), []string{"prompt", "[img-1]"}, ""},

		{"not a medium", "completion", "/completion", completion("See <__media__>", base64.StdEncoding.EncodeToString([]byte("plain text"))), []string{"prompt.multimodal_data[0]", "neither an image nor a sound"}, "prompt.multimodal_data[0]"},
		{"truncated", "completion", "/completion", completion("See <__media__>", half), []string{"prompt.multimodal_data[0]", "PNG"}, "prompt.multimodal_data[0]"},
		{"markers and media", "completion", "/completion", completion("See <__media__> and <__media__>", b64), []string{"prompt.multimodal_data", "2 media markers"}, "prompt.multimodal_data"},
		{"too many", "completion", "/completion", completion(strings.Repeat("<__media__>", 17)+"?", many(func(int) string { return b64 })...), []string{"prompt.multimodal_data", "--max-media"}, "prompt.multimodal_data"},
		{"a sound for a vision model", "completion", "/completion", completion("Hear <__media__>.", wav), []string{"does not take audio"}, "prompt"},
	}
	// refused checks that server refuses r with a 400 in its dialect's
	// shape, saying what r says.
	refused := func(server *e2etest.Server, r refusal) {
		t.Helper()
		resp, b := server.Post(t, r.path, r.body)
		e := readError(t, r.dialect, resp.StatusCode, b)
		ok := e.status == http.StatusBadRequest && (r.param == "" || e.param == r.param)
		for _, s := range r.says {
			ok = ok && strings.Contains(e.message, s)
		}
		if !ok {
			t.Errorf("%s %s %s: %d %s; want 400 saying %q (param %q)", r.dialect, r.path, r.name, resp.StatusCode, b, r.says, r.param)
		}
	}
	for _, r := range refusals {
		refused(ts, r)
	}
	if n, ok := ts.Metrics(t)["corral_prompt_tokens_total"]; !ok || n != 0 {
		t.Errorf("refused requests reached the engine: %v prompt tokens", n)
	}

	// A model without a projector.
	for _, r := range []refusal{
		{"no projector", "anthropic", "/v1/messages", anthropic(anthropicImage("image/png", b64)), []string{"messages", "does not take images", "--mmproj"}, ""},
		{"no projector", "anthropic", "/v1/messages/count_tokens", anthropic(anthropicImage("image/png", b64)), []string{"messages", "does not take images"}, ""},
		{"no projector", "responses", "/v1/responses", responses(responsesImage("data:image/png;base64," + b64)), []string{"does not take images", "--mmproj"}, "input"},
		{"no projector", "ollama", "/api/chat", ollamaChat(b64), []string{"does not take images", "--mmproj"}, ""},
		{"no projector", "ollama", "/api/generate", ollamaGenerate(true, "[img-0] x", b64), []string{"does not take images"}, ""},
		{"no projector", "completion", "/completion", completion("<__media__> x", b64), []string{"does not take images"}, "prompt"},
	} {
		refused(text, r)
	}
}
