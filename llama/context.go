package llama

/*
#include <stdlib.h>
#include "shim.h"
#include "ggml-cpu.h"
#include "corral-arch.h"
*/
import "C"

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"unsafe"
)

// ContextParams configure a Context.
type ContextParams struct {
	NCtx    int  // total KV cells
	NBatch  int  // most tokens in one Decode
	NSeqMax int  // number of sequences (slots)
	Threads int  // generation threads
	Unified bool // one KV buffer shared by all sequences
	// NoFlashAttn computes attention with matrix products instead of
	// llama.cpp's flash-attention kernel (its default on a CPU). On a CPU
	// that kernel decodes faster but evaluates prompts over a long cached
	// context slower; outputs differ in the last bits.
	NoFlashAttn bool
	// TypeK and TypeV are the element types of the KV cache's keys and
	// values (F16, the zero value, by default). A quantized V needs flash
	// attention, and a quantized type needs heads of whole blocks (see
	// CheckCacheTypes): NewContext refuses, with ErrCacheType, what
	// llama.cpp would refuse or run wrongly.
	TypeK, TypeV CacheType
	// NoThreadPool lets ggml start and join its worker threads for every
	// forward pass instead of keeping a pool attached to the context, whose
	// workers spin between passes. The pool is faster when its threads have
	// cores of their own, and slower when they take the cores the rest of
	// the process needs (see engine.New).
	NoThreadPool bool
	// Pooling is how Context.SeqEmbedding pools a sequence's token
	// embeddings; PoolingUnspecified (the zero value) takes what the
	// model's GGUF declares, none when it declares nothing.
	Pooling Pooling
	// Rollback is how many of a sequence's last tokens its recurrent
	// state can be cut back over (llama.cpp's n_rs_seq): each decode
	// keeps the state after each of its last Rollback+1 tokens of every
	// sequence, Rollback more copies of every sequence's state in all.
	// Only some architectures keep them (Context.Rollback says what the
	// context took); the others, and models without a recurrent state,
	// take 0. With several sequences, a hybrid model's copies stay valid
	// only without Unified: llama.cpp then evaluates consecutive
	// sequences together, whose states the context keeps in adjacent
	// cells (Context.homeStates); with one buffer it may move one
	// (TestRollbackAfterCellsMove).
	Rollback int
	// MTP makes a context that runs the model's multi-token prediction
	// head (llama.cpp's LLAMA_CONTEXT_TYPE_MTP; the model loaded with
	// Offload.MTP) instead of the model: it keeps keys and values for the
	// head's layer only, and each token of a batch comes with the hidden
	// row the model computed at the position before (Batch.AddHidden).
	// Other is the context of the model whose rows it reads.
	MTP   bool
	Other *Context
}

// Pooling is llama.cpp's llama_pooling_type, shifted so that the zero
// value means "unspecified".
type Pooling int

// Pooling types.
const (
	PoolingUnspecified Pooling = iota // the model's own (ContextParams only)
	PoolingNone                       // no pooled embedding: the model cannot embed sequences
	PoolingMean                       // the mean of the sequence's token embeddings
	PoolingCLS                        // the first token's embedding
	PoolingLast                       // the last token's embedding
	PoolingRank                       // a reranker's classification head: scores, not embeddings
)

// String names the pooling as llama-server's --pooling does.
func (p Pooling) String() string {
	switch p {
	case PoolingNone:
		return "none"
	case PoolingMean:
		return "mean"
	case PoolingCLS:
		return "cls"
	case PoolingLast:
		return "last"
	case PoolingRank:
		return "rank"
	}
	return "unspecified"
}

