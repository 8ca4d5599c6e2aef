package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/llama"
)

// corral version names the CPU variant loaded (the one this test process
// loads too) among those embedded, and exits non-zero naming what the CPU
// lacks when CORRAL_CPU_VARIANT asks for one it cannot run.
func TestVersionNamesCPUVariant(t *testing.T) {
	c := llama.CPU()
	if c.Err != nil {
		t.Fatal(c.Err)
	}
	cmd := exec.Command(testmodel.Binary(t), "version")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("corral version: %v\n%s", err, out)
	}
	for _, want := range []string{"cpu variant: " + c.Variant + " (kernels " + c.Kernels, "variants:    " + strings.Join(c.Variants, " "), "cpu " + c.Variant + ")"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("corral version does not say %q:\n%s", want, out)
		}
	}
	cmd = exec.Command(testmodel.Binary(t), "version")
	cmd.Env = append(os.Environ(), llama.CPUVariantEnv+"=pentium")
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "pentium: no such CPU variant") {
		t.Errorf("corral version with %s=pentium: %v, want a failure naming it:\n%s", llama.CPUVariantEnv, err, out)
	}
}
