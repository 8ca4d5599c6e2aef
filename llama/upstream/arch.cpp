// See corral-arch.h. The only file of corral's compiled against
// llama.cpp's internal headers; it changes with the release.
#include "corral-arch.h"

#include "gguf.h"
#include "llama-arch.h"
#include "llama-context.h"
#include "llama-ext.h"
#include "llama-model.h"

#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
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
