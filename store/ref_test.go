package store

import (
	"strings"
	"testing"
)

func TestPickQuant(t *testing.T) {
	files := func(names ...string) []hubEntry {
		es := make([]hubEntry, len(names))
		for i, n := range names {
			es[i] = hubEntry{Type: "file", Path: n}
		}
		return es
	}
	for _, tt := range []struct {
		files     []hubEntry
		quant     string
		want, err string
	}{
		{files("m-Q4_K_M.gguf", "m-Q8_0.gguf"), "Q8_0", "m-Q8_0.gguf", ""},
		{files("m-Q4_K_M.gguf", "m-Q8_0.gguf"), "q8_0", "m-Q8_0.gguf", ""},
		{files("qwen2-0.5b-instruct-q8_0.gguf", "qwen2-0.5b-instruct-fp16.gguf"), "Q8_0", "qwen2-0.5b-instruct-q8_0.gguf", ""},
		{files("m.Q5_K_M.gguf", "m.Q5_K_S.gguf"), "Q5_K_M", "m.Q5_K_M.gguf", ""},
		{files("Q6_K/m-Q6_K.gguf", "Q8_0/m-Q8_0.gguf"), "Q6_K", "Q6_K/m-Q6_K.gguf", ""},
		{files("m-UD-Q4_K_XL.gguf", "m-Q4_K_M.gguf"), "UD-Q4_K_XL", "m-UD-Q4_K_XL.gguf", ""},
		// A whole quant, not a substring.
		{files("mQ8_0.gguf"), "Q8_0", "", "no GGUF file for quant Q8_0"},
		{files("m-Q4_0.gguf", "m-Q4_0_4_4.gguf"), "Q4_0", "m-Q4_0.gguf", ""},
		{files("m-Q6_K_L.gguf"), "Q6_K", "", "o/r has no GGUF file for quant Q6_K; available: Q6_K_L"},
		{files("m-Q4_K_M.gguf", "m-Q4_K_S.gguf"), "Q4_K", "", "no GGUF file for quant Q4_K; available: Q4_K_M, Q4_K_S"},
		{files("m_Q8_0-imat.gguf"), "Q8_0", "m_Q8_0-imat.gguf", ""},
		// Two files name the quant: the one whose label is exactly it wins,
		// else it is ambiguous.
		{files("m-UD-Q4_K_XL.gguf", "m-Q4_K_XL.gguf"), "Q4_K_XL", "m-Q4_K_XL.gguf", ""},
		{files("a/m-Q8_0.gguf", "b/m-Q8_0.gguf"), "Q8_0", "", "quant Q8_0 matches several files of o/r (a/m-Q8_0.gguf, b/m-Q8_0.gguf); pull one as hf://o/r/PATH"},
		{files("m-Q4_K_M.gguf", "m-Q8_0.gguf"), "", "m-Q4_K_M.gguf", ""},
		{files("m-Q8_0.gguf"), "", "m-Q8_0.gguf", ""},
		{files("m-Q8_0.gguf", "m-F16.gguf", "m-BF16.gguf"), "", "", "o/r has no Q4_K_M file and more than one GGUF file; name one: o/r:QUANT with QUANT one of BF16, F16, Q8_0"},
		{files("m-Q8_0.gguf", "weird.gguf"), "Q2_K", "", "available: Q8_0, weird.gguf"},
		{files("m-Q8_0-00001-of-00002.gguf", "m-Q8_0-00002-of-00002.gguf", "m-Q4_K_M.gguf"), "Q8_0", "",
			"the Q8_0 model of o/r is split into 2 files (m-Q8_0-00001-of-00002.gguf, …)"},
		{files("m-Q8_0-00001-of-00002.gguf", "m-Q8_0-00002-of-00002.gguf", "m-Q4_K_M.gguf"), "Q6_K", "", "available: Q4_K_M, Q8_0 (split, not supported)"},
		// A single-part "split" is a whole model.
		{files("m-Q8_0-00001-of-00001.gguf"), "Q8_0", "m-Q8_0-00001-of-00001.gguf", ""},
	} {
		got, err := pickQuant(tt.files, "o/r", tt.quant)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("pickQuant(%v, %q): %v", tt.files, tt.quant, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("pickQuant(%v, %q): error %v, want one containing %q", tt.files, tt.quant, err, tt.err)
		case tt.err == "" && got.Path != tt.want:
			t.Errorf("pickQuant(%v, %q) = %s, want %s", tt.files, tt.quant, got.Path, tt.want)
		}
	}
}

func TestParseSHA256(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	for in, want := range map[string]string{
		sum: sum, `"` + sum + `"`: sum, `W/"` + sum + `"`: sum, strings.ToUpper(sum): sum,
		`"` + sum[:40] + `"`: "", `"` + strings.Repeat("zz", 32) + `"`: "", "": "",
	} {
		if got := parseSHA256(in); got != want {
			t.Errorf("parseSHA256(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseContentRange(t *testing.T) {
	for _, tt := range []struct {
		in           string
		start, total int64
		ok           bool
	}{
		{"bytes 100-199/200", 100, 200, true},
		{"bytes 0-0/*", 0, -1, true},
		{"bytes */300", -1, 300, true},
		{"bytes 100-299/200", -1, -1, false},
		{"bytes 5-4/200", -1, -1, false},
		{"items 0-1/2", -1, -1, false},
		{"bytes x-1/2", -1, -1, false},
	} {
		start, total, ok := parseContentRange(tt.in)
		if start != tt.start || total != tt.total || ok != tt.ok {
			t.Errorf("parseContentRange(%q) = %d, %d, %v; want %d, %d, %v", tt.in, start, total, ok, tt.start, tt.total, tt.ok)
		}
	}
}
