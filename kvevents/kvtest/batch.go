package kvtest

import (
	"errors"
	"fmt"
	"math"
)

// Batch is a decoded event batch: vLLM's KVEventBatch, an array of the
// time, the events and the data-parallel rank.
type Batch struct {
	Time   float64
	Events []Event
}

// Event is one decoded event. Kind is its tag: BlockStored, BlockRemoved
// or AllBlocksCleared.
type Event struct {
	Kind   string
	Hashes [][]byte
	Parent []byte // nil: none
	// Tokens are a BlockStored event's token ids; TokensField says
	// whether the field was there at all (an empty array is).
	Tokens      []uint64
	TokensField bool
	BlockSize   uint64
	Medium      string
}

// Decode reads a batch's msgpack payload.
func Decode(payload []byte) (Batch, error) {
	v, rest, err := decode(payload, 0)
	if err != nil {
		return Batch{}, err
	}
	if len(rest) != 0 {
		return Batch{}, fmt.Errorf("kvtest: %d bytes after the batch", len(rest))
	}
	arr, ok := v.([]any)
	if !ok || len(arr) < 2 {
		return Batch{}, fmt.Errorf("kvtest: a batch is %T, want [time, events, rank]", v)
	}
	var b Batch
	if b.Time, ok = arr[0].(float64); !ok {
		return b, fmt.Errorf("kvtest: the batch's time is %T", arr[0])
	}
	evs, ok := arr[1].([]any)
	if !ok {
		return b, fmt.Errorf("kvtest: the batch's events are %T", arr[1])
	}
	for i, ev := range evs {
		e, err := event(ev)
		if err != nil {
			return b, fmt.Errorf("kvtest: event %d: %w", i, err)
		}
		b.Events = append(b.Events, e)
	}
	return b, nil
}

func event(v any) (Event, error) {
	var e Event
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 {
		return e, fmt.Errorf("%T, want a tagged array", v)
	}
	if e.Kind, ok = arr[0].(string); !ok {
		return e, fmt.Errorf("tag %T", arr[0])
	}
	hashes := func(v any) error {
		hs, ok := v.([]any)
		if !ok {
			return fmt.Errorf("hashes %T", v)
		}
		for _, h := range hs {
			b, ok := h.([]byte)
			if !ok {
				return fmt.Errorf("hash %T", h)
			}
			e.Hashes = append(e.Hashes, b)
		}
		return nil
	}
	medium := func(v any) error {
		switch m := v.(type) {
		case nil:
		case string:
			e.Medium = m
		default:
			return fmt.Errorf("medium %T", v)
		}
		return nil
	}
	switch e.Kind {
	case "BlockStored":
		if len(arr) != 7 {
			return e, fmt.Errorf("BlockStored of %d fields, want 7", len(arr)-1)
		}
		if err := hashes(arr[1]); err != nil {
			return e, err
		}
		switch p := arr[2].(type) {
		case nil:
		case []byte:
			e.Parent = p
		default:
			return e, fmt.Errorf("parent %T", arr[2])
		}
		toks, ok := arr[3].([]any)
		if !ok {
			return e, fmt.Errorf("token ids %T", arr[3])
		}
		e.TokensField = true
		for _, t := range toks {
			n, ok := t.(uint64)
			if !ok {
				return e, fmt.Errorf("token id %T", t)
			}
			e.Tokens = append(e.Tokens, n)
		}
		if e.BlockSize, ok = arr[4].(uint64); !ok {
			return e, fmt.Errorf("block size %T", arr[4])
		}
		return e, medium(arr[6])
	case "BlockRemoved":
		if len(arr) != 3 {
			return e, fmt.Errorf("BlockRemoved of %d fields, want 2", len(arr)-1)
		}
		if err := hashes(arr[1]); err != nil {
			return e, err
		}
		return e, medium(arr[2])
	case "AllBlocksCleared":
		return e, nil
	}
	return e, fmt.Errorf("unknown tag %q", e.Kind)
}

var errShort = errors.New("kvtest: msgpack cut short")

