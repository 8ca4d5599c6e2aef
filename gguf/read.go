package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
)

// Limits that keep a corrupt file from causing huge allocations. Every
// length is also checked against the bytes left in the file.
const (
	maxKVs       = 1 << 20 // key-value pairs
	maxTensors   = 1 << 20 // tensors
	maxDims      = 4       // dimensions of one tensor (GGML_MAX_DIMS)
	maxKeyLen    = 1 << 16 // bytes in a key or tensor name
	maxStringLen = 1 << 24 // bytes in a string value
	maxArrayLen  = 1 << 24 // elements in an array value
)

// scalarSize is the encoded size of each fixed-size value type.
var scalarSize = map[valueType]uint64{
	typeUint8: 1, typeInt8: 1, typeUint16: 2, typeInt16: 2,
	typeUint32: 4, typeInt32: 4, typeFloat32: 4, typeBool: 1,
	typeUint64: 8, typeInt64: 8, typeFloat64: 8,
}

// ReadMetadata reads the header, the key-value metadata and the tensor
// descriptions of the GGUF file at path. It reads no tensor data, but checks
// that the data of every tensor of a known type lies within the file.
func ReadMetadata(path string) (*Metadata, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	m, err := decode(bufio.NewReaderSize(f, 1<<16), st.Size())
	if err != nil {
		return nil, fmt.Errorf("gguf: read %s: %w", path, err)
	}
	return m, nil
}

// decoder reads little-endian GGUF values from r, which holds size bytes.
type decoder struct {
	r    io.Reader
	off  uint64 // bytes consumed
	size uint64
	buf  [8]byte
}

// decode parses a GGUF header of a file of size bytes read from r.
func decode(r io.Reader, size int64) (*Metadata, error) {
	d := &decoder{r: r, size: uint64(max(size, 0))}
	b, err := d.next(4)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotGGUF, err)
	}
	if string(b) != magic {
		return nil, fmt.Errorf("%w: magic %q", ErrNotGGUF, b)
	}
	m := &Metadata{KV: map[string]any{}}
	if m.Version, err = d.u32(); err != nil {
		return nil, fmt.Errorf("version: %w", err)
	}
	if m.Version != 2 && m.Version != 3 {
		return nil, fmt.Errorf("%w: %d", ErrVersion, m.Version)
	}
	nTensors, err := d.count("tensor count", maxTensors, 24)
	if err != nil {
		return nil, err
	}
	nKV, err := d.count("key-value count", maxKVs, 13)
	if err != nil {
		return nil, err
	}
	for i := range nKV {
		key, err := d.str(maxKeyLen)
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", i, err)
		}
		if _, dup := m.KV[key]; dup {
			return nil, fmt.Errorf("%w: duplicate key %q", ErrMalformed, key)
		}
		t, err := d.u32()
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", key, err)
		}
		v, err := d.value(valueType(t))
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", key, err)
		}
		m.KV[key] = v
	}
	align := uint64(defaultAlignment)
	if v, ok := m.KV["general.alignment"]; ok {
		a, ok := v.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 {
			return nil, fmt.Errorf("%w: general.alignment %v is not a uint32 power of two", ErrMalformed, v)
		}
		align = uint64(a)
	}
	m.Tensors = make([]TensorInfo, 0, min(nTensors, 1024))
	names := make(map[string]bool)
	for i := range nTensors {
		t, err := d.tensorInfo()
		if err != nil {
			return nil, fmt.Errorf("tensor %d: %w", i, err)
		}
		if names[t.Name] {
			return nil, fmt.Errorf("%w: duplicate tensor %q", ErrMalformed, t.Name)
		}
		names[t.Name] = true
		m.Tensors = append(m.Tensors, t)
	}
	data := alignUp(d.off, align)
	for _, t := range m.Tensors {
		if err := checkData(t, data, align, d.size); err != nil {
			return nil, err
		}
	}
	m.DataOffset = int64(data)
	m.TensorCount = len(m.Tensors)
	m.Alignment = int(align)
	m.fillTyped()
	return m, nil
}

