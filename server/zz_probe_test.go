package server

import (
	"encoding/json"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
)

func TestZZProbe(t *testing.T) {
	ts := startModel(t, testmodel.Stories260K, engine.Config{Parallel: 4})
	for _, p := range []string{"Describe a pet as JSON.", "Hi", "Once upon a time", "{\"a\":1}", "{}", "Give me an empty object."} {
		for _, temp := range []float64{0, 1} {
			_, b := ts.post(t, "/v1/chat/completions", map[string]any{
				"messages":        []map[string]string{{"role": "user", "content": p}},
				"response_format": map[string]any{"type": "json_object"}, "temperature": temp, "seed": 3, "max_tokens": 300,
			})
			var c chatCompletion
			json.Unmarshal(b, &c)
			t.Logf("%q %v: %s %q", p, temp, *c.Choices[0].FinishReason, c.Choices[0].Message.Content[:min(80, len(c.Choices[0].Message.Content))])
		}
	}
}
