package e2e

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/testsynth"
)

// TestSDKImageURL: openai-go sends an image_url part whose URL is an
// http URL of a loopback server. `corral serve --allowed-media-domains
// 127.0.0.1` fetches it and answers as it answers the same bytes sent
// inline, finding the image in the prefix cache the inline request left
// (a medium is named by its bytes, however it came), and so do
// Anthropic's url source and the Responses API's input_image; a server
// without
// the flag answers 400 naming it, and fetches nothing.
func TestSDKImageURL(t *testing.T) {
	png := mediaFile(t, "gradient-64.png")
	var fetches atomic.Int32
	images := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		w.Header().Set("Content-Type", "image/png")
		w.Write(png)
	}))
	t.Cleanup(images.Close)
	imageURL := images.URL + "/gradient-64.png"

	ask := func(client openai.Client, url string) (*openai.ChatCompletion, error) {
		return client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: "tiny",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
				openai.TextContentPart("Describe"),
				openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: url}),
				openai.TextContentPart(" the image."),
			})},
			MaxTokens: openai.Int(12), Temperature: openai.Float(0),
		}, ignoreEOS)
	}

	model, proj := testsynth.Projector(t, t.TempDir(), "gemma3")
	child := e2etest.StartChild(t, model, "--mmproj", proj, "-np", "1", "-t", "1", "--allowed-media-domains", "127.0.0.1")
	client := openai.NewClient(option.WithBaseURL(child.URL+"/v1/"), option.WithAPIKey("x"),
		option.WithMaxRetries(0), option.WithHTTPClient(child.Client))
	inline, err := ask(client, "data:image/png;base64,"+base64.StdEncoding.EncodeToString(png))
	if err != nil {
		t.Fatal(err)
	}
	fetched, err := ask(client, imageURL)
	if err != nil {
		t.Fatal(err)
	}
	want, got := inline.Choices[0].Message.Content, fetched.Choices[0].Message.Content
	if u := fetched.Usage; got != want || u.PromptTokens != imageChatTokens || u.PromptTokensDetails.CachedTokens != imageChatTokens-1 {
		t.Errorf("by URL: %q, %d prompt tokens, %d cached; inline: %q; want the same answer, %d of %d prompt tokens cached",
			got, u.PromptTokens, u.PromptTokensDetails.CachedTokens, want, imageChatTokens-1, imageChatTokens)
	}

	// Anthropic's url source and the Responses API's input_image: the
	// same prompt, the image found in the cache.
	for _, c := range []struct {
		path, body string
		cached     func(b []byte) (prompt, cached int)
	}{
		{"/v1/messages", `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":[{"type":"text","text":"Describe"},{"type":"image","source":{"type":"url","url":"` + imageURL + `"}},{"type":"text","text":" the image."}]}]}`,
			func(b []byte) (int, int) {
				var r struct {
					Usage struct {
						InputTokens          int `json:"input_tokens"`
						CacheReadInputTokens int `json:"cache_read_input_tokens"`
					} `json:"usage"`
				}
				unmarshal(t, string(b), &r)
				return r.Usage.InputTokens + r.Usage.CacheReadInputTokens, r.Usage.CacheReadInputTokens
			}},
		{"/v1/responses", `{"model":"tiny","max_output_tokens":2,"store":false,"input":[{"role":"user","content":[{"type":"input_text","text":"Describe"},{"type":"input_image","image_url":"` + imageURL + `"},{"type":"input_text","text":" the image."}]}]}`,
			func(b []byte) (int, int) {
				var r struct {
					Usage struct {
						InputTokens        int `json:"input_tokens"`
						InputTokensDetails struct {
							CachedTokens int `json:"cached_tokens"`
						} `json:"input_tokens_details"`
					} `json:"usage"`
				}
				unmarshal(t, string(b), &r)
				return r.Usage.InputTokens, r.Usage.InputTokensDetails.CachedTokens
			}},
	} {
		code, b := child.Request(t, http.MethodPost, c.path, []byte(c.body))
		if code != http.StatusOK {
			t.Errorf("%s: %d %s", c.path, code, b)
			continue
		}
		if prompt, cached := c.cached(b); prompt != imageChatTokens || cached != imageChatTokens-1 {
			t.Errorf("%s: %d prompt tokens, %d cached; want %d, %d cached: %s", c.path, prompt, cached, imageChatTokens, imageChatTokens-1, b)
		}
	}
	if n := fetches.Load(); n != 3 {
		t.Errorf("the image was fetched %d times; want once a request", n)
	}

	_, err = ask(sdkClient(mediaServer(t, "gemma3", engine.Config{})), imageURL)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "messages[0].content[1].image_url.url" ||
		!strings.Contains(apiErr.Message, "--allowed-media-domains") {
		t.Errorf("without --allowed-media-domains: %v; want a 400 naming the field and the flag", err)
	}
	if n := fetches.Load(); n != 3 {
		t.Errorf("the server without the flag fetched the image (%d fetches in all)", n)
	}
}
