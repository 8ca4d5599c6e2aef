// Exception barrier between llama.cpp (C++) and Go.
//
// Some llama.cpp entry points throw C++ exceptions through the C API: the
// SPM tokenizer throws std::out_of_range for a character that has no token
// in a vocabulary without byte fallback, the grammar throws when its stacks
// empty, constructors throw std::bad_alloc. An exception
// crossing into Go aborts the process, so every call a request can reach
// goes through one of these wrappers. Asserts cannot be caught, so
// corral_sample also avoids the one a dead-end grammar would trip, and the
// Go side bounds every size before it gets here.
#include "shim.h"

#include "ggml-cpu.h"
#include "fit.h"
#include "llama-grammar.h"
#include "mtmd.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <vector>

namespace {

// fill resets cur to the full distribution at batch index idx.
bool fill(std::vector<llama_token_data> & cur, struct llama_context * ctx, int32_t idx) {
    const float * logits = llama_get_logits_ith(ctx, idx);
    if (logits == nullptr) {
        return false;
    }
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
    cur.resize(n_vocab);
    for (llama_token i = 0; i < n_vocab; i++) {
        cur[i] = llama_token_data{i, logits[i], 0.0f};
    }
    return true;
}

bool any_left(const llama_token_data_array & arr) {
    for (size_t i = 0; i < arr.size; i++) {
        if (arr.data[i].logit != -INFINITY) {
            return true;
        }
    }
    return false;
}

// only_eog reports whether every candidate left is an end-of-generation token.
bool only_eog(const llama_vocab * vocab, const llama_token_data_array & arr) {
    for (size_t i = 0; i < arr.size; i++) {
        if (arr.data[i].logit != -INFINITY && !llama_vocab_is_eog(vocab, arr.data[i].id)) {
            return false;
        }
    }
    return true;
}

// grammar_can_start reports whether some token of the vocabulary is allowed
// as the grammar's first token.
bool grammar_can_start(const llama_vocab * vocab, const llama_grammar & grmr) {
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);
    std::vector<llama_token_data> cur(n_vocab);
    for (llama_token i = 0; i < n_vocab; i++) {
        cur[i] = llama_token_data{i, 0.0f, 0.0f};
    }
    llama_token_data_array arr = {cur.data(), cur.size(), -1, false};
    llama_grammar_apply_impl(grmr, &arr);
    for (size_t i = 0; i < arr.size; i++) {
        if (arr.data[i].logit != -INFINITY && !llama_vocab_is_eog(vocab, arr.data[i].id)) {
            return true;
        }
    }
    return false;
}

// grammar_allows reports whether the grammar accepts tok next.
bool grammar_allows(const llama_grammar & grmr, llama_token tok) {
    llama_token_data one = {tok, 1.0f, 0.0f};
    llama_token_data_array single = {&one, 1, -1, false};
    llama_grammar_apply_impl(grmr, &single);
    return single.data[0].logit != -INFINITY;
}

// forced_char sets chr to the one code point every stack of the grammar
// requires next. It reports false when the grammar leaves a choice (of
// characters, or of ending), expects a token id rather than text, or is
// in the middle of a UTF-8 sequence.
bool forced_char(const llama_grammar & grmr, uint32_t & chr) {
    if (grmr.partial_utf8.n_remain != 0 || grmr.stacks.empty()) {
        return false;
    }
    bool found = false;
    for (const auto & stack : grmr.stacks) {
        if (stack.empty()) {
            return false; // the grammar may end here
        }
        const llama_grammar_element * pos = stack.back();
        if (pos->type != LLAMA_GRETYPE_CHAR) {
            return false; // [^...], ".", or a token
        }
        // A character set: CHAR, each range's upper end, then CHAR_ALT
        // for every further member.
        do {
            const uint32_t lo = pos->value;
            uint32_t hi = lo;
            if (pos[1].type == LLAMA_GRETYPE_CHAR_RNG_UPPER) {
                hi = pos[1].value;
                pos++;
            }
            if (lo != hi || (found && lo != chr)) {
                return false;
            }
            chr = lo;
            found = true;
            pos++;
        } while (pos->type == LLAMA_GRETYPE_CHAR_ALT);
    }
    return found && chr != 0;
}

