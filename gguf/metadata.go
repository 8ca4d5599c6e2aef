package gguf

import "math"

// Metadata is what a GGUF file says about itself: the header, every
// key-value pair and the tensor descriptions.
//
// The typed fields are read from the well-known keys; a field whose key is
// absent (or has a type other than the expected one) is zero unless its doc
// says otherwise. Architecture-specific keys are looked up under the
// architecture's prefix, for example "llama.context_length".
type Metadata struct {
	// Version is the GGUF format version, 2 or 3.
	Version uint32
	// Architecture is general.architecture, such as "llama".
	Architecture string
	// Name is general.name.
	Name string
	// ContextLength is the context the model was trained with.
	ContextLength int
	// EmbeddingLength is the width of the hidden state.
	EmbeddingLength int
	// BlockCount is the number of transformer layers.
	BlockCount int
	// FeedForwardLength is the width of the feed-forward layer.
	FeedForwardLength int
	// HeadCount is the number of attention heads (zero when given per layer).
	HeadCount int
	// HeadCountKV is the number of key-value heads (zero when given per layer).
	HeadCountKV int
	// VocabSize is the length of tokenizer.ggml.tokens.
	VocabSize int
	// BOS is the beginning-of-sequence token id, or -1 when absent.
	BOS int
	// EOS is the end-of-sequence token id, or -1 when absent.
	EOS int
	// AddBOS is tokenizer.ggml.add_bos_token. When the key is absent it is
	// llama.cpp's default for the tokenizer: true for "llama" (SentencePiece)
	// and "bert" (WordPiece), false otherwise.
	AddBOS bool
	// ChatTemplate is tokenizer.chat_template, empty when absent.
	ChatTemplate string
	// ChatTemplateToolUse is tokenizer.chat_template.tool_use, the
	// template for requests that offer tools (Command R+, FireFunction
	// v2), empty when absent.
	ChatTemplateToolUse string
	// FileType is general.file_type (a llama_ftype, 7 = mostly Q8_0), or -1
	// when absent.
	FileType int
	// TensorCount is the number of tensors.
	TensorCount int
	// Alignment is general.alignment, 32 by default.
	Alignment int
	// DataOffset is the file offset where tensor data starts.
	DataOffset int64
	// KV holds every key-value pair. Scalars are uint8, int8, uint16, int16,
	// uint32, int32, float32, bool, string, uint64, int64 or float64; arrays
	// are slices of those ([]string for tokenizer.ggml.tokens).
	KV map[string]any
	// Tensors describes the tensors in file order.
	Tensors []TensorInfo
}

// String returns the string value of key.
func (m *Metadata) String(key string) (string, bool) {
	s, ok := m.KV[key].(string)
	return s, ok
}

// Uint returns the value of key if it is a non-negative integer scalar of
// any width.
func (m *Metadata) Uint(key string) (uint64, bool) {
	switch v := m.KV[key].(type) {
	case uint8:
		return uint64(v), true
	case uint16:
		return uint64(v), true
	case uint32:
		return uint64(v), true
	case uint64:
		return v, true
	case int8:
		return uint64(v), v >= 0
	case int16:
		return uint64(v), v >= 0
	case int32:
		return uint64(v), v >= 0
	case int64:
		return uint64(v), v >= 0
	}
	return 0, false
}

// Float returns the value of key if it is a float32 or float64 scalar.
func (m *Metadata) Float(key string) (float64, bool) {
	switch v := m.KV[key].(type) {
	case float32:
		return float64(v), true
	case float64:
		return v, true
	}
	return 0, false
}

// Bool returns the value of key if it is a bool.
func (m *Metadata) Bool(key string) (bool, bool) {
	b, ok := m.KV[key].(bool)
	return b, ok
}

// fillTyped sets the typed fields from KV.
func (m *Metadata) fillTyped() {
	m.Architecture, _ = m.String("general.architecture")
	m.Name, _ = m.String("general.name")
	arch := m.Architecture + "."
	m.ContextLength = m.count(arch + "context_length")
	m.EmbeddingLength = m.count(arch + "embedding_length")
	m.BlockCount = m.count(arch + "block_count")
	m.FeedForwardLength = m.count(arch + "feed_forward_length")
	m.HeadCount = m.count(arch + "attention.head_count")
	m.HeadCountKV = m.count(arch + "attention.head_count_kv")
	if toks, ok := m.KV["tokenizer.ggml.tokens"].([]string); ok {
		m.VocabSize = len(toks)
	}
	m.BOS = m.id("tokenizer.ggml.bos_token_id")
	m.EOS = m.id("tokenizer.ggml.eos_token_id")
	if b, ok := m.Bool("tokenizer.ggml.add_bos_token"); ok {
		m.AddBOS = b
	} else {
		tok, _ := m.String("tokenizer.ggml.model")
		m.AddBOS = tok == "llama" || tok == "bert"
	}
	m.ChatTemplate, _ = m.String(chatTemplateKey)
	m.ChatTemplateToolUse, _ = m.String(chatTemplateToolUseKey)
	m.FileType = m.id("general.file_type")
}

// count returns key as an int, or 0.
func (m *Metadata) count(key string) int {
	v, ok := m.Uint(key)
	if !ok || v > math.MaxInt32 {
		return 0
	}
	return int(v)
}

// id returns key as an int, or -1 when it is absent or out of range (files
// write "none" as 0xFFFFFFFF).
func (m *Metadata) id(key string) int {
	v, ok := m.Uint(key)
	if !ok || v >= math.MaxInt32 {
		return -1
	}
	return int(v)
}
