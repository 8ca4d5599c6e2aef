package llama

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/corral-llm/corral/internal/testmodel"
)

// This process runs, so the machine has everything the binary's own
// code was built for, and CPU says so. The variant loaded is the one
// pickCPUVariant chooses for this machine, and the machine has all it
// uses.
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
	if c.Err != nil {
		t.Fatalf("no CPU variant loaded: %v", c.Err)
	}
	want, err := pickCPUVariant(c.Arch, c.Variants, c.Machine, os.Getenv(CPUVariantEnv), func() bool { return false })
	if err != nil || c.Variant != want {
		t.Errorf("variant %q loaded, pickCPUVariant says %q (%v)", c.Variant, want, err)
	}
	for _, f := range c.Uses {
		if !slices.Contains(c.Machine, f) {
			t.Errorf("variant %s uses %s, which the machine lacks (Machine: %v)", c.Variant, f, c.Machine)
		}
	}
	if !strings.Contains(Version(), "cpu "+c.Variant+")") {
		t.Errorf("Version() = %q does not name the variant %s", Version(), c.Variant)
	}
}

// The binary embeds every variant ggml builds for the architecture
// (arm64's SME variants only where the compiler could build them), and
// each has a row in cpuVariants, so that none goes unscored.
func TestCPUVariantsEmbedded(t *testing.T) {
	got := embeddedCPUVariants()
	for _, v := range got {
		if _, ok := cpuVariants[runtime.GOARCH][v]; !ok {
			t.Errorf("embedded variant %s has no row in cpuVariants[%s]", v, runtime.GOARCH)
		}
	}
	for v := range cpuVariants[runtime.GOARCH] {
		if !slices.Contains(got, v) && !strings.HasPrefix(v, "armv9") {
			t.Errorf("variant %s is not embedded (embedded: %v)", v, got)
		}
	}
	for v, feats := range cpuVariants[runtime.GOARCH] {
		for _, f := range feats {
			if _, ok := cpuFeatures[runtime.GOARCH][f]; !ok {
				t.Errorf("variant %s: feature %s has no weight", v, f)
			}
		}
	}
}

func TestPickCPUVariant(t *testing.T) {
	const (
		x86v3  = "sse4_2 avx f16c fma avx2 bmi2"
		avx512 = " avx512f avx512cd avx512vl avx512dq avx512bw"
	)
	all := func(arch string) []string {
		var out []string
		for v := range cpuVariants[arch] {
			out = append(out, v)
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		arch      string
		available []string // nil: all
		have      string
		want      string // CORRAL_CPU_VARIANT
		amxRuns   bool
		pick      string
		err       string
	}{
		{name: "zen3", arch: "amd64", have: x86v3, pick: "haswell"},
		{name: "zen4", arch: "amd64", have: x86v3 + avx512 + " avx512vbmi avx512_vnni avx512_bf16", pick: "zen4"},
		{name: "icelake", arch: "amd64", have: x86v3 + avx512 + " avx512vbmi avx512_vnni", pick: "icelake"},
		{name: "skylake-x", arch: "amd64", have: x86v3 + avx512, pick: "skylakex"},
		{name: "alderlake", arch: "amd64", have: x86v3 + " avx_vnni", pick: "alderlake"},
		// AVX-512 in CPUID, but the OS does not save the registers:
		// __builtin_cpu_supports reports no avx512f.
		{name: "avx512 not granted", arch: "amd64", have: x86v3 + " avx512vbmi avx512_vnni", pick: "haswell"},
		{name: "sapphire rapids", arch: "amd64", have: x86v3 + avx512 + " avx_vnni avx512vbmi avx512_vnni avx512_bf16 amx_tile amx_int8", amxRuns: true, pick: "zen4"},
		{name: "amx asked for", arch: "amd64", have: x86v3 + avx512 + " avx512vbmi avx512_vnni avx512_bf16 amx_tile amx_int8", want: "sapphirerapids", amxRuns: true, pick: "sapphirerapids"},
		{name: "amx asked for, tiles fault", arch: "amd64", have: x86v3 + avx512 + " avx512vbmi avx512_vnni avx512_bf16 amx_tile amx_int8", want: "sapphirerapids", err: "tile instructions do not run"},
		{name: "asked for, lacking", arch: "amd64", have: x86v3, want: "skylakex", err: "lacks avx512f avx512cd avx512vl avx512dq avx512bw"},
		{name: "asked for, absent", arch: "amd64", available: []string{"x64", "haswell"}, have: x86v3, want: "zen4", err: "no such CPU variant"},
		{name: "asked for, older", arch: "amd64", have: x86v3 + avx512, want: "sse42", pick: "sse42"},
		{name: "only some embedded", arch: "amd64", available: []string{"x64", "sse42", "haswell"}, have: x86v3 + avx512, pick: "haswell"},
		{name: "baseline", arch: "amd64", have: "", pick: "x64"},
		{name: "nothing runs", arch: "amd64", available: []string{"haswell"}, have: "sse4_2", err: "no CPU variant"},
		{name: "neoverse-n1", arch: "arm64", have: "asimddp asimdhp", pick: "armv8.2_2"},
		{name: "graviton3", arch: "arm64", have: "asimddp asimdhp sve i8mm bf16", pick: "armv8.6_1"},
		{name: "graviton4", arch: "arm64", have: "asimddp asimdhp sve i8mm sve2", pick: "armv8.6_2"},
		{name: "cortex-a53", arch: "arm64", have: "crc32", pick: "armv8.0_1"},
		{name: "sme", arch: "arm64", have: "asimddp asimdhp sve i8mm sve2 sme", pick: "armv9.2_2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			available := tc.available
			if available == nil {
				available = all(tc.arch)
			}
			probed := false
			got, err := pickCPUVariant(tc.arch, available, strings.Fields(tc.have), tc.want, func() bool { probed = true; return tc.amxRuns })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("pick = %q, %v; want an error with %q", got, err, tc.err)
				}
			} else if err != nil || got != tc.pick {
				t.Fatalf("pick = %q, %v; want %q", got, err, tc.pick)
			}
			if probed != (tc.want == "sapphirerapids") {
				t.Errorf("AMX probed: %v (only when an AMX variant is asked for)", probed)
			}
		})
	}
}

