//go:build !upstream

// ggml's AMX kernels are left out of corral's build (see CPU in cpu.go).
//
// When the compiler targets AMX (-march=native on a Sapphire Rapids or
// later Xeon, -march=sapphirerapids), ggml-cpu.cpp asks for the AMX buffer
// type, but the cgo package that compiles ggml's CPU backend does not
// compile ggml-cpu/amx, so the link failed. This answers "none": ggml then
// runs its AVX-512 (VNNI) kernels, as on every other x86-64 machine.

#if defined(__AMX_INT8__) && defined(__AVX512VNNI__)
#    include "ggml-backend.h"

// The declaration in ggml-cpu/amx/amx.h, with C++ linkage as there.
ggml_backend_buffer_type_t ggml_backend_amx_buffer_type(void);

ggml_backend_buffer_type_t ggml_backend_amx_buffer_type(void) {
    return nullptr;
}
#endif
