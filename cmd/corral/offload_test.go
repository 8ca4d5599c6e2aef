package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/llama"
	"github.com/corral-llm/corral/registry"
)

func TestParseOffload(t *testing.T) {
	for _, c := range []struct {
		layers, devices, split, ts string
		main                       int
		want                       llama.Offload
	}{
		{"auto", "", "layer", "", 0, llama.Offload{GPULayers: llama.GPULayersAuto, SplitMode: llama.SplitLayer}},
		{"all", "Vulkan0, Vulkan1", "row", "3,1", 1, llama.Offload{GPULayers: llama.GPULayersAll, Devices: []string{"Vulkan0", "Vulkan1"},
			SplitMode: llama.SplitRow, TensorSplit: []float32{3, 1}, MainGPU: 1}},
		{"-1", "", "none", "", 0, llama.Offload{GPULayers: llama.GPULayersAll, SplitMode: llama.SplitNone}},
		{"12", "none", "", "", 0, llama.Offload{GPULayers: 0, SplitMode: llama.SplitLayer}},
		{"0", "", "", "", 0, llama.Offload{SplitMode: llama.SplitLayer}},
	} {
		got, err := parseOffload(c.layers, c.devices, c.split, c.ts, c.main)
		if err != nil {
			t.Errorf("%+v: %v", c, err)
			continue
		}
		if got.GPULayers != c.want.GPULayers || !slices.Equal(got.Devices, c.want.Devices) || got.SplitMode != c.want.SplitMode ||
			!slices.Equal(got.TensorSplit, c.want.TensorSplit) || got.MainGPU != c.want.MainGPU {
			t.Errorf("%+v: got %+v, want %+v", c, got, c.want)
		}
	}
	for _, c := range []struct{ layers, devices, split, ts string }{
		{"some", "", "", ""}, {"-2", "", "", ""}, {"1", "Vulkan0,", "", ""}, {"1", "", "rows", ""},
		{"1", "", "", "3,x"}, {"1", "", "", "-1"}, {"1", "", "", "NaN"},
	} {
		if o, err := parseOffload(c.layers, c.devices, c.split, c.ts, 0); err == nil {
			t.Errorf("%+v accepted: %+v", c, o)
		}
	}
	if _, err := parseOffload("1", "", "", "", -1); err == nil {
		t.Error("--main-gpu -1 accepted")
	}
}

// A --config model's offload fields replace the flags' values they name
// and keep the others.
func TestModelSpecsOffload(t *testing.T) {
	dir := t.TempDir()
	touch(t, filepath.Join(dir, "c.gguf"))
	config := filepath.Join(dir, "models.yaml")
	if err := os.WriteFile(config, []byte(`
models:
  - id: gpu
    path: c.gguf
    n_gpu_layers: 20
    device: Vulkan1
    split_mode: none
    tensor_split: "1,2"
    main_gpu: 0
  - id: cpu
    path: c.gguf
    device: none
  - id: flags
    path: c.gguf
`), 0o644); err != nil {
		t.Fatal(err)
	}
	base := engine.Config{Offload: llama.Offload{GPULayers: llama.GPULayersAll, Devices: []string{"Vulkan0"}, SplitMode: llama.SplitRow, MainGPU: 1}}
	specs, err := modelSpecs(registry.Spec{Engine: base}, nil, "", config, projectorFlags{})
	if err != nil {
		t.Fatal(err)
	}
	gpu, cpu, flags := specs[0].Engine.Offload, specs[1].Engine.Offload, specs[2].Engine.Offload
	if gpu.GPULayers != 20 || !slices.Equal(gpu.Devices, []string{"Vulkan1"}) || gpu.SplitMode != llama.SplitNone ||
		!slices.Equal(gpu.TensorSplit, []float32{1, 2}) || gpu.MainGPU != 0 {
		t.Errorf("config offload: %+v", gpu)
	}
	if cpu.Enabled() {
		t.Errorf("device: none: %+v, want no layer offloaded", cpu)
	}
	if flags.GPULayers != llama.GPULayersAll || !slices.Equal(flags.Devices, []string{"Vulkan0"}) || flags.SplitMode != llama.SplitRow || flags.MainGPU != 1 {
		t.Errorf("a model without offload fields: %+v, want the flags' %+v", flags, base.Offload)
	}
	for name, body := range map[string]string{
		"bad n_gpu_layers": "models:\n  - path: c.gguf\n    n_gpu_layers: many\n",
		"bad split_mode":   "models:\n  - path: c.gguf\n    split_mode: diagonal\n",
		"bad tensor_split": "models:\n  - path: c.gguf\n    tensor_split: a,b\n",
		"bad main_gpu":     "models:\n  - path: c.gguf\n    main_gpu: -1\n",
	} {
		bad := filepath.Join(dir, "bad.yaml")
		if err := os.WriteFile(bad, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := modelSpecs(registry.Spec{Engine: base}, nil, "", bad, projectorFlags{}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestDeviceBudgets: --device-memory's budgets by name, a GPU not named
// its free memory less the 1 GiB -ngl auto leaves (unlimited when
// unknown), and the errors of a name not found and a bad size.
func TestDeviceBudgets(t *testing.T) {
	const gib = 1 << 30
	devs := []engine.Device{{Name: "Vulkan0", Free: 6 * gib, Total: 8 * gib}, {Name: "Vulkan1", Free: 3 * gib, Total: 4 * gib}, {Name: "Vulkan2"}}
	got, err := deviceBudgets("Vulkan1=50%", devs)
	if err != nil {
		t.Fatal(err)
	}
	want := []registry.Device{{Name: "Vulkan0", Budget: 5 * gib, Free: 6 * gib}, {Name: "Vulkan1", Budget: 2 * gib, Free: 3 * gib}, {Name: "Vulkan2"}}
	if !slices.Equal(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got, err := deviceBudgets("Vulkan0=512MiB, Vulkan2=1GiB", devs); err != nil || got[0].Budget != 512<<20 || got[2].Budget != gib {
		t.Errorf("got %+v, %v", got, err)
	}
	for _, bad := range []string{"CUDA0=1GiB", "Vulkan0", "Vulkan0=lots", "Vulkan0=1GiB,Vulkan0=2GiB", "Vulkan2=50%"} {
		if _, err := deviceBudgets(bad, devs); err == nil || !strings.Contains(err.Error(), "--device-memory") {
			t.Errorf("%q: %v, want an error naming --device-memory", bad, err)
		}
	}
}
