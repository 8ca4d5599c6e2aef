//go:build !upstream

package llama

/*
#cgo CPPFLAGS: -I${SRCDIR}/include
*/
import "C"

import (
	"runtime/debug"

	_ "github.com/ollama/ollama/llama/llama.cpp/src" // compiles and links llama.cpp + ggml-cpu
)

// negativeLayersAll: a negative n_gpu_layers offloads none.
const negativeLayersAll = false

// Version names the llama.cpp linked in: the module that compiles it.
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/ollama/ollama" {
				return "llama.cpp from " + d.Path + " " + d.Version
			}
		}
	}
	return "llama.cpp from github.com/ollama/ollama (version unknown)"
}
