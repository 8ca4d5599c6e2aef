package openai

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/corral-llm/corral/engine"
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

// Sampling validates p and converts it for a model with vocab tokens and
// reqCtx tokens of context a request may use.
func (p *SamplingParams) Sampling(vocab, reqCtx int) (engine.Sampling, *serving.Error) {
	typed := serving.Sampling{Temperature: p.Temperature, TopP: p.TopP, MinP: p.MinP, TypicalP: p.TypicalP,
		FrequencyPenalty: p.FrequencyPenalty, PresencePenalty: p.PresencePenalty, RepeatPenalty: p.RepeatPenalty,
		TopK: p.TopK, RepeatLastN: p.RepeatLastN, Seed: p.Seed}
	s, e := typed.Engine(vocab, reqCtx)
	if e != nil {
		return s, e
	}
	if s.LogitBias, e = parseLogitBias(p.LogitBias, vocab); e != nil {
		return s, e
	}
	return s, nil
}

// parseLogitBias accepts OpenAI's {"token id": bias} object and
// llama.cpp's [[token id, bias], ...] array. Biases are in [-100, 100].
func parseLogitBias(raw json.RawMessage, vocab int) (map[int32]float32, *serving.Error) {
	if serving.IsNull(raw) {
		return nil, nil
	}
	bias := make(map[int32]float32)
	add := func(tok int64, b float64) *serving.Error {
		if tok < 0 || tok >= int64(vocab) {
			return serving.Invalid("logit_bias", "'logit_bias' names token %d, outside the vocabulary [0, %d)", tok, vocab)
		}
		if b < -100 || b > 100 {
			return serving.Invalid("logit_bias", "'logit_bias' values must be in [-100, 100], got %g", b)
		}
		bias[int32(tok)] = float32(b)
		return nil
	}
	var obj map[string]float64
	if json.Unmarshal(raw, &obj) == nil {
		for k, b := range obj {
			tok, err := strconv.ParseInt(k, 10, 32)
			if err != nil {
				return nil, serving.Invalid("logit_bias", "'logit_bias' keys must be token ids, got %q", k)
			}
			if e := add(tok, b); e != nil {
				return nil, e
			}
		}
		return bias, nil
	}
	var pairs [][2]float64
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, serving.Invalid("logit_bias", "'logit_bias' must map token ids to numbers")
	}
	for _, p := range pairs {
		if p[0] != math.Trunc(p[0]) {
			return nil, serving.Invalid("logit_bias", "'logit_bias' token ids must be integers, got %g", p[0])
		}
		if e := add(int64(p[0]), p[1]); e != nil {
			return nil, e
		}
	}
	return bias, nil
}
