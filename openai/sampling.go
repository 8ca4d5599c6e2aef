package openai

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/corral-llm/corral/serving"
)

// SamplingParams are the sampling fields of OpenAI's completion and chat
// requests, which llama-server's /completion and Ollama's options share.
// Pointers tell "absent" from zero.
type SamplingParams struct {
	Temperature      *float64        `json:"temperature"`
	TopP             *float64        `json:"top_p"`
	TopK             *int            `json:"top_k"`
	MinP             *float64        `json:"min_p"`
	TypicalP         *float64        `json:"typical_p"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	RepeatPenalty    *float64        `json:"repeat_penalty"`
	RepeatLastN      *int            `json:"repeat_last_n"`
	Seed             *int64          `json:"seed"`
	LogitBias        json.RawMessage `json:"logit_bias"`
	Stop             json.RawMessage `json:"stop"`
	IgnoreEOS        bool            `json:"ignore_eos"`
	// Priority is the request's class (vLLM's field): lower is served
	// first. Not sampling, but shared by the same endpoints.
	Priority *int `json:"priority"`
	// KeepAlive is how long the model stays loaded after this request
	// (Ollama's field; see serving.KeepAlive).
	KeepAlive *serving.KeepAlive `json:"keep_alive"`
}

// Sampling translates p: its logit_bias read (its tokens are checked
// against the model's vocabulary by serving.Core.Build).
func (p *SamplingParams) Sampling() (serving.Sampling, *serving.Error) {
	s := serving.Sampling{Temperature: p.Temperature, TopP: p.TopP, MinP: p.MinP, TypicalP: p.TypicalP,
		FrequencyPenalty: p.FrequencyPenalty, PresencePenalty: p.PresencePenalty, RepeatPenalty: p.RepeatPenalty,
		TopK: p.TopK, RepeatLastN: p.RepeatLastN, Seed: p.Seed}
	var e *serving.Error
	s.LogitBias, e = parseLogitBias(p.LogitBias)
	return s, e
}

// parseLogitBias accepts OpenAI's {"token id": bias} object and
// llama.cpp's [[token id, bias], ...] array.
func parseLogitBias(raw json.RawMessage) (map[int64]float64, *serving.Error) {
	if serving.IsNull(raw) {
		return nil, nil
	}
	var obj map[string]float64
	if json.Unmarshal(raw, &obj) == nil {
		bias := make(map[int64]float64, len(obj))
		for k, b := range obj {
			tok, err := strconv.ParseInt(k, 10, 32)
			if err != nil {
				return nil, serving.Invalid("logit_bias", "'logit_bias' keys must be token ids, got %q", k)
			}
			bias[tok] = b
		}
		return bias, nil
	}
	var pairs [][2]float64
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, serving.Invalid("logit_bias", "'logit_bias' must map token ids to numbers")
	}
	bias := make(map[int64]float64, len(pairs))
	for _, p := range pairs {
		if p[0] != math.Trunc(p[0]) {
			return nil, serving.Invalid("logit_bias", "'logit_bias' token ids must be integers, got %g", p[0])
		}
		if math.Abs(p[0]) > math.MaxInt32 {
			return nil, serving.Invalid("logit_bias", "'logit_bias' names token %g, outside the vocabulary", p[0])
		}
		bias[int64(p[0])] = p[1]
	}
	return bias, nil
}
