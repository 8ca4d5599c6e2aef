// Exception barrier between llama.cpp (C++) and Go.
//
// Some llama.cpp entry points throw C++ exceptions through the C API: the
// SPM tokenizer throws std::out_of_range for a character that has no token
// in a vocabulary without byte fallback, the grammar sampler throws when a
// grammar stack empties. An exception crossing into Go aborts the process,
// so every such call goes through one of these wrappers.
#include "shim.h"

#include <exception>

extern "C" {

int32_t corral_tokenize(const struct llama_vocab * vocab, const char * text, int32_t text_len,
                        llama_token * tokens, int32_t n_tokens_max, bool add_special, bool parse_special,
                        int * failed) {
    *failed = 0;
    try {
        return llama_tokenize(vocab, text, text_len, tokens, n_tokens_max, add_special, parse_special);
    } catch (const std::exception &) {
        *failed = 1;
        return 0;
    }
}

int32_t corral_token_to_piece(const struct llama_vocab * vocab, llama_token token, char * buf, int32_t length,
                              bool special) {
    try {
        return llama_token_to_piece(vocab, token, buf, length, 0, special);
    } catch (const std::exception &) {
        return 0;
    }
}

int32_t corral_detokenize(const struct llama_vocab * vocab, const llama_token * tokens, int32_t n_tokens,
                          char * text, int32_t text_len_max) {
    try {
        return llama_detokenize(vocab, tokens, n_tokens, text, text_len_max, false, false);
    } catch (const std::exception &) {
        return 0;
    }
}

struct llama_sampler * corral_sampler_init_grammar(const struct llama_vocab * vocab, const char * grammar) {
    try {
        return llama_sampler_init_grammar(vocab, grammar, "root");
    } catch (const std::exception &) {
        return nullptr;
    }
}

llama_token corral_sampler_sample(struct llama_sampler * smpl, struct llama_context * ctx, int32_t idx) {
    try {
        return llama_sampler_sample(smpl, ctx, idx);
    } catch (const std::exception &) {
        return LLAMA_TOKEN_NULL;
    }
}

int32_t corral_decode(struct llama_context * ctx, struct llama_batch batch) {
    try {
        return llama_decode(ctx, batch);
    } catch (const std::exception &) {
        return -100;
    }
}

} // extern "C"
