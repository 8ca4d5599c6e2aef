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

// CPUInfo tells which of ggml's CPU variants runs, which instruction sets
// it and the binary's own C code were compiled for, and which of them the
// machine has. A binary whose own code needs an instruction set the CPU
// lacks never gets this far: cpu.c refuses to start it, naming what is
// missing, before any such instruction can run. ggml's kernels are a
// module per variant, embedded, of which Init loads the best the machine
// runs (cpuvariant.go).
//
// ggml's AMX kernels run only when asked for (CORRAL_CPU_VARIANT=
// sapphirerapids) and when a probe shows tile instructions run: Ollama
// measured them slower than AVX-512 on Sapphire Rapids
// (ollama/ollama#9203), and on some virtual machines that advertise AMX,
// they die of SIGILL at the first prompt. An AMX machine otherwise runs
// the AVX-512 (VNNI) kernels.
type CPUInfo struct {
	Arch     string   // GOARCH
	Variant  string   // ggml's CPU variant loaded ("haswell", "zen4", "armv8.2_1")
	Err      error    // why no variant loaded (then Variant may name the one refused)
	Variants []string // the variants this binary embeds
	Kernels  string   // the widest SIMD the variant's kernels use, e.g. "avx512+vnni", "avx2", "neon+dotprod"
	Uses     []string // what the variant was compiled for, in /proc/cpuinfo's names
	Built    []string // what the binary's own C code (cgo) was compiled for
	Machine  []string // the features of those lists that this machine has
}

// CPU describes this binary and this machine. It loads the CPU backend
// (Init) if nothing has yet.
func CPU() CPUInfo {
	Init()
	c := CPUInfo{Arch: runtime.GOARCH, Variant: cpuVariant, Err: cpuErr, Variants: embeddedCPUVariants(),
		Built: cpuList('b'), Machine: cpuList('m')}
	c.Uses, _, _, _ = variantNeeds(c.Arch, c.Variant)
	c.Kernels = kernels(c.Arch, c.Uses)
	return c
}

// AMXUnused reports whether the machine has AMX and its kernels are not
// the ones loaded.
func (c CPUInfo) AMXUnused() bool {
	return slices.Contains(c.Machine, "amx_int8") && !slices.Contains(c.Uses, "amx_int8")
}

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
			if has("amx_int8") {
				k += "+amx"
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
