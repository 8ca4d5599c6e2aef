package llama

/*
#include <stdlib.h>
#include "corral-arch.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/corral-llm/corral/gguf"
)

// Architectures returns the model architectures the linked llama.cpp
// knows, as general.architecture spells them ("llama", "qwen35",
// "gemma4", ...), in llama.cpp's order.
func Architectures() []string {
	n := int(C.corral_arch_count())
	names := make([]string, 0, n)
	for i := range n {
		if p := C.corral_arch_name(C.int32_t(i)); p != nil {
			names = append(names, C.GoString(p))
		}
	}
	return names
}

// Layout returns the tensors llama.cpp creates for the model that the
// GGUF file at path describes: a file of metadata (architecture,
// hyperparameters, tokenizer) that needs no tensors. Nothing of the
// weights is allocated. Each tensor has its name and its extents (Dims,
// without trailing ones); a tensor llama.cpp creates twice (a tied output
// matrix) is listed once. The error says why llama.cpp cannot build such a
// model (a missing or invalid hyperparameter). It is a gguf.Layout.
func Layout(path string) ([]gguf.TensorInfo, error) {
	Init()
	if cpuErr != nil {
		return nil, fmt.Errorf("layout of %s: %w", path, cpuErr)
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var why [512]C.char
	m := C.corral_layout(cpath, &why[0], C.size_t(len(why)))
	if m == nil {
		return nil, fmt.Errorf("layout of %s: %s", path, C.GoString(&why[0]))
	}
	defer C.llama_model_free(m)
	var ts []gguf.TensorInfo
	seen := map[string]bool{}
	for i := 0; ; i++ {
		var ne [4]C.int64_t
		p := C.corral_layout_tensor(m, C.int32_t(i), &ne[0])
		if p == nil {
			break
		}
		name := C.GoString(p)
		if seen[name] {
			continue
		}
		seen[name] = true
		dims := make([]uint64, 0, 4)
		for _, n := range ne {
			if n < 1 {
				return nil, fmt.Errorf("layout of %s: tensor %s has extents %v", path, name, ne)
			}
			dims = append(dims, uint64(n))
		}
		for len(dims) > 1 && dims[len(dims)-1] == 1 {
			dims = dims[:len(dims)-1]
		}
		ts = append(ts, gguf.TensorInfo{Name: name, Dims: dims})
	}
	return ts, nil
}