// Context is a llama.cpp inference context: KV cache plus compute buffers.
// It must be used from a single goroutine.
type Context struct {
	c      *C.struct_llama_context
	mem    C.llama_memory_t
	batch  C.struct_llama_batch
	cap    int
	nEmbd  int                       // the model's hidden width
	hidden *C.float                  // cap rows of nEmbd: the hidden rows of an MTP context's batch (C memory)
	pool   *C.struct_ggml_threadpool // nil with NoThreadPool
	passes *C.uint64_t               // C memory: the eval callback writes it
	// home: the context keeps rollback copies of recurrent states, which
	// stay valid only with each sequence's state in its own cell
	// (corral_recurrent_home, before every decode and state load).
	home bool
	// bySeq: llama.cpp evaluates this context's batches in micro-batches
	// of consecutive sequences (a buffer per sequence, or a recurrent
	// memory alone), so Decode gives it their rows in sequence order
	// (Context.sortBySeq).
	bySeq bool
	// outAt maps a batch index of the last Decode or DecodeSplit to the
	// index of its row in the batch llama.cpp evaluated last (empty: the
	// same index): DecodeSplit's second pass, or the batch in sequence
	// order; first and rest are DecodeSplit's passes (first also the
	// batch in sequence order), seen and order scratches.
	outAt       []int32
	first, rest Batch
	seen        []uint8
	order       []int32
}

// c is p as llama_context_params: what NewContext creates, and what
// fitting and MemoryNeeds size without creating it.
func (p ContextParams) c() C.struct_llama_context_params {
	cp := C.llama_context_default_params()
	cp.n_ctx = C.uint32_t(p.NCtx)
	cp.n_batch = C.uint32_t(p.NBatch)
	if p.NBatch < 1 {
		cp.n_batch = 512
	}
	cp.n_ubatch = cp.n_batch
	cp.n_seq_max = C.uint32_t(max(p.NSeqMax, 1))
	C.corral_outputs_max(&cp)
	if p.Threads > 0 {
		cp.n_threads = C.int32_t(p.Threads)
		cp.n_threads_batch = C.int32_t(p.Threads)
	}
	cp.kv_unified = C.bool(p.Unified)
	// Sliding-window layers keep their window (and a batch), not the
	// whole context, as llama-server's do: the engine cuts a sequence
	// back only where its window is still there, or from a checkpoint.
	cp.swa_full = C.bool(false)
	cp.no_perf = C.bool(true)
	// Flash attention stays at llama.cpp's default (auto: on for CPU)
	// unless turned off; the golden outputs in ../shared/models/GOLDEN.md
	// depend on it.
	if p.NoFlashAttn {
		cp.flash_attn_type = C.LLAMA_FLASH_ATTN_TYPE_DISABLED
	}
	cp.type_k = p.TypeK.ggmlType()
	cp.type_v = p.TypeV.ggmlType()
	cp.pooling_type = C.enum_llama_pooling_type(int(p.Pooling) - 1)
	cp.n_rs_seq = C.uint32_t(max(p.Rollback, 0))
	if p.MTP {
		cp.ctx_type = C.LLAMA_CONTEXT_TYPE_MTP
		cp.n_rs_seq = 0
	}
	if p.Other != nil {
		cp.ctx_other = p.Other.c
	}
	return cp
}

