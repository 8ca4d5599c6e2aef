package llama

/*
#include <stdlib.h>
#include "mtmd.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

// A Projector is a multimodal projector (an "mmproj" GGUF: a vision or
// audio encoder and the layers that map its output into a text model's
// embedding space) loaded with llama.cpp's libmtmd for one Model. It
// turns an image or a stretch of audio into the embeddings the model
// reads in their place. Like a Context it belongs to one goroutine.
type Projector struct {
	p      *C.mtmd_context
	model  *Model
	marker string // what stands for a medium in the text mtmd tokenizes
}

// LoadProjector loads the projector at path for m, on the CPU with
// threads threads. It fails when the file is no projector, or one made
// for a model of another embedding width.
func LoadProjector(path string, m *Model, threads int) (*Projector, error) {
	Init()
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	params := C.mtmd_context_params_default()
	params.use_gpu = false
	params.print_timings = false
	params.warmup = false
	if threads > 0 {
		params.n_threads = C.int(threads)
	}
	p := C.mtmd_init_from_file(cpath, m.m, params)
	if p == nil {
		return nil, fmt.Errorf("load projector %s: llama.cpp could not load it for this model (CORRAL_LLAMA_LOG=1 shows why)", path)
	}
	return &Projector{p: p, model: m, marker: C.GoString(C.mtmd_default_marker())}, nil
}

// Close frees the projector.
func (p *Projector) Close() {
	if p.p != nil {
		C.mtmd_free(p.p)
		p.p = nil
	}
}

// Vision reports whether the projector takes images.
func (p *Projector) Vision() bool { return bool(C.mtmd_support_vision(p.p)) }

// Audio reports whether the projector takes audio.
func (p *Projector) Audio() bool { return bool(C.mtmd_support_audio(p.p)) }

// AudioSampleRate is the rate in Hz of the mono samples EncodeAudio
// takes; 0 when the projector takes no audio.
func (p *Projector) AudioSampleRate() int { return max(0, int(C.mtmd_get_audio_sample_rate(p.p))) }

// Encoded is a medium as the text model reads it: Tokens embeddings of
// the model's width each, in order (Embd holds Tokens × width floats),
// which take Positions positions in the sequence.
type Encoded struct {
	Tokens, Positions int
	Embd              []float32
}

// EncodeImage encodes an image of nx × ny pixels, rgb holding 3 bytes per
// pixel row by row, as the projector's preprocessing (resizing,
// normalising, slicing) and encoder make it.
func (p *Projector) EncodeImage(rgb []byte, nx, ny int) (Encoded, error) {
	if !p.Vision() {
		return Encoded{}, errors.New("encode image: the projector takes no images")
	}
	if nx <= 0 || ny <= 0 || len(rgb) != nx*ny*3 {
		return Encoded{}, fmt.Errorf("encode image: %d bytes for %d × %d pixels, want %d", len(rgb), nx, ny, nx*ny*3)
	}
	b := C.mtmd_bitmap_init(C.uint32_t(nx), C.uint32_t(ny), (*C.uchar)(unsafe.Pointer(&rgb[0])))
	if b == nil {
		return Encoded{}, errors.New("encode image: llama.cpp refused the bitmap")
	}
	defer C.mtmd_bitmap_free(b)
	return p.encode(b, C.MTMD_INPUT_CHUNK_TYPE_IMAGE)
}

// EncodeAudio encodes mono samples in [-1, 1] at AudioSampleRate.
func (p *Projector) EncodeAudio(pcm []float32) (Encoded, error) {
	if !p.Audio() {
		return Encoded{}, errors.New("encode audio: the projector takes no audio")
	}
	if len(pcm) == 0 {
		return Encoded{}, errors.New("encode audio: no samples")
	}
	b := C.mtmd_bitmap_init_from_audio(C.size_t(len(pcm)), (*C.float)(unsafe.Pointer(&pcm[0])))
	if b == nil {
		return Encoded{}, errors.New("encode audio: llama.cpp refused the samples")
	}
	defer C.mtmd_bitmap_free(b)
	return p.encode(b, C.MTMD_INPUT_CHUNK_TYPE_AUDIO)
}

// encode tokenizes the medium b alone (the marker, no other text) and
// encodes its chunks of type typ, their embeddings one after the other.
func (p *Projector) encode(b *C.mtmd_bitmap, typ C.enum_mtmd_input_chunk_type) (Encoded, error) {
	chunks := C.mtmd_input_chunks_init()
	defer C.mtmd_input_chunks_free(chunks)
	ctext := C.CString(p.marker)
	defer C.free(unsafe.Pointer(ctext))
	text := C.mtmd_input_text{text: ctext, text_len: C.size_t(len(p.marker)), add_special: false, parse_special: true}
	bitmaps := (**C.mtmd_bitmap)(C.malloc(C.size_t(unsafe.Sizeof(b))))
	defer C.free(unsafe.Pointer(bitmaps))
	*bitmaps = b
	if rc := C.mtmd_tokenize(p.p, chunks, &text, bitmaps, 1); rc != 0 {
		return Encoded{}, fmt.Errorf("encode: llama.cpp could not preprocess the medium (%d)", int(rc))
	}
	width := p.model.NEmbdInput()
	var out Encoded
	for i := range int(C.mtmd_input_chunks_size(chunks)) {
		c := C.mtmd_input_chunks_get(chunks, C.size_t(i))
		if C.mtmd_input_chunk_get_type(c) != typ {
			continue
		}
		if rc := C.mtmd_encode_chunk(p.p, c); rc != 0 {
			return Encoded{}, fmt.Errorf("encode: the encoder failed (%d)", int(rc))
		}
		n := int(C.mtmd_input_chunk_get_n_tokens(c))
		embd := unsafe.Slice((*float32)(unsafe.Pointer(C.mtmd_get_output_embd(p.p))), n*width)
		out.Embd = append(out.Embd, embd...)
		out.Tokens += n
		out.Positions += int(C.mtmd_input_chunk_get_n_pos(c))
	}
	if out.Tokens == 0 {
		return Encoded{}, errors.New("encode: the medium made no tokens")
	}
	return out, nil
}
