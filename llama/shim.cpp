// Exception barrier between llama.cpp (C++) and Go.
//
// Some llama.cpp entry points throw C++ exceptions through the C API: the
// SPM tokenizer throws std::out_of_range for a character that has no token
// in a vocabulary without byte fallback, the grammar sampler throws when a
// grammar stack empties. Asserts cannot be caught, so corral_sample also
// avoids the one a dead-end grammar would trip. An exception crossing into Go aborts the process,
// so every such call goes through one of these wrappers.
#include "shim.h"

#include <cmath>
#include <exception>
#include <vector>

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

llama_token corral_sample(struct llama_sampler * chain, struct llama_sampler * select, struct llama_context * ctx,
                          int32_t idx) {
    try {
        const float * logits = llama_get_logits_ith(ctx, idx);
        if (logits == nullptr) {
            return LLAMA_TOKEN_NULL;
        }
        const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
        thread_local std::vector<llama_token_data> cur;
        cur.resize(n_vocab);
        for (llama_token i = 0; i < n_vocab; i++) {
            cur[i] = llama_token_data{i, logits[i], 0.0f};
        }
        llama_token_data_array arr = {cur.data(), cur.size(), -1, false};
        llama_sampler_apply(chain, &arr);
        // When the filters (a grammar, logit biases) leave no candidate, the
        // dist selector would trip an assert and abort the process.
        bool any = false;
        for (size_t i = 0; i < arr.size; i++) {
            if (arr.data[i].logit != -INFINITY) {
                any = true;
                break;
            }
        }
        if (!any) {
            return LLAMA_TOKEN_NULL;
        }
        llama_sampler_apply(select, &arr);
        if (arr.selected < 0 || (size_t) arr.selected >= arr.size) {
            return LLAMA_TOKEN_NULL;
        }
        const llama_token tok = arr.data[arr.selected].id;
        llama_sampler_accept(chain, tok);
        llama_sampler_accept(select, tok);
        return tok;
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