// NewContext creates an inference context for the model.
func NewContext(m *Model, p ContextParams) (*Context, error) {
	if p.NSeqMax < 1 {
		p.NSeqMax = 1
	}
	if p.NBatch < 1 {
		p.NBatch = 512
	}
	hk, hv := m.HeadSizes()
	if err := CheckCacheTypes(p.TypeK, p.TypeV, !p.NoFlashAttn, hk, hv); err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	cp := p.c()
	passes := (*C.uint64_t)(C.calloc(2, C.size_t(unsafe.Sizeof(C.uint64_t(0))))) // passes, device nodes
	cp.cb_eval = C.ggml_backend_sched_eval_callback(C.corral_count_pass)
	cp.cb_eval_user_data = unsafe.Pointer(passes)
	var why [512]C.char
	c := C.corral_context_new(m.m, cp, &why[0], C.size_t(len(why)))
	if c == nil {
		C.free(unsafe.Pointer(passes))
		return nil, fmt.Errorf("llama: create context (n_ctx %d, n_seq %d): %s", p.NCtx, p.NSeqMax, C.GoString(&why[0]))
	}
	// llama.cpp may take fewer tokens per llama_decode than asked (no
	// more than the n_ctx asked for, before it pads the cache), and
	// aborts the process on a batch larger than that: the batch's
	// capacity is what it took.
	ctx := &Context{c: c, mem: C.llama_get_memory(c), cap: min(p.NBatch, int(C.llama_n_batch(c))), nEmbd: m.NEmbd(), passes: passes}
	if !p.NoThreadPool {
		// Without a pool ggml creates and joins its threads on every pass.
		ctx.pool = C.corral_threadpool_new(C.int32_t(max(1, p.Threads)))
		if ctx.pool == nil {
			ctx.Close()
			return nil, fmt.Errorf("llama: create a thread pool of %d threads: failed", p.Threads)
		}
		C.llama_attach_threadpool(c, ctx.pool, ctx.pool)
	}
	ctx.batch = C.llama_batch_init(C.int32_t(ctx.cap), 0, 1)
	ctx.home = C.llama_n_rs_seq(c) > 0
	ctx.bySeq = !p.Unified || (m.Recurrent() && !m.Hybrid())
	return ctx, nil
}

// Close frees the context.
func (c *Context) Close() {
	if c.c != nil {
		C.llama_batch_free(c.batch)
		C.free(unsafe.Pointer(c.hidden))
		c.hidden = nil
		C.llama_free(c.c)
		c.c = nil
		if c.pool != nil {
			C.corral_threadpool_free(c.pool)
			c.pool = nil
		}
		C.free(unsafe.Pointer(c.passes))
		c.passes = nil
	}
}

// Passes is the number of forward passes (graph computations) the context
// has run. llama_decode runs one per micro-batch it splits a batch into.
func (c *Context) Passes() uint64 { return uint64(*c.passes) }

// Rollback is how many of a sequence's last tokens, all evaluated by
// its last Decode, SeqRemove can cut its recurrent state back over (0:
// none; see ContextParams.Rollback).
func (c *Context) Rollback() int { return int(C.llama_n_rs_seq(c.c)) }

// NCtx is the total number of KV cells.
func (c *Context) NCtx() int { return int(C.llama_n_ctx(c.c)) }

// NCtxSeq is the KV cache size one sequence may use: NCtx with the
// unified cache, else its equal share (llama.cpp rounds it up to 256).
func (c *Context) NCtxSeq() int { return int(C.llama_n_ctx_seq(c.c)) }

// Pooling is the pooling the context applies when embeddings are on: the
// one asked for in ContextParams, or the model's.
func (c *Context) Pooling() Pooling { return Pooling(C.llama_pooling_type(c.c)) + 1 }

// SetEmbeddings turns the output of embeddings on or off for the next
// Decode calls. With it on, a pooled context (Pooling not none) pools
// each sequence of the batch into one vector, read with SeqEmbedding;
// every token of a sequence must then be marked for output (Batch.Add's
// logits), and a sequence must lie within one micro-batch (no more than
// NBatch tokens in all): llama.cpp pools per micro-batch, and a later one
// overwrites an earlier one's vector. Logits are still computed for every
// marked token.
func (c *Context) SetEmbeddings(on bool) { C.llama_set_embeddings(c.c, C.bool(on)) }

// SeqEmbedding appends the pooled embedding of seq from the last Decode
// (which had embeddings on) to dst; n is the model's embedding size. It
// reports false when that Decode pooled nothing for seq.
func (c *Context) SeqEmbedding(dst []float32, seq, n int) ([]float32, bool) {
	p := C.llama_get_embeddings_seq(c.c, C.llama_seq_id(seq))
	if p == nil {
		return dst, false
	}
	return append(dst, unsafe.Slice((*float32)(unsafe.Pointer(p)), n)...), true
}

// NBatch is the most tokens one Decode takes: ContextParams.NBatch, or
// less when llama.cpp took less.
func (c *Context) NBatch() int { return c.cap }

