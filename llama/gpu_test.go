//go:build gpu

package llama_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/llama"
)

// The offload tests (make test-gpu) run with the backend libraries of
// $CORRAL_BACKENDS loaded and offload to the device $CORRAL_TEST_DEVICE
// names. They fail when it is not there: a test-gpu run that computes on
// the CPU proves nothing.

// testDevice returns the device the tests offload to.
func testDevice(t *testing.T) llama.Device {
	t.Helper()
	name := os.Getenv("CORRAL_TEST_DEVICE")
	if name == "" {
		t.Fatal("CORRAL_TEST_DEVICE is not set: name the device to test (make test-gpu sets it)")
	}
	devs := llama.Devices()
	i := slices.IndexFunc(devs, func(d llama.Device) bool { return d.Name == name })
	if i < 0 {
		t.Fatalf("device %s not found: devices %+v, backends %+v ($%s=%q)", name, devs, llama.Backends(), llama.BackendsEnv, os.Getenv(llama.BackendsEnv))
	}
	return devs[i]
}

func TestGPUDeviceFound(t *testing.T) {
	d := testDevice(t)
	if d.Backend == "" || d.Description == "" || d.Total <= 0 {
		t.Errorf("device %+v: want a backend, a description and its memory", d)
	}
}

// TestGPUGoldenAllLayers runs the golden prompts with every layer (and
// the output layer) on the device: llama.cpp's greedy output over the
// goldens' length is what the CPU run gives.
func TestGPUGoldenAllLayers(t *testing.T) {
	d := testDevice(t)
	for _, c := range testmodel.Goldens {
		m, err := llama.LoadModelOffload(context.Background(), testmodel.Path(t, c.Model),
			llama.Offload{GPULayers: llama.GPULayersAll, Devices: []string{d.Name}}, llama.ContextParams{})
		if err != nil {
			t.Fatal(err)
		}
		off := m.Offloaded()
		if off.GPULayers != off.Layers || !slices.Equal(off.Devices, []string{d.Name}) {
			t.Errorf("%s: offloaded %+v, want every layer on %s", c.Model, off, d.Name)
		}
		got := generate(t, m, c.Prompt, c.N)
		m.Close()
		if got != c.Want {
			t.Errorf("%s %q on %s: got %q, want %q", c.Model, c.Prompt, d.Name, got, c.Want)
		}
	}
}

// TestGPUPartialOffload puts some layers on the device and the rest on
// the CPU: the output is the CPU's too.
func TestGPUPartialOffload(t *testing.T) {
	d := testDevice(t)
	c := testmodel.Goldens[0]
	m, err := llama.LoadModelOffload(context.Background(), testmodel.Path(t, c.Model),
		llama.Offload{GPULayers: 2, Devices: []string{d.Name}}, llama.ContextParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if off := m.Offloaded(); off.GPULayers != 2 || off.Layers <= 2 {
		t.Errorf("offloaded %+v, want 2 layers of more", off)
	}
	if got := generate(t, m, c.Prompt, c.N); got != c.Want {
		t.Errorf("%s %q with 2 layers on %s: got %q, want %q", c.Model, c.Prompt, d.Name, got, c.Want)
	}
}

// TestGPUAutoFits offloads as many layers as fit: the test models are
// small, so all of them.
func TestGPUAutoFits(t *testing.T) {
	d := testDevice(t)
	c := testmodel.Goldens[0]
	m, err := llama.LoadModelOffload(context.Background(), testmodel.Path(t, c.Model),
		llama.Offload{GPULayers: llama.GPULayersAuto, Devices: []string{d.Name}},
		llama.ContextParams{NCtx: 512, NBatch: 512, NSeqMax: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if off := m.Offloaded(); off.GPULayers != off.Layers {
		t.Errorf("offloaded %+v, want every layer (the model is small)", off)
	}
}

// TestGPUUnknownDevice refuses a device that is not there, naming the
// ones that are.
func TestGPUUnknownDevice(t *testing.T) {
	d := testDevice(t)
	_, err := llama.LoadModelOffload(context.Background(), testmodel.Path(t, testmodel.Goldens[0].Model),
		llama.Offload{GPULayers: llama.GPULayersAll, Devices: []string{"NoSuchGPU9"}}, llama.ContextParams{})
	if err == nil {
		t.Fatal("loaded on a device that does not exist")
	}
	if msg := err.Error(); !strings.Contains(msg, "NoSuchGPU9") || !strings.Contains(msg, d.Name) {
		t.Errorf("error %q: want the device asked for and those found", msg)
	}
}
