package llama

/*
#include "cpu.h"
*/
import "C"

import (
	"runtime"
	"slices"
	"strings"
	"unsafe"
)

// CPUInfo tells which instruction sets the binary's llama.cpp and ggml were
// compiled for and which of them the machine has. A binary whose CPU lacks
// one never gets this far: cpu.c refuses to start it, naming what is
// missing, before any such instruction can run.
//
// ggml's AMX kernels are never used. scripts/llama-cpp.sh compiles ggml's
// CPU backend with -mno-amx-* unless its flags name AMX, and
// they are a poor bet anyway: Ollama measured them slower than AVX-512 on
// Sapphire Rapids (ollama/ollama#9203, which took them out of its builds),
// and on some virtual machines that advertise AMX, llama.cpp's AMX kernels
// die of SIGILL at the first prompt. An AMX machine runs the AVX-512 (VNNI)
// kernels.
type CPUInfo struct {
	Arch    string   // GOARCH
	Built   []string // what the C code was compiled for, in /proc/cpuinfo's names
	Machine []string // the features of that list that this machine has
	Kernels string   // the widest SIMD ggml's kernels use, e.g. "avx512+vnni", "avx2", "neon+dotprod"
}

// CPU describes this binary and this machine.
func CPU() CPUInfo {
	c := CPUInfo{Arch: runtime.GOARCH, Built: cpuList('b'), Machine: cpuList('m')}
	c.Kernels = kernels(c.Arch, c.Built)
	return c
}

// AMXUnused reports whether the machine has AMX, which corral does not use.
func (c CPUInfo) AMXUnused() bool { return slices.Contains(c.Machine, "amx_int8") }

func cpuList(want byte) []string {
	var buf [1024]C.char
	n := C.corral_cpu_list(C.char(want), &buf[0], C.int(len(buf)))
	return strings.Fields(C.GoStringN((*C.char)(unsafe.Pointer(&buf[0])), n))
}

// kernels names the widest vector extension among built, as ggml picks its
// kernels at compile time.
func kernels(arch string, built []string) string {
	has := func(f string) bool { return slices.Contains(built, f) }
	var k string
	switch arch {
	case "amd64":
		switch {
		case has("avx512f"):
			k = "avx512"
			if has("avx512_vnni") {
				k += "+vnni"
			}
		case has("avx2"):
			k = "avx2"
			if has("avx_vnni") {
				k += "+vnni"
			}
		case has("avx"):
			k = "avx"
		default:
			k = "sse2"
		}
	case "arm64":
		k = "neon"
		if has("sve") {
			k = "sve"
		}
		for _, f := range []string{"asimddp", "i8mm"} {
			if has(f) {
				k += "+" + strings.TrimPrefix(f, "asimd")
			}
		}
	default:
		k = "scalar"
	}
	return k
}
