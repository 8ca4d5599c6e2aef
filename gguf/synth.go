package gguf

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
)

// weightStdDev is the standard deviation of the random weights: small
// enough that activations stay finite through many layers.
const weightStdDev = 0.02

// WriteSynthetic writes to path a llama-architecture model of the given
// shape with random weights, like vLLM's "dummy" load format: matrices are
// drawn from N(0, 0.02²), norm weights are 1. The tokenizer is a synthetic
// SentencePiece vocabulary (see synthVocab) with <s> as BOS and </s> as
// EOS. The same shape and seed give the same file.
//
// The file is written as it is generated, one tensor row at a time; on
// error the partial file is removed.
func WriteSynthetic(path string, shape Shape, seed int64) (err error) {
	if err := shape.Validate(); err != nil {
		return fmt.Errorf("gguf: write %s: %w", path, err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("gguf: write %s: %w", path, cerr)
		}
		if err != nil {
			os.Remove(path)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := writeSynthetic(bw, shape, seed); err != nil {
		return fmt.Errorf("gguf: write %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("gguf: write %s: %w", path, err)
	}
	return nil
}

// writeSynthetic writes the whole file to w.
func writeSynthetic(w *bufio.Writer, s Shape, seed int64) error {
	e := &encoder{w: w}
	tensors := s.tensors()
	e.header(synthKVs(s), tensors, defaultAlignment)
	rng := rand.New(rand.NewPCG(uint64(seed), 0x636f7272616c)) // "corral"
	for _, t := range tensors {
		if e.err != nil {
			break
		}
		writeTensor(e, t, rng)
		e.pad(defaultAlignment)
	}
	return e.err
}

// synthKVs returns the metadata of a synthetic model of shape s, with the
// key types llama.cpp insists on.
func synthKVs(s Shape) []kv {
	v := synthVocab(s.Vocab, s.ChatML)
	u := func(n int) uint32 { return uint32(n) }
	kvs := []kv{
		{"general.architecture", "llama"},
		{"general.name", "corral synthetic " + s.String()},
		{"general.alignment", uint32(defaultAlignment)},
		{"general.file_type", s.fileType()},
		{"llama.context_length", u(s.Ctx)},
		{"llama.embedding_length", u(s.Embd)},
		{"llama.block_count", u(s.Layers)},
		{"llama.feed_forward_length", u(s.FF)},
		{"llama.attention.head_count", u(s.Heads)},
		{"llama.attention.head_count_kv", u(s.HeadsKV)},
		{"llama.rope.dimension_count", u(s.Embd / s.Heads)},
		{"llama.rope.freq_base", float32(10000)},
		{"llama.attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"llama.vocab_size", u(s.Vocab)},
		{"tokenizer.ggml.model", "llama"},
		{"tokenizer.ggml.tokens", v.tokens},
		{"tokenizer.ggml.scores", v.scores},
		{"tokenizer.ggml.token_type", v.types},
		{"tokenizer.ggml.unknown_token_id", uint32(unkID)},
		{"tokenizer.ggml.bos_token_id", uint32(bosID)},
		{"tokenizer.ggml.eos_token_id", uint32(eosID)},
		{"tokenizer.ggml.add_bos_token", true},
		{"tokenizer.ggml.add_eos_token", false},
	}
	if s.tensorType() != TypeF32 {
		kvs = append(kvs, kv{"general.quantization_version", uint32(2)})
	}
	return kvs
}

// writeTensor writes the data of t, an F32 or Q8_0 tensor, row by row:
// ones for a norm vector, random values otherwise.
func writeTensor(e *encoder, t TensorInfo, rng *rand.Rand) {
	n, _ := t.Elements()
	row := t.Dims[0]
	vals := make([]float32, row)
	size, _ := t.Size()
	out := make([]byte, size/(n/row))
	norm := strings.HasSuffix(t.Name, "norm.weight")
	put := putF32
	if t.Type == TypeQ8_0 {
		put = putQ8_0
	}
	for range n / row {
		for i := range vals {
			if norm {
				vals[i] = 1
			} else {
				vals[i] = float32(rng.NormFloat64() * weightStdDev)
			}
		}
		put(out, vals)
		e.write(out)
	}
}
