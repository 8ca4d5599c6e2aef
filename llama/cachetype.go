package llama

/*
#include "ggml.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
)

// CacheType is the element type of the KV cache's K or V tensors
// (llama_context_params.type_k and type_v): one of the ggml types
// llama-server's --cache-type-k and --cache-type-v accept. The zero
// value is F16, llama.cpp's default.
type CacheType int

// Cache types, in llama-server's order.
const (
	CacheF16 CacheType = iota
	CacheF32
	CacheBF16
	CacheQ8_0
	CacheQ4_0
	CacheQ4_1
	CacheIQ4NL
	CacheQ5_0
	CacheQ5_1
)

// cacheTypes describes each CacheType: its name (llama-server's), its
// ggml type, and its storage block (elems values in size bytes), as
// ggml's type traits give them (ggml.c; the block structs are in
// ggml-common.h).
var cacheTypes = [...]struct {
	name        string
	ggml        C.enum_ggml_type
	elems, size int64
}{
	CacheF16:   {"f16", C.GGML_TYPE_F16, 1, 2},
	CacheF32:   {"f32", C.GGML_TYPE_F32, 1, 4},
	CacheBF16:  {"bf16", C.GGML_TYPE_BF16, 1, 2},
	CacheQ8_0:  {"q8_0", C.GGML_TYPE_Q8_0, 32, 34},     // F16 scale + 32 int8
	CacheQ4_0:  {"q4_0", C.GGML_TYPE_Q4_0, 32, 18},     // F16 scale + 32 nibbles
	CacheQ4_1:  {"q4_1", C.GGML_TYPE_Q4_1, 32, 20},     // F16 scale and minimum + 32 nibbles
	CacheIQ4NL: {"iq4_nl", C.GGML_TYPE_IQ4_NL, 32, 18}, // F16 scale + 32 nibbles (a non-linear table)
	CacheQ5_0:  {"q5_0", C.GGML_TYPE_Q5_0, 32, 22},     // F16 scale + 32 fifth bits + 32 nibbles
	CacheQ5_1:  {"q5_1", C.GGML_TYPE_Q5_1, 32, 24},     // F16 scale and minimum + fifth bits + nibbles
}

// CacheTypeNames are the names ParseCacheType accepts, in llama-server's
// order.
func CacheTypeNames() []string {
	names := make([]string, len(cacheTypes))
	for i, t := range cacheTypes {
		names[i] = t.name
	}
	return names
}

// ParseCacheType returns the cache type named s ("" is F16), as
// llama-server's --cache-type-k names them; an unknown name's error lists
// the names.
func ParseCacheType(s string) (CacheType, error) {
	if s == "" {
		return CacheF16, nil
	}
	for i, t := range cacheTypes {
		if t.name == s {
			return CacheType(i), nil
		}
	}
	return 0, fmt.Errorf("KV cache type %q: want one of %s", s, strings.Join(CacheTypeNames(), ", "))
}

// valid reports whether t is one of the constants.
func (t CacheType) valid() bool { return t >= 0 && int(t) < len(cacheTypes) }

// String is the type's name, such as "q8_0".
func (t CacheType) String() string {
	if !t.valid() {
		return fmt.Sprintf("CacheType(%d)", int(t))
	}
	return cacheTypes[t].name
}

// BlockSize is the number of values stored together in one block: 32 for
// the quantized types, 1 for the float types. A row of the cache (one
// attention head's keys or values for one cell) must be whole blocks.
func (t CacheType) BlockSize() int64 {
	if !t.valid() {
		return 1
	}
	return cacheTypes[t].elems
}

// Quantized reports whether t stores values in quantized blocks.
func (t CacheType) Quantized() bool { return t.BlockSize() > 1 }

// RowBytes is the storage of n values of type t (ggml_row_size): n must
// be a multiple of BlockSize.
func (t CacheType) RowBytes(n int64) int64 {
	if !t.valid() {
		return 2 * n
	}
	return n / cacheTypes[t].elems * cacheTypes[t].size
}

// ggmlType is the type as llama.cpp takes it.
func (t CacheType) ggmlType() C.enum_ggml_type {
	if !t.valid() {
		return C.GGML_TYPE_F16
	}
	return cacheTypes[t].ggml
}

// ggmlTraits returns what the linked ggml says of t's storage block:
// values a block, bytes a block, and its name.
func (t CacheType) ggmlTraits() (elems, size int64, name string) {
	g := t.ggmlType()
	return int64(C.ggml_blck_size(g)), int64(C.ggml_type_size(g)), C.GoString(C.ggml_type_name(g))
}

// ErrCacheType is the error of CheckCacheTypes: a KV cache type llama.cpp
// cannot run with the model or the other settings.
var ErrCacheType = errors.New("unsupported KV cache type")

// CheckCacheTypes reports whether llama.cpp can run a KV cache of keys
// of type k and values of type v, with flash attention on or off, for a
// model whose attention heads are headK and headV values wide (see
// Model.HeadSizes; 0 for a model without attention heads, which has no
// such cache). The error, an ErrCacheType, names llama-server's flag
// and the reason. llama.cpp itself refuses these combinations with a
// generic failure to create the context, or, for a head that is not
// whole blocks with flash attention off, creates it and addresses the
// heads wrongly (ggml_row_size of a part of a block rounds down), so
// that the output is garbage.
//
//   - A quantized V needs flash attention: without it llama.cpp keeps V
//     transposed, a value a row, which cannot be cut into blocks.
//   - A quantized type stores blocks of 32 values: an attention head
//     must be whole blocks (ggml cuts the cache into heads).
func CheckCacheTypes(k, v CacheType, flashAttn bool, headK, headV int) error {
	for _, c := range []struct {
		t          CacheType
		which      string
		flag, head string
		n          int
	}{{k, "K", "--cache-type-k", "key", headK}, {v, "V", "--cache-type-v", "value", headV}} {
		if !c.t.valid() {
			return fmt.Errorf("%w: %s cache type %s (%s)", ErrCacheType, c.which, c.t, c.flag)
		}
		if c.t.Quantized() && c.n > 0 && int64(c.n)%c.t.BlockSize() != 0 {
			return fmt.Errorf("%w: %s %s: the model's attention heads are %d values wide (%s), not a multiple of the type's block of %d values; use a float type (f16, bf16, f32)",
				ErrCacheType, c.flag, c.t, c.n, c.head, c.t.BlockSize())
		}
	}
	if v.Quantized() && !flashAttn {
		return fmt.Errorf("%w: --cache-type-v %s needs flash attention (without it llama.cpp stores V transposed, which cannot be quantized); turn flash attention on (-fa on or auto) or use a float V type (f16, bf16, f32)",
			ErrCacheType, v)
	}
	return nil
}
