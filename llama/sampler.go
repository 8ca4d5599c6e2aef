package llama

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"unicode/utf8"
	"unsafe"
)

// SamplerParams select the sampler chain, in llama-server's order:
// logit bias, penalties, top-k, typical, top-p, min-p, temperature, then a
// seeded draw (or greedy when Temperature <= 0). A grammar is checked
// against the drawn token (see Sampler.Sample).
type SamplerParams struct {
	Temperature      float32
	TopK             int // clamped to the vocabulary size
	TopP             float32
	MinP             float32
	TypicalP         float32
	RepeatPenalty    float32
	FrequencyPenalty float32
	PresencePenalty  float32
	// RepeatLastN is the penalty window in tokens, 0 disabling penalties.
	// The caller bounds it (the engine clamps it to a slot's context);
	// NewSampler refuses more than MaxRepeatLastN.
	RepeatLastN int
	Seed        uint32
	LogitBias   map[Token]float32 // token ids must be in the vocabulary
	Grammar     string            // GBNF with root rule "root"; "" for none
}

// MaxRepeatLastN bounds SamplerParams.RepeatLastN: llama.cpp allocates a
// ring buffer of that many tokens.
const MaxRepeatLastN = 1 << 20

// Errors of NewSampler and Sample.
var (
	// ErrGrammar: llama.cpp rejected the grammar text.
	ErrGrammar = errors.New("llama: grammar could not be parsed")
	// ErrGrammarDead: no sequence of the vocabulary's tokens writes the
	// text the grammar starts with (see UnwritableError).
	ErrGrammarDead = errors.New("llama: this vocabulary cannot write the start of the grammar")
	// ErrGrammarStuck: the grammar has reached a point that no token of
	// the vocabulary continues, not even an end-of-generation token (see
	// UnwritableError).
	ErrGrammarStuck = errors.New("llama: no token of this vocabulary continues the grammar")
	// ErrSample: no token can be sampled (the logit biases exclude every
	// token the grammar allows).
	ErrSample = errors.New("llama: sampling failed")
	// ErrNotAllowed: Accept was given a token the grammar does not allow.
	ErrNotAllowed = errors.New("llama: the grammar does not allow the token")
	// ErrGrammarEnd: the grammar is complete and allows only an
	// end-of-generation token, which the logit biases ban.
	ErrGrammarEnd = errors.New("llama: the grammar is complete")
)

// UnwritableError is the error of a grammar the vocabulary cannot write:
// NewSampler's when no sequence of tokens writes the text the grammar
// starts with (Err is ErrGrammarDead), Sample's when the grammar has
// reached a point that no token continues (Err is ErrGrammarStuck).
type UnwritableError struct {
	Err error
	// Reason says what the grammar requires that no token writes, in
	// words for a person.
	Reason string
}

// Error is Err's message and the reason.
func (e *UnwritableError) Error() string { return e.Err.Error() + ": " + e.Reason }

// Unwrap returns Err, for errors.Is.
func (e *UnwritableError) Unwrap() error { return e.Err }

// maxStartCheck bounds the text at a grammar's start that NewSampler
// checks the vocabulary can write.
const maxStartCheck = 1024

// Sampler is the filter chain, an optional grammar and the final selector
// (greedy or a seeded draw), kept apart so that a filter that leaves no
// candidate is an error instead of an abort and the grammar is evaluated
// only when needed. It belongs to one goroutine.
type Sampler struct {
	chain, sel *C.struct_llama_sampler
	grammar    *C.struct_llama_grammar
	lp         logprobScratch
	// Resampled counts the steps whose drawn token the grammar rejected,
	// so the grammar had to be applied to the whole vocabulary.
	Resampled int
}

