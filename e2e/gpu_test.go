//go:build gpu

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/llama"
	"github.com/corral-llm/corral/registry"
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
	ts.Get(t, "/props", &props)
	if !slices.ContainsFunc(props.Devices, func(d device) bool { return d.Name == name && d.Backend != "" && d.MemoryTotal > 0 }) {
		t.Errorf("/props devices %+v: want %s with its backend and memory", props.Devices, name)
	}
	if props.Offload.Layers < 2 || props.Offload.GPULayers != props.Offload.Layers || !slices.Equal(props.Offload.Devices, []string{name}) {
		t.Errorf("/props offload %+v: want every layer on %s", props.Offload, name)
	}
	g := testmodel.GoldensFor(testmodel.TinyStories656K)[0]
	resp, body := ts.Post(t, "/completion", map[string]any{"prompt": g.Prompt, "n_predict": g.N, "temperature": 0, "ignore_eos": true})
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

// TestGPUDeviceBudget: the registry accounts the test device's memory
// under its own budget. A model asked with every layer on it that does
// not fit that budget is refused (400 model_too_large naming the device,
// its need and the budget), never loaded to run out of memory in the
// backend; under -ngl auto the same model loads with the most layers
// that fit, which /v1/models and /metrics report with its reservation.
func TestGPUDeviceBudget(t *testing.T) {
	name := os.Getenv("CORRAL_TEST_DEVICE")
	if name == "" {
		t.Fatal("CORRAL_TEST_DEVICE is not set: name the device to test (make test-gpu sets it)")
	}
	if !slices.ContainsFunc(engine.Devices(), func(d engine.Device) bool { return d.Name == name }) {
		t.Fatalf("device %s not found: devices %+v, backends %+v", name, engine.Devices(), llama.Backends())
	}
	s := spec(t, "tiny", testmodel.Stories260K, 1)
	s.Engine.CtxSize = 512
	md, err := gguf.ReadMetadata(s.Engine.ModelPath)
	if err != nil {
		t.Fatal(err)
	}
	three, err := engine.EstimateSplit(md, s.Engine, 3, []string{name}, nil)
	if err != nil {
		t.Fatal(err)
	}
	budget := three.Devices[0].Total() // 3 of the 6 layers, not 4
	rcfg := registry.Config{KeepAlive: -1, Devices: []registry.Device{{Name: name, Budget: budget}}, Place: registry.PlaceFromFile}

	all := s
	all.Engine.Offload = llama.Offload{GPULayers: llama.GPULayersAll, Devices: []string{name}}
	ms := startModels(t, rcfg, all)
	resp, b := ms.Post(t, "/v1/completions", map[string]any{"prompt": "Hi", "max_tokens": 2})
	if resp.StatusCode != 400 || !strings.Contains(string(b), `"code":"model_too_large"`) || !strings.Contains(string(b), name) ||
		!strings.Contains(string(b), registry.FormatBytes(budget)) {
		t.Errorf("-ngl all over %s's budget: %d %s", name, resp.StatusCode, b)
	}
	if u := ms.reg.DeviceBudgets()[name].Used() + ms.reg.Budget().Used(); u != 0 {
		t.Errorf("a refused model reserved %d bytes", u)
	}

	auto := s
	auto.Engine.Offload = llama.Offload{GPULayers: llama.GPULayersAuto}
	ms = startModels(t, rcfg, auto)
	g := testmodel.GoldensFor(testmodel.Stories260K)[0]
	resp, b = ms.Post(t, "/v1/completions", map[string]any{"prompt": g.Prompt, "max_tokens": g.N, "temperature": 0, "ignore_eos": true})
	if resp.StatusCode != 200 {
		t.Fatalf("-ngl auto: %d %s", resp.StatusCode, b)
	}
	var c struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &c); err != nil || len(c.Choices) != 1 || c.Choices[0].Text != g.Want {
		t.Errorf("-ngl auto with 3 layers on %s: %s, want %q", name, b, g.Want)
	}
	var models struct {
		Data []struct {
			DeviceMemory map[string]int64 `json:"device_memory_bytes"`
			Meta         struct {
				Offload struct {
					GPULayers int      `json:"n_gpu_layers"`
					Layers    int      `json:"n_layers"`
					Devices   []string `json:"devices"`
				} `json:"offload"`
			} `json:"meta"`
		} `json:"data"`
	}
	ms.Get(t, "/v1/models", &models)
	if len(models.Data) != 1 {
		t.Fatalf("/v1/models: %+v", models)
	}
	m := models.Data[0]
	if m.DeviceMemory[name] != budget || m.Meta.Offload.GPULayers != 3 || m.Meta.Offload.Layers != 6 || !slices.Equal(m.Meta.Offload.Devices, []string{name}) {
		t.Errorf("/v1/models: %+v, want 3 of 6 layers on %s reserving %d B there", m, name, budget)
	}
	if u := ms.reg.DeviceBudgets()[name].Used(); u != budget {
		t.Errorf("%s: %d B reserved, want %d", name, u, budget)
	}
	resp, b = ms.Do(t, context.Background(), http.MethodGet, "/metrics", nil)
	for _, want := range []string{
		fmt.Sprintf(`corral_memory_device_reserved_bytes{device=%q} %s`, name, strconv.FormatFloat(float64(budget), 'g', -1, 64)),
		fmt.Sprintf(`corral_memory_device_budget_bytes{device=%q} %s`, name, strconv.FormatFloat(float64(budget), 'g', -1, 64)),
	} {
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
