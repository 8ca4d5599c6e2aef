// See corral-arch.h. The only file of corral's compiled against
// llama.cpp's internal headers; it changes with the release.
#include "corral-arch.h"

#include "gguf.h"
#include "llama-arch.h"
#include "llama-context.h"
#include "llama-ext.h"
#include "llama-memory-hybrid-iswa.h"
#include "llama-memory-hybrid.h"
#include "llama-memory-recurrent.h"
#include "llama-model.h"

#include "ggml-backend.h"

#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace {

const std::vector<llm_arch> & archs() {
    static const std::vector<llm_arch> all = [] {
        std::vector<llm_arch> v;
        for (llm_arch a : llm_arch_all()) {
            if (a != LLM_ARCH_UNKNOWN) {
                v.push_back(a);
            }
        }
        return v;
    }();
    return all;
}

// llama_model_init_from_user reports why it failed only in the log: a
// forwarding logger, installed once, keeps the first error of a thread
// that asked for it.
thread_local std::string * last_error = nullptr;
ggml_log_callback next_log = nullptr;
void * next_log_ud = nullptr;

void capture_log(ggml_log_level level, const char * text, void * ud) {
    if (last_error != nullptr && last_error->empty() && level == GGML_LOG_LEVEL_ERROR && text != nullptr) {
        *last_error = text;
    }
    if (next_log != nullptr) {
        next_log(level, text, next_log_ud);
    }
    (void) ud;
}

void no_data(struct ggml_tensor *, void *) {}

// install_capture puts capture_log in front of llama.cpp's log callback,
// once.
void install_capture() {
    static std::once_flag once;
    std::call_once(once, [] {
        llama_log_get(&next_log, &next_log_ud);
        llama_log_set(capture_log, nullptr);
    });
}

// capture keeps the first error llama.cpp logs on this thread while it
// lives, and writes it (or fallback) to a C buffer.
struct capture {
    std::string why;
    capture() {
        install_capture();
        last_error = &why;
    }
    ~capture() { last_error = nullptr; }
    void write(char * err, size_t err_len, const char * fallback) {
        last_error = nullptr;
        if (err == nullptr || err_len == 0) {
            return;
        }
        if (why.empty()) {
            why = fallback;
        }
        while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) {
            why.pop_back();
        }
        snprintf(err, err_len, "%s", why.c_str());
    }
};

} // namespace

extern "C" int32_t corral_arch_count(void) {
    return (int32_t) archs().size();
}

extern "C" const char * corral_arch_name(int32_t i) {
    if (i < 0 || (size_t) i >= archs().size()) {
        return nullptr;
    }
    return llm_arch_name(archs()[i]);
}

extern "C" struct llama_model * corral_layout(const char * path, char * err, size_t err_len) {
    capture c;
    struct llama_model * model = nullptr;
    gguf_context * meta = nullptr;
    const char * fallback = "llama.cpp could not build the model";
    try {
        gguf_init_params gp = {/*no_alloc =*/ true, /*ctx =*/ nullptr};
        meta = gguf_init_from_file(path, gp);
        if (meta == nullptr) {
            fallback = "not a GGUF file";
        } else {
            llama_model_params mp = llama_model_default_params();
            ggml_backend_dev_t none[] = {nullptr}; // the CPU alone
            mp.devices = none;
            mp.n_gpu_layers = 0;
            mp.no_alloc = true;
            mp.load_mtp = true; // a model's multi-token prediction heads are tensors too
            model = llama_model_init_from_user(meta, no_data, nullptr, mp);
        }
    } catch (const std::exception & e) {
        c.why = e.what();
    }
    if (meta != nullptr) {
        gguf_free(meta);
    }
    if (model == nullptr) {
        c.write(err, err_len, fallback);
    }
    return model;
}

extern "C" struct llama_model * corral_model_load(const char * path, struct llama_model_params params, char * err, size_t err_len) {
    capture c;
    struct llama_model * model = llama_model_load_from_file(path, params);
    if (model == nullptr) {
        c.write(err, err_len, "llama.cpp could not load it");
    }
    return model;
}

extern "C" struct llama_context * corral_context_new(struct llama_model * model, struct llama_context_params params, char * err, size_t err_len) {
    capture c;
    struct llama_context * ctx = llama_init_from_model(model, params);
    if (ctx == nullptr) {
        c.write(err, err_len, "failed");
    }
    return ctx;
}

extern "C" const char * corral_layout_tensor(const struct llama_model * model, int32_t i, int64_t ne[4]) {
    if (model == nullptr || i < 0 || (size_t) i >= model->tensors_by_name.size()) {
        return nullptr;
    }
    const ggml_tensor * t = model->tensors_by_name[i].second;
    for (int d = 0; d < 4; d++) {
        ne[d] = t->ne[d];
    }
    return model->tensors_by_name[i].first.c_str();
}

extern "C" void corral_memory_of(const struct llama_context * ctx, size_t sizes[3]) {
    sizes[0] = sizes[1] = sizes[2] = 0;
    for (const auto & [buft, m] : llama_get_memory_breakdown(ctx)) {
        sizes[0] += m.model;
        sizes[1] += m.context;
        sizes[2] += m.compute;
    }
}

extern "C" bool corral_memory_apply(struct llama_context * ctx) {
    try {
        return ctx->memory_update(false);
    } catch (const std::exception &) {
        return false;
    }
}