// put_utf8 writes c as UTF-8 into buf and returns its length (0 for a
// value outside Unicode).
int put_utf8(uint32_t c, char * buf) {
    if (c < 0x80) {
        buf[0] = char(c);
        return 1;
    }
    if (c < 0x800) {
        buf[0] = char(0xC0 | (c >> 6));
        buf[1] = char(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        buf[0] = char(0xE0 | (c >> 12));
        buf[1] = char(0x80 | ((c >> 6) & 0x3F));
        buf[2] = char(0x80 | (c & 0x3F));
        return 3;
    }
    if (c < 0x110000) {
        buf[0] = char(0xF0 | (c >> 18));
        buf[1] = char(0x80 | ((c >> 12) & 0x3F));
        buf[2] = char(0x80 | ((c >> 6) & 0x3F));
        buf[3] = char(0x80 | (c & 0x3F));
        return 4;
    }
    return 0;
}

// exp_nonpos is exp(x) for x <= 0 (-inf included), within about 2e-7
// relative error, and 0 below -87 (where expf's result would be 0 or a
// denormal, slow to add up and negligible in a softmax). Branch-free
// arithmetic the compiler vectorizes, where expf is a library call per
// token of the vocabulary.
inline float exp_nonpos(float x) {
    const bool under = !(x >= -87.0f); // -inf and NaN too
    x = under ? -87.0f : x;
    // exp(x) = 2^n * 2^f, n = round(x*log2(e)), |f| <= 1/2.
    const float t = x * 1.44269504088896341f;
    const float n = (t + 12582912.0f) - 12582912.0f; // round to nearest (1.5*2^23)
    const float y = (t - n) * 0.693147180559945309f;  // f*ln(2), |y| <= 0.347
    // Taylor series of e^y to degree 6: error below y^7/7! = 1.3e-7.
    float p = 1.0f / 720.0f;
    p = p * y + 1.0f / 120.0f;
    p = p * y + 1.0f / 24.0f;
    p = p * y + 1.0f / 6.0f;
    p = p * y + 0.5f;
    p = p * y + 1.0f;
    p = p * y + 1.0f;
    int32_t bits;
    std::memcpy(&bits, &p, sizeof bits);
    bits += int32_t(n) * (1 << 23); // n >= -126: a normal result
    float r;
    std::memcpy(&r, &bits, sizeof r);
    return under ? 0.0f : r;
}

// logprobs computes the log-softmax of the candidates left in arr (those
// with a finite logit) for the token at arr.data[chosen], and the n_top
// most likely candidates, most likely first. See corral_sample.
void logprobs(const llama_token_data_array & arr, size_t chosen, int32_t n_top, float * chosen_lp,
              llama_token * top_ids, float * top_lps, int32_t * n_out) {
    // The logits, contiguous: the loops below then vectorize. Each keeps
    // sixteen independent partial results, which the compiler maps onto
    // vector lanes (a single one is a chain it may not reorder).
    constexpr size_t lanes = 16;
    thread_local std::vector<float> buf;
    const size_t n_cand = arr.size;
    buf.resize((n_cand + lanes - 1) / lanes * lanes);
    for (size_t i = 0; i < n_cand; i++) {
        buf[i] = arr.data[i].logit;
    }
    std::fill(buf.begin() + n_cand, buf.end(), -INFINITY);
    float maxes[lanes];
    std::fill(maxes, maxes + lanes, -INFINITY);
    for (size_t i = 0; i < buf.size(); i += lanes) {
        for (size_t k = 0; k < lanes; k++) {
            maxes[k] = buf[i + k] > maxes[k] ? buf[i + k] : maxes[k];
        }
    }
    float max_l = -INFINITY;
    for (float m : maxes) {
        max_l = std::max(max_l, m);
    }
    float sums[lanes] = {};
    for (size_t i = 0; i < buf.size(); i += lanes) {
        for (size_t k = 0; k < lanes; k++) {
            sums[k] += exp_nonpos(buf[i + k] - max_l);
        }
    }
    double sum = 0.0;
    for (float v : sums) {
        sum += v;
    }
    const double norm = double(max_l) + std::log(sum);
    *chosen_lp = float(double(arr.data[chosen].logit) - norm);
    // The n_top largest logits by insertion into a sorted array, a block
    // of logits at a time: n_top is small, and soon most blocks have none
    // above the smallest kept (-inf and NaN never are).
    int32_t n = 0;
    float thr = -INFINITY;
    for (size_t i = 0; i < buf.size() && n_top > 0; i += lanes) {
        int any = 0;
        for (size_t k = 0; k < lanes; k++) {
            any |= buf[i + k] > thr;
        }
        if (!any) {
            continue;
        }
        for (size_t k = 0; k < lanes; k++) {
            const float l = buf[i + k];
            if (!(l > thr)) {
                continue;
            }
            int32_t j = n < n_top ? n++ : n - 1;
            for (; j > 0 && top_lps[j - 1] < l; j--) {
                top_lps[j] = top_lps[j - 1];
                top_ids[j] = top_ids[j - 1];
            }
            top_lps[j] = l;
            top_ids[j] = arr.data[i + k].id;
            if (n == n_top) {
                thr = top_lps[n - 1];
            }
        }
    }
    for (int32_t j = 0; j < n; j++) {
        top_lps[j] = float(double(top_lps[j]) - norm);
    }
    *n_out = n;
}

} // namespace

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

