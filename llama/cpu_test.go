package llama

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// This process runs, so the machine has everything the binary was built
// for, and CPU says so.
func TestCPUThisBinary(t *testing.T) {
	c := CPU()
	for _, f := range c.Built {
		if !slices.Contains(c.Machine, f) {
			t.Errorf("built for %s, which the machine lacks (Machine: %v), yet the process runs", f, c.Machine)
		}
	}
	if c.Kernels == "" || c.Arch != runtime.GOARCH {
		t.Errorf("CPU() = %+v", c)
	}
}

func TestKernels(t *testing.T) {
	for _, tc := range []struct {
		arch  string
		built string
		want  string
	}{
		{"amd64", "", "sse2"},
		{"amd64", "sse3 ssse3 avx", "avx"},
		{"amd64", "avx avx2 fma f16c", "avx2"},
		{"amd64", "avx avx2 avx_vnni", "avx2+vnni"},
		{"amd64", "avx2 avx512f avx512bw", "avx512"},
		{"amd64", "avx2 avx_vnni avx512f avx512_vnni amx_int8", "avx512+vnni"},
		{"arm64", "", "neon"},
		{"arm64", "atomics asimddp", "neon+dp"},
		{"arm64", "asimddp i8mm sve", "sve+dp+i8mm"},
		{"riscv64", "", "scalar"},
	} {
		if got := kernels(tc.arch, strings.Fields(tc.built)); got != tc.want {
			t.Errorf("kernels(%s, %q) = %q, want %q", tc.arch, tc.built, got, tc.want)
		}
	}
}

// A binary built for instruction sets the machine lacks stops at start
// with a message naming them, before anything else runs. cpu.c is
// compiled here with a main of its own and told the machine has only the
// baseline (CORRAL_CPU_PRETEND), so this holds on any machine.
func TestCPURefusesMissingFeatures(t *testing.T) {
	var march, pretend, lacks string
	switch runtime.GOARCH {
	case "amd64":
		march, pretend, lacks = "-march=x86-64-v3", "sse3,ssse3", "avx2"
	case "arm64":
		march, pretend, lacks = "-march=armv8.2-a+dotprod+fp16", "crc32", "asimddp"
	default:
		t.Fatalf("no baseline known for %s: add one", runtime.GOARCH)
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	dir := t.TempDir()
	main := filepath.Join(dir, "main.c")
	if err := os.WriteFile(main, []byte("#include <stdio.h>\nint main(void) { puts(\"main ran\"); return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "refuse")
	build := exec.Command(cc, "-O2", march, `-DCORRAL_CPU_PRETEND="`+pretend+`"`, "cpu.c", main, "-o", bin)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", build.Args, err, out)
	}
	var stdout, stderr bytes.Buffer
	run := exec.Command(bin)
	run.Stdout, run.Stderr = &stdout, &stderr
	err := run.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 69 {
		t.Fatalf("run: err %v, want exit status 69; stderr: %s", err, stderr.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("main ran: %q", stdout.String())
	}
	msg := stderr.String()
	if !strings.Contains(msg, "lacks [") || !strings.Contains(msg, lacks) || strings.Contains(msg, "lacks ["+strings.ReplaceAll(pretend, ",", " ")) {
		t.Errorf("message %q should name %s among the missing features, and not the ones it has (%s)", msg, lacks, pretend)
	}
}
