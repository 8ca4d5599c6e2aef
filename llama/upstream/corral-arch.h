// What the binding asks of llama.cpp's internals (src/llama-arch.h,
// src/llama-model.h, src/llama-ext.h) that its C API does not offer: the
// architectures it knows, the tensors a model of one of them has, what a
// context allocated, why a load failed (its log's first error), a
// memory update on demand, and the hidden rows a multi-token prediction
// head reads. Built into
// libcorral-common (arch.cpp) with llama.cpp's src/ on the include path.
#ifndef CORRAL_ARCH_H
#define CORRAL_ARCH_H

#include <stddef.h>
#include <stdint.h>
#include "llama.h"

#ifdef __cplusplus
extern "C" {
#endif

// corral_arch_count is the number of architectures llama.cpp knows (its
// "unknown" placeholder left out); corral_arch_name names the i-th, as
// general.architecture spells it, or returns NULL past the end.
int32_t      corral_arch_count(void);
const char * corral_arch_name(int32_t i);

// corral_layout builds, without allocating a byte of weights, the model
// that the GGUF metadata in path (a file of key-value pairs and no
// tensors) describes, so that its tensors can be listed (a multi-token
// prediction head's among them). Returns NULL and
// writes why to err (at most err_len bytes with the NUL) when llama.cpp
// cannot build it. Free the model with llama_model_free.
struct llama_model * corral_layout(const char * path, char * err, size_t err_len);

// corral_layout_tensor describes the i-th tensor of a model from
// corral_layout: its name (NULL past the end) and its extents ne[0..3].
const char * corral_layout_tensor(const struct llama_model * model, int32_t i, int64_t ne[4]);

// corral_model_load is llama_model_load_from_file, and
// corral_context_new llama_init_from_model, that on failure write the
// first error llama.cpp logged (or a generic reason) to err, at most
// err_len bytes with the NUL.
struct llama_model *   corral_model_load(const char * path, struct llama_model_params params, char * err, size_t err_len);
struct llama_context * corral_context_new(struct llama_model * model, struct llama_context_params params, char * err, size_t err_len);

// corral_memory_of writes to sizes what llama.cpp allocated for ctx and
// its model (llama_get_memory_breakdown): sizes[0] the weights, sizes[1]
// the context's memory (KV cells of every kind, recurrent states),
// sizes[2] the compute buffers, each summed over the host and devices.
void corral_memory_of(const struct llama_context * ctx, size_t sizes[3]);

// corral_memory_apply does now what llama.cpp does to ctx's memory at the
// start of the next decode: above all the copy of a sequence's buffer
// that llama_memory_seq_cp between sequences of different buffers
// (kv_unified off) only queues. Returns whether it changed anything.
bool corral_memory_apply(struct llama_context * ctx);

// corral_set_embeddings_nextn turns on or off the hidden rows a model's
// multi-token prediction head reads (llama_set_embeddings_nextn): of
// every token of a batch (masked false) or of those with logits.
// corral_embeddings_nextn_ith returns the row of batch index i of the
// last decode, or NULL when there is none.
void          corral_set_embeddings_nextn(struct llama_context * ctx, bool on, bool masked);
const float * corral_embeddings_nextn_ith(struct llama_context * ctx, int32_t i);

// corral_recurrent_home puts the recurrent state of every sequence of
// ctx in the state cell numbered as the sequence, and gives a sequence
// without a state an empty one there, when ctx keeps rollback copies
// (n_rs_seq > 0); otherwise it does nothing. llama.cpp evaluates the
// sequences of a micro-batch in adjacent cells and moves other
// sequences' states out of the way, carrying only their current state,
// not the copies a rollback reads: a sequence whose copies were written
// by one micro-batch of a decode and moved by a later one then goes back
// to another sequence's state. With every sequence at home, a sequential
// split (consecutive sequence ids per micro-batch: a buffer per
// sequence, or a recurrent memory alone) never moves one. Called before
// every decode and state load of such a context; it copies state rows
// only when a cell is out of place (after llama_memory_seq_cp, or a
// load into another sequence's freed cell). Returns false when it could
// not (the states are then as llama.cpp left them).
bool corral_recurrent_home(struct llama_context * ctx);

#ifdef __cplusplus
}
#endif

#endif
