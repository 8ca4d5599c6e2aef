package serving

import (
	"bytes"
	"encoding/json"
	"math"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/grammar"
)

// Sampling defaults when a request leaves a parameter out. They are
// llama-server's, so scripts written against it sample the same way.
const (
	DefaultTemperature = 0.8
	DefaultTopK        = 40
	DefaultTopP        = 0.95
	DefaultMinP        = 0.05
	DefaultRepeatLastN = 64
)

// Limits on stop strings. OpenAI allows 4; these are generous, and keep
// the per-token stop check cheap for every other slot.
const (
	MaxStops     = 16
	MaxStopBytes = 256
)

// Sampling is a request's sampling settings as it gives them, in no
// dialect's words: nil where it gives none (the defaults apply). Errors
// name the parameters as every dialect does (temperature, top_p, ...).
type Sampling struct {
	Temperature, TopP, MinP, TypicalP                *float64
	FrequencyPenalty, PresencePenalty, RepeatPenalty *float64
	TopK, RepeatLastN                                *int
	Seed                                             *int64
	// LogitBias adds a bias in [-100, 100] to the logits of token ids.
	LogitBias map[int64]float64
}

// Engine validates p and converts it for a model with vocab tokens and
// reqCtx tokens of context a request may use.
func (p *Sampling) Engine(vocab, reqCtx int) (engine.Sampling, *Error) {
	s := engine.Sampling{
		Temperature: DefaultTemperature,
		TopK:        DefaultTopK,
		TopP:        DefaultTopP,
		MinP:        DefaultMinP,
		RepeatLastN: DefaultRepeatLastN,
		Seed:        -1,
	}
	checks := []struct {
		param  string
		v      *float64
		lo, hi float64
		loOpen bool
		dst    *float32
	}{
		{"temperature", p.Temperature, 0, 2, false, &s.Temperature},
		{"top_p", p.TopP, 0, 1, true, &s.TopP},
		{"min_p", p.MinP, 0, 1, false, &s.MinP},
		{"typical_p", p.TypicalP, 0, 1, true, &s.TypicalP},
		{"frequency_penalty", p.FrequencyPenalty, -2, 2, false, &s.FrequencyPenalty},
		{"presence_penalty", p.PresencePenalty, -2, 2, false, &s.PresencePenalty},
		{"repeat_penalty", p.RepeatPenalty, 0, math.MaxFloat32, false, &s.RepeatPenalty},
	}
	for _, c := range checks {
		if c.v == nil {
			continue
		}
		v := *c.v
		if v < c.lo || v > c.hi || (c.loOpen && v == c.lo) {
			open := "["
			if c.loOpen {
				open = "("
			}
			return s, Invalid(c.param, "'%s' must be in %s%g, %g], got %g", c.param, open, c.lo, c.hi, v)
		}
		*c.dst = float32(v)
	}
	if p.TopK != nil {
		if *p.TopK < 0 {
			return s, Invalid("top_k", "'top_k' must be >= 0, got %d", *p.TopK)
		}
		// top_k beyond the vocabulary keeps every token, as 0 does.
		s.TopK = min(*p.TopK, vocab)
	}
	if p.RepeatLastN != nil {
		// llama-server's meaning: -1 the context size, 0 disabled; a
		// window longer than a slot's context is the context.
		switch n := *p.RepeatLastN; {
		case n < -1:
			return s, Invalid("repeat_last_n", "'repeat_last_n' must be -1 (the context size) or >= 0, got %d", n)
		case n == -1 || n > reqCtx:
			s.RepeatLastN = reqCtx
		default:
			s.RepeatLastN = n
		}
	}
	if p.Seed != nil && *p.Seed != -1 {
		// 0 is a seed like any other; only an absent seed or -1 is random.
		if *p.Seed < 0 || *p.Seed > math.MaxUint32 {
			return s, Invalid("seed", "'seed' must be -1 (random) or in [0, %d], got %d", uint32(math.MaxUint32), *p.Seed)
		}
		s.Seed = *p.Seed
	}
	if len(p.LogitBias) > 0 {
		s.LogitBias = make(map[int32]float32, len(p.LogitBias))
		for tok, b := range p.LogitBias {
			if tok < 0 || tok >= int64(vocab) {
				return s, Invalid("logit_bias", "'logit_bias' names token %d, outside the vocabulary [0, %d)", tok, vocab)
			}
			if b < -100 || b > 100 {
				return s, Invalid("logit_bias", "'logit_bias' values must be in [-100, 100], got %g", b)
			}
			s.LogitBias[int32(tok)] = float32(b)
		}
	}
	return s, nil
}

