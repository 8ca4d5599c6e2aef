// Package llama is corral's thin binding to llama.cpp's C API (llama.h).
//
// It is the only package in corral that uses cgo. It links the static
// libraries of the pinned llama.cpp release (upstream/release) that
// scripts/llama-cpp.sh builds with llama.cpp's own CMake into ./lib (make
// llama; link.go).
//
// Nothing here is safe for concurrent use unless stated: a Context and its
// Samplers belong to one goroutine (the engine's scheduler).
package llama

/*
#cgo CXXFLAGS: -std=c++17
#cgo linux LDFLAGS: -Wl,--export-dynamic
#include <stdlib.h>
#include <stdio.h>
#include "shim.h"
#include "corral-arch.h"
#include "mtmd-helper.h"

static int corral_log_verbose = 0;

static void corral_log(enum ggml_log_level level, const char * text, void * user) {
	(void)user;
	if (corral_log_verbose || level == GGML_LOG_LEVEL_ERROR) {
		fputs(text, stderr);
	}
}

static void corral_log_init(int verbose) {
	corral_log_verbose = verbose;
	llama_log_set(corral_log, NULL);
	mtmd_helper_log_set(corral_log, NULL);
}

// corral_load_progress continues a model load while *stop is 0.
static bool corral_load_progress(float progress, void * stop) {
	(void)progress;
	return __atomic_load_n((int *)stop, __ATOMIC_RELAXED) == 0;
}

static void corral_set_progress(struct llama_model_params * p, int * stop) {
	p->progress_callback = corral_load_progress;
	p->progress_callback_user_data = stop;
}
*/
import "C"

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"
)

var (
	initOnce   sync.Once
	initDone   bool   // guarded by backendMu: the backend libraries are loaded
	cpuVariant string // set by Init: the CPU variant loaded (or refused)
	cpuErr     error  // set by Init: why no CPU backend was loaded
)

// Init initialises the llama.cpp backend once per process, after loading
// the CPU backend (the variant of ggml's kernels for this machine, see
// cpuvariant.go) and the ggml backend libraries of the folders
// SetBackendDirs set (or DefaultBackendDirs). Logs from llama.cpp are
// dropped except errors, unless CORRAL_LLAMA_LOG=1.
func Init() {
	initOnce.Do(func() {
		verbose := 0
		if os.Getenv("CORRAL_LLAMA_LOG") == "1" {
			verbose = 1
		}
		C.corral_log_init(C.int(verbose))
		// A failed GGML_ASSERT ends the process; unless told otherwise,
		// ggml first attaches gdb for a backtrace, which can hold a
		// server (or a test) stopped under the debugger for good.
		if _, ok := os.LookupEnv("GGML_NO_BACKTRACE"); !ok {
			os.Setenv("GGML_NO_BACKTRACE", "1")
		}
		cpuVariant, cpuErr = loadCPUVariant()
		backendMu.Lock()
		dirs := backendDirs
		if !backendSet {
			dirs = DefaultBackendDirs()
		}
		backends = loadBackends(dirs)
		initDone = true
		backendMu.Unlock()
		C.llama_backend_init()
	})
}

// Token is a vocabulary id.
type Token = int32

// Model is a loaded GGUF model. Its methods are safe for concurrent use
// (llama.cpp's model and vocab are read-only after load).
type Model struct {
	m     *C.struct_llama_model
	vocab *C.struct_llama_vocab

	specialsOnce sync.Once
	specials     []special // control and unknown tokens, longest text first
	firstBytes   [256]bool // first bytes of the specials' texts
	unk          Token     // the unknown token, -1 if none
	first, last  []Token   // what llama_tokenize adds around text (see specialEnds)
	encodable    sync.Map  // rune → bool: can the vocabulary encode it alone?

	piecesOnce sync.Once
	pieces     *Pieces

	offload Offloaded
}

// LoadModel loads a GGUF file into memory (CPU). When ctx ends during the
// load, llama.cpp stops at its next progress report and LoadModel returns
// ctx's error.
func LoadModel(ctx context.Context, path string) (*Model, error) {
	return LoadModelOffload(ctx, path, Offload{}, ContextParams{})
}

