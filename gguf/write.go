package gguf

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// kv is one metadata pair to write.
type kv struct {
	key   string
	value any
}

// encoder writes little-endian GGUF values to w, counting the bytes. The
// first error sticks: later writes do nothing and err reports it.
type encoder struct {
	w   io.Writer
	n   uint64
	err error
	buf [8]byte
}

func (e *encoder) write(b []byte) {
	if e.err != nil {
		return
	}
	n, err := e.w.Write(b)
	e.n += uint64(n)
	e.err = err
}

func (e *encoder) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.buf[:4], v)
	e.write(e.buf[:4])
}

func (e *encoder) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.buf[:8], v)
	e.write(e.buf[:8])
}

func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	e.write([]byte(s))
}

// pad writes zeros up to the next multiple of align.
func (e *encoder) pad(align uint64) {
	var zeros [256]byte
	for e.n%align != 0 && e.err == nil {
		e.write(zeros[:min(alignUp(e.n, align)-e.n, uint64(len(zeros)))])
	}
}

// header writes the file header: magic, version 3, counts, the metadata
// pairs and the tensor descriptions, then pads to align.
func (e *encoder) header(kvs []kv, tensors []TensorInfo, align uint64) {
	e.write([]byte(magic))
	e.u32(3)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(kvs)))
	for _, p := range kvs {
		e.str(p.key)
		e.value(p.value)
	}
	for _, t := range tensors {
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(t.Offset)
	}
	e.pad(align)
}

// value writes the type tag and the value v; it supports the Go types the
// synthetic writer uses.
func (e *encoder) value(v any) {
	switch v := v.(type) {
	case uint32:
		e.u32(uint32(typeUint32))
		e.u32(v)
	case float32:
		e.u32(uint32(typeFloat32))
		e.u32(math.Float32bits(v))
	case bool:
		e.u32(uint32(typeBool))
		b := byte(0)
		if v {
			b = 1
		}
		e.write([]byte{b})
	case string:
		e.u32(uint32(typeString))
		e.str(v)
	case []string:
		e.arrayHeader(typeString, len(v))
		for _, s := range v {
			e.str(s)
		}
	case []float32:
		e.arrayHeader(typeFloat32, len(v))
		for _, f := range v {
			e.u32(math.Float32bits(f))
		}
	case []int32:
		e.arrayHeader(typeInt32, len(v))
		for _, i := range v {
			e.u32(uint32(i))
		}
	default:
		if e.err == nil {
			e.err = fmt.Errorf("gguf: cannot encode a %T value", v)
		}
	}
}

func (e *encoder) arrayHeader(t valueType, n int) {
	e.u32(uint32(typeArray))
	e.u32(uint32(t))
	e.u64(uint64(n))
}