// decode reads one msgpack value: nil, a bool, an unsigned integer
// (uint64), a negative one (int64), a float (float64), a string, a binary
// ([]byte), an array ([]any) or a map (map[any]any); depth bounds nesting.
func decode(b []byte, depth int) (any, []byte, error) {
	if depth > 32 {
		return nil, nil, errors.New("kvtest: msgpack nested too deep")
	}
	if len(b) == 0 {
		return nil, nil, errShort
	}
	c, b := b[0], b[1:]
	// take reads n bytes.
	take := func(n uint64) ([]byte, []byte, error) {
		if uint64(len(b)) < n {
			return nil, nil, errShort
		}
		return b[:n], b[n:], nil
	}
	// size reads a big-endian length of w bytes.
	size := func(w int) (uint64, error) {
		p, rest, err := take(uint64(w))
		if err != nil {
			return 0, err
		}
		b = rest
		var n uint64
		for _, x := range p {
			n = n<<8 | uint64(x)
		}
		return n, nil
	}
	array := func(n uint64) (any, []byte, error) {
		if n > uint64(len(b)) { // each element takes a byte at least
			return nil, nil, errShort
		}
		out := make([]any, 0, n)
		for range n {
			v, rest, err := decode(b, depth+1)
			if err != nil {
				return nil, nil, err
			}
			out, b = append(out, v), rest
		}
		return out, b, nil
	}
	mapOf := func(n uint64) (any, []byte, error) {
		if n > uint64(len(b)) {
			return nil, nil, errShort
		}
		out := make(map[any]any, n)
		for range n {
			k, rest, err := decode(b, depth+1)
			if err != nil {
				return nil, nil, err
			}
			v, rest, err := decode(rest, depth+1)
			if err != nil {
				return nil, nil, err
			}
			out[fmt.Sprint(k)], b = v, rest // keys as text: enough here
		}
		return out, b, nil
	}
	str := func(n uint64, bin bool) (any, []byte, error) {
		p, rest, err := take(n)
		if err != nil {
			return nil, nil, err
		}
		if bin {
			return append([]byte(nil), p...), rest, nil
		}
		return string(p), rest, nil
	}
	switch {
	case c <= 0x7f:
		return uint64(c), b, nil
	case c >= 0xe0:
		return int64(int8(c)), b, nil
	case c&0xf0 == 0x80:
		return mapOf(uint64(c & 0x0f))
	case c&0xf0 == 0x90:
		return array(uint64(c & 0x0f))
	case c&0xe0 == 0xa0:
		return str(uint64(c&0x1f), false)
	}
	switch c {
	case 0xc0:
		return nil, b, nil
	case 0xc2, 0xc3:
		return c == 0xc3, b, nil
	case 0xc4, 0xc5, 0xc6, 0xd9, 0xda, 0xdb:
		w := map[byte]int{0xc4: 1, 0xc5: 2, 0xc6: 4, 0xd9: 1, 0xda: 2, 0xdb: 4}[c]
		n, err := size(w)
		if err != nil {
			return nil, nil, err
		}
		return str(n, c <= 0xc6)
	case 0xca:
		n, err := size(4)
		if err != nil {
			return nil, nil, err
		}
		return float64(math.Float32frombits(uint32(n))), b, nil
	case 0xcb:
		n, err := size(8)
		if err != nil {
			return nil, nil, err
		}
		return math.Float64frombits(n), b, nil
	case 0xcc, 0xcd, 0xce, 0xcf:
		n, err := size(1 << (c - 0xcc))
		if err != nil {
			return nil, nil, err
		}
		return n, b, nil
	case 0xd0, 0xd1, 0xd2, 0xd3:
		w := 1 << (c - 0xd0)
		n, err := size(w)
		if err != nil {
			return nil, nil, err
		}
		shift := 64 - 8*w
		v := int64(n<<shift) >> shift // sign-extend
		if v >= 0 {
			return uint64(v), b, nil
		}
		return v, b, nil
	case 0xdc, 0xdd:
		n, err := size(2 << (c - 0xdc))
		if err != nil {
			return nil, nil, err
		}
		return array(n)
	case 0xde, 0xdf:
		n, err := size(2 << (c - 0xde))
		if err != nil {
			return nil, nil, err
		}
		return mapOf(n)
	}
	return nil, nil, fmt.Errorf("kvtest: msgpack type 0x%02x not read here", c)
}
