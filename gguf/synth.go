package gguf

import (
	"bufio"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
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
func WriteSynthetic(path string, shape Shape, seed int64) error {
	return WriteSyntheticOptions(path, shape, seed, SynthOptions{})
}

// SynthOptions are the optional parts of a synthetic model.
type SynthOptions struct {
	// Tokenizer, when not nil, is the metadata of a GGUF file (such as one
	// of llama.cpp's vocabulary-only ggml-vocab-*.gguf) whose tokenizer
	// the model takes in place of the synthetic one: every tokenizer.* key
	// is copied with its type (vocabulary, scores, token types, merges,
	// special token ids, add_bos/add_eos, pre-tokenizer, chat template).
	// The model's vocabulary size is the length of its
	// tokenizer.ggml.tokens, whatever Shape.Vocab says. Its general.name
	// starts the model's name too: llama.cpp sets some token attributes by
	// model name (Phi-3's special tokens strip the whitespace after them).
	Tokenizer *Metadata
	// ChatTemplate, when not empty, is written as tokenizer.chat_template,
	// replacing the Tokenizer's.
	ChatTemplate string
	// ChatTemplateToolUse, when not empty, is written as
	// tokenizer.chat_template.tool_use: the template for requests that
	// offer tools (Command R+'s, Hermes 2 Pro's), replacing the
	// Tokenizer's.
	ChatTemplateToolUse string
	// Special are control tokens added at the end of the synthetic
	// vocabulary (after ChatML's), which grows by their number: a chat
	// template's markup that real models write as one token. The
	// vocabulary then adds no space before the text that follows a special
	// token (tokenizer.ggml.add_space_prefix false), as the BPE
	// vocabularies of such models do not. They may not go with a
	// Tokenizer, repeat, or be tokens the vocabulary has.
	Special []string
}

// WriteSyntheticOptions is WriteSynthetic with a tokenizer or chat template
// from elsewhere (see SynthOptions).
func WriteSyntheticOptions(path string, shape Shape, seed int64, o SynthOptions) (err error) {
	var tokenizer []kv
	if o.Tokenizer != nil {
		if tokenizer, shape.Vocab, err = tokenizerKVs(o.Tokenizer); err != nil {
			return fmt.Errorf("gguf: write %s: %w", path, err)
		}
		if shape.ChatML {
			return fmt.Errorf("gguf: write %s: shape %v: chatml adds tokens to the synthetic vocabulary and cannot go with a vocabulary from a file", path, shape)
		}
	}
	if err := o.checkTemplates(); err != nil {
		return fmt.Errorf("gguf: write %s: %w", path, err)
	}
	if err := shape.validate(tokenizer == nil); err != nil {
		return fmt.Errorf("gguf: write %s: %w", path, err)
	}
	if shape.Experts > 0 || shape.ExpertsUsed > 0 {
		return fmt.Errorf("gguf: write %s: shape %v: experts are for architectures other than llama", path, shape)
	}
	if len(o.Special) > 0 {
		if tokenizer != nil {
			return fmt.Errorf("gguf: write %s: special tokens are added to the synthetic vocabulary and cannot go with a vocabulary from a file", path)
		}
		if tokenizer, err = specialKVs(synthVocab(shape.Vocab, shape.ChatML), o.Special); err != nil {
			return fmt.Errorf("gguf: write %s: %w", path, err)
		}
		shape.Vocab += len(o.Special)
		if err := shape.validate(false); err != nil {
			return fmt.Errorf("gguf: write %s: %w", path, err)
		}
	}
	name := "corral synthetic " + shape.String()
	if o.Tokenizer != nil && o.Tokenizer.Name != "" {
		name = o.Tokenizer.Name + " (" + name + ")"
	}
	kvs := o.setTemplates(synthKVs(shape, name, tokenizer))
	return writeFile(path, func(w *bufio.Writer) error { return writeSynthetic(w, shape, kvs, seed) })
}

// chatTemplateKey holds a model's Jinja chat template;
// chatTemplateToolUseKey the one for requests that offer tools.
const (
	chatTemplateKey        = "tokenizer.chat_template"
	chatTemplateToolUseKey = "tokenizer.chat_template.tool_use"
)

// checkTemplates refuses chat templates too long for a GGUF string.
func (o SynthOptions) checkTemplates() error {
	for _, t := range []string{o.ChatTemplate, o.ChatTemplateToolUse} {
		if len(t) > maxStringLen {
			return fmt.Errorf("chat template of %d bytes, more than %d", len(t), maxStringLen)
		}
	}
	return nil
}

// setTemplates sets the chat templates o gives in kvs.
func (o SynthOptions) setTemplates(kvs []kv) []kv {
	if o.ChatTemplate != "" {
		kvs = setKV(kvs, chatTemplateKey, o.ChatTemplate)
	}
	if o.ChatTemplateToolUse != "" {
		kvs = setKV(kvs, chatTemplateToolUseKey, o.ChatTemplateToolUse)
	}
	return kvs
}

// tokenizerKVs returns the tokenizer.* pairs of m, sorted by key, and the
// number of tokens, after checking that they name a tokenizer model and
// hold a vocabulary.
func tokenizerKVs(m *Metadata) ([]kv, int, error) {
	if _, ok := m.String("tokenizer.ggml.model"); !ok {
		return nil, 0, errors.New("the vocabulary file has no tokenizer.ggml.model")
	}
	toks, _ := m.KV["tokenizer.ggml.tokens"].([]string)
	if len(toks) == 0 {
		return nil, 0, errors.New("the vocabulary file has no tokenizer.ggml.tokens")
	}
	if len(toks) > maxVocab {
		return nil, 0, fmt.Errorf("the vocabulary file has %d tokens, more than %d", len(toks), maxVocab)
	}
	var kvs []kv
	for _, k := range slices.Sorted(maps.Keys(m.KV)) {
		if strings.HasPrefix(k, "tokenizer.") {
			kvs = append(kvs, kv{k, m.KV[k]})
		}
	}
	return kvs, len(toks), nil
}

// setKV sets key to value in kvs, in place if the key is there, else at the
// end.
func setKV(kvs []kv, key string, value any) []kv {
	for i := range kvs {
		if kvs[i].key == key {
			kvs[i].value = value
			return kvs
		}
	}
	return append(kvs, kv{key, value})
}

// writeSynthetic writes the whole file to w.
func writeSynthetic(w *bufio.Writer, s Shape, kvs []kv, seed int64) error {
	e := &encoder{w: w}
	tensors := s.tensors()
	e.header(kvs, tensors, defaultAlignment)
	rng := rand.New(rand.NewPCG(uint64(seed), 0x636f7272616c)) // "corral"
	fill := randomRows(rng, weightStdDev)
	if s.Copy {
		fill = newCopier(s, rng).row
	}
	for _, t := range tensors {
		if e.err != nil {
			break
		}
		writeRows(e, t, fill)
		e.pad(defaultAlignment)
	}
	return e.err
}

// synthKVs returns the metadata of a synthetic model of shape s, with the
// key types llama.cpp insists on, named name. The tokenizer pairs are
// tokenizer, or the synthetic vocabulary's when tokenizer is nil.
func synthKVs(s Shape, name string, tokenizer []kv) []kv {
	u := func(n int) uint32 { return uint32(n) }
	kvs := []kv{
		{"general.architecture", "llama"},
		{"general.name", name},
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
	}
	if tokenizer == nil {
		tokenizer = synthTokenizerKVs(s)
	}
	kvs = append(kvs, tokenizer...)
	if s.tensorType() != TypeF32 {
		kvs = append(kvs, kv{"general.quantization_version", uint32(2)})
	}
	return kvs
}

// specialKVs returns the tokenizer metadata of the synthetic vocabulary v
// with the control tokens special added at its end.
func specialKVs(v vocab, special []string) ([]kv, error) {
	have := make(map[string]bool, len(v.tokens)+len(special))
	for _, tok := range v.tokens {
		have[tok] = true
	}
	for _, tok := range special {
		if tok == "" || len(tok) > maxStringLen || have[tok] {
			return nil, fmt.Errorf("special token %q is empty, too long, repeated or in the vocabulary already", tok)
		}
		have[tok] = true
		v.tokens = append(v.tokens, tok)
		v.scores = append(v.scores, 0)
		v.types = append(v.types, tokenControl)
	}
	return append(vocabKVs(v), kv{"tokenizer.ggml.add_space_prefix", false}), nil
}

// synthTokenizerKVs returns the tokenizer metadata of the synthetic
// vocabulary of shape s.
func synthTokenizerKVs(s Shape) []kv {
	return vocabKVs(synthVocab(s.Vocab, s.ChatML))
}

// vocabKVs returns the tokenizer metadata of the synthetic vocabulary v.
func vocabKVs(v vocab) []kv {
	return []kv{
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
}

// writeTensor writes the data of t, an F32 or Q8_0 tensor, row by row:
// ones for a norm vector, values drawn from N(0, std²) otherwise.
func writeTensor(e *encoder, t TensorInfo, rng *rand.Rand, std float64) {
	writeRows(e, t, randomRows(rng, std))
}

// randomRows fills a norm vector's rows with ones, other rows with values
// drawn from N(0, std²).
func randomRows(rng *rand.Rand, std float64) func(t TensorInfo, row int, vals []float32) {
	return func(t TensorInfo, _ int, vals []float32) {
		norm := strings.HasSuffix(t.Name, "norm.weight")
		for i := range vals {
			if norm {
				vals[i] = 1
			} else {
				vals[i] = float32(rng.NormFloat64() * std)
			}
		}
	}
}

// writeRows writes the data of t, an F32 or Q8_0 tensor, row by row, each
// as fill sets it (a row's index, then its values).
func writeRows(e *encoder, t TensorInfo, fill func(t TensorInfo, row int, vals []float32)) {
	n, _ := t.Elements()
	row := t.Dims[0]
	vals := make([]float32, row)
	size, _ := t.Size()
	out := make([]byte, size/(n/row))
	put := putF32
	if t.Type == TypeQ8_0 {
		put = putQ8_0
	}
	for r := range n / row {
		fill(t, int(r), vals)
		put(out, vals)
		e.write(out)
	}
}