// checkData reports an error if tensor t, whose data section starts at
// data, is misaligned or, when its size is known, runs past the file's end.
func checkData(t TensorInfo, data, align, fileSize uint64) error {
	if t.Offset%align != 0 {
		return fmt.Errorf("%w: tensor %q offset %d is not a multiple of %d", ErrMalformed, t.Name, t.Offset, align)
	}
	if b, ok := blocks[t.Type]; ok && len(t.Dims) > 0 && t.Dims[0]%b.elems != 0 {
		return fmt.Errorf("%w: tensor %q of type %v has rows of %d values, not whole blocks of %d",
			ErrMalformed, t.Name, t.Type, t.Dims[0], b.elems)
	}
	size, ok := t.Size()
	if !ok {
		return nil
	}
	if data > fileSize || t.Offset > fileSize-data || size > fileSize-data-t.Offset {
		return fmt.Errorf("%w: tensor %q data (%d bytes at %d+%d) runs past the end of the %d-byte file",
			ErrMalformed, t.Name, size, data, t.Offset, fileSize)
	}
	return nil
}

// next returns the next n (at most 8) bytes; they are valid until the next call.
func (d *decoder) next(n uint64) ([]byte, error) {
	if err := d.need(n); err != nil {
		return nil, err
	}
	b := d.buf[:n]
	if _, err := io.ReadFull(d.r, b); err != nil {
		return nil, fmt.Errorf("at offset %d: %w", d.off, err)
	}
	d.off += n
	return b, nil
}

// need reports an error if fewer than n bytes are left.
func (d *decoder) need(n uint64) error {
	if left := d.size - d.off; n > left {
		return fmt.Errorf("%w: truncated at offset %d: need %d bytes, %d left", ErrMalformed, d.off, n, left)
	}
	return nil
}

// bytes reads n bytes into a new slice.
func (d *decoder) bytes(n uint64) ([]byte, error) {
	if err := d.need(n); err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(d.r, b); err != nil {
		return nil, fmt.Errorf("at offset %d: %w", d.off, err)
	}
	d.off += n
	return b, nil
}

