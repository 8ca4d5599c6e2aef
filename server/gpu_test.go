//go:build gpu

package server

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/llama"
)

// TestGPUPropsAndGolden: a model served with every layer on the test
// device ($CORRAL_TEST_DEVICE, make test-gpu) answers /completion with
// the golden text, and /props lists the device found and the layers on
// it.
func TestGPUPropsAndGolden(t *testing.T) {
	name := os.Getenv("CORRAL_TEST_DEVICE")
	if name == "" {
		t.Fatal("CORRAL_TEST_DEVICE is not set: name the device to test (make test-gpu sets it)")
	}
	if !slices.ContainsFunc(engine.Devices(), func(d engine.Device) bool { return d.Name == name }) {
		t.Fatalf("device %s not found: devices %+v, backends %+v", name, engine.Devices(), llama.Backends())
	}
	ts := startServer(t, engine.Config{Parallel: 1, Offload: llama.Offload{GPULayers: llama.GPULayersAll, Devices: []string{name}}})
	type device struct {
		Name        string `json:"name"`
		Backend     string `json:"backend"`
		MemoryTotal int64  `json:"memory_total"`
	}
	var props struct {
		Devices []device `json:"devices"`
		Offload struct {
			GPULayers int      `json:"n_gpu_layers"`
			Layers    int      `json:"n_layers"`
			Devices   []string `json:"devices"`
		} `json:"offload"`
	}
	ts.get(t, "/props", &props)
	if !slices.ContainsFunc(props.Devices, func(d device) bool { return d.Name == name && d.Backend != "" && d.MemoryTotal > 0 }) {
		t.Errorf("/props devices %+v: want %s with its backend and memory", props.Devices, name)
	}
	if props.Offload.Layers < 2 || props.Offload.GPULayers != props.Offload.Layers || !slices.Equal(props.Offload.Devices, []string{name}) {
		t.Errorf("/props offload %+v: want every layer on %s", props.Offload, name)
	}
	g := testmodel.GoldensFor(testmodel.TinyStories656K)[0]
	resp, body := ts.post(t, "/completion", map[string]any{"prompt": g.Prompt, "n_predict": g.N, "temperature": 0, "ignore_eos": true})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/completion: %d %s", resp.StatusCode, body)
	}
	var c llamaCompletion
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatal(err)
	}
	if c.Content != g.Want {
		t.Errorf("/completion on %s: %q, want %q", name, c.Content, g.Want)
	}
}
