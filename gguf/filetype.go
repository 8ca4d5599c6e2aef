package gguf

import "fmt"

// fileTypes names the llama_ftype values of general.file_type, as llama.h
// lists them (the retired values 4, 5, 6, 33, 34 and 35 excepted).
var fileTypes = map[int]string{
	0:  "F32",
	1:  "F16",
	2:  "Q4_0",
	3:  "Q4_1",
	7:  "Q8_0",
	8:  "Q5_0",
	9:  "Q5_1",
	10: "Q2_K",
	11: "Q3_K_S",
	12: "Q3_K_M",
	13: "Q3_K_L",
	14: "Q4_K_S",
	15: "Q4_K_M",
	16: "Q5_K_S",
	17: "Q5_K_M",
	18: "Q6_K",
	19: "IQ2_XXS",
	20: "IQ2_XS",
	21: "Q2_K_S",
	22: "IQ3_XS",
	23: "IQ3_XXS",
	24: "IQ1_S",
	25: "IQ4_NL",
	26: "IQ3_S",
	27: "IQ3_M",
	28: "IQ2_S",
	29: "IQ2_M",
	30: "IQ4_XS",
	31: "IQ1_M",
	32: "BF16",
	36: "TQ1_0",
	37: "TQ2_0",
	38: "MXFP4",
}

// FileTypeName returns the name of the llama_ftype ft (general.file_type),
// such as "Q4_K_M" for 15; "" when ft is negative (the key is absent, as
// Metadata.FileType reports it), and "file_type(N)" for a value llama.h
// does not list.
func FileTypeName(ft int) string {
	if ft < 0 {
		return ""
	}
	if name, ok := fileTypes[ft]; ok {
		return name
	}
	return fmt.Sprintf("file_type(%d)", ft)
}

// Quantization returns the name of the model's file type, such as "Q8_0".
// Without a general.file_type key it is the name of the most common tensor
// type, which is how llama.cpp guesses the file type; "" for a file with
// neither.
func (m *Metadata) Quantization() string {
	if m.FileType >= 0 {
		return FileTypeName(m.FileType)
	}
	counts := map[TensorType]int{}
	best, bestN := TensorType(0), 0
	for _, t := range m.Tensors {
		counts[t.Type]++
		// Ties go to the type seen first, so the answer does not depend on
		// map order.
		if n := counts[t.Type]; n > bestN {
			best, bestN = t.Type, n
		}
	}
	if bestN == 0 {
		return ""
	}
	return best.String()
}