// Batch is a set of tokens to evaluate in one Decode, filled by Add (or,
// for a context with ContextParams.MTP, AddHidden).
type Batch struct {
	Tokens []Token
	Pos    []int32
	Seq    []int32
	Logits []bool
	// Hidden are the tokens' hidden rows, one of the model's width
	// (Model.NEmbd) each, in an MTP context's batch; empty otherwise.
	Hidden []float32
}

// Reset empties the batch, keeping its memory.
func (b *Batch) Reset() {
	b.Tokens, b.Pos, b.Seq, b.Logits = b.Tokens[:0], b.Pos[:0], b.Seq[:0], b.Logits[:0]
	b.Hidden = b.Hidden[:0]
}

// AddHidden is Add for a context with ContextParams.MTP: the token comes
// with the hidden row the model computed at the position before pos
// (Context.HiddenTo of the model's context, or of this one for a token
// the head itself drafted). Every token of such a batch needs one.
func (b *Batch) AddHidden(tok Token, pos int, seq int, logits bool, row []float32) {
	b.Add(tok, pos, seq, logits)
	b.Hidden = append(b.Hidden, row...)
}

// Add appends one token of sequence seq at position pos; logits asks for
// its output distribution.
func (b *Batch) Add(tok Token, pos int, seq int, logits bool) {
	b.Tokens = append(b.Tokens, tok)
	b.Pos = append(b.Pos, int32(pos))
	b.Seq = append(b.Seq, int32(seq))
	b.Logits = append(b.Logits, logits)
}

// Len is the number of tokens in the batch.
func (b *Batch) Len() int { return len(b.Tokens) }

// DecodeError is a non-zero return of llama_decode.
type DecodeError struct{ Code int }

func (e *DecodeError) Error() string {
	switch e.Code {
	case 1:
		return "llama: decode: no KV cache slot for the batch"
	case 2:
		return "llama: decode: aborted"
	case -100:
		return "llama: decode: exception in llama.cpp"
	}
	return fmt.Sprintf("llama: decode failed (%d)", e.Code)
}

// Decode evaluates the batch. Outputs are then read by batch index with
// Sampler.Sample or Logits.
func (c *Context) Decode(b *Batch) error {
	c.outAt = c.outAt[:0]
	if c.bySeq && c.sortBySeq(b) {
		return c.decode(&c.first)
	}
	return c.decode(b)
}

// sortBySeq fills c.first with b's rows in sequence order, each
// sequence's in batch order, and sets c.outAt; it reports false, doing
// nothing, where b is in that order already.
//
// With a buffer per sequence (ContextParams.Unified off) llama.cpp
// evaluates a batch in micro-batches of consecutive sequences with as
// many rows each, a pass of the weights apiece, and chains sequences in
// the order their first rows come in the batch: one decoding token for
// each of sequences 0 to 4 and 6 to 15, then a prompt chunk of sequence
// 5, take three passes (0-4, 6-15, 5); in sequence order two (one row
// of each of the sixteen, then the rest of the chunk).
func (c *Context) sortBySeq(b *Batch) bool {
	if slices.IsSorted(b.Seq) {
		return false
	}
	c.order = c.order[:0]
	for i := range b.Seq {
		c.order = append(c.order, int32(i))
	}
	slices.SortStableFunc(c.order, func(i, j int32) int { return cmp.Compare(b.Seq[i], b.Seq[j]) })
	c.first.Reset()
	c.outAt = slices.Grow(c.outAt[:0], b.Len())[:b.Len()]
	width := len(b.Hidden) / b.Len()
	for at, i := range c.order {
		c.first.Add(b.Tokens[i], int(b.Pos[i]), int(b.Seq[i]), b.Logits[i])
		if width > 0 {
			c.first.Hidden = append(c.first.Hidden, b.Hidden[int(i)*width:int(i+1)*width]...)
		}
		c.outAt[i] = int32(at)
	}
	return true
}

// faTile is the query rows of a tile of ggml's CPU flash-attention
// kernel, which evaluates a pass of that many rows or more in such tiles.
const faTile = 64

