package llama

/*
#include <stdlib.h>
#include "shim.h"
#include "corral-arch.h"
*/
import "C"

import (
	"fmt"
	"os"
	"unsafe"
)

// Memory is what llama.cpp allocates for a model and a context of it, in
// bytes, summed over the host and the devices.
type Memory struct {
	// Weights is the model's tensor data.
	Weights int64
	// Context is the context's memory: the KV cells of every kind (full
	// and sliding-window attention, MLA's compressed keys, an indexer's
	// keys) and the recurrent states, one per sequence.
	Context int64
	// Compute is the compute buffers, sized for the largest graph.
	Compute int64
}

// MemoryNeeds returns what llama.cpp would allocate for the model at path,
// on the CPU, with a context of p, found without allocating it: llama.cpp
// builds the model and the context with no_alloc from the file's header
// and sizes every buffer, as its own fitting does. It reads no weight,
// and takes about as long as the header takes to read (the vocabulary)
// and a few graphs to build. The numbers are exactly what NewContext then
// allocates, for every architecture: they come from llama.cpp's own
// sizing, not a model of it.
func MemoryNeeds(path string, p ContextParams) (Memory, error) {
	Init()
	if cpuErr != nil {
		return Memory{}, fmt.Errorf("memory of %s: %w", path, cpuErr)
	}
	if _, err := os.Stat(path); err != nil {
		return Memory{}, fmt.Errorf("memory of %s: %w", path, err)
	}
	mp := C.llama_model_default_params()
	devs := (*C.ggml_backend_dev_t)(C.calloc(1, C.size_t(unsafe.Sizeof(C.ggml_backend_dev_t(nil))))) // none: the CPU
	defer C.free(unsafe.Pointer(devs))
	mp.devices = devs
	mp.n_gpu_layers = 0
	p.NCtx = max(p.NCtx, 1) // 0 would be the training context
	cp := p.c()
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var sizes [3]C.size_t
	fitMu.Lock()
	ok := C.corral_memory_needs(cpath, &mp, &cp, &sizes[0])
	fitMu.Unlock()
	if !ok {
		return Memory{}, fmt.Errorf("memory of %s: llama.cpp cannot build the model or a context of %d cells", path, p.NCtx)
	}
	return Memory{Weights: int64(sizes[0]), Context: int64(sizes[1]), Compute: int64(sizes[2])}, nil
}

// Memory returns what llama.cpp allocated for c and its model.
func (c *Context) Memory() Memory {
	var sizes [3]C.size_t
	C.corral_memory_of(c.c, &sizes[0])
	return Memory{Weights: int64(sizes[0]), Context: int64(sizes[1]), Compute: int64(sizes[2])}
}
