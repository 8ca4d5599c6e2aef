package gguf

import (
	"fmt"
	"math"
	"strconv"
)

// Parameters is the model's parameter count: general.parameter_count when
// the file has it, else the sum of its tensors' elements.
func (m *Metadata) Parameters() uint64 {
	if n, ok := m.Uint("general.parameter_count"); ok {
		return n
	}
	var n uint64
	for _, t := range m.Tensors {
		if e, ok := t.Elements(); ok {
			n += e
		}
	}
	return n
}

// ParameterLabel writes a parameter count as model names and Ollama do:
// "8B", "7.6B", "135M", "16.78M", "656K".
func ParameterLabel(n uint64) string {
	f := float64(n)
	switch {
	case n >= 1e9:
		return trimmedUnit(f/1e9, "%.1fB", "B")
	case n >= 1e6:
		return trimmedUnit(f/1e6, "%.2fM", "M")
	case n >= 1e3:
		return fmt.Sprintf("%.0fK", f/1e3)
	}
	return strconv.FormatUint(n, 10)
}

// trimmedUnit writes v with no decimals when it is whole, else with format.
func trimmedUnit(v float64, format, unit string) string {
	if v == math.Floor(v) {
		return fmt.Sprintf("%.0f%s", v, unit)
	}
	return fmt.Sprintf(format, v)
}