// DecodeSplit is Decode in two passes where the batch has at least
// faTile rows and its rows with outputs, in a pass of their own, would
// evaluate attention over fewer cells: first each sequence's rows before
// its first row with an output (the chunk of a prompt that does not end
// here, or all but its last token), then the rest in batch order
// (decoding tokens, drafts, the last token of a prompt), where some
// sequence decodes (its first row has an output) and the rest has fewer
// than faTile rows; split reports whether it did. Outputs are
// read by the batch's indexes as after Decode.
//
// ggml's CPU flash-attention kernel takes a pass of faTile rows or more
// in tiles of faTile queries, and a tile skips a block of cells only
// where none of its queries sees one; one buffer shared by all sequences
// (ContextParams.Unified) holds their cells interleaved. A tile that holds
// the decoding tokens of many sequences beside a prompt's rows then
// visits every cell in use for each of its rows, where alone they take the
// kernel's path for a few rows, which skips the cells a row does not see,
// and the prompt's tiles see its own cells only (BenchmarkMixedStep in
// package engine, the 135M on 2 cores: 16 sequences decoding at 320 cells
// each beside a 64-token chunk took 510-550 ms in one pass and 260 ms in
// two; 2 sequences 167 and 142 ms). Not for a batch with hidden rows (an
// MTP context's), nor one whose sequences are pooled into embeddings.
//
// A context whose batches llama.cpp takes in micro-batches of
// consecutive sequences (see Decode) never splits: a prompt's rows after
// its first go in a pass without the decoding tokens already, and with a
// buffer per sequence a row's attention sees its own sequence's cells
// only.
func (c *Context) DecodeSplit(b *Batch) (split bool, err error) {
	if c.bySeq {
		return false, c.Decode(b)
	}
	c.outAt = c.outAt[:0]
	if b.Len() < faTile || len(b.Hidden) > 0 || !c.split(b) {
		return false, c.decode(b)
	}
	if err := c.decode(&c.first); err != nil {
		c.outAt = c.outAt[:0]
		return true, err
	}
	return true, c.decode(&c.rest)
}

// split divides b into c.first and c.rest as DecodeSplit does and sets
// c.outAt; it reports false, with c.outAt empty, where either would be
// empty, where no sequence decodes (has an output at its first row: a pass
// of prompts alone gains nothing by leaving their last tokens apart), or
// where the rest has faTile rows or more (drafts): it would take the tiled
// path all the same, and the second pass would cost without saving.
func (c *Context) split(b *Batch) bool {
	const (
		unseen = iota
		prompt // its rows so far go first
		output // its rows from here on go last
	)
	c.first.Reset()
	c.rest.Reset()
	clear(c.seen)
	decodes := false
	for i, seq := range b.Seq {
		if int(seq) >= len(c.seen) {
			c.seen = append(c.seen, make([]uint8, int(seq)+1-len(c.seen))...)
		}
		switch {
		case c.seen[seq] == output:
		case b.Logits[i]:
			decodes = decodes || c.seen[seq] == unseen
			c.seen[seq] = output
		default:
			c.seen[seq] = prompt
			c.first.Add(b.Tokens[i], int(b.Pos[i]), int(seq), false)
			c.outAt = append(c.outAt, int32(b.Len())) // no output: out of the last pass's range
			continue
		}
		if c.rest.Len() == faTile-1 { // the rest would take the tiled path
			c.outAt = c.outAt[:0]
			return false
		}
		c.outAt = append(c.outAt, int32(c.rest.Len()))
		c.rest.Add(b.Tokens[i], int(b.Pos[i]), int(seq), b.Logits[i])
	}
	if !decodes || c.first.Len() == 0 || c.rest.Len() == 0 {
		c.outAt = c.outAt[:0]
		return false
	}
	return true
}

// row is the index, in the last pass, of batch index i of the last Decode
// or DecodeSplit.
func (c *Context) row(i int) C.int32_t {
	if i >= 0 && i < len(c.outAt) {
		return C.int32_t(c.outAt[i])
	}
	return C.int32_t(i)
}

