// Declarations of shim.cpp: the llama.cpp calls a request can reach, each
// behind a barrier that never lets a C++ exception escape into Go.
#ifndef CORRAL_SHIM_H
#define CORRAL_SHIM_H

#include <stdbool.h>
#include <stdint.h>
#include "llama.h"

#ifdef __cplusplus
extern "C" {
#endif

int32_t corral_tokenize(const struct llama_vocab * vocab, const char * text, int32_t text_len,
                        llama_token * tokens, int32_t n_tokens_max, bool add_special, bool parse_special,
                        int * failed);
int32_t corral_token_to_piece(const struct llama_vocab * vocab, llama_token token, char * buf, int32_t length,
                              bool special);
int32_t corral_detokenize(const struct llama_vocab * vocab, const llama_token * tokens, int32_t n_tokens,
                          char * text, int32_t text_len_max);

// llama.cpp's grammar state (llama-grammar.h): its rules and the stacks of
// its parse so far.
struct llama_grammar;

// Sampler settings, already bounded by the caller (see sampler.go).
struct corral_sampler_params {
    float    temp;
    int32_t  top_k;
    float    top_p;
    float    min_p;
    float    typical_p;
    float    repeat_penalty;
    float    freq_penalty;
    float    presence_penalty;
    int32_t  repeat_last_n;
    uint32_t seed;
    const llama_logit_bias * bias;
    int32_t  n_bias;
};

// Results of corral_sampler_new.
enum {
    CORRAL_SAMPLER_OK            = 0,
    CORRAL_SAMPLER_BAD_GRAMMAR   = 1, // llama.cpp rejected the grammar text
    CORRAL_SAMPLER_DEAD_GRAMMAR  = 2, // no token of the vocabulary can start the grammar
    CORRAL_SAMPLER_EXCEPTION     = 3,
};

// corral_sampler_new builds the filter chain (logit bias, penalties, top-k,
// typical, top-p, min-p, temperature), the grammar (NULL when grammar is
// NULL) and the selector (greedy or a seeded draw). With
// CORRAL_SAMPLER_DEAD_GRAMMAR they are built too, for the caller to look
// at the grammar before it frees them.
int corral_sampler_new(const struct llama_vocab * vocab, const struct corral_sampler_params * p, const char * grammar,
                       struct llama_sampler ** chain, struct llama_grammar ** grmr, struct llama_sampler ** select);

// corral_sampler_accept_tokens records tokens (the prompt) in the chain's
// penalty history without touching the grammar. Returns false on an exception.
bool corral_sampler_accept_tokens(struct llama_sampler * chain, const llama_token * tokens, int32_t n);

// corral_sampler_free frees the chain, the grammar and the selector (any
// may be NULL).
void corral_sampler_free(struct llama_sampler * chain, struct llama_grammar * grmr, struct llama_sampler * select);

// Results of corral_sample below zero.
enum {
    CORRAL_SAMPLE_NONE         = -1, // no candidate left: the logit biases exclude every token the grammar allows
    CORRAL_SAMPLE_GRAMMAR_END  = -2, // the grammar is complete: it allows only end-of-generation tokens, and those are banned
    CORRAL_SAMPLE_EXCEPTION    = -3,
    CORRAL_SAMPLE_GRAMMAR_DEAD = -4, // the grammar allows no token of the vocabulary, not even an end-of-generation one
};

// corral_sample picks a token from the output at batch index idx. With a
// grammar it samples first and checks only the chosen token against the
// grammar, evaluating the grammar over the whole vocabulary only when that
// token is rejected. *resampled is set to 1 in that case.
//
// With n_top >= 0 it also computes log-probabilities: the log-softmax of
// the candidates the selector drew from (after the filter chain, and after
// the grammar when its full pass ran). *chosen_logprob is the drawn
// token's; top_ids/top_logprobs (capacity n_top) receive the n_top most
// likely candidates, most likely first, and *n_out how many there were
// (fewer when fewer candidates are left). Candidates the filters removed
// (or set to -inf) are not counted. With n_top < 0 nothing is computed and
// the four pointers may be NULL.
llama_token corral_sample(struct llama_sampler * chain, struct llama_grammar * grmr, struct llama_sampler * select,
                          struct llama_context * ctx, int32_t idx, int * resampled,
                          int32_t n_top, float * chosen_logprob, llama_token * top_ids, float * top_logprobs,
                          int32_t * n_out);

// Results of corral_sampler_accept.
enum {
    CORRAL_ACCEPT_OK        = 0,
    CORRAL_ACCEPT_REJECTED  = 1, // the grammar does not allow the token: nothing changed
    CORRAL_ACCEPT_EXCEPTION = 2,
};

// corral_sampler_accept records tok as corral_sample records the token it
// draws (in the penalties, the grammar and the selector), for a token
// chosen without sampling, after checking that the grammar (if any)
// allows it. The selector's random state does not advance.
int corral_sampler_accept(struct llama_sampler * chain, struct llama_grammar * grmr, struct llama_sampler * select,
                          llama_token tok);

// corral_grammar_forced writes into buf (capacity cap bytes, whole UTF-8
// characters only) the text the grammar requires next, one character
// after another for as long as the grammar allows exactly one: where its
// rules leave no choice, such as the literal markup around a tool call or
// the keys of a JSON object with a fixed order. It returns the length,
// 0 when the next character is a choice (or the grammar may end there, or
// is NULL). The grammar's state does not change.
int32_t corral_grammar_forced(struct llama_grammar * grmr, char * buf, int32_t cap);

// corral_grammar_prefix returns how many of toks, one after another from
// the grammar's present state, the grammar accepts: n when grmr is NULL;
// an end-of-generation token it accepts ends the count. The grammar's
// state does not change.
int32_t corral_grammar_prefix(struct llama_grammar * grmr, const llama_token * toks, int32_t n);

// corral_logits copies the n_vocab logits at batch index idx of the last
// decode into out. Returns false when there are none (or on an exception).
bool corral_logits(struct llama_context * ctx, int32_t idx, float * out, int32_t n_vocab);

int32_t corral_decode(struct llama_context * ctx, struct llama_batch batch);

// corral_decode_embd evaluates n input embeddings (n rows of the model's
// input width) of sequence seq at positions pos: n of them, or for a
// model with M-RoPE 4 planes of n (llama_batch's layout). Nothing is
// output. It returns llama_decode's code, or -100 when C++ threw.
int32_t corral_decode_embd(struct llama_context * ctx, const float * embd, int32_t n, const int32_t * pos, int32_t seq);

struct mtmd_input_chunk;

// corral_chunk_positions writes to out the positions of n embeddings of
// a media chunk from its off-th, the chunk starting at position pos0, as
// llama.cpp's mtmd helpers place them: pos0+off+i, or with mrope 4
// planes of n, t y x z (an image's 2-D positions from
// mtmd_image_tokens_get_decoder_pos; a sound's pos0+off+i in each).
void corral_chunk_positions(const struct mtmd_input_chunk * chunk, bool mrope, int32_t pos0, int32_t off, int32_t n, int32_t * out);

// corral_encoder_abort is an eval callback for a projector's encoder
// (mtmd_context_params.cb_eval): user_data points to three int64s, the
// number of the encode running, the number of the last one aborted, and
// a count of the layers computed, which it adds to at the end of each
// (the nodes clip names "layer_out-N"). When the first two are equal the
// graph stops there, so an abort waits one layer at most.
bool corral_encoder_abort(struct ggml_tensor * t, bool ask, void * user_data);

// corral_count_pass is an eval callback (llama_context_params.cb_eval) that
// counts forward passes: it adds one to ((uint64_t *)user_data)[0] each
// time ggml is about to compute a graph's token-embedding lookup (the rows of
// token_embd.weight: a named input since llama.cpp's 2026 releases, so the
// lookup, not inp_embd, is what runs), which every
// decoder graph computes exactly once, and asks for no tensor data. It
// adds one to ((uint64_t *)user_data)[1] for every node computed into a
// buffer that is not host memory (a GPU's).
bool corral_count_pass(struct ggml_tensor * t, bool ask, void * user_data);

// corral_threadpool_new makes a persistent ggml thread pool of n threads
// (NULL on failure); free it with corral_threadpool_free after the context.
struct ggml_threadpool * corral_threadpool_new(int32_t n);
void                     corral_threadpool_free(struct ggml_threadpool * tp);

// corral_outputs_max lets a decode have as many outputs as the batch has
// tokens or the context sequences, whichever is more: since llama.cpp's
// 2026 releases a context reserves n_outputs_max (default: n_batch) and
// asserts when its buffers would need one per sequence beyond that.
static inline void corral_outputs_max(struct llama_context_params * p) {
    p->n_outputs_max = p->n_batch > p->n_seq_max ? p->n_batch : p->n_seq_max;
}

// corral_params_fit lowers mparams' GPU layers (and writes its tensor split
// and overrides) to what fits in the devices' free memory beside a context
// of cparams, leaving margin bytes free on each device: llama.cpp's fitting
// (common_fit_params). Not thread-safe: it
// swaps llama.cpp's global log callback while it runs.
bool corral_params_fit(const char * path, struct llama_model_params * mparams, struct llama_context_params * cparams,
                       float * tensor_split, struct llama_model_tensor_buft_override * overrides, size_t margin,
                       uint32_t n_ctx_min);

// corral_memory_needs writes to sizes what llama.cpp would allocate for
// the model at path loaded with mparams and a context of cparams, found
// without allocating it (the accounting llama.cpp's fitting runs on):
// sizes[0] the weights, sizes[1] the context's memory (the KV cells of
// every kind and the recurrent states), sizes[2] the compute buffers,
// each summed over the host and the devices. False when llama.cpp cannot
// build the model or the context. Not thread-safe, as corral_params_fit.
bool corral_memory_needs(const char * path, const struct llama_model_params * mparams,
                         const struct llama_context_params * cparams, size_t sizes[3]);

#ifdef __cplusplus
}
#endif

#endif