int corral_sampler_new(const struct llama_vocab * vocab, const struct corral_sampler_params * p, const char * grammar,
                       struct llama_sampler ** chain_out, struct llama_grammar ** grmr_out,
                       struct llama_sampler ** select_out) {
    *chain_out = nullptr;
    *grmr_out = nullptr;
    *select_out = nullptr;
    struct llama_sampler * chain = nullptr;
    struct llama_grammar * grmr = nullptr;
    struct llama_sampler * select = nullptr;
    try {
        llama_sampler_chain_params cp = llama_sampler_chain_default_params();
        cp.no_perf = true;
        chain = llama_sampler_chain_init(cp);
        if (p->n_bias > 0) {
            llama_sampler_chain_add(chain, llama_sampler_init_logit_bias(llama_vocab_n_tokens(vocab), p->n_bias, p->bias));
        }
        if (p->repeat_last_n > 0 && (p->repeat_penalty != 1.0f || p->freq_penalty != 0.0f || p->presence_penalty != 0.0f)) {
            llama_sampler_chain_add(chain, llama_sampler_init_penalties(llama_vocab_n_tokens(vocab), p->repeat_last_n,
                                                                        p->repeat_penalty, p->freq_penalty,
                                                                        p->presence_penalty));
        }
        if (p->temp > 0.0f) {
            if (p->top_k > 0) {
                llama_sampler_chain_add(chain, llama_sampler_init_top_k(p->top_k));
            }
            if (p->typical_p > 0.0f && p->typical_p < 1.0f) {
                llama_sampler_chain_add(chain, llama_sampler_init_typical(p->typical_p, 1));
            }
            if (p->top_p > 0.0f && p->top_p < 1.0f) {
                llama_sampler_chain_add(chain, llama_sampler_init_top_p(p->top_p, 1));
            }
            if (p->min_p > 0.0f) {
                llama_sampler_chain_add(chain, llama_sampler_init_min_p(p->min_p, 1));
            }
            llama_sampler_chain_add(chain, llama_sampler_init_temp(p->temp));
            select = llama_sampler_init_dist(p->seed);
        } else {
            select = llama_sampler_init_greedy();
        }
        if (grammar != nullptr) {
            // The grammar's own state rather than llama.cpp's grammar
            // sampler, which hides it: corral_grammar_forced reads it.
            grmr = llama_grammar_init_impl(vocab, grammar, "root", false, nullptr, 0, nullptr, 0);
            if (grmr == nullptr) {
                corral_sampler_free(chain, nullptr, select);
                return CORRAL_SAMPLER_BAD_GRAMMAR;
            }
            if (!grammar_can_start(vocab, *grmr)) {
                *chain_out = chain;
                *grmr_out = grmr;
                *select_out = select;
                return CORRAL_SAMPLER_DEAD_GRAMMAR;
            }
        }
    } catch (const std::exception &) {
        corral_sampler_free(chain, grmr, select);
        return CORRAL_SAMPLER_EXCEPTION;
    }
    *chain_out = chain;
    *grmr_out = grmr;
    *select_out = select;
    return CORRAL_SAMPLER_OK;
}

bool corral_sampler_accept_tokens(struct llama_sampler * chain, const llama_token * tokens, int32_t n) {
    try {
        for (int32_t i = 0; i < n; i++) {
            llama_sampler_accept(chain, tokens[i]);
        }
        return true;
    } catch (const std::exception &) {
        return false;
    }
}