func (d *decoder) u32() (uint32, error) {
	b, err := d.next(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (d *decoder) u64() (uint64, error) {
	b, err := d.next(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// count reads a 64-bit count of items, each encoded in at least minSize
// bytes, and checks it against limit and the bytes left.
func (d *decoder) count(what string, limit, minSize uint64) (uint64, error) {
	n, err := d.u64()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	if n > limit {
		return 0, fmt.Errorf("%w: %s %d exceeds the limit %d", ErrMalformed, what, n, limit)
	}
	if err := d.need(n * minSize); err != nil {
		return 0, fmt.Errorf("%s %d: %w", what, n, err)
	}
	return n, nil
}

// str reads a length-prefixed string of at most limit bytes.
func (d *decoder) str(limit uint64) (string, error) {
	n, err := d.u64()
	if err != nil {
		return "", err
	}
	if n > limit {
		return "", fmt.Errorf("%w: string length %d exceeds the limit %d", ErrMalformed, n, limit)
	}
	b, err := d.bytes(n)
	return string(b), err
}

// value reads one metadata value of type t.
func (d *decoder) value(t valueType) (any, error) {
	switch t {
	case typeString:
		return d.str(maxStringLen)
	case typeArray:
		return d.array()
	}
	size, ok := scalarSize[t]
	if !ok {
		return nil, fmt.Errorf("%w: unknown value type %d", ErrMalformed, t)
	}
	b, err := d.next(size)
	if err != nil {
		return nil, err
	}
	return scalar(t, b), nil
}

// scalar decodes a fixed-size value of type t from b.
func scalar(t valueType, b []byte) any {
	le := binary.LittleEndian
	switch t {
	case typeUint8:
		return b[0]
	case typeInt8:
		return int8(b[0])
	case typeUint16:
		return le.Uint16(b)
	case typeInt16:
		return int16(le.Uint16(b))
	case typeUint32:
		return le.Uint32(b)
	case typeInt32:
		return int32(le.Uint32(b))
	case typeFloat32:
		return math.Float32frombits(le.Uint32(b))
	case typeBool:
		return b[0] != 0
	case typeUint64:
		return le.Uint64(b)
	case typeInt64:
		return int64(le.Uint64(b))
	default: // typeFloat64; callers pass only the types of scalarSize
		return math.Float64frombits(le.Uint64(b))
	}
}

// array reads an array value: element type, length, elements. Arrays of
// arrays are rejected, as llama.cpp does.
func (d *decoder) array() (any, error) {
	et, err := d.u32()
	if err != nil {
		return nil, err
	}
	t := valueType(et)
	if t == typeString {
		n, err := d.count("string array length", maxArrayLen, 8)
		if err != nil {
			return nil, err
		}
		s := make([]string, 0, min(n, 1<<16))
		for range n {
			v, err := d.str(maxStringLen)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", len(s), err)
			}
			s = append(s, v)
		}
		return s, nil
	}
	size, ok := scalarSize[t]
	if !ok {
		return nil, fmt.Errorf("%w: unsupported array element type %d", ErrMalformed, et)
	}
	n, err := d.count("array length", maxArrayLen, size)
	if err != nil {
		return nil, err
	}
	raw, err := d.bytes(n * size)
	if err != nil {
		return nil, err
	}
	switch t {
	case typeUint8:
		return raw, nil
	case typeInt8:
		return slice[int8](t, raw, size), nil
	case typeUint16:
		return slice[uint16](t, raw, size), nil
	case typeInt16:
		return slice[int16](t, raw, size), nil
	case typeUint32:
		return slice[uint32](t, raw, size), nil
	case typeInt32:
		return slice[int32](t, raw, size), nil
	case typeFloat32:
		return slice[float32](t, raw, size), nil
	case typeBool:
		return slice[bool](t, raw, size), nil
	case typeUint64:
		return slice[uint64](t, raw, size), nil
	case typeInt64:
		return slice[int64](t, raw, size), nil
	default: // typeFloat64
		return slice[float64](t, raw, size), nil
	}
}

// slice decodes raw as consecutive values of type t, whose Go type is T.
func slice[T any](t valueType, raw []byte, size uint64) []T {
	s := make([]T, len(raw)/int(size))
	for i := range s {
		s[i] = scalar(t, raw[uint64(i)*size:]).(T)
	}
	return s
}

// tensorInfo reads one tensor description.
func (d *decoder) tensorInfo() (TensorInfo, error) {
	var t TensorInfo
	var err error
	if t.Name, err = d.str(maxKeyLen); err != nil {
		return t, fmt.Errorf("name: %w", err)
	}
	nd, err := d.u32()
	if err != nil {
		return t, fmt.Errorf("%q dimensions: %w", t.Name, err)
	}
	if nd > maxDims {
		return t, fmt.Errorf("%w: tensor %q has %d dimensions, more than %d", ErrMalformed, t.Name, nd, maxDims)
	}
	t.Dims = make([]uint64, nd)
	for i := range t.Dims {
		if t.Dims[i], err = d.u64(); err != nil {
			return t, fmt.Errorf("%q dimensions: %w", t.Name, err)
		}
	}
	if _, ok := t.Elements(); !ok {
		return t, fmt.Errorf("%w: tensor %q dimensions %v overflow", ErrMalformed, t.Name, t.Dims)
	}
	typ, err := d.u32()
	if err != nil {
		return t, fmt.Errorf("%q type: %w", t.Name, err)
	}
	t.Type = TensorType(typ)
	if t.Offset, err = d.u64(); err != nil {
		return t, fmt.Errorf("%q offset: %w", t.Name, err)
	}
	return t, nil
}
