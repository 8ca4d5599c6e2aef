package gguf

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Shape is the architecture of a synthetic llama model.
type Shape struct {
	Embd    int    // width of the hidden state (n_embd)
	Layers  int    // transformer blocks
	Heads   int    // attention heads
	HeadsKV int    // key-value heads; Heads must be a multiple
	FF      int    // feed-forward width
	Vocab   int    // tokens, at least 260 (3 special + 256 byte tokens + 1)
	Ctx     int    // training context length
	Type    string // weight matrix type: "q8_0" or "f32"
	// ChatML ends the vocabulary with the control tokens <|im_start|> and
	// <|im_end|>, for testing chat prompts on a model that has them.
	ChatML bool
	// Experts is the number of experts of a mixture-of-experts feed-forward
	// (0: dense), ExpertsUsed how many of them each token goes through.
	// Only architectures other than llama take them (WriteSyntheticArch).
	Experts, ExpertsUsed int
	// MTP is the number of multi-token prediction heads (nextn layers)
	// after the Layers of the trunk, for architectures that have them
	// (Qwen3.5, DeepSeek, GLM, ...): synth --arch only.
	MTP int
	// Copy sets the weights by hand, not at random: the model's greedy
	// continuation repeats what followed the last token's earlier
	// occurrence in the prompt (see copier). llama only.
	Copy bool
}

// Shapes are the named shapes ParseShape accepts.
var Shapes = map[string]Shape{
	// 135m is SmolLM2-135M's architecture, with an untied output matrix.
	"135m": {Embd: 576, Layers: 30, Heads: 9, HeadsKV: 3, FF: 1536, Vocab: 49152, Ctx: 2048, Type: "q8_0"},
	// tiny is small enough for tests, even with a pure-Python decoder.
	"tiny": {Embd: 64, Layers: 2, Heads: 4, HeadsKV: 2, FF: 128, Vocab: 512, Ctx: 256, Type: "q8_0"},
}

// Upper bounds on shape fields; they keep a typo from asking for an
// impossible file.
const (
	maxEmbd    = 1 << 14
	maxLayers  = 1 << 10
	maxFF      = 1 << 16
	maxVocab   = 1 << 20
	maxCtx     = 1 << 22
	maxExperts = 1 << 10
)

// ParseShape parses a shape: a name from Shapes, or comma-separated
// key=value pairs with the keys embd, layers, heads, kv, ff, vocab, ctx,
// type, experts, used and mtp (and chatml=true, copy=true), as Shape.String
// writes them.
// The pairs may follow a name to override its fields ("tiny,type=f32");
// without a name, every key but kv (default: heads), type (default: q8_0)
// and the experts is required.
func ParseShape(s string) (Shape, error) {
	return ParseShapeFrom(Shape{}, s)
}

// ParseShapeFrom is ParseShape with the fields that s does not set taken
// from base (such as ArchShape's), unless s starts with a shape's name.
func ParseShapeFrom(base Shape, s string) (Shape, error) {
	parts := strings.Split(s, ",")
	sh := base
	if named, ok := Shapes[strings.TrimSpace(parts[0])]; ok {
		sh = named
		parts = parts[1:]
	}
	fields := map[string]*int{
		"embd": &sh.Embd, "layers": &sh.Layers, "heads": &sh.Heads, "kv": &sh.HeadsKV,
		"ff": &sh.FF, "vocab": &sh.Vocab, "ctx": &sh.Ctx, "experts": &sh.Experts, "used": &sh.ExpertsUsed,
		"mtp": &sh.MTP,
	}
	for _, p := range parts {
		key, val, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok {
			return Shape{}, fmt.Errorf("shape %q: %q is neither a known shape nor key=value", s, p)
		}
		if key == "type" {
			sh.Type = val
			continue
		}
		if flag, ok := map[string]*bool{"chatml": &sh.ChatML, "copy": &sh.Copy}[key]; ok {
			b, err := strconv.ParseBool(val)
			if err != nil {
				return Shape{}, fmt.Errorf("shape %q: %s: %w", s, key, err)
			}
			*flag = b
			continue
		}
		f, ok := fields[key]
		if !ok {
			return Shape{}, fmt.Errorf("shape %q: unknown key %q", s, key)
		}
		n, err := strconv.Atoi(val)
		if err != nil {
			return Shape{}, fmt.Errorf("shape %q: %s: %w", s, key, err)
		}
		*f = n
	}
	if sh.HeadsKV == 0 {
		sh.HeadsKV = sh.Heads
	}
	if sh.Type == "" {
		sh.Type = "q8_0"
	}
	if err := sh.validateArch(true); err != nil {
		return Shape{}, err
	}
	return sh, nil
}