// IsNull reports whether raw is absent or JSON null.
func IsNull(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// ParseStop accepts a string or an array of at most MaxStops strings of
// at most MaxStopBytes bytes each; empty strings are dropped since they
// would stop before the first token.
func ParseStop(raw json.RawMessage) ([]string, *Error) {
	if IsNull(raw) {
		return nil, nil
	}
	var many []string
	var one string
	if json.Unmarshal(raw, &one) == nil {
		many = []string{one}
	} else if err := json.Unmarshal(raw, &many); err != nil {
		return nil, Invalid("stop", "'stop' must be a string or an array of strings")
	}
	if len(many) > MaxStops {
		return nil, Invalid("stop", "'stop' has %d strings; at most %d are allowed", len(many), MaxStops)
	}
	stops := many[:0]
	for i, s := range many {
		if len(s) > MaxStopBytes {
			return nil, Invalid("stop", "'stop' string %d is %d bytes long; at most %d are allowed", i, len(s), MaxStopBytes)
		}
		if s != "" {
			stops = append(stops, s)
		}
	}
	if len(stops) == 0 {
		return nil, nil
	}
	return stops, nil
}

// ParseTokens checks that every id is in the vocabulary; nil for none.
func ParseTokens(ids []int64, vocab int, param string) ([]int32, *Error) {
	if len(ids) == 0 {
		return nil, nil
	}
	toks := make([]int32, len(ids))
	for i, id := range ids {
		if id < 0 || id >= int64(vocab) {
			return nil, Invalid(param, "token %d at index %d is outside the vocabulary [0, %d)", id, i, vocab)
		}
		toks[i] = int32(id)
	}
	return toks, nil
}

// ParsePrompt accepts a string, an array of one string, an array of token
// ids, or an array of one array of token ids (checked against the
// model's vocabulary by Core.Build).
func ParsePrompt(raw json.RawMessage) (*Prompt, *Error) {
	if IsNull(raw) {
		return nil, Invalid("prompt", "'prompt' is required")
	}
	var p Prompt
	if json.Unmarshal(raw, &p.Text) == nil {
		return &p, nil
	}
	if json.Unmarshal(raw, &p.Tokens) == nil && len(p.Tokens) > 0 {
		return &p, nil
	}
	var texts []string
	if json.Unmarshal(raw, &texts) == nil && len(texts) == 1 {
		return &Prompt{Text: texts[0]}, nil
	}
	var idLists [][]int64
	if json.Unmarshal(raw, &idLists) == nil && len(idLists) == 1 && len(idLists[0]) > 0 {
		return &Prompt{Tokens: idLists[0]}, nil
	}
	return nil, Invalid("prompt", "'prompt' must be a string, an array of one string, or an array of token ids")
}

// SchemaGrammar converts a JSON Schema within lim, reporting a bad one
// against param.
func SchemaGrammar(schema json.RawMessage, param string, lim *Limits) (string, *Error) {
	g, err := grammar.FromSchemaLimits(schema, lim.SchemaLimits())
	if err != nil {
		if e := SchemaLimitError(err, param); e != nil {
			return "", e
		}
		return "", Invalid(param, "invalid JSON schema: %v", err)
	}
	return g, nil
}
