package engine_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/llama"
)

// TestEstimateSplit offloads k of the real models' layers and checks each
// device's share against the file's own tensor table: its weights are the
// sum of its blocks' tensors (and the output layer's once it is
// offloaded), its KV those blocks' cells, and host and devices add up to
// the CPU-only estimate.
func TestEstimateSplit(t *testing.T) {
	for _, name := range []string{testmodel.Stories260K, testmodel.TinyStories656K} {
		md, err := gguf.ReadMetadata(testmodel.Path(t, name))
		if err != nil {
			t.Fatal(err)
		}
		cfg := engine.Config{CtxSize: 512, Parallel: 2}
		cpu, err := engine.EstimateMemory(md, cfg)
		if err != nil {
			t.Fatal(err)
		}
		n := md.BlockCount
		// The KV of one block: every block of these models has the same
		// heads, so the CPU total over n.
		blockKV := cpu.KV / int64(n)
		for k := 0; k <= n+1; k++ {
			t.Run(fmt.Sprintf("%s/ngl=%d", name, k), func(t *testing.T) {
				s, err := engine.EstimateSplit(md, cfg, k, []string{"Vulkan0"}, nil)
				if err != nil {
					t.Fatal(err)
				}
				// A model with no output.weight (TinyStories656K) multiplies
				// by token_embd on the output layer's device: a copy.
				var wantW, copied int64
				for _, ti := range md.Tensors {
					size, _ := ti.Size()
					if onDevice(ti.Name, n, k) {
						wantW += int64(size)
					}
					if ti.Name == "token_embd.weight" && k > n && !hasTensor(md, "output.weight") {
						copied = int64(size)
					}
				}
				wantW += copied
				wantKV := int64(min(k, n)) * blockKV
				var dev engine.DeviceFootprint
				if k > 0 {
					if len(s.Devices) != 1 {
						t.Fatalf("devices %+v, want one", s.Devices)
					}
					dev = s.Devices[0]
					if dev.Device != "Vulkan0" || dev.Layers != k || dev.Compute != cpu.Compute {
						t.Errorf("device %+v: want Vulkan0 with %d layers and compute %d", dev, k, cpu.Compute)
					}
				} else if len(s.Devices) != 0 {
					t.Fatalf("devices %+v with no layer offloaded", s.Devices)
				}
				if s.GPULayers != k || s.Layers != n+1 {
					t.Errorf("GPULayers %d of %d, want %d of %d", s.GPULayers, s.Layers, k, n+1)
				}
				if dev.Weights != wantW || dev.KV != wantKV {
					t.Errorf("device weights %d KV %d, want %d and %d", dev.Weights, dev.KV, wantW, wantKV)
				}
				if s.Host.Weights+dev.Weights-copied != cpu.Weights || s.Host.KV+dev.KV != cpu.KV {
					t.Errorf("host %d+%d and device %d+%d do not add up to the CPU's %d+%d",
						s.Host.Weights, s.Host.KV, dev.Weights, dev.KV, cpu.Weights, cpu.KV)
				}
				if s.Host.Compute != cpu.Compute || s.Host.Overhead != cpu.Overhead || s.Host.HostCache != cpu.HostCache {
					t.Errorf("host %+v: compute, overhead and host cache should stay the CPU's %+v", s.Host, cpu)
				}
			})
		}
	}
}

// onDevice says whether llama.cpp puts tensor name on the GPU with k of a
// model's n blocks (and the output layer) offloaded: the last k blocks,
// and the output layer's tensors when k is n + 1.
func onDevice(name string, n, k int) bool {
	var b int
	if _, err := fmt.Sscanf(name, "blk.%d.", &b); err == nil {
		return b >= n-k
	}
	if strings.HasPrefix(name, "token_embd") {
		return false
	}
	return k > n
}

// hasTensor says whether md has a tensor named name.
func hasTensor(md *gguf.Metadata, name string) bool {
	for _, ti := range md.Tensors {
		if ti.Name == name {
			return true
		}
	}
	return false
}

// TestEstimateSplitDevices checks the split over two devices: even
// shares, proportions as --tensor-split gives them, split mode none, and
// a tied output matrix copied to the output layer's device.
func TestEstimateSplitDevices(t *testing.T) {
	md, err := gguf.ReadMetadata(testmodel.Path(t, testmodel.Stories260K))
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{CtxSize: 512}
	cpu, err := engine.EstimateMemory(md, cfg)
	if err != nil {
		t.Fatal(err)
	}
	layers := func(s engine.Split) string {
		var parts []string
		for _, d := range s.Devices {
			parts = append(parts, fmt.Sprintf("%s:%d", d.Device, d.Layers))
		}
		return strings.Join(parts, " ")
	}
	devs := []string{"A", "B"}
	for _, c := range []struct {
		ngl    int
		shares []float32
		mode   llama.SplitMode
		want   string
	}{
		// 6 layers (5 blocks and the output): block i on the first
		// device whose cumulative share exceeds i/6.
		{llama.GPULayersAll, nil, llama.SplitLayer, "A:3 B:3"},
		{llama.GPULayersAll, []float32{2, 1}, llama.SplitLayer, "A:4 B:2"},
		{llama.GPULayersAll, []float32{0, 1}, llama.SplitLayer, "B:6"},
		{4, []float32{1, 1}, llama.SplitLayer, "A:2 B:2"},
		{llama.GPULayersAll, nil, llama.SplitNone, "A:6"},
	} {
		cfg := cfg
		cfg.Offload.SplitMode = c.mode
		s, err := engine.EstimateSplit(md, cfg, c.ngl, devs, c.shares)
		if err != nil {
			t.Fatal(err)
		}
		if got := layers(s); got != c.want {
			t.Errorf("ngl %d shares %v %s: %s, want %s", c.ngl, c.shares, c.mode, got, c.want)
		}
		var w, kv int64
		for _, d := range s.Devices {
			w += d.Weights
			kv += d.KV
		}
		if s.Host.Weights+w != cpu.Weights || s.Host.KV+kv != cpu.KV {
			t.Errorf("ngl %d shares %v: the parts do not add up to the CPU's estimate", c.ngl, c.shares)
		}
	}

	// Without output.weight llama.cpp multiplies by token_embd on the
	// output layer's device: a copy of it goes there, the host keeps its
	// own.
	tied := *md
	tied.Tensors = nil
	var embd, out int64
	for _, ti := range md.Tensors {
		size, _ := ti.Size()
		switch ti.Name {
		case "output.weight":
			out = int64(size)
			continue
		case "token_embd.weight":
			embd = int64(size)
		}
		tied.Tensors = append(tied.Tensors, ti)
	}
	whole, err := engine.EstimateSplit(md, cfg, llama.GPULayersAll, devs[:1], nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := engine.EstimateSplit(&tied, cfg, llama.GPULayersAll, devs[:1], nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Devices[0].Weights, whole.Devices[0].Weights-out+embd; got != want {
		t.Errorf("tied output: device weights %d, want %d (the blocks, the output norm and token_embd's copy)", got, want)
	}
	if _, err := engine.EstimateSplit(md, cfg, llama.GPULayersAuto, devs, nil); err == nil {
		t.Error("auto: no error; the caller resolves it to a count")
	}
}