// LoadModelOffload loads a GGUF file as LoadModel does, with the layers o
// asks for on the devices it names. With o.GPULayers GPULayersAuto, cp is
// the context the model will get (NewContext's parameters): as many
// layers are offloaded as fit in the devices' free memory beside that
// context's buffers, leaving FitMargin free on each.
func LoadModelOffload(ctx context.Context, path string, o Offload, cp ContextParams) (*Model, error) {
	Init()
	if cpuErr != nil {
		return nil, fmt.Errorf("load model %s: %w", path, cpuErr)
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("load model: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("load model %s: %w", path, err)
	}
	params := C.llama_model_default_params()
	var coff cOffload
	defer coff.free()
	if err := o.apply(&params, &coff); err != nil {
		return nil, fmt.Errorf("load model %s: %w", path, err)
	}
	if o.GPULayers == GPULayersAuto {
		if err := coff.fit(path, &params, cp); err != nil {
			return nil, fmt.Errorf("load model %s: %w", path, err)
		}
	}
	// The flag lives in C memory: llama.cpp reads it from its loader thread.
	stop := (*C.int)(C.calloc(1, C.size_t(unsafe.Sizeof(C.int(0)))))
	defer C.free(unsafe.Pointer(stop))
	C.corral_set_progress(&params, stop)
	stopped := make(chan struct{})
	detach := context.AfterFunc(ctx, func() {
		(*atomic.Int32)(unsafe.Pointer(stop)).Store(1)
		close(stopped)
	})
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var why [512]C.char
	m := C.corral_model_load(cpath, params, &why[0], C.size_t(len(why)))
	if !detach() {
		<-stopped // the flag is written before the deferred free
	}
	if m == nil {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("load model %s: %w", path, err)
		}
		return nil, fmt.Errorf("load model %s: %s", path, C.GoString(&why[0]))
	}
	model := &Model{m: m, vocab: C.llama_model_get_vocab(m)}
	model.offload = offloaded(&params, int(C.llama_model_n_layer(m)))
	return model, nil
}

// Close frees the model. No Context of it may be used afterwards.
func (m *Model) Close() {
	if m.m != nil {
		C.llama_model_free(m.m)
		m.m = nil
	}
}

