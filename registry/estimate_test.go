package registry

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/internal/testsynth"
	"github.com/corral-llm/corral/llama"
)

// TestEstimateFromFileCacheTypes: the budget's need follows a spec's KV
// cache types: with q8_0 keys and values it is below the F16 need, its
// KV cache smaller by the bytes quantization saves (a head of 64 values:
// 68 bytes against 128), and a combination llama.cpp cannot run is an
// error naming the flag.
func TestEstimateFromFileCacheTypes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv64.gguf")
	shape := gguf.Shape{Embd: 256, Layers: 2, Heads: 4, HeadsKV: 2, FF: 512, Vocab: 512, Ctx: 512, Type: "q8_0"}
	if err := gguf.WriteSynthetic(path, shape, 1); err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{ModelPath: path, CtxSize: 4096, Parallel: 4}
	f16, err := EstimateFromFile(Spec{ID: "m", Engine: cfg})
	if err != nil {
		t.Fatal(err)
	}
	cfg.CacheTypeK, cfg.CacheTypeV = "q8_0", "q8_0"
	q8, err := EstimateFromFile(Spec{ID: "m", Engine: cfg})
	if err != nil {
		t.Fatal(err)
	}
	// The KV cache takes 4,096 cells × 2 layers × 2 KV heads × (K + V) ×
	// (128 - 68) bytes less; llama.cpp's compute buffers grow a little
	// (it converts the quantized cache for attention).
	md, err := gguf.ReadMetadata(path)
	if err != nil {
		t.Fatal(err)
	}
	kv := func(c engine.Config) int64 {
		fp, err := engine.EstimateMemory(md, c)
		if err != nil {
			t.Fatal(err)
		}
		return fp.KV
	}
	f16cfg := cfg
	f16cfg.CacheTypeK, f16cfg.CacheTypeV = "", ""
	if saved, want := kv(f16cfg)-kv(cfg), int64(4096*2*2*2*(128-68)); saved != want || q8 >= f16 {
		t.Errorf("need with q8_0 KV %d, with f16 %d: the KV cache saves %d, want %d", q8, f16, saved, want)
	}
	cfg.NoFlashAttn = true
	if _, err := EstimateFromFile(Spec{ID: "m", Engine: cfg}); !errors.Is(err, llama.ErrCacheType) {
		t.Errorf("q8_0 V without flash attention: %v, want ErrCacheType", err)
	}
}

// TestPlaceFromFile: -ngl auto takes the most layers whose device part
// fits the device's budget, a count is placed as asked (and refused by
// New when too large), an unpinned model gets a placement per device,
// best first, and -ngl 0 none.
func TestPlaceFromFile(t *testing.T) {
	path := testmodel.Path(t, testmodel.Stories260K)
	cfg := engine.Config{ModelPath: path, CtxSize: 512}
	md, err := gguf.ReadMetadata(path)
	if err != nil {
		t.Fatal(err)
	}
	split := func(k int) engine.Split {
		s, err := engine.EstimateSplit(md, cfg, k, []string{"GPU0"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	three := split(3)
	budget := three.Devices[0].Total() // room for 3 layers, not 4
	if split(4).Devices[0].Total() <= budget {
		t.Fatal("4 layers take no more than 3")
	}
	devs := []Device{{Name: "GPU0", Budget: budget}, {Name: "GPU1"}}

	cfg.Offload = llama.Offload{GPULayers: llama.GPULayersAuto, Devices: []string{"GPU0"}}
	ps, err := PlaceFromFile(Spec{ID: "m", Engine: cfg}, devs)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].Offload.GPULayers != 3 || ps[0].Devices["GPU0"] != budget || ps[0].Host != three.Host.Total() {
		t.Fatalf("auto on GPU0: %+v, want 3 layers, %d B on GPU0 and %d on the host", ps, budget, three.Host.Total())
	}

	// Unpinned: all 6 layers on GPU1 (unlimited) first, then 3 on GPU0.
	cfg.Offload.Devices = nil
	if ps, err = PlaceFromFile(Spec{ID: "m", Engine: cfg}, devs); err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].Offload.GPULayers != 6 || ps[0].Devices["GPU1"] == 0 || ps[1].Offload.GPULayers != 3 || ps[1].Devices["GPU0"] != budget {
		t.Errorf("auto unpinned: %+v, want 6 layers on GPU1, then 3 on GPU0", ps)
	}

	// A count too large for GPU0 is placed as asked; the registry refuses it.
	cfg.Offload = llama.Offload{GPULayers: 4, Devices: []string{"GPU0"}}
	spec := Spec{ID: "m", Engine: cfg}
	r, err := New(Config{Devices: devs, Place: PlaceFromFile}, []Spec{spec}, func(context.Context, Spec) (*fakeModel, error) {
		t.Error("a model too large for its device was loaded")
		return nil, errors.New("no")
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var tl *TooLargeError
	if _, err := r.Acquire(context.Background(), "m"); !errors.As(err, &tl) || tl.Device != "GPU0" || tl.Need != split(4).Devices[0].Total() || tl.Budget != budget {
		t.Errorf("-ngl 4 over GPU0's budget: %v, want a TooLargeError naming GPU0", err)
	}

	cfg.Offload = llama.Offload{}
	if ps, err = PlaceFromFile(Spec{ID: "m", Engine: cfg}, devs); err != nil || ps != nil {
		t.Errorf("-ngl 0: %+v, %v; want no placement", ps, err)
	}
	cfg.Offload = llama.Offload{GPULayers: llama.GPULayersAll, Devices: []string{"GPU7"}}
	if _, err = PlaceFromFile(Spec{ID: "m", Engine: cfg}, devs); err == nil || !strings.Contains(err.Error(), "GPU7") {
		t.Errorf("an unknown device: %v", err)
	}
}

// TestEstimateFromFileProjector: the budget's need of a model with a
// projector (Engine.MMProj) counts the projector's estimate on top of
// the model's, and on the host in every placement (libmtmd runs it on
// the CPU).
func TestEstimateFromFileProjector(t *testing.T) {
	model, proj := testsynth.Projector(t, t.TempDir(), "gemma3")
	cfg := engine.Config{ModelPath: model}
	without, err := EstimateFromFile(Spec{ID: "m", Engine: cfg})
	if err != nil {
		t.Fatal(err)
	}
	cfg.MMProj = proj
	with, err := EstimateFromFile(Spec{ID: "m", Engine: cfg})
	if err != nil {
		t.Fatal(err)
	}
	pmd, err := gguf.ReadMetadata(proj)
	if err != nil {
		t.Fatal(err)
	}
	want, err := engine.EstimateProjector(pmd)
	if err != nil {
		t.Fatal(err)
	}
	if with-without != want || want <= 0 {
		t.Errorf("need with the projector %d, without %d: %d more, want the projector's %d", with, without, with-without, want)
	}
	md, err := gguf.ReadMetadata(model)
	if err != nil {
		t.Fatal(err)
	}
	s, err := engine.EstimateSplit(md, cfg, llama.GPULayersAll, []string{"GPU0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Host.Projector != want {
		t.Errorf("all layers offloaded: the host keeps %d of the projector, want %d", s.Host.Projector, want)
	}
}