// decode evaluates b in one pass.
func (c *Context) decode(b *Batch) error {
	n := b.Len()
	if n == 0 {
		return nil
	}
	if n > c.cap {
		return fmt.Errorf("llama: decode: batch of %d exceeds capacity %d", n, c.cap)
	}
	cb := &c.batch
	toks := unsafe.Slice((*Token)(unsafe.Pointer(cb.token)), n)
	pos := unsafe.Slice((*int32)(unsafe.Pointer(cb.pos)), n)
	nseq := unsafe.Slice((*C.int32_t)(unsafe.Pointer(cb.n_seq_id)), n)
	seqs := unsafe.Slice((**C.llama_seq_id)(unsafe.Pointer(cb.seq_id)), n)
	logits := unsafe.Slice((*C.int8_t)(unsafe.Pointer(cb.logits)), n)
	copy(toks, b.Tokens)
	copy(pos, b.Pos)
	for i := 0; i < n; i++ {
		nseq[i] = 1
		*seqs[i] = C.llama_seq_id(b.Seq[i])
		if b.Logits[i] {
			logits[i] = 1
		} else {
			logits[i] = 0
		}
	}
	cb.n_tokens = C.int32_t(n)
	if len(b.Hidden) > 0 {
		if len(b.Hidden) != n*c.nEmbd {
			return fmt.Errorf("llama: decode: %d hidden values for %d tokens of width %d", len(b.Hidden), n, c.nEmbd)
		}
		if c.hidden == nil {
			c.hidden = (*C.float)(C.malloc(C.size_t(c.cap * c.nEmbd * 4)))
		}
		copy(unsafe.Slice((*float32)(unsafe.Pointer(c.hidden)), n*c.nEmbd), b.Hidden)
		cb.embd = c.hidden
		defer func() { cb.embd = nil }() // llama_batch_free would free it
	}
	if err := c.homeStates(); err != nil {
		return err
	}
	if rc := C.corral_decode(c.c, *cb); rc != 0 {
		return &DecodeError{Code: int(rc)}
	}
	return nil
}

// SetHidden turns on or off the output of the hidden rows a model's
// multi-token prediction head reads (the last layer's output before the
// vocabulary projection; llama.cpp's nextn embeddings), for the tokens a
// Decode computes logits for: on the model's context to feed an MTP
// context, and on the MTP context to chain its drafts.
func (c *Context) SetHidden(on bool) { C.corral_set_embeddings_nextn(c.c, C.bool(on), C.bool(true)) }

// HiddenTo copies into dst's storage (grown when too small) the hidden
// row at batch index i of the last Decode, which must have computed
// logits there with SetHidden on (llama.cpp aborts otherwise when built
// without NDEBUG; a release build logs it and HiddenTo returns nil).
func (c *Context) HiddenTo(dst []float32, i int) []float32 {
	p := C.corral_embeddings_nextn_ith(c.c, c.row(i))
	if p == nil {
		return nil
	}
	if cap(dst) < c.nEmbd {
		dst = make([]float32, c.nEmbd)
	}
	dst = dst[:c.nEmbd]
	copy(dst, unsafe.Slice((*float32)(unsafe.Pointer(p)), c.nEmbd))
	return dst
}

// Logits returns a copy of the raw logits (one per vocabulary token) at
// batch index i of the last Decode, nil when that index asked for none.
func (c *Context) Logits(i int) []float32 {
	n := int(C.llama_vocab_n_tokens(C.llama_model_get_vocab(C.llama_get_model(c.c))))
	out := make([]float32, n)
	if !C.corral_logits(c.c, c.row(i), (*C.float)(&out[0]), C.int32_t(n)) {
		return nil
	}
	return out
}