// String formats s as key=value pairs that ParseShape reads back.
func (s Shape) String() string {
	str := fmt.Sprintf("embd=%d,layers=%d,heads=%d,kv=%d,ff=%d,vocab=%d,ctx=%d,type=%s",
		s.Embd, s.Layers, s.Heads, s.HeadsKV, s.FF, s.Vocab, s.Ctx, s.Type)
	if s.ChatML {
		str += ",chatml=true"
	}
	if s.Experts > 0 {
		str += fmt.Sprintf(",experts=%d,used=%d", s.Experts, s.ExpertsUsed)
	}
	if s.MTP > 0 {
		str += fmt.Sprintf(",mtp=%d", s.MTP)
	}
	if s.Copy {
		str += ",copy=true"
	}
	return str
}

// Validate reports whether llama.cpp can load and run a llama model of
// shape s.
func (s Shape) Validate() error {
	if err := s.validate(true); err != nil {
		return err
	}
	if s.Experts > 0 || s.ExpertsUsed > 0 || s.MTP > 0 {
		return fmt.Errorf("shape %v: experts and prediction heads are for architectures other than llama (synth --arch)", s)
	}
	return nil
}

// validateArch is validate for a model of another architecture, which may
// have experts (llama.cpp checks the rest when it builds the layout).
func (s Shape) validateArch(synthVocab bool) error {
	if err := s.validate(synthVocab); err != nil {
		return err
	}
	if s.Experts < 0 || s.Experts > maxExperts || s.ExpertsUsed < 0 || s.ExpertsUsed > s.Experts || (s.Experts > 0) != (s.ExpertsUsed > 0) {
		return fmt.Errorf("shape %v: experts=%d, used=%d: want 0 < used <= experts <= %d, or neither", s, s.Experts, s.ExpertsUsed, maxExperts)
	}
	return nil
}