// NewSampler builds a sampler for the model. Every llama.cpp constructor
// runs behind the exception barrier. A grammar whose start the
// vocabulary cannot write (the text it requires before any choice, up to
// 1 KiB of it) is an *UnwritableError wrapping ErrGrammarDead.
func NewSampler(m *Model, p SamplerParams) (*Sampler, error) {
	if p.RepeatLastN < 0 || p.RepeatLastN > MaxRepeatLastN {
		return nil, fmt.Errorf("llama: penalty window %d outside [0, %d]", p.RepeatLastN, MaxRepeatLastN)
	}
	cp := C.struct_corral_sampler_params{
		temp:             C.float(p.Temperature),
		top_k:            C.int32_t(min(max(p.TopK, 0), m.NVocab())),
		top_p:            C.float(p.TopP),
		min_p:            C.float(p.MinP),
		typical_p:        C.float(p.TypicalP),
		repeat_penalty:   C.float(p.RepeatPenalty),
		freq_penalty:     C.float(p.FrequencyPenalty),
		presence_penalty: C.float(p.PresencePenalty),
		repeat_last_n:    C.int32_t(p.RepeatLastN),
		seed:             C.uint32_t(p.Seed),
	}
	if cp.repeat_penalty == 0 {
		cp.repeat_penalty = 1
	}
	if len(p.LogitBias) > 0 {
		// C memory: the struct holding the pointer is passed to C.
		n := len(p.LogitBias)
		biases := unsafe.Slice((*C.llama_logit_bias)(C.malloc(C.size_t(n)*C.size_t(unsafe.Sizeof(C.llama_logit_bias{})))), n)
		defer C.free(unsafe.Pointer(&biases[0]))
		i := 0
		for tok, b := range p.LogitBias {
			if tok < 0 || int(tok) >= m.NVocab() {
				return nil, fmt.Errorf("llama: logit bias for token %d outside the vocabulary", tok)
			}
			if math.IsInf(float64(b), 1) || math.IsNaN(float64(b)) {
				return nil, fmt.Errorf("llama: logit bias %g for token %d", b, tok)
			}
			biases[i] = C.llama_logit_bias{token: C.llama_token(tok), bias: C.float(b)}
			i++
		}
		cp.bias, cp.n_bias = &biases[0], C.int32_t(n)
	}
	var grammar *C.char
	if p.Grammar != "" {
		grammar = C.CString(p.Grammar)
		defer C.free(unsafe.Pointer(grammar))
	}
	s := &Sampler{}
	switch rc := C.corral_sampler_new(m.vocab, &cp, grammar, &s.chain, &s.grammar, &s.sel); rc {
	case C.CORRAL_SAMPLER_OK:
		if err := s.checkStart(m); err != nil {
			s.Close()
			return nil, err
		}
		return s, nil
	case C.CORRAL_SAMPLER_BAD_GRAMMAR:
		return nil, ErrGrammar
	case C.CORRAL_SAMPLER_DEAD_GRAMMAR:
		reason := "no token of the vocabulary can start it"
		if forced := s.Forced(nil, 32); len(forced) > 0 {
			reason = fmt.Sprintf("no token writes the start of %s, the text the grammar starts with", quoteHead(forced))
		}
		s.Close()
		return nil, &UnwritableError{Err: ErrGrammarDead, Reason: reason}
	default:
		return nil, fmt.Errorf("llama: create sampler: exception in llama.cpp (%d)", int(rc))
	}
}

// checkStart checks that some sequence of the vocabulary's tokens writes
// the text the grammar requires before its first choice: llama.cpp's
// grammar checks one token at a time, so a grammar like "<tool_call>\n{"
// on a vocabulary without "{" would fail only after the tokens before it.
func (s *Sampler) checkStart(m *Model) error {
	forced := s.Forced(nil, maxStartCheck)
	if len(forced) == 0 {
		return nil
	}
	n := m.Pieces().Reach(forced)
	if n == len(forced) {
		return nil
	}
	if n == 0 {
		return &UnwritableError{Err: ErrGrammarDead, Reason: fmt.Sprintf("no token writes the start of %s, the text the grammar starts with", quoteHead(forced))}
	}
	return &UnwritableError{Err: ErrGrammarDead, Reason: fmt.Sprintf("no token writes the start of %s, which the grammar requires after %s", quoteHead(forced[n:]), quoteTail(forced[:n]))}
}