// LogitsTo is Logits into dst's storage (grown when too small), for a
// caller that reads logits every step without allocating.
func (c *Context) LogitsTo(dst []float32, i int) []float32 {
	n := int(C.llama_vocab_n_tokens(C.llama_model_get_vocab(C.llama_get_model(c.c))))
	if cap(dst) < n {
		dst = make([]float32, n)
	}
	dst = dst[:n]
	if !C.corral_logits(c.c, c.row(i), (*C.float)(&dst[0]), C.int32_t(n)) {
		return nil
	}
	return dst
}

// SeqRemove removes positions [p0, p1) of sequence seq from the KV cache
// (p1 < 0: to the end). It reports false if a partial removal is impossible.
func (c *Context) SeqRemove(seq, p0, p1 int) bool {
	return bool(C.llama_memory_seq_rm(c.mem, C.llama_seq_id(seq), C.llama_pos(p0), C.llama_pos(p1)))
}

// SeqCopy copies positions [p0, p1) of sequence src to dst, in one
// buffer for all sequences (ContextParams.Unified): dst then holds the
// same cells, and no data is copied.
func (c *Context) SeqCopy(src, dst, p0, p1 int) {
	C.llama_memory_seq_cp(c.mem, C.llama_seq_id(src), C.llama_seq_id(dst), C.llama_pos(p0), C.llama_pos(p1))
}

// SeqCopyBuffer copies sequence src's whole buffer to dst's, with a
// buffer per sequence (ContextParams.Unified off): dst's cells are
// dropped, and it then holds src's positions in the same cells of its own
// buffer, their keys and values copied before SeqCopyBuffer returns.
// llama.cpp copies only whole buffers; cut dst back with SeqRemove.
func (c *Context) SeqCopyBuffer(src, dst int) {
	C.llama_memory_seq_cp(c.mem, C.llama_seq_id(src), C.llama_seq_id(dst), -1, -1)
	C.corral_memory_apply(c.c)
}

// SeqPosMax is the largest position cached for seq (-1 when empty).
func (c *Context) SeqPosMax(seq int) int {
	return int(C.llama_memory_seq_pos_max(c.mem, C.llama_seq_id(seq)))
}

// SeqPosMin is the smallest position seq holds in the cache (-1 if
// none): above 0 once a sliding window has dropped the sequence's first
// positions, and a recurrent state's one position.
func (c *Context) SeqPosMin(seq int) int {
	return int(C.llama_memory_seq_pos_min(c.mem, C.llama_seq_id(seq)))
}

// Clear empties the whole KV cache.
func (c *Context) Clear() { C.llama_memory_clear(c.mem, C.bool(true)) }

// SeqStateSize is the length of the state SeqStateGet would return for
// seq, counted without copying it.
func (c *Context) SeqStateSize(seq int) int {
	return int(C.llama_state_seq_get_size(c.c, C.llama_seq_id(seq)))
}

// SeqStateGet copies the KV state of seq into a new byte slice.
func (c *Context) SeqStateGet(seq int) []byte {
	n := c.SeqStateSize(seq)
	if n == 0 {
		return nil
	}
	buf := make([]byte, n)
	got := C.llama_state_seq_get_data(c.c, (*C.uint8_t)(unsafe.Pointer(&buf[0])), C.size_t(n), C.llama_seq_id(seq))
	return buf[:got]
}

// partialOnly is LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY: the state of a
// sequence's recurrent (or sliding-window) memory alone.
const partialOnly = 1

// SeqStatePartial copies the part of seq's state that cannot be cut back
// to an earlier position (a recurrent model's state, a sliding window)
// into a new byte slice; nil for a memory without one. Restored with
// SetSeqStatePartial into the same sequence, it puts that part back as it
// was, and the sequence's attention cells past that point can then be
// dropped (SeqRemove): a checkpoint.
func (c *Context) SeqStatePartial(seq int) []byte {
	n := int(C.llama_state_seq_get_size_ext(c.c, C.llama_seq_id(seq), partialOnly))
	if n == 0 {
		return nil
	}
	buf := make([]byte, n)
	got := C.llama_state_seq_get_data_ext(c.c, (*C.uint8_t)(unsafe.Pointer(&buf[0])), C.size_t(n), C.llama_seq_id(seq), partialOnly)
	return buf[:got]
}

