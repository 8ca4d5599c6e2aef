package gguf

import (
	"testing"

	"github.com/corral-llm/corral/internal/testmodel"
)

func TestFileTypeName(t *testing.T) {
	for ft, want := range map[int]string{
		-1: "", 0: "F32", 1: "F16", 2: "Q4_0", 7: "Q8_0", 15: "Q4_K_M", 18: "Q6_K",
		30: "IQ4_XS", 32: "BF16", 38: "MXFP4", 4: "file_type(4)", 1024: "file_type(1024)",
	} {
		if got := FileTypeName(ft); got != want {
			t.Errorf("FileTypeName(%d) = %q, want %q", ft, got, want)
		}
	}
}

func TestQuantization(t *testing.T) {
	for _, tt := range []struct{ model, want string }{
		{testmodel.Stories260K, "F32"},      // no general.file_type: guessed from the tensors
		{testmodel.TinyStories656K, "Q8_0"}, // general.file_type = 7
	} {
		m, err := ReadMetadata(testmodel.Path(t, tt.model))
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Quantization(); got != tt.want {
			t.Errorf("%s: Quantization() = %q, want %q", tt.model, got, tt.want)
		}
	}
	guessed := &Metadata{FileType: -1, Tensors: []TensorInfo{
		{Type: TypeF32}, {Type: TypeQ8_0}, {Type: TypeQ8_0}, {Type: TypeF32}, {Type: TypeQ8_0},
	}}
	if got := guessed.Quantization(); got != "Q8_0" {
		t.Errorf("most common tensor type: got %q, want Q8_0", got)
	}
	if got := (&Metadata{FileType: -1}).Quantization(); got != "" {
		t.Errorf("no file type, no tensors: got %q, want empty", got)
	}
}

func TestParameterLabel(t *testing.T) {
	for n, want := range map[uint64]string{
		8030261248: "8.0B", 7615616512: "7.6B", 3e9: "3B", 135e6: "135M", 16780000: "16.78M",
		656000: "656K", 655360: "655K", 999: "999", 0: "0",
	} {
		if got := ParameterLabel(n); got != want {
			t.Errorf("ParameterLabel(%d) = %q, want %q", n, got, want)
		}
	}
}