// CORRAL_CPU_VARIANT loads the variant it names (a model loads and
// decodes on it), and refuses one the CPU cannot run, at model load, in
// a clear error. Each case runs this test binary again with the
// variable set (TestCPUVariantChild).
func TestCPUVariantEnv(t *testing.T) {
	c := CPU()
	lacking := ""
	for _, v := range c.Variants {
		if needs, _, _, _ := variantNeeds(c.Arch, v); slices.ContainsFunc(needs, func(f string) bool { return !slices.Contains(c.Machine, f) }) {
			lacking = v
			break
		}
	}
	base := map[string]string{"amd64": "x64", "arm64": "armv8.0_1"}[c.Arch]
	for _, tc := range []struct{ variant, want string }{
		{base, "loaded " + base + " decoded"},
		{lacking, "this CPU lacks"},
		{"pentium", "no such CPU variant"},
	} {
		if tc.variant == "" {
			t.Logf("this machine runs every variant: no refusal to check")
			continue
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestCPUVariantChild$", "-test.v")
		cmd.Env = append(os.Environ(), CPUVariantEnv+"="+tc.variant, "CORRAL_CPU_CHILD_MODEL="+testmodel.Path(t, testmodel.TinyStories656K))
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s=%s: %v, want output with %q:\n%s", CPUVariantEnv, tc.variant, err, tc.want, out)
		}
	}
}

// TestCPUVariantChild is TestCPUVariantEnv's child: it does nothing unless
// CORRAL_CPU_CHILD_MODEL is set.
func TestCPUVariantChild(t *testing.T) {
	path := os.Getenv("CORRAL_CPU_CHILD_MODEL")
	if path == "" {
		return
	}
	m, err := LoadModel(context.Background(), path)
	if err != nil {
		fmt.Println("load:", err)
		return
	}
	defer m.Close()
	ctx, err := NewContext(m, ContextParams{NCtx: 64, NBatch: 64, NSeqMax: 1, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	toks, err := m.Tokenize("Once upon a time", true, false)
	if err != nil {
		t.Fatal(err)
	}
	var b Batch
	for i, tok := range toks {
		b.Add(tok, i, 0, i == len(toks)-1)
	}
	if err := ctx.Decode(&b); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("loaded %s decoded\n", CPU().Variant)
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
		{"amd64", "avx2 avx_vnni avx512f avx512_vnni", "avx512+vnni"},
		{"amd64", "avx2 avx512f avx512_vnni amx_tile amx_int8", "avx512+vnni+amx"},
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
