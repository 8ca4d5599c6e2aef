package e2e

import (
	"context"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	oaioption "github.com/openai/openai-go/v3/option"
	rsdk "github.com/openai/openai-go/v3/responses"

	"github.com/corral-llm/corral/engine"
)

// TestCacheSaltAnthropicAndResponses: Anthropic's Messages API and OpenAI's
// Responses API take cache_salt as Chat Completions does, sent through
// their official SDKs: a request of another salt finds none of the first
// one's prompt cached, the first salt again finds it.
func TestCacheSaltAnthropicAndResponses(t *testing.T) {
	ctx := context.Background()
	t.Run("messages", func(t *testing.T) {
		client := anthropicClient(startServer(t, engine.Config{Parallel: 2}))
		cached := func(salt string) int64 {
			t.Helper()
			m, err := client.Messages.New(ctx, sdkMessage(2), anthropicGreedy, option.WithJSONSet("cache_salt", salt))
			if err != nil {
				t.Fatal(err)
			}
			return m.Usage.CacheReadInputTokens
		}
		if a, b, again := cached("tenant-one"), cached("tenant-two"), cached("tenant-one"); a != 0 || b != 0 || again == 0 {
			t.Errorf("cached prompt tokens: %d, another salt %d, the first salt again %d; want 0, 0, some", a, b, again)
		}
	})
	t.Run("responses", func(t *testing.T) {
		client := sdkClient(startServer(t, engine.Config{Parallel: 2}))
		cached := func(salt string) int64 {
			t.Helper()
			r, err := client.Responses.New(ctx, rsdk.ResponseNewParams{
				Input:           rsdk.ResponseNewParamsInputUnion{OfString: openai.String("Tell me a story about a little dog.")},
				MaxOutputTokens: openai.Int(2), Temperature: openai.Float(0), Store: openai.Bool(false),
			}, oaioption.WithJSONSet("cache_salt", salt))
			if err != nil {
				t.Fatal(err)
			}
			return r.Usage.InputTokensDetails.CachedTokens
		}
		if a, b, again := cached("tenant-one"), cached("tenant-two"), cached("tenant-one"); a != 0 || b != 0 || again == 0 {
			t.Errorf("cached prompt tokens: %d, another salt %d, the first salt again %d; want 0, 0, some", a, b, again)
		}
	})
}