void corral_sampler_free(struct llama_sampler * chain, struct llama_grammar * grmr, struct llama_sampler * select) {
    if (chain != nullptr) {
        llama_sampler_free(chain);
    }
    llama_grammar_free_impl(grmr);
    if (select != nullptr) {
        llama_sampler_free(select);
    }
}

llama_token corral_sample(struct llama_sampler * chain, struct llama_grammar * grmr, struct llama_sampler * select,
                          struct llama_context * ctx, int32_t idx, int * resampled,
                          int32_t n_top, float * chosen_logprob, llama_token * top_ids, float * top_logprobs,
                          int32_t * n_out) {
    *resampled = 0;
    try {
        thread_local std::vector<llama_token_data> cur;
        if (!fill(cur, ctx, idx)) {
            return CORRAL_SAMPLE_NONE;
        }
        llama_token_data_array arr = {cur.data(), cur.size(), -1, false};
        llama_sampler_apply(chain, &arr);
        llama_token tok = LLAMA_TOKEN_NULL;
        // When the filters leave no candidate, the dist selector would trip
        // an assert and abort the process.
        if (any_left(arr)) {
            llama_sampler_apply(select, &arr);
            if (arr.selected >= 0 && (size_t) arr.selected < arr.size) {
                tok = arr.data[arr.selected].id;
            }
        }
        // The array the selector drew from, for the log-probabilities: the
        // first draw's, or the full grammar pass's when that one ran.
        size_t chosen = arr.selected >= 0 ? (size_t) arr.selected : 0;
        if (grmr != nullptr) {
            // Sample first, then ask the grammar about that one token: the
            // full-vocabulary grammar pass is by far the most expensive part
            // of a grammar-constrained step, and the model's own choice is
            // usually allowed.
            if (tok == LLAMA_TOKEN_NULL || !grammar_allows(*grmr, tok)) {
                *resampled = 1;
                fill(cur, ctx, idx);
                arr = {cur.data(), cur.size(), -1, false};
                llama_grammar_apply_impl(*grmr, &arr);
                if (!any_left(arr)) {
                    // Not even an end-of-generation token: the grammar
                    // wants text no token of the vocabulary starts.
                    return CORRAL_SAMPLE_GRAMMAR_DEAD;
                }
                const llama_vocab * vocab = llama_model_get_vocab(llama_get_model(ctx));
                const bool at_end = only_eog(vocab, arr);
                llama_sampler_apply(chain, &arr);
                if (!any_left(arr)) {
                    return at_end ? CORRAL_SAMPLE_GRAMMAR_END : CORRAL_SAMPLE_NONE;
                }
                llama_sampler_apply(select, &arr);
                if (arr.selected < 0 || (size_t) arr.selected >= arr.size) {
                    return CORRAL_SAMPLE_NONE;
                }
                tok = arr.data[arr.selected].id;
                chosen = (size_t) arr.selected;
            }
        }
        if (tok == LLAMA_TOKEN_NULL) {
            return CORRAL_SAMPLE_NONE;
        }
        if (n_top >= 0) {
            logprobs(arr, chosen, n_top, chosen_logprob, top_ids, top_logprobs, n_out);
        }
        llama_sampler_accept(chain, tok);
        if (grmr != nullptr) {
            llama_grammar_accept_impl(*grmr, tok);
        }
        llama_sampler_accept(select, tok);
        return tok;
    } catch (const std::exception &) {
        return CORRAL_SAMPLE_EXCEPTION;
    }
}

int corral_sampler_accept(struct llama_sampler * chain, struct llama_grammar * grmr, struct llama_sampler * select,
                          llama_token tok) {
    try {
        if (grmr != nullptr && !grammar_allows(*grmr, tok)) {
            return CORRAL_ACCEPT_REJECTED;
        }
        llama_sampler_accept(chain, tok);
        if (grmr != nullptr) {
            llama_grammar_accept_impl(*grmr, tok);
        }
        llama_sampler_accept(select, tok);
        return CORRAL_ACCEPT_OK;
    } catch (const std::exception &) {
        return CORRAL_ACCEPT_EXCEPTION;
    }
}