// quoteHead quotes the first few characters of text, quoteTail its last
// ones, for an error message.
func quoteHead(text []byte) string {
	n := 0
	for i := 0; i < 8 && n < len(text); i++ {
		_, size := utf8.DecodeRune(text[n:])
		n += size
	}
	if n < len(text) {
		return fmt.Sprintf("%q...", text[:n])
	}
	return fmt.Sprintf("%q", text)
}

func quoteTail(text []byte) string {
	n := len(text)
	for i := 0; i < 24 && n > 0; i++ {
		_, size := utf8.DecodeLastRune(text[:n])
		n -= size
	}
	if n > 0 {
		return fmt.Sprintf("...%q", text[n:])
	}
	return fmt.Sprintf("%q", text)
}

// Forced appends to dst the text the grammar requires next, at most max
// bytes of it: characters one after another for as long as the grammar
// allows exactly one, such as the literal markup around a tool call or
// the keys of a JSON object. Nothing is appended when the next character
// is a choice, the grammar may end, or there is no grammar. The
// grammar's state does not change.
func (s *Sampler) Forced(dst []byte, max int) []byte {
	if s.grammar == nil || max <= 0 {
		return dst
	}
	dst = slices.Grow(dst, max)
	buf := dst[len(dst) : len(dst)+max]
	n := C.corral_grammar_forced(s.grammar, (*C.char)(unsafe.Pointer(&buf[0])), C.int32_t(max))
	return dst[:len(dst)+int(n)]
}

// GrammarAllows returns how many of toks, one after another from the
// sampler's present state, its grammar accepts (all of them without a
// grammar); an end-of-generation token it accepts ends the count. The
// grammar's state does not change. It cuts a speculative draft where the
// grammar would refuse it, before the draft is evaluated.
func (s *Sampler) GrammarAllows(toks []Token) int {
	if s.grammar == nil || len(toks) == 0 {
		return len(toks)
	}
	n := C.corral_grammar_prefix(s.grammar, (*C.llama_token)(unsafe.Pointer(&toks[0])), C.int32_t(len(toks)))
	runtime.KeepAlive(toks)
	return int(n)
}

// HasGrammar reports whether the sampler has a grammar.
func (s *Sampler) HasGrammar() bool { return s.grammar != nil }

// Accept records tok as if Sample had drawn it: in the penalties' history,
// the grammar and the selector (whose random state does not advance). A
// token the grammar does not allow is ErrNotAllowed, and changes nothing.
// It is for tokens a caller chooses itself, such as an end-of-thinking
// marker a reasoning budget forces.
func (s *Sampler) Accept(tok Token) error {
	switch C.corral_sampler_accept(s.chain, s.grammar, s.sel, C.llama_token(tok)) {
	case C.CORRAL_ACCEPT_OK:
		return nil
	case C.CORRAL_ACCEPT_REJECTED:
		return fmt.Errorf("%w: token %d", ErrNotAllowed, tok)
	}
	return fmt.Errorf("llama: accept token %d: exception in llama.cpp", tok)
}

// AcceptPrompt records prompt tokens in the penalty history, as
// llama-server does, so repetition penalties see the prompt. The grammar is
// not advanced. Only the last RepeatLastN tokens matter; pass just those.
func (s *Sampler) AcceptPrompt(toks []Token) error {
	if len(toks) == 0 {
		return nil
	}
	ok := C.corral_sampler_accept_tokens(s.chain, (*C.llama_token)(unsafe.Pointer(&toks[0])), C.int32_t(len(toks)))
	runtime.KeepAlive(toks)
	if !ok {
		return fmt.Errorf("llama: accept prompt: exception in llama.cpp")
	}
	return nil
}