// Meta returns a metadata value as a string (e.g. "tokenizer.chat_template").
func (m *Model) Meta(key string) (string, bool) {
	ckey := C.CString(key)
	defer C.free(unsafe.Pointer(ckey))
	n := C.llama_model_meta_val_str(m.m, ckey, nil, 0)
	if n < 0 {
		return "", false
	}
	buf := make([]byte, int(n)+1)
	C.llama_model_meta_val_str(m.m, ckey, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	return string(buf[:n]), true
}

// Desc is llama.cpp's one-line description of the model.
func (m *Model) Desc() string {
	var buf [256]C.char
	n := C.llama_model_desc(m.m, &buf[0], C.size_t(len(buf)))
	if n < 0 {
		return ""
	}
	return C.GoStringN(&buf[0], n)
}

// CtxTrain is the model's training context length.
func (m *Model) CtxTrain() int { return int(C.llama_model_n_ctx_train(m.m)) }

// NParams is the number of parameters.
func (m *Model) NParams() uint64 { return uint64(C.llama_model_n_params(m.m)) }

// NVocab is the vocabulary size.
func (m *Model) NVocab() int { return int(C.llama_vocab_n_tokens(m.vocab)) }

// Recurrent reports whether the model keeps a recurrent state (a recurrent
// or hybrid architecture): its sequences cannot drop their last positions
// (Context.SeqRemove of a tail fails).
func (m *Model) Recurrent() bool {
	return bool(C.llama_model_is_recurrent(m.m)) || bool(C.llama_model_is_hybrid(m.m))
}

// Hybrid reports whether the model keeps both a recurrent state and a KV
// cache (Jamba, Qwen3.5, Granite-4 hybrid, ...).
func (m *Model) Hybrid() bool { return bool(C.llama_model_is_hybrid(m.m)) }

// Diffusion reports whether the model generates by diffusion (Dream,
// LLaDA): a whole answer denoised at once, not token by token.
func (m *Model) Diffusion() bool { return bool(C.llama_model_is_diffusion(m.m)) }

// HasEncoder reports whether the model has an encoder (T5), which
// llama_encode runs before any decoding.
func (m *Model) HasEncoder() bool { return bool(C.llama_model_has_encoder(m.m)) }

// SlidingWindow is the window of the model's sliding-window attention
// layers in tokens, 0 for a model without.
func (m *Model) SlidingWindow() int { return int(C.llama_model_n_swa(m.m)) }

// NEmbd is the model's embedding size: the length of a pooled embedding.
func (m *Model) NEmbd() int { return int(C.llama_model_n_embd(m.m)) }

// MTPHeads is the number of multi-token prediction heads (llama.cpp's
// nextn layers) the model's file has: 0 for most models.
func (m *Model) MTPHeads() int { return int(C.llama_model_n_layer_nextn(m.m)) }

// NEmbdInput is the width of the embeddings the model reads (those of its
// tokens, and those a Projector gives in place of media).
func (m *Model) NEmbdInput() int { return int(C.llama_model_n_embd_inp(m.m)) }

// HeadSizes are the widths of an attention head's key and value, as
// llama.cpp reads them (n_embd_head_k and n_embd_head_v): the model's
// <arch>.attention.key_length and value_length, or the embedding size
// over the first layer's head count. Both are 0 for a model without
// attention heads.
func (m *Model) HeadSizes() (k, v int) {
	heads := int(C.llama_model_n_head(m.m))
	if heads <= 0 {
		return 0, 0
	}
	k, v = m.NEmbd()/heads, m.NEmbd()/heads
	arch, _ := m.Meta("general.architecture")
	for _, d := range []struct {
		dst *int
		key string
	}{{&k, ".attention.key_length"}, {&v, ".attention.value_length"}} {
		if s, ok := m.Meta(arch + d.key); ok {
			if n, err := strconv.Atoi(s); err == nil {
				*d.dst = n
			}
		}
	}
	return k, v
}

// BOS is the beginning-of-sequence token (-1 if none).
func (m *Model) BOS() Token { return Token(C.llama_vocab_bos(m.vocab)) }

// EOS is the end-of-sequence token (-1 if none).
func (m *Model) EOS() Token { return Token(C.llama_vocab_eos(m.vocab)) }

// AddBOS reports whether tokenization with addSpecial prepends BOS.
func (m *Model) AddBOS() bool { return bool(C.llama_vocab_get_add_bos(m.vocab)) }

// AddEOS reports whether tokenization with addSpecial appends EOS.
func (m *Model) AddEOS() bool { return bool(C.llama_vocab_get_add_eos(m.vocab)) }

// IsEOG reports whether tok ends generation (EOS, EOT, ...).
func (m *Model) IsEOG(tok Token) bool { return bool(C.llama_vocab_is_eog(m.vocab, C.llama_token(tok))) }

// AppendPiece appends the bytes of one token to buf (special tokens are
// rendered as their text when special is true). The bytes may be part of
// a UTF-8 sequence that continues in the next token.
func (m *Model) AppendPiece(buf []byte, tok Token, special bool) []byte {
	var tmp [64]byte
	n := C.corral_token_to_piece(m.vocab, C.llama_token(tok), (*C.char)(unsafe.Pointer(&tmp[0])), C.int32_t(len(tmp)), C.bool(special))
	if n >= 0 {
		return append(buf, tmp[:n]...)
	}
	big := make([]byte, -n)
	n = C.corral_token_to_piece(m.vocab, C.llama_token(tok), (*C.char)(unsafe.Pointer(&big[0])), C.int32_t(len(big)), C.bool(special))
	if n < 0 {
		return buf
	}
	return append(buf, big[:n]...)
}

// Detokenize converts tokens to text, as llama.cpp's llama_detokenize does
// (removing a leading BOS and the SPM leading space).
func (m *Model) Detokenize(toks []Token) string {
	if len(toks) == 0 {
		return ""
	}
	buf := make([]byte, len(toks)*8+16)
	for {
		n := C.corral_detokenize(m.vocab, (*C.llama_token)(unsafe.Pointer(&toks[0])), C.int32_t(len(toks)),
			(*C.char)(unsafe.Pointer(&buf[0])), C.int32_t(len(buf)))
		if n >= 0 {
			return string(buf[:n])
		}
		buf = make([]byte, -n)
	}
}