int32_t corral_grammar_forced(struct llama_grammar * grmr, char * buf, int32_t cap) {
    if (grmr == nullptr || cap <= 0) {
        return 0;
    }
    // Advance the stacks character by character, then put them back
    // (they point into the rules, which do not change).
    llama_grammar_stacks saved;
    try {
        saved = grmr->stacks;
    } catch (const std::exception &) {
        return 0;
    }
    int32_t n = 0;
    try {
        uint32_t chr = 0;
        char enc[4];
        while (forced_char(*grmr, chr)) {
            const int k = put_utf8(chr, enc);
            if (k == 0 || n + k > cap) {
                break;
            }
            std::memcpy(buf + n, enc, size_t(k));
            n += k;
            llama_grammar_accept(grmr, chr);
        }
    } catch (const std::exception &) {
        n = 0;
    }
    grmr->stacks = std::move(saved);
    return n;
}

int32_t corral_grammar_prefix(struct llama_grammar * grmr, const llama_token * toks, int32_t n) {
    if (grmr == nullptr || n <= 0) {
        return n < 0 ? 0 : n;
    }
    // Accepting a token changes the stacks, the partial UTF-8 sequence and
    // a lazy grammar's trigger state: keep them, put them back after.
    llama_grammar_stacks saved;
    llama_partial_utf8   utf8     = grmr->partial_utf8;
    bool                 awaiting = grmr->awaiting_trigger;
    std::string          buffer;
    std::vector<llama_grammar::token_pos> positions;
    try {
        saved     = grmr->stacks;
        buffer    = grmr->trigger_buffer;
        positions = grmr->trigger_buffer_positions;
    } catch (const std::exception &) {
        return 0;
    }
    int32_t k = 0;
    try {
        const llama_vocab * vocab = grmr->vocab;
        while (k < n && grammar_allows(*grmr, toks[k])) {
            const bool eog = vocab != nullptr && llama_vocab_is_eog(vocab, toks[k]);
            if (!eog) {
                llama_grammar_accept_impl(*grmr, toks[k]);
            }
            k++;
            if (eog) {
                break;
            }
        }
    } catch (const std::exception &) {
        k = 0;
    }
    grmr->stacks                   = std::move(saved);
    grmr->partial_utf8             = utf8;
    grmr->awaiting_trigger         = awaiting;
    grmr->trigger_buffer           = std::move(buffer);
    grmr->trigger_buffer_positions = std::move(positions);
    return k;
}

bool corral_logits(struct llama_context * ctx, int32_t idx, float * out, int32_t n_vocab) {
    try {
        const float * logits = llama_get_logits_ith(ctx, idx);
        if (logits == nullptr) {
            return false;
        }
        std::memcpy(out, logits, sizeof(float) * (size_t) n_vocab);
        return true;
    } catch (const std::exception &) {
        return false;
    }
}

int32_t corral_decode(struct llama_context * ctx, struct llama_batch batch) {
    try {
        return llama_decode(ctx, batch);
    } catch (const std::exception &) {
        return -100;
    }
}

int32_t corral_decode_embd(struct llama_context * ctx, const float * embd, int32_t n, const int32_t * pos, int32_t seq) {
    try {
        std::vector<int32_t>        n_seq(n, 1);
        std::vector<llama_seq_id>   ids(n, seq);
        std::vector<llama_seq_id *> seqs(n);
        std::vector<int8_t>         logits(n, 0);
        for (int32_t i = 0; i < n; i++) {
            seqs[i] = &ids[i];
        }
        llama_batch batch = {};
        batch.n_tokens = n;
        batch.embd     = const_cast<float *>(embd);
        batch.pos      = const_cast<llama_pos *>(pos);
        batch.n_seq_id = n_seq.data();
        batch.seq_id   = seqs.data();
        batch.logits   = logits.data();
        return llama_decode(ctx, batch);
    } catch (const std::exception &) {
        return -100;
    }
}

void corral_chunk_positions(const struct mtmd_input_chunk * chunk, bool mrope, int32_t pos0, int32_t off, int32_t n, int32_t * out) {
    if (!mrope) {
        for (int32_t i = 0; i < n; i++) {
            out[i] = pos0 + off + i;
        }
        return;
    }
    const mtmd_image_tokens * img = mtmd_input_chunk_get_tokens_image(chunk);
    for (int32_t i = 0; i < n; i++) {
        mtmd_decoder_pos p;
        if (img != nullptr) {
            p = mtmd_image_tokens_get_decoder_pos(img, pos0, (size_t) (off + i));
        } else {
            const uint32_t v = (uint32_t) (pos0 + off + i);
            p = {v, v, v, v};
        }
        out[i]         = (int32_t) p.t;
        out[i + n]     = (int32_t) p.y;
        out[i + 2 * n] = (int32_t) p.x;
        out[i + 3 * n] = (int32_t) p.z;
    }
}

