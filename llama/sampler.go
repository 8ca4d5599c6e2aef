package llama

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"unsafe"
)

// SamplerParams select the sampler chain, in llama-server's order:
// logit bias, penalties, grammar, top-k, typical, top-p, min-p, temperature,
// then a seeded draw (or greedy when Temperature <= 0).
type SamplerParams struct {
	Temperature      float32
	TopK             int
	TopP             float32
	MinP             float32
	TypicalP         float32
	RepeatPenalty    float32
	FrequencyPenalty float32
	PresencePenalty  float32
	RepeatLastN      int
	Seed             uint32
	LogitBias        map[Token]float32
	Grammar          string // GBNF with root rule "root"; "" for none
}

// ErrGrammar is returned when llama.cpp rejects a grammar.
var ErrGrammar = errors.New("llama: grammar could not be parsed")

// Sampler is a llama.cpp sampler chain (the filters) plus the final
// selector (greedy or a seeded draw), kept apart so a filter that leaves no
// candidate is an error instead of an abort. It belongs to one goroutine.
type Sampler struct {
	s      *C.struct_llama_sampler // chain of filters
	selown *C.struct_llama_sampler // greedy or dist
}

// NewSampler builds a sampler chain for the model.
func NewSampler(m *Model, p SamplerParams) (*Sampler, error) {
	cp := C.llama_sampler_chain_default_params()
	cp.no_perf = C.bool(true)
	chain := C.llama_sampler_chain_init(cp)
	add := func(s *C.struct_llama_sampler) { C.llama_sampler_chain_add(chain, s) }

	if len(p.LogitBias) > 0 {
		biases := make([]C.llama_logit_bias, 0, len(p.LogitBias))
		for tok, b := range p.LogitBias {
			biases = append(biases, C.llama_logit_bias{token: C.llama_token(tok), bias: C.float(b)})
		}
		add(C.llama_sampler_init_logit_bias(C.int32_t(m.NVocab()), C.int32_t(len(biases)), &biases[0]))
	}
	if (p.RepeatPenalty != 0 && p.RepeatPenalty != 1) || p.FrequencyPenalty != 0 || p.PresencePenalty != 0 {
		lastN := p.RepeatLastN
		if lastN == 0 {
			lastN = 64
		}
		rp := p.RepeatPenalty
		if rp == 0 {
			rp = 1
		}
		add(C.llama_sampler_init_penalties(C.int32_t(lastN), C.float(rp), C.float(p.FrequencyPenalty), C.float(p.PresencePenalty)))
	}
	if p.Grammar != "" {
		g := C.CString(p.Grammar)
		gs := C.corral_sampler_init_grammar(m.vocab, g)
		C.free(unsafe.Pointer(g))
		if gs == nil {
			C.llama_sampler_free(chain)
			return nil, ErrGrammar
		}
		add(gs)
	}
	if p.Temperature <= 0 {
		return &Sampler{s: chain, selown: C.llama_sampler_init_greedy()}, nil
	}
	if p.TopK > 0 {
		add(C.llama_sampler_init_top_k(C.int32_t(p.TopK)))
	}
	if p.TypicalP > 0 && p.TypicalP < 1 {
		add(C.llama_sampler_init_typical(C.float(p.TypicalP), 1))
	}
	if p.TopP > 0 && p.TopP < 1 {
		add(C.llama_sampler_init_top_p(C.float(p.TopP), 1))
	}
	if p.MinP > 0 {
		add(C.llama_sampler_init_min_p(C.float(p.MinP), 1))
	}
	add(C.llama_sampler_init_temp(C.float(p.Temperature)))
	seed := C.uint32_t(p.Seed)
	if p.Seed == 0 {
		seed = C.LLAMA_DEFAULT_SEED
	}
	return &Sampler{s: chain, selown: C.llama_sampler_init_dist(seed)}, nil
}

// ErrSample is returned when no token can be sampled: the grammar or the
// logit biases exclude every token of the vocabulary.
var ErrSample = errors.New("llama: sampling failed")

// Sample picks a token from the output at batch index i of the last
// Decode and advances the sampler state (penalties, grammar) with it.
func (s *Sampler) Sample(c *Context, i int) (Token, error) {
	tok := Token(C.corral_sample(s.s, s.selown, c.c, C.int32_t(i)))
	if tok == C.LLAMA_TOKEN_NULL {
		return tok, ErrSample
	}
	return tok, nil
}

// Close frees the sampler.
func (s *Sampler) Close() {
	if s.s != nil {
		C.llama_sampler_free(s.s)
		C.llama_sampler_free(s.selown)
		s.s, s.selown = nil, nil
	}
}
