package llama

/*
#include <stdlib.h>
#include "cpu.h"
#include "ggml-backend.h"
*/
import "C"

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// CPUVariantEnv names the environment variable that picks ggml's CPU
// variant by name ("haswell", "zen4", "armv8.2_1") instead of the best
// the machine runs. A variant the machine cannot run is refused, not
// loaded.
const CPUVariantEnv = "CORRAL_CPU_VARIANT"

// ggml's CPU backend is built once per instruction-set variant
// (GGML_CPU_ALL_VARIANTS, scripts/llama-cpp.sh), each a module embedded in
// the binary (cpuModules, zllama_GOOS_GOARCH.go). Init loads one: the
// best the machine runs, by ggml's own score (the sum of the weights of
// the features a variant uses), or the one CORRAL_CPU_VARIANT names.
//
// corral does its own choosing, not ggml_backend_load_best: that asks each
// module for its score, which means loading modules compiled for
// instructions the machine may lack, and its x86 score reads CPUID only
// ("does not check for OS support"). Here the machine's features come
// from cpu.c: __builtin_cpu_supports on x86-64, which also checks that the
// kernel saves the AVX and AVX-512 registers (XCR0), and the kernel's
// hwcaps on arm64. A variant is loaded only when the machine has every
// feature it was compiled for.
//
// The AMX variant (sapphirerapids) is never chosen on its own: only by
// CORRAL_CPU_VARIANT, and only when a probe shows tile instructions run
// (cpu.c's corral_amx_runs; some virtual machines advertise AMX and kill
// the process at the first tile instruction, issue 20). Ollama measured
// ggml's AMX kernels slower than AVX-512 on Sapphire Rapids
// (ollama/ollama#9203); on a machine where they measure faster
// (BenchmarkLlamaBench with CORRAL_CPU_VARIANT=sapphirerapids against
// zen4), set the variable.

// cpuFeature is one of ggml's variant features: its score weight
// (ggml-cpu/arch/*/cpu-feats.cpp) and the machine features (cpu.c's
// names) it needs.
type cpuFeature struct {
	weight int
	needs  []string
}

var cpuFeatures = map[string]map[string]cpuFeature{
	"amd64": {
		"FMA":         {1, []string{"fma"}},
		"F16C":        {1 << 1, []string{"f16c"}},
		"SSE42":       {1 << 2, []string{"sse4_2"}},
		"BMI2":        {1 << 3, []string{"bmi2"}},
		"AVX":         {1 << 4, []string{"avx"}},
		"AVX2":        {1 << 5, []string{"avx2"}},
		"AVX_VNNI":    {1 << 6, []string{"avx_vnni"}},
		"AVX512":      {1 << 7, []string{"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"}},
		"AVX512_VBMI": {1 << 8, []string{"avx512vbmi"}},
		"AVX512_BF16": {1 << 9, []string{"avx512_bf16"}},
		"AVX512_VNNI": {1 << 10, []string{"avx512_vnni"}},
		"AMX_TILE":    {0, []string{"amx_tile"}},
		"AMX_INT8":    {1 << 11, []string{"amx_int8"}},
	},
	"arm64": {
		"DOTPROD":                {1 << 1, []string{"asimddp"}},
		"FP16_VECTOR_ARITHMETIC": {1 << 2, []string{"asimdhp"}},
		"SVE":                    {1 << 3, []string{"sve"}},
		"MATMUL_INT8":            {1 << 4, []string{"i8mm"}},
		"SVE2":                   {1 << 5, []string{"sve2"}},
		"SME":                    {1 << 6, []string{"sme"}},
	},
}

// cpuVariants lists ggml's CPU variants per architecture and the features
// each is compiled with, as ggml/src/CMakeLists.txt defines them (Linux).
var cpuVariants = map[string]map[string][]string{
	"amd64": {
		"x64":            nil,
		"sse42":          {"SSE42"},
		"sandybridge":    {"SSE42", "AVX"},
		"ivybridge":      {"SSE42", "AVX", "F16C"},
		"piledriver":     {"SSE42", "AVX", "F16C", "FMA"},
		"haswell":        {"SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2"},
		"skylakex":       {"SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512"},
		"cannonlake":     {"SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VBMI"},
		"cascadelake":    {"SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VNNI"},
		"icelake":        {"SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI"},
		"cooperlake":     {"SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VNNI", "AVX512_BF16"},
		"zen4":           {"SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"},
		"alderlake":      {"SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX_VNNI"},
		"sapphirerapids": {"SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_TILE", "AMX_INT8"},
	},
	"arm64": {
		"armv8.0_1": nil,
		"armv8.2_1": {"DOTPROD"},
		"armv8.2_2": {"DOTPROD", "FP16_VECTOR_ARITHMETIC"},
		"armv8.2_3": {"DOTPROD", "FP16_VECTOR_ARITHMETIC", "SVE"},
		"armv8.6_1": {"DOTPROD", "FP16_VECTOR_ARITHMETIC", "SVE", "MATMUL_INT8"},
		"armv8.6_2": {"DOTPROD", "FP16_VECTOR_ARITHMETIC", "SVE", "MATMUL_INT8", "SVE2"},
		"armv9.2_1": {"DOTPROD", "FP16_VECTOR_ARITHMETIC", "SVE", "MATMUL_INT8", "SME"},
		"armv9.2_2": {"DOTPROD", "FP16_VECTOR_ARITHMETIC", "SVE", "MATMUL_INT8", "SVE2", "SME"},
	},
}