// SetSeqStatePartial restores a state from SeqStatePartial into seq. It
// reports false when llama.cpp could not load it.
func (c *Context) SetSeqStatePartial(seq int, state []byte) bool {
	if len(state) == 0 {
		return false
	}
	if c.homeStates() != nil {
		return false
	}
	got := C.llama_state_seq_set_data_ext(c.c, (*C.uint8_t)(unsafe.Pointer(&state[0])), C.size_t(len(state)), C.llama_seq_id(seq), partialOnly)
	return got != 0
}

// SeqStateSet restores state saved by SeqStateGet into seq. It reports
// false when the state could not be loaded.
func (c *Context) SeqStateSet(seq int, state []byte) bool {
	if len(state) == 0 {
		return false
	}
	if c.homeStates() != nil {
		return false
	}
	got := C.llama_state_seq_set_data(c.c, (*C.uint8_t)(unsafe.Pointer(&state[0])), C.size_t(len(state)), C.llama_seq_id(seq))
	return got != 0
}

// DecodeEmbd evaluates n input embeddings, rows of the model's input
// width in embd (a medium's, from Projector.Encode), as tokens of
// sequence seq at positions pos (Projector.Positions): n of them, or
// 4n for a model with M-RoPE. Nothing is output. At most NBatch at once.
func (c *Context) DecodeEmbd(embd []float32, n int, pos []int32, seq int) error {
	model := C.llama_get_model(c.c)
	width := int(C.llama_model_n_embd_inp(model))
	if n <= 0 || n > c.cap || len(embd) != n*width {
		return fmt.Errorf("llama: decode embeddings: %d floats for %d of width %d (at most %d)", len(embd), n, width, c.cap)
	}
	if want := n * posPerEmbd(model); len(pos) != want {
		return fmt.Errorf("llama: decode embeddings: %d positions for %d embeddings, want %d", len(pos), n, want)
	}
	c.outAt = c.outAt[:0]
	if err := c.homeStates(); err != nil {
		return err
	}
	if rc := C.corral_decode_embd(c.c, (*C.float)(unsafe.Pointer(&embd[0])), C.int32_t(n), (*C.int32_t)(unsafe.Pointer(&pos[0])), C.int32_t(seq)); rc != 0 {
		return &DecodeError{Code: int(rc)}
	}
	return nil
}

// posPerEmbd is how many positions the model takes per embedding: 4
// with M-RoPE (a position per section), else 1.
func posPerEmbd(m *C.struct_llama_model) int {
	switch C.llama_model_rope_type(m) {
	case C.LLAMA_ROPE_TYPE_MROPE, C.LLAMA_ROPE_TYPE_IMROPE:
		return 4
	}
	return 1
}

// SetCausalAttn turns causal attention on or off for the next Decode
// calls: off for a medium whose tokens attend to each other both ways
// (MediaChunk.NonCausal).
func (c *Context) SetCausalAttn(on bool) { C.llama_set_causal_attn(c.c, C.bool(on)) }

// SetThreads sets the threads the next Decode calls compute with, at
// most ContextParams.Threads when the context has a thread pool.
func (c *Context) SetThreads(n int) { C.llama_set_n_threads(c.c, C.int32_t(n), C.int32_t(n)) }

// homeStates puts every sequence's recurrent state in its own cell, in a
// context with rollback copies (see Context.home): llama.cpp moves a
// sequence's state to make room for others, and carries only its
// current state, so a rollback over a draft evaluated in the same decode
// would go back to whatever copies the cell it moved to held. With the
// states at home a decode moves none (its micro-batches hold consecutive
// sequences; see ContextParams.Rollback).
func (c *Context) homeStates() error {
	if c.home && !bool(C.corral_recurrent_home(c.c)) {
		return errors.New("llama: the recurrent states could not be put in their cells")
	}
	return nil
}
