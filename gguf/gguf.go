// Package gguf reads the metadata of GGUF model files and writes synthetic
// llama models with random weights.
//
// GGUF is the little-endian container llama.cpp loads: a header, typed
// key-value metadata, tensor descriptions, then the tensor data, each tensor
// starting at a multiple of the file's alignment.
package gguf

import (
	"errors"
	"fmt"
	"math/bits"
)

// Errors that ReadMetadata wraps; test for them with errors.Is.
var (
	// ErrNotGGUF means the file does not start with the GGUF magic.
	ErrNotGGUF = errors.New("not a GGUF file")
	// ErrVersion means the file is GGUF, but of a version other than 2 or 3.
	ErrVersion = errors.New("unsupported GGUF version")
	// ErrMalformed means the file is truncated or its structure is invalid.
	ErrMalformed = errors.New("malformed GGUF")
)

const (
	magic            = "GGUF"
	defaultAlignment = 32
)

// valueType is the type tag of a metadata value (gguf_type).
type valueType uint32

const (
	typeUint8 valueType = iota
	typeInt8
	typeUint16
	typeInt16
	typeUint32
	typeInt32
	typeFloat32
	typeBool
	typeString
	typeArray
	typeUint64
	typeInt64
	typeFloat64
)

// TensorType is the element type of a tensor (ggml_type).
type TensorType uint32

// Tensor types whose storage size this package knows.
const (
	TypeF32  TensorType = 0  // 32-bit float
	TypeF16  TensorType = 1  // 16-bit IEEE float
	TypeQ4_0 TensorType = 2  // 4-bit blocks of 32, one scale
	TypeQ4_1 TensorType = 3  // 4-bit blocks of 32, scale and minimum
	TypeQ5_0 TensorType = 6  // 5-bit blocks of 32, one scale
	TypeQ5_1 TensorType = 7  // 5-bit blocks of 32, scale and minimum
	TypeQ8_0 TensorType = 8  // 8-bit blocks of 32: fp16 scale + 32 int8
	TypeQ8_1 TensorType = 9  // 8-bit blocks of 32, scale and sum
	TypeQ2_K TensorType = 10 // 2-bit k-quant super-blocks of 256
	TypeQ3_K TensorType = 11 // 3-bit k-quant super-blocks of 256
	TypeQ4_K TensorType = 12 // 4-bit k-quant super-blocks of 256
	TypeQ5_K TensorType = 13 // 5-bit k-quant super-blocks of 256
	TypeQ6_K TensorType = 14 // 6-bit k-quant super-blocks of 256
	TypeQ8_K TensorType = 15 // 8-bit k-quant super-blocks of 256
	TypeBF16 TensorType = 30 // bfloat16
)

// block is the storage unit of a tensor type: elems values in size bytes.
type block struct {
	name        string
	elems, size uint64
}

var blocks = map[TensorType]block{
	TypeF32:  {"F32", 1, 4},
	TypeF16:  {"F16", 1, 2},
	TypeQ4_0: {"Q4_0", 32, 18},
	TypeQ4_1: {"Q4_1", 32, 20},
	TypeQ5_0: {"Q5_0", 32, 22},
	TypeQ5_1: {"Q5_1", 32, 24},
	TypeQ8_0: {"Q8_0", 32, 34},
	TypeQ8_1: {"Q8_1", 32, 36},
	TypeQ2_K: {"Q2_K", 256, 84},
	TypeQ3_K: {"Q3_K", 256, 110},
	TypeQ4_K: {"Q4_K", 256, 144},
	TypeQ5_K: {"Q5_K", 256, 176},
	TypeQ6_K: {"Q6_K", 256, 210},
	TypeQ8_K: {"Q8_K", 256, 292},
	TypeBF16: {"BF16", 1, 2},
}

// String returns the ggml name of t, such as "Q8_0", or "type(N)".
func (t TensorType) String() string {
	if b, ok := blocks[t]; ok {
		return b.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// TensorInfo describes one tensor; its data is not read.
type TensorInfo struct {
	// Name is the tensor's name, such as "blk.0.attn_q.weight".
	Name string
	// Dims are the extents in ggml order: Dims[0] is the length of a row.
	Dims []uint64
	// Type is the element type.
	Type TensorType
	// Offset is where the data starts, relative to Metadata.DataOffset.
	Offset uint64
}

// Elements returns the number of values in the tensor, and false if that
// number does not fit in 63 bits.
func (t TensorInfo) Elements() (uint64, bool) {
	n := uint64(1)
	for _, d := range t.Dims {
		hi, lo := bits.Mul64(n, d)
		if hi != 0 || lo > 1<<63-1 {
			return 0, false
		}
		n = lo
	}
	return n, true
}

// Size returns the number of data bytes of the tensor, and false if its type
// is one this package does not know, its rows are not whole blocks, or the
// size overflows.
func (t TensorInfo) Size() (uint64, bool) {
	b, ok := blocks[t.Type]
	if !ok {
		return 0, false
	}
	n, ok := t.Elements()
	if !ok || (len(t.Dims) > 0 && t.Dims[0]%b.elems != 0) {
		return 0, false
	}
	hi, size := bits.Mul64(n/b.elems, b.size)
	return size, hi == 0
}

// alignUp rounds n up to a multiple of align, a power of two.
func alignUp(n, align uint64) uint64 {
	return (n + align - 1) &^ (align - 1)
}