// variantNeeds returns the machine features variant v of arch needs, its
// score, and whether it uses AMX.
func variantNeeds(arch, v string) (needs []string, score int, amx bool, ok bool) {
	feats, ok := cpuVariants[arch][v]
	if !ok {
		return nil, 0, false, false
	}
	score = 1
	for _, f := range feats {
		cf := cpuFeatures[arch][f]
		score += cf.weight
		needs = append(needs, cf.needs...)
		amx = amx || strings.HasPrefix(f, "AMX")
	}
	return needs, score, amx, true
}

// pickCPUVariant chooses among the available variants of arch for a
// machine with the features have: want when it is set, else the
// highest-scoring variant whose features the machine has all of, AMX
// variants left out. amxRuns is asked only for an AMX variant named by
// want.
func pickCPUVariant(arch string, available, have []string, want string, amxRuns func() bool) (string, error) {
	lacks := func(needs []string) []string {
		var out []string
		for _, n := range needs {
			if !slices.Contains(have, n) {
				out = append(out, n)
			}
		}
		return out
	}
	if want != "" {
		if !slices.Contains(available, want) {
			return "", fmt.Errorf("%s=%s: no such CPU variant in this binary (it has %s)", CPUVariantEnv, want, strings.Join(available, ", "))
		}
		needs, _, amx, ok := variantNeeds(arch, want)
		if !ok {
			return "", fmt.Errorf("%s=%s: variant unknown to this corral", CPUVariantEnv, want)
		}
		if l := lacks(needs); len(l) > 0 {
			return "", fmt.Errorf("%s=%s: this CPU lacks %s", CPUVariantEnv, want, strings.Join(l, " "))
		}
		if amx && !amxRuns() {
			return "", fmt.Errorf("%s=%s: this machine advertises AMX but its tile instructions do not run", CPUVariantEnv, want)
		}
		return want, nil
	}
	best, bestScore := "", 0
	for _, v := range available {
		needs, score, amx, ok := variantNeeds(arch, v)
		if !ok || amx || len(lacks(needs)) > 0 {
			continue
		}
		if score > bestScore || score == bestScore && v < best {
			best, bestScore = v, score
		}
	}
	if best == "" {
		return "", fmt.Errorf("no CPU variant of this binary (%s) runs on this CPU", strings.Join(available, ", "))
	}
	return best, nil
}

// CPUVariantRuns reports whether this binary embeds ggml's CPU variant v
// and this machine runs it (an AMX variant never, here): whether
// CPUVariantEnv may name it. It loads nothing, and may be called before
// Init.
func CPUVariantRuns(v string) bool {
	_, err := pickCPUVariant(runtime.GOARCH, embeddedCPUVariants(), cpuList('m'), v, func() bool { return false })
	return err == nil
}

// embeddedCPUVariants lists the variants whose modules the binary embeds.
func embeddedCPUVariants() []string {
	ents, err := fs.ReadDir(cpuModules, cpuModulesDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		if v, ok := strings.CutPrefix(n, "libggml-cpu-"); ok {
			if v, ok := strings.CutSuffix(v, ".so.gz"); ok {
				out = append(out, v)
			}
		}
	}
	slices.Sort(out)
	return out
}

// cpuModule returns the uncompressed module of variant v.
func cpuModule(v string) ([]byte, error) {
	gz, err := cpuModules.ReadFile(path.Join(cpuModulesDir, "libggml-cpu-"+v+".so.gz"))
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("cpu variant %s: %w", v, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("cpu variant %s: %w", v, err)
	}
	return b, nil
}

// loadCPUVariant picks a variant and registers its module with ggml.
// The module is loaded from memory (a memfd), or, where that is not
// allowed (vm.memfd_noexec, a seccomp filter), from a file written once
// into the user's cache folder, named by its content's hash.
func loadCPUVariant() (string, error) {
	available := embeddedCPUVariants()
	if len(available) == 0 {
		return "", errors.New("llama: this binary embeds no CPU backend (run make llama before go build)")
	}
	amxRuns := func() bool { return C.corral_amx_runs() != 0 }
	v, err := pickCPUVariant(runtime.GOARCH, available, cpuList('m'), os.Getenv(CPUVariantEnv), amxRuns)
	if err != nil {
		return "", fmt.Errorf("llama: %w", err)
	}
	mod, err := cpuModule(v)
	if err != nil {
		return v, fmt.Errorf("llama: %w", err)
	}
	if memfdLoad(v, mod) {
		return v, nil
	}
	p, err := cpuModuleFile(v, mod)
	if err != nil {
		return v, fmt.Errorf("llama: cpu variant %s: %w", v, err)
	}
	if !backendLoad(p) {
		return v, fmt.Errorf("llama: cpu variant %s (%s) did not load", v, p)
	}
	return v, nil
}

// memfdLoad loads mod from an anonymous memory file.
func memfdLoad(v string, mod []byte) bool {
	fd, err := unix.MemfdCreate("ggml-cpu-"+v, unix.MFD_CLOEXEC)
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(fd), "memfd:ggml-cpu-"+v)
	defer f.Close()
	if _, err := f.Write(mod); err != nil {
		return false
	}
	return backendLoad(fmt.Sprintf("/proc/self/fd/%d", fd))
}

// cpuModuleFile writes mod into the user's cache folder (the system's
// temporary folder when there is none) unless it is there, and returns
// its path.
func cpuModuleFile(v string, mod []byte) (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, "corral", "cpu")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	sum := sha256.Sum256(mod)
	p := filepath.Join(dir, "libggml-cpu-"+v+"-"+hex.EncodeToString(sum[:8])+".so")
	if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, mod) {
		return p, nil
	}
	tmp, err := os.CreateTemp(dir, ".libggml-cpu-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(mod); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	return p, os.Rename(tmp.Name(), p)
}

// backendLoad registers the ggml backend module at p.
func backendLoad(p string) bool {
	cp := C.CString(p)
	defer C.free(unsafe.Pointer(cp))
	return C.ggml_backend_load(cp) != nil
}
