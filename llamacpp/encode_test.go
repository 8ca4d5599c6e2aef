package llamacpp

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/servetest"
)

func TestLlamaEncoding(t *testing.T) {
	f := &llamaEncoder{model: "tiny"}
	b, _ := json.Marshal(f.Deltas(servetest.Content("a"), nil, engine.Chunk{Tokens: 2})[0])
	if want := `{"content":"a","stop":false,"tokens_predicted":2}`; string(b) != want {
		t.Errorf("partial %s, want %s", b, want)
	}
	res := engine.Result{
		FinishReason: engine.FinishStop, StopWord: "END", Slot: 1,
		Usage:   engine.Usage{PromptTokens: 6, CachedTokens: 2, CompletionTokens: 4},
		Timings: engine.Timings{Prefill: 8 * time.Millisecond, Decode: 20 * time.Millisecond},
	}
	b, _ = json.Marshal(f.Whole(servetest.Whole("abcd", "stop"), res))
	want := `{"content":"abcd","stop":true,"model":"tiny","id_slot":1,"tokens_predicted":4,"tokens_evaluated":6,"tokens_cached":2,` +
		`"stop_type":"word","stopping_word":"END","truncated":false,"timings":{"prompt_n":4,"prompt_ms":8,"prompt_per_token_ms":2,` +
		`"prompt_per_second":500,"predicted_n":4,"predicted_ms":20,"predicted_per_token_ms":5,"predicted_per_second":200}}`
	if string(b) != want {
		t.Errorf("final\n got %s\nwant %s", b, want)
	}
	for reason, stopType := range map[engine.FinishReason]string{engine.FinishStop: "eos", engine.FinishLength: "limit"} {
		v := f.Whole(servetest.Whole("", string(reason)), engine.Result{FinishReason: reason}).(*llamaFinal)
		if v.StopType != stopType {
			t.Errorf("%s: stop_type %q, want %q", reason, v.StopType, stopType)
		}
	}
}
