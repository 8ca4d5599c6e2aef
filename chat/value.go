package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// The template sees JSON objects as ordered dictionaries, the way Python
// keeps a dict's insertion order: tools and tool-call arguments then come
// out of tojson in the order the client wrote them.

// dict builds an ordered template dictionary from alternating keys and
// values.
func dict(kv ...any) *exec.Dict {
	d := &exec.Dict{Pairs: make([]*exec.Pair, 0, len(kv)/2)}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue(kv[i]), Value: exec.AsValue(kv[i+1])})
	}
	return d
}

// list is a template list. It indexes like a Python list: gonja's own
// indexing misses l[-n] where n is the length, as in messages[-1] of a
// one-message conversation.
type list []any

// GetItem implements exec.ItemGetter.
func (l list) GetItem(key any) (*exec.Value, bool) {
	i, ok := key.(int)
	if !ok {
		return exec.AsValue(nil), false
	}
	if i < 0 {
		i += len(l)
	}
	if i < 0 || i >= len(l) {
		return exec.AsValue(nil), false
	}
	return exec.AsValue(l[i]), true
}

// decodeJSON turns JSON text into template values: objects become ordered
// dictionaries (an empty one a plain map, which templates treat as false),
// arrays lists, integers int, other numbers float64.
func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok := tok.(type) {
	case json.Delim:
		switch tok {
		case '{':
			d := &exec.Dict{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue(k), Value: exec.AsValue(v)})
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			if len(d.Pairs) == 0 {
				return map[string]any{}, nil
			}
			return d, nil
		case '[':
			l := list{}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				l = append(l, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return l, nil
		}
		return nil, fmt.Errorf("unexpected %v", tok)
	case json.Number:
		if i, err := strconv.Atoi(tok.String()); err == nil {
			return i, nil
		}
		return tok.Float64()
	default: // string, bool, nil
		return tok, nil
	}
}

// toValue converts a Go value to template values through its JSON form.
func toValue(v any) (any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return decodeJSON(data)
}
