//go:build !gpu

package llama_test

import (
	"context"
	"strings"
	"testing"

	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/llama"
)

// Without a backend library (plain go test: none beside the test binary,
// or CORRAL_BACKENDS empty as make test sets it) there is no device: -ngl
// auto computes on the CPU, and layers asked of a GPU are refused by
// name, not placed on the CPU in silence.
func TestOffloadWithoutDevices(t *testing.T) {
	if devs := llama.Devices(); len(devs) > 0 {
		t.Fatalf("devices %+v: this test wants a process without GPU backends (CORRAL_BACKENDS= go test)", devs)
	}
	path := testmodel.Path(t, testmodel.TinyStories656K)
	m, err := llama.LoadModelOffload(context.Background(), path, llama.Offload{GPULayers: llama.GPULayersAuto}, llama.ContextParams{NCtx: 512})
	if err != nil {
		t.Fatal(err)
	}
	off := m.Offloaded()
	m.Close()
	if off.GPULayers != 0 || len(off.Devices) != 0 || off.Layers < 2 {
		t.Errorf("-ngl auto without devices: offloaded %+v, want no layer on a device", off)
	}
	for _, o := range []llama.Offload{
		{GPULayers: llama.GPULayersAll},
		{GPULayers: 3},
		{GPULayers: llama.GPULayersAuto, Devices: []string{"Vulkan0"}},
	} {
		_, err := llama.LoadModelOffload(context.Background(), path, o, llama.ContextParams{})
		if err == nil || !strings.Contains(err.Error(), "no backend library loaded a device") {
			t.Errorf("%+v without devices: err %v, want a refusal naming the missing device", o, err)
		}
	}
}
