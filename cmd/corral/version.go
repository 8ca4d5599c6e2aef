package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/corral-llm/corral/llama"
)

// runVersion prints the build (revision, Go, the llama.cpp build) and
// the CPU: the variant of ggml's kernels loaded and the others embedded,
// what the binary was built for, what the machine has. A machine that lacks an instruction set the binary
// needs never gets here: the binary stops at start, naming it.
func runVersion(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return err
	}
	rev := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				rev = s.Value
			}
		}
	}
	c := llama.CPU()
	w := os.Stdout
	fmt.Fprintf(w, "corral %s (%s, %s/%s)\n", rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintln(w, llama.Version())
	if c.Err != nil {
		fmt.Fprintf(w, "cpu variant: none: %v\n", c.Err)
	} else {
		fmt.Fprintf(w, "cpu variant: %s (kernels %s; uses %s)\n", c.Variant, c.Kernels, orNone(c.Uses))
	}
	fmt.Fprintf(w, "variants:    %s\n", strings.Join(c.Variants, " "))
	fmt.Fprintf(w, "built for:   %s\n", orNone(c.Built))
	fmt.Fprintf(w, "machine has: %s\n", orNone(c.Machine))
	if c.AMXUnused() {
		fmt.Fprintf(w, "amx:         present, not used (%s=sapphirerapids to try it)\n", llama.CPUVariantEnv)
	}
	return c.Err
}

func orNone(fs []string) string {
	if len(fs) == 0 {
		return "(baseline only)"
	}
	return strings.Join(fs, " ")
}