bool corral_encoder_abort(struct ggml_tensor * t, bool ask, void * user_data) {
    int64_t * gen = static_cast<int64_t *>(user_data);
    if (ask) {
        // "layer_out-3", not the views ggml names after it ("layer_out-3 (transposed)").
        const char * name = ggml_get_name(t);
        if (std::strncmp(name, "layer_out-", 10) != 0 || name[10] == '\0') {
            return false;
        }
        for (const char * c = name + 10; *c != '\0'; c++) {
            if (*c < '0' || *c > '9') {
                return false;
            }
        }
        return true;
    }
    __atomic_fetch_add(&gen[2], 1, __ATOMIC_RELAXED);
    return __atomic_load_n(&gen[1], __ATOMIC_RELAXED) != __atomic_load_n(&gen[0], __ATOMIC_RELAXED);
}

bool corral_count_pass(struct ggml_tensor * t, bool ask, void * user_data) {
    uint64_t * n = static_cast<uint64_t *>(user_data);
    if (ask && t->op == GGML_OP_GET_ROWS && t->src[0] != nullptr &&
        std::strcmp(ggml_get_name(t->src[0]), "token_embd.weight") == 0) {
        ++n[0];
    }
    if (ask && t->buffer != nullptr && !ggml_backend_buffer_is_host(t->buffer)) {
        ++n[1];
    }
    return false;
}

// corral_cpu_proc returns the CPU backend's function name (NULL when no
// CPU backend is loaded): ggml-cpu is a module loaded at run time
// (cpuvariant.go), not linked in.
static void * corral_cpu_proc(const char * name) {
    ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (dev == nullptr) {
        return nullptr;
    }
    return ggml_backend_reg_get_proc_address(ggml_backend_dev_backend_reg(dev), name);
}

struct ggml_threadpool * corral_threadpool_new(int32_t n) {
    auto * fn = (decltype(ggml_threadpool_new) *) corral_cpu_proc("ggml_threadpool_new");
    if (fn == nullptr) {
        return nullptr;
    }
    struct ggml_threadpool_params p = ggml_threadpool_params_default(n);
    return fn(&p);
}

void corral_threadpool_free(struct ggml_threadpool * tp) {
    auto * fn = (decltype(ggml_threadpool_free) *) corral_cpu_proc("ggml_threadpool_free");
    if (fn != nullptr && tp != nullptr) {
        fn(tp);
    }
}

} // extern "C"

bool corral_params_fit(const char * path, struct llama_model_params * mparams, struct llama_context_params * cparams,
                       float * tensor_split, struct llama_model_tensor_buft_override * overrides, size_t margin,
                       uint32_t n_ctx_min) {
    try {
        // One margin per device, as common_fit_params reads them.
        std::vector<size_t> margins(llama_max_devices(), margin);
        return common_fit_params(path, mparams, cparams, tensor_split, overrides, margins.data(), n_ctx_min,
                                 GGML_LOG_LEVEL_ERROR) == COMMON_PARAMS_FIT_STATUS_SUCCESS;
    } catch (...) {
        return false;
    }
}

bool corral_memory_needs(const char * path, const struct llama_model_params * mparams,
                         const struct llama_context_params * cparams, size_t sizes[3]) {
    try {
        std::vector<ggml_backend_dev_t> devs;
        uint32_t layers = 0, ctx_train = 0, experts = 0;
        common_device_memory_data_vec mem = common_get_device_memory_data(
            path, mparams, cparams, devs, layers, ctx_train, experts, GGML_LOG_LEVEL_ERROR);
        sizes[0] = sizes[1] = sizes[2] = 0;
        for (const auto & d : mem) {
            sizes[0] += d.model;
            sizes[1] += d.context;
            sizes[2] += d.compute;
        }
        return true;
    } catch (...) {
        return false;
    }
}

// common/log.cpp, linked for fit.cpp's logs, asks common/common.cpp (not
// linked: corral uses nothing else of it) whether a terminal takes colours.
// corral's own logs carry none.
bool tty_can_use_colors() {
    return false;
}
