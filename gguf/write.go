package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
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

// value writes the type tag and the value v: any scalar or array that
// ReadMetadata returns (see Metadata.KV), so that metadata read from one file
// can be written to another with the same types.
func (e *encoder) value(v any) {
	if t, ok := scalarType(v); ok {
		e.u32(uint32(t))
		e.scalar(v)
		return
	}
	switch v := v.(type) {
	case string:
		e.u32(uint32(typeString))
		e.str(v)
	case []string:
		e.arrayHeader(typeString, len(v))
		for _, s := range v {
			e.str(s)
		}
	case []uint8:
		e.arrayHeader(typeUint8, len(v))
		e.write(v)
	case []int8:
		writeArray(e, typeInt8, v)
	case []uint16:
		writeArray(e, typeUint16, v)
	case []int16:
		writeArray(e, typeInt16, v)
	case []uint32:
		writeArray(e, typeUint32, v)
	case []int32:
		writeArray(e, typeInt32, v)
	case []float32:
		writeArray(e, typeFloat32, v)
	case []bool:
		writeArray(e, typeBool, v)
	case []uint64:
		writeArray(e, typeUint64, v)
	case []int64:
		writeArray(e, typeInt64, v)
	case []float64:
		writeArray(e, typeFloat64, v)
	default:
		if e.err == nil {
			e.err = fmt.Errorf("gguf: cannot encode a %T value", v)
		}
	}
}

// scalarType returns the type tag of a fixed-size value, and false if v is
// not one.
func scalarType(v any) (valueType, bool) {
	switch v.(type) {
	case uint8:
		return typeUint8, true
	case int8:
		return typeInt8, true
	case uint16:
		return typeUint16, true
	case int16:
		return typeInt16, true
	case uint32:
		return typeUint32, true
	case int32:
		return typeInt32, true
	case float32:
		return typeFloat32, true
	case bool:
		return typeBool, true
	case uint64:
		return typeUint64, true
	case int64:
		return typeInt64, true
	case float64:
		return typeFloat64, true
	}
	return 0, false
}

// scalar writes a fixed-size value without its type tag; v is one of the
// types scalarType knows.
func (e *encoder) scalar(v any) {
	switch v := v.(type) {
	case uint8:
		e.write([]byte{v})
	case int8:
		e.write([]byte{byte(v)})
	case uint16:
		binary.LittleEndian.PutUint16(e.buf[:2], v)
		e.write(e.buf[:2])
	case int16:
		binary.LittleEndian.PutUint16(e.buf[:2], uint16(v))
		e.write(e.buf[:2])
	case uint32:
		e.u32(v)
	case int32:
		e.u32(uint32(v))
	case float32:
		e.u32(math.Float32bits(v))
	case bool:
		b := byte(0)
		if v {
			b = 1
		}
		e.write([]byte{b})
	case uint64:
		e.u64(v)
	case int64:
		e.u64(uint64(v))
	case float64:
		e.u64(math.Float64bits(v))
	}
}

// writeArray writes an array of fixed-size values of type t.
func writeArray[T any](e *encoder, t valueType, vs []T) {
	e.arrayHeader(t, len(vs))
	for _, v := range vs {
		e.scalar(v)
	}
}

func (e *encoder) arrayHeader(t valueType, n int) {
	e.u32(uint32(typeArray))
	e.u32(uint32(t))
	e.u64(uint64(n))
}

// writeFile creates path and writes it with write through a buffer; on
// error the partial file is removed.
func writeFile(path string, write func(*bufio.Writer) error) (err error) {
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
	if err := write(bw); err != nil {
		return fmt.Errorf("gguf: write %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("gguf: write %s: %w", path, err)
	}
	return nil
}
