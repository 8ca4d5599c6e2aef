package llama

/*
#include <stdlib.h>
#include "mtmd.h"
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// A Projector is a multimodal projector (an "mmproj" GGUF: a vision or
// audio encoder and the layers that map its output into a text model's
// embedding space) loaded with llama.cpp's libmtmd for one Model. It
// turns an image or a stretch of audio into the embeddings the model
// reads in their place.
//
// TokenizeImage and TokenizeAudio may run on any goroutine, several at
// once (libmtmd's preprocessing reads the projector and writes only the
// chunks it returns); Encode belongs to one goroutine at a time, and
// Close to none.
type Projector struct {
	p      *C.mtmd_context
	model  *Model
	marker string // what stands for a medium in the text mtmd tokenizes
	// gen is C memory the encoder's eval callback reads
	// (corral_encoder_abort): the number of the encode running, of the
	// last one aborted, and the layers the encode running has computed.
	// An Encode's context may end after the Projector is closed: mu
	// guards gen (nil once freed) for the abort those ends make.
	mu   sync.Mutex
	gen  *[3]int64
	next int64 // the number of the last encode started
}

// LoadProjector loads the projector at path for m, on the CPU with
// threads threads. It fails when the file is no projector, or one made
// for a model of another embedding width.
func LoadProjector(path string, m *Model, threads int) (*Projector, error) {
	Init()
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	gen := (*[3]int64)(C.calloc(3, 8))
	params := C.mtmd_context_params_default()
	params.use_gpu = false
	params.print_timings = false
	// The warmup sizes the compute buffers at load, and decides flash
	// attention (auto: on where the backend has it) as llama-server's
	// does: without it the encoder computes attention the other way,
	// and its embeddings differ in the last bits.
	params.warmup = true
	params.cb_eval = C.ggml_backend_sched_eval_callback(C.corral_encoder_abort)
	params.cb_eval_user_data = unsafe.Pointer(gen)
	if threads > 0 {
		params.n_threads = C.int(threads)
	}
	p := C.mtmd_init_from_file(cpath, m.m, params)
	if p == nil {
		C.free(unsafe.Pointer(gen))
		return nil, fmt.Errorf("load projector %s: llama.cpp could not load it for this model (CORRAL_LLAMA_LOG=1 shows why)", path)
	}
	return &Projector{p: p, model: m, marker: C.GoString(C.mtmd_default_marker()), gen: gen}, nil
}

// Close frees the projector.
func (p *Projector) Close() {
	if p.p != nil {
		C.mtmd_free(p.p)
		p.p = nil
		p.mu.Lock()
		C.free(unsafe.Pointer(p.gen))
		p.gen = nil
		p.mu.Unlock()
	}
}

// Vision reports whether the projector takes images.
func (p *Projector) Vision() bool { return bool(C.mtmd_support_vision(p.p)) }

// Audio reports whether the projector takes audio.
func (p *Projector) Audio() bool { return bool(C.mtmd_support_audio(p.p)) }

// MRoPE reports whether the model places a medium's embeddings with
// M-RoPE's positions (the Qwen2-VL family: an image's are 2-D, and it
// takes fewer positions than cells).
func (p *Projector) MRoPE() bool { return bool(C.mtmd_decode_use_mrope(p.p)) }

// Positions returns the positions of n of the chunk's embeddings from
// its off-th, the chunk starting at position pos0, for
// Context.DecodeEmbd: pos0+off to pos0+off+n-1, or with M-RoPE four
// planes of n (an image's 2-D positions: all of its embeddings at pos0
// on the first plane, its rows and columns on the next two).
func (p *Projector) Positions(c *MediaChunk, pos0, off, n int) []int32 {
	if n <= 0 || off < 0 || off+n > c.Tokens {
		return nil
	}
	mrope, planes := p.MRoPE(), 1
	if mrope {
		planes = 4
	}
	out := make([]int32, n*planes)
	C.corral_chunk_positions(c.c, C.bool(mrope), C.int32_t(pos0), C.int32_t(off), C.int32_t(n), (*C.int32_t)(unsafe.Pointer(&out[0])))
	return out
}

// AudioSampleRate is the rate in Hz of the mono samples TokenizeAudio
// takes; 0 when the projector takes no audio.
func (p *Projector) AudioSampleRate() int { return max(0, int(C.mtmd_get_audio_sample_rate(p.p))) }

// MediaPiece is one part of what a medium becomes in a prompt, in order:
// text tokens (the markers a model sets around an image or a sound) or
// a chunk the encoder turns into embeddings.
type MediaPiece struct {
	Tokens []Token
	Chunk  *MediaChunk
}

// A MediaChunk is a preprocessed image or stretch of audio: Tokens
// embeddings once encoded, which take Tokens cells and Positions
// positions of a sequence. NonCausal chunks must be evaluated in one
// Decode with causal attention off (Gemma 3's images); the others may be
// split like text. Free it when done.
//
// With M-RoPE (Projector.MRoPE) an image's embeddings are OnePosition:
// all of them take the chunk's first position on the first plane, and
// it takes fewer Positions than Tokens.
type MediaChunk struct {
	c                             *C.mtmd_input_chunk
	Tokens, Positions             int
	Audio, NonCausal, OnePosition bool
}

// Free frees the chunk's preprocessed data.
func (c *MediaChunk) Free() {
	if c != nil && c.c != nil {
		C.mtmd_input_chunk_free(c.c)
		c.c = nil
	}
}

// FreePieces frees the chunks of pieces.
func FreePieces(pieces []MediaPiece) {
	for _, pc := range pieces {
		pc.Chunk.Free()
	}
}

// TokenizeImage preprocesses an image of nx × ny pixels, rgb holding 3
// bytes per pixel row by row (resizing, normalising, slicing as the
// projector wants), into the pieces that stand for it in a prompt.
func (p *Projector) TokenizeImage(rgb []byte, nx, ny int) ([]MediaPiece, error) {
	if !p.Vision() {
		return nil, errors.New("tokenize image: the projector takes no images")
	}
	if nx <= 0 || ny <= 0 || len(rgb) != nx*ny*3 {
		return nil, fmt.Errorf("tokenize image: %d bytes for %d × %d pixels, want %d", len(rgb), nx, ny, nx*ny*3)
	}
	b := C.mtmd_bitmap_init(C.uint32_t(nx), C.uint32_t(ny), (*C.uchar)(unsafe.Pointer(&rgb[0])))
	if b == nil {
		return nil, errors.New("tokenize image: llama.cpp refused the bitmap")
	}
	defer C.mtmd_bitmap_free(b)
	return p.tokenize(b)
}

// TokenizeAudio preprocesses mono samples in [-1, 1] at AudioSampleRate
// into the pieces that stand for them in a prompt.
func (p *Projector) TokenizeAudio(pcm []float32) ([]MediaPiece, error) {
	if !p.Audio() {
		return nil, errors.New("tokenize audio: the projector takes no audio")
	}
	if len(pcm) < 2 {
		return nil, errors.New("tokenize audio: fewer than 2 samples")
	}
	b := C.mtmd_bitmap_init_from_audio(C.size_t(len(pcm)), (*C.float)(unsafe.Pointer(&pcm[0])))
	if b == nil {
		return nil, errors.New("tokenize audio: llama.cpp refused the samples")
	}
	defer C.mtmd_bitmap_free(b)
	return p.tokenize(b)
}

// tokenize runs mtmd's tokenizer on the medium b alone (the marker, no
// other text, no BOS) and copies out its pieces.
func (p *Projector) tokenize(b *C.mtmd_bitmap) ([]MediaPiece, error) {
	chunks := C.mtmd_input_chunks_init()
	defer C.mtmd_input_chunks_free(chunks)
	ctext := C.CString(p.marker)
	defer C.free(unsafe.Pointer(ctext))
	text := C.mtmd_input_text{text: ctext, text_len: C.size_t(len(p.marker)), add_special: false, parse_special: true}
	bitmaps := (**C.mtmd_bitmap)(C.malloc(C.size_t(unsafe.Sizeof(b))))
	defer C.free(unsafe.Pointer(bitmaps))
	*bitmaps = b
	if rc := C.mtmd_tokenize(p.p, chunks, &text, bitmaps, 1); rc != 0 {
		return nil, fmt.Errorf("tokenize: llama.cpp could not preprocess the medium (%d)", int(rc))
	}
	var out []MediaPiece
	for i := range int(C.mtmd_input_chunks_size(chunks)) {
		c := C.mtmd_input_chunks_get(chunks, C.size_t(i))
		switch C.mtmd_input_chunk_get_type(c) {
		case C.MTMD_INPUT_CHUNK_TYPE_TEXT:
			var n C.size_t
			toks := C.mtmd_input_chunk_get_tokens_text(c, &n)
			if n > 0 {
				out = append(out, MediaPiece{Tokens: append([]Token(nil), unsafe.Slice((*Token)(unsafe.Pointer(toks)), int(n))...)})
			}
		default:
			own := C.mtmd_input_chunk_copy(c)
			if own == nil {
				FreePieces(out)
				return nil, errors.New("tokenize: llama.cpp could not copy a chunk")
			}
			mc := &MediaChunk{
				c:         own,
				Tokens:    int(C.mtmd_input_chunk_get_n_tokens(own)),
				Positions: int(C.mtmd_input_chunk_get_n_pos(own)),
				Audio:     C.mtmd_input_chunk_get_type(own) == C.MTMD_INPUT_CHUNK_TYPE_AUDIO,
				NonCausal: bool(C.mtmd_decode_use_non_causal(p.p, own)),
			}
			if mc.Tokens > 1 && p.MRoPE() {
				last := p.Positions(mc, 0, mc.Tokens-1, 1)
				mc.OnePosition = last[0] == 0 // the first plane of the last embedding
			}
			out = append(out, MediaPiece{Chunk: mc})
		}
	}
	if !hasChunk(out) {
		FreePieces(out)
		return nil, errors.New("tokenize: the medium made no chunk")
	}
	return out, nil
}

func hasChunk(pieces []MediaPiece) bool {
	for _, pc := range pieces {
		if pc.Chunk != nil {
			return true
		}
	}
	return false
}

// ErrEncodeCancelled is Encode's error when its context ended.
var ErrEncodeCancelled = errors.New("encode: cancelled")

// Encode runs the encoder on the chunk and appends its Tokens
// embeddings, of the model's input width each, to dst. When ctx ends
// meanwhile the encoder stops at the end of a layer and Encode returns
// ErrEncodeCancelled.
func (p *Projector) Encode(ctx context.Context, c *MediaChunk, dst []float32) ([]float32, error) {
	if c == nil || c.c == nil {
		return dst, errors.New("encode: a freed chunk")
	}
	p.next++
	n := p.next
	atomic.StoreInt64(&p.gen[0], n)
	atomic.StoreInt64(&p.gen[2], 0)
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.gen != nil {
			atomic.StoreInt64(&p.gen[1], n)
		}
	})
	defer stop()
	if ctx.Err() != nil {
		return dst, ErrEncodeCancelled
	}
	rc := C.mtmd_encode_chunk(p.p, c.c)
	if atomic.LoadInt64(&p.gen[1]) == n {
		return dst, ErrEncodeCancelled
	}
	if rc != 0 {
		return dst, fmt.Errorf("encode: the encoder failed (%d)", int(rc))
	}
	embd := unsafe.Slice((*float32)(unsafe.Pointer(C.mtmd_get_output_embd(p.p))), c.Tokens*p.model.NEmbdInput())
	return append(dst, embd...), nil
}