// Sample picks a token from the output at batch index i of the last Decode
// and advances the sampler state (penalties, grammar) with it. With a
// grammar, the token is drawn first and only it is checked against the
// grammar; the grammar runs over the whole vocabulary only when it rejects
// that token (llama.cpp's common sampler does the same). A grammar that
// no token continues is an *UnwritableError wrapping ErrGrammarStuck.
func (s *Sampler) Sample(c *Context, i int) (Token, error) {
	return s.sample(c, i, -1, nil)
}

// TokenLogprob is a token and its log-probability.
type TokenLogprob struct {
	Token   Token
	Logprob float32
}

// MaxTopLogprobs bounds the top alternatives SampleLogprobs reports.
const MaxTopLogprobs = 100

// SampleLogprobs is Sample that also reports log-probabilities: the drawn
// token's, and the nTop (at most MaxTopLogprobs) most likely candidates,
// most likely first, appended to top[:0].
//
// They are the log-softmax of the distribution the selector drew from:
// the logits after the filter chain (logit bias and penalties; with
// Temperature > 0 also top-k, typical, top-p, min-p and the temperature),
// like llama-server's post_sampling_probs. With Temperature > 0 they
// reflect the truncation and the temperature, and tokens the filters
// removed do not appear (top may be shorter than nTop). Greedy sampling
// keeps every token, so without biases and penalties they are the
// log-softmax of the raw logits, and the drawn token is top[0]. With a
// grammar, the distribution is the chain's when the grammar accepted the
// first draw (alternatives the grammar would refuse can appear), and the
// grammar-filtered one when its full pass ran.
func (s *Sampler) SampleLogprobs(c *Context, i, nTop int, top []TokenLogprob) (Token, float32, []TokenLogprob, error) {
	nTop = min(max(nTop, 0), MaxTopLogprobs)
	lp := &s.lp
	tok, err := s.sample(c, i, nTop, lp)
	top = top[:0]
	if err != nil {
		return tok, 0, top, err
	}
	for j := range int(lp.n) {
		top = append(top, TokenLogprob{Token: lp.ids[j], Logprob: lp.lps[j]})
	}
	return tok, lp.chosen, top, nil
}

// logprobScratch receives corral_sample's log-probabilities.
type logprobScratch struct {
	chosen float32
	n      C.int32_t
	ids    [MaxTopLogprobs]Token
	lps    [MaxTopLogprobs]float32
}

// sample runs corral_sample; with nTop >= 0 it fills lp.
func (s *Sampler) sample(c *Context, i, nTop int, lp *logprobScratch) (Token, error) {
	var resampled C.int
	var tok Token
	if nTop < 0 {
		tok = Token(C.corral_sample(s.chain, s.grammar, s.sel, c.c, c.row(i), &resampled, -1, nil, nil, nil, nil))
	} else {
		lp.n = 0
		tok = Token(C.corral_sample(s.chain, s.grammar, s.sel, c.c, c.row(i), &resampled, C.int32_t(nTop),
			(*C.float)(&lp.chosen), (*C.llama_token)(&lp.ids[0]), (*C.float)(&lp.lps[0]), &lp.n))
	}
	if resampled != 0 {
		s.Resampled++
	}
	switch {
	case tok >= 0:
		return tok, nil
	case tok == C.CORRAL_SAMPLE_GRAMMAR_END:
		return tok, ErrGrammarEnd
	case tok == C.CORRAL_SAMPLE_GRAMMAR_DEAD:
		reason := "no token of the vocabulary continues it here"
		if need := s.Forced(nil, 32); len(need) > 0 {
			reason = fmt.Sprintf("no token writes the start of %s, which the grammar requires next", quoteHead(need))
		}
		return tok, &UnwritableError{Err: ErrGrammarStuck, Reason: reason}
	case tok == C.CORRAL_SAMPLE_EXCEPTION:
		return tok, fmt.Errorf("%w: exception in llama.cpp", ErrSample)
	}
	return tok, ErrSample
}

// Close frees the sampler.
func (s *Sampler) Close() {
	if s.chain != nil {
		C.corral_sampler_free(s.chain, s.grammar, s.sel)
		s.chain, s.grammar, s.sel = nil, nil, nil
	}
}