// validate is Validate; synthVocab says whether the model has the synthetic
// vocabulary, whose fixed head sets a minimum size.
func (s Shape) validate(synthVocab bool) error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	inRange := func(name string, v, lo, hi int) {
		check(v >= lo && v <= hi, "%s=%d is outside [%d, %d]", name, v, lo, hi)
	}
	inRange("embd", s.Embd, 1, maxEmbd)
	inRange("layers", s.Layers, 1, maxLayers)
	inRange("mtp", s.MTP, 0, maxLayers-s.Layers)
	inRange("heads", s.Heads, 1, s.Embd)
	inRange("kv", s.HeadsKV, 1, s.Heads)
	inRange("ff", s.FF, 1, maxFF)
	minVocab := 1
	if synthVocab {
		minVocab = firstPiece + 1
		if s.ChatML {
			minVocab += len(chatMLTokens)
		}
	}
	inRange("vocab", s.Vocab, minVocab, maxVocab)
	inRange("ctx", s.Ctx, 1, maxCtx)
	if s.Heads > 0 && s.HeadsKV > 0 {
		check(s.Embd%s.Heads == 0, "embd=%d is not a multiple of heads=%d", s.Embd, s.Heads)
		check(s.Embd%s.Heads != 0 || s.Embd/s.Heads%2 == 0, "head size embd/heads=%d is odd; RoPE rotates pairs", s.Embd/s.Heads)
		check(s.Heads%s.HeadsKV == 0, "heads=%d is not a multiple of kv=%d", s.Heads, s.HeadsKV)
	}
	if s.Copy && s.Heads > 0 && s.Embd%s.Heads == 0 {
		check(s.Layers >= 2, "copy=true needs 2 layers or more, not %d", s.Layers)
		check(s.codeDims() >= minCodeDims, "copy=true needs a head size of %d or more and embd of %d or more, not %d and %d",
			2*copyPosPairs+minCodeDims, 3*minCodeDims+1, s.Embd/s.Heads, s.Embd)
	}
	switch s.Type {
	case "f32":
	case "q8_0":
		check(s.Embd%q8Block == 0, "embd=%d is not a multiple of %d, as q8_0 needs", s.Embd, q8Block)
		check(s.FF%q8Block == 0, "ff=%d is not a multiple of %d, as q8_0 needs", s.FF, q8Block)
	default:
		check(false, "type %q is neither q8_0 nor f32", s.Type)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("shape %v: %w", s, err)
	}
	return nil
}

// Params returns the number of weights in a model of shape s.
func (s Shape) Params() int64 {
	var n int64
	for _, t := range s.tensors() {
		e, _ := t.Elements()
		n += int64(e)
	}
	return n
}

// tensorType returns the ggml type of the weight matrices.
func (s Shape) tensorType() TensorType {
	if s.Type == "f32" {
		return TypeF32
	}
	return TypeQ8_0
}

// fileType returns general.file_type (llama_ftype) for the shape.
func (s Shape) fileType() uint32 {
	if s.Type == "f32" {
		return 0 // LLAMA_FTYPE_ALL_F32
	}
	return 7 // LLAMA_FTYPE_MOSTLY_Q8_0
}

// tensors returns the tensors of a llama model of shape s, as llama.cpp's
// LLM_ARCH_LLAMA loader names and sizes them, with offsets laid out
// back to back at the default alignment. Norm vectors are F32; matrices
// have the shape's type.
func (s Shape) tensors() []TensorInfo {
	embd, kvDim := uint64(s.Embd), uint64(s.Embd/s.Heads*s.HeadsKV)
	ff, voc := uint64(s.FF), uint64(s.Vocab)
	mt := s.tensorType()
	ts := []TensorInfo{
		{Name: "token_embd.weight", Dims: []uint64{embd, voc}, Type: mt},
		{Name: "output_norm.weight", Dims: []uint64{embd}, Type: TypeF32},
		{Name: "output.weight", Dims: []uint64{embd, voc}, Type: mt},
	}
	if s.Copy {
		ts = append(ts, TensorInfo{Name: copyRopeTensor, Dims: []uint64{embd / uint64(s.Heads) / 2}, Type: TypeF32})
	}
	for i := range s.Layers {
		blk := func(name string, typ TensorType, dims ...uint64) TensorInfo {
			return TensorInfo{Name: fmt.Sprintf("blk.%d.%s.weight", i, name), Dims: dims, Type: typ}
		}
		ts = append(ts,
			blk("attn_norm", TypeF32, embd),
			blk("attn_q", mt, embd, embd),
			blk("attn_k", mt, embd, kvDim),
			blk("attn_v", mt, embd, kvDim),
			blk("attn_output", mt, embd, embd),
			blk("ffn_norm", TypeF32, embd),
			blk("ffn_gate", mt, embd, ff),
			blk("ffn_up", mt, embd, ff),
			blk("ffn_down", mt, ff, embd),
		)
	}
	var off uint64
	for i := range ts {
		ts[i].Offset = off
		size, _ := ts[i].Size()
		off += alignUp(size, defaultAlignment)
	}
	return ts
}
