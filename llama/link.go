package llama

// The pinned llama.cpp release's static libraries, built by
// scripts/llama-cpp.sh (make llama): without them the link fails, naming
// the missing -lllama.

/*
#cgo CPPFLAGS: -I${SRCDIR}/lib/include
#cgo linux,amd64 LDFLAGS: -L${SRCDIR}/lib/linux_amd64
#cgo linux,arm64 LDFLAGS: -L${SRCDIR}/lib/linux_arm64
#cgo LDFLAGS: -lcorral-common -lmtmd -lvendor-hash -lllama -lggml -lggml-base -lstdc++ -lm -lpthread -ldl
*/
import "C"

// negativeLayersAll: a negative n_gpu_layers offloads every layer.
const negativeLayersAll = true

// Version names the llama.cpp linked in: its release, commit, the keys
// of the build's two parts (scripts/llama-cpp.sh: release, compilers and
// options) and the CPU variant loaded (Init).
func Version() string {
	Init()
	v := cpuVariant
	if v == "" {
		v = "none"
	}
	return Release() + " (build " + buildKey + ", cpu " + v + ")"
}

// Release names the llama.cpp release linked in and its commit, e.g.
// "llama.cpp b10573 d775b8967".
func Release() string {
	return "llama.cpp " + buildRelease + " " + buildCommit[:9]
}
