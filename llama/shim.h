// Declarations of shim.cpp: llama.cpp calls that never let a C++
// exception escape into Go.
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
struct llama_sampler * corral_sampler_init_grammar(const struct llama_vocab * vocab, const char * grammar);
llama_token corral_sample(struct llama_sampler * chain, struct llama_sampler * select, struct llama_context * ctx,
                          int32_t idx);
int32_t corral_decode(struct llama_context * ctx, struct llama_batch batch);

#ifdef __cplusplus
}
#endif

#endif