extern "C" void corral_set_embeddings_nextn(struct llama_context * ctx, bool on, bool masked) {
    llama_set_embeddings_nextn(ctx, on, masked);
}

extern "C" const float * corral_embeddings_nextn_ith(struct llama_context * ctx, int32_t i) {
    try {
        return llama_get_embeddings_nextn_ith(ctx, i);
    } catch (const std::exception &) {
        return nullptr;
    }
}

namespace {

llama_memory_recurrent * recurrent_of(llama_context * ctx) {
    llama_memory_i * mem = llama_get_memory(ctx);
    if (auto * h = dynamic_cast<llama_memory_hybrid *>(mem)) {
        return h->get_mem_recr();
    }
    if (auto * h = dynamic_cast<llama_memory_hybrid_iswa *>(mem)) {
        return h->get_mem_recr();
    }
    return dynamic_cast<llama_memory_recurrent *>(mem);
}

// move_rows copies the rows of state cell from to cell to, in every
// plane (the current state and the rollback copies) of every recurrent
// layer, or swaps the two cells' rows.
void move_rows(llama_memory_recurrent * r, uint32_t from, uint32_t to, bool swap, std::vector<uint8_t> & buf) {
    const uint32_t planes = 1 + r->n_rs_seq;
    for (auto * layers : {&r->r_l, &r->s_l}) {
        for (ggml_tensor * t : *layers) {
            if (t == nullptr) {
                continue;
            }
            const size_t row = t->nb[1];
            buf.resize(2*row);
            for (uint32_t p = 0; p < planes; ++p) {
                const size_t a = (size_t) (p*r->size + from)*row;
                const size_t b = (size_t) (p*r->size + to)*row;
                ggml_backend_tensor_get(t, buf.data(), a, row);
                if (swap) {
                    ggml_backend_tensor_get(t, buf.data() + row, b, row);
                    ggml_backend_tensor_set(t, buf.data() + row, a, row);
                }
                ggml_backend_tensor_set(t, buf.data(), b, row);
            }
        }
    }
}

// renumber makes the cells whose state rows live in cell a look in b
// and the other way round, after the rows of a and b moved.
void renumber(llama_memory_recurrent * r, int32_t a, int32_t b, bool swap) {
    for (auto & c : r->cells) {
        if (c.src == a) {
            c.src = b;
        } else if (swap && c.src == b) {
            c.src = a;
        }
    }
}

} // namespace

extern "C" bool corral_recurrent_home(struct llama_context * ctx) {
    try {
        llama_memory_recurrent * r = recurrent_of(ctx);
        if (r == nullptr || r->n_rs_seq == 0) {
            return true;
        }
        auto & cells = r->cells;
        const int32_t n = (int32_t) r->size;
        std::vector<uint8_t> buf;
        bool synced = false;
        // sync lets a pass still running on a device finish before state
        // rows are read or written.
        auto sync = [&] {
            if (!synced) {
                llama_synchronize(ctx);
                synced = true;
            }
        };
        // A sequence that shares another's cell (llama_memory_seq_cp) gets
        // a copy of its own, in an empty cell (its own when empty): the
        // cell stays with the sequence it is home to, or its first one.
        for (int32_t s = 0; s < n; ++s) {
            const int32_t t = cells[s].tail;
            if (t < 0 || cells[t].seq_id.size() < 2) {
                continue;
            }
            const llama_seq_id keep = cells[t].has_seq_id(t) ? t : *cells[t].seq_id.begin();
            if (s == keep) {
                continue;
            }
            int32_t e = cells[s].is_empty() ? s : -1;
            for (int32_t i = 0; e < 0 && i < n; ++i) {
                if (cells[i].is_empty()) {
                    e = i;
                }
            }
            if (e < 0) {
                return false; // cannot be: a shared cell leaves one empty
            }
            const int32_t from = cells[t].src;
            if (from >= 0) {
                sync();
                move_rows(r, from, e, false, buf);
            }
            cells[e].pos = cells[t].pos;
            cells[e].src = from >= 0 ? e : -1;
            cells[e].seq_id = {s};
            cells[t].seq_id.erase(s);
            cells[s].tail = e;
        }
        // Every sequence with a state into its own cell, swapping with
        // whatever is there (another sequence out of place, or nothing).
        for (int32_t s = 0; s < n; ++s) {
            const int32_t t = cells[s].tail;
            if (t < 0 || t == s) {
                continue;
            }
            sync();
            move_rows(r, t, s, true, buf);
            renumber(r, t, s, true);
            std::swap(cells[s].pos, cells[t].pos);
            std::swap(cells[s].src, cells[t].src);
            std::swap(cells[s].seq_id, cells[t].seq_id);
            for (llama_seq_id q : cells[s].seq_id) {
                cells[q].tail = s;
            }
            for (llama_seq_id q : cells[t].seq_id) {
                cells[q].tail = t;
            }
        }
        // A sequence without a state gets an empty one at home: llama.cpp
        // zeroes a cell without a source (src -1) before it is read.
        uint32_t used = 0;
        for (int32_t s = 0; s < n; ++s) {
            if (cells[s].tail < 0 && cells[s].is_empty()) {
                cells[s].seq_id = {s};
                cells[s].pos = -1;
                cells[s].src = -1;
                cells[s].tail = s;
            }
            used += cells[s].is_empty() ? 0 : 1;
        }
        r->used = used;
        return true;
    } catch (const std::exception &) {
        return false;
    }
}
