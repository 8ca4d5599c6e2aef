package engine

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/llama"
)

// DeviceFootprint is the part of a model's memory on one device (see
// EstimateSplit). Every size is in bytes.
type DeviceFootprint struct {
	// Device is the device's name ("Vulkan0").
	Device string
	// Layers is the number of the model's layers on it, the output layer
	// counted.
	Layers int
	// Weights is the tensor data of those layers.
	Weights int64
	// KV is those layers' part of the KV cache.
	KV int64
	// Compute is the device's compute buffer: the whole of
	// Footprint.Compute, an upper bound (see EstimateSplit).
	Compute int64
}

// Total is the sum of the parts.
func (d DeviceFootprint) Total() int64 { return d.Weights + d.KV + d.Compute }

// Split is a model's memory divided between the host and the devices its
// layers are offloaded to.
type Split struct {
	// Host is what stays in host memory.
	Host Footprint
	// Devices has one entry per device used, in the order given to
	// EstimateSplit; a device that gets no layer is left out.
	Devices []DeviceFootprint
	// GPULayers is the number of layers offloaded, the output layer
	// counted (llama.cpp's n_gpu_layers, capped at the block count + 1).
	GPULayers int
	// Layers is the model's layer count, the output layer counted.
	Layers int
}

// Device returns the footprint on the device named name, and whether the
// split puts anything there.
func (s Split) Device(name string) (DeviceFootprint, bool) {
	i := slices.IndexFunc(s.Devices, func(d DeviceFootprint) bool { return d.Device == name })
	if i < 0 {
		return DeviceFootprint{}, false
	}
	return s.Devices[i], true
}

// EstimateSplit estimates, as EstimateMemory does, the memory of cfg's
// engine when gpuLayers of the model's layers are offloaded to devices
// (their names, in the order llama.cpp gets them), split between them in
// proportion to shares (cfg.Offload.TensorSplit's role; nil or all zero
// shares the layers evenly). gpuLayers is a count or llama.GPULayersAll;
// it counts the output layer as llama.cpp does: of a model of n blocks,
// gpuLayers ≤ n puts the last gpuLayers blocks on the devices, n + 1 the
// output layer too.
//
// The placement is llama.cpp's (llama_model::load_tensors): the input
// layer (token_embd, its norm, position and token-type embeddings) stays
// on the host; block i of the offloaded ones goes to the first device
// whose cumulative share exceeds i / gpuLayers; the output layer (every
// tensor that is neither a block's nor the input's) is placed as block n
// would be. A model whose output matrix is its token embeddings (no
// output.weight) gets a copy of token_embd on the output layer's device.
// With cfg.Offload.SplitMode none every offloaded layer is on the device
// at cfg.Offload.MainGPU; row mode, which spreads the rows of each matrix
// by the same shares, is counted as layer mode.
//
// A device's Weights is the sum of its tensors' sizes, its KV the cells
// of its layers (the KV of a layer lives where the layer does), and its
// Compute the whole compute estimate of EstimateMemory: ggml sizes each
// device's compute buffer for the graph nodes it runs, which are at most
// the whole graph, and the largest nodes (the attention over the cache,
// the logits) run where the layers are. The host keeps the rest of the
// weights and the KV, and all of Compute, Overhead, HostCache and
// Projector (libmtmd runs it on the CPU): the CPU backend computes the
// input layer and the layers not offloaded, and the logits are copied
// back to host memory. So Host.Weights + Σ Weights and
// Host.KV + Σ KV are EstimateMemory's Weights and KV (plus the copy of a
// tied output matrix), and compute is counted once per device and once
// on the host: conservative, never short.
func EstimateSplit(md *gguf.Metadata, cfg Config, gpuLayers int, devices []string, shares []float32) (Split, error) {
	fp, err := EstimateMemory(md, cfg)
	if err != nil {
		return Split{}, err
	}
	h, err := readHParams(md)
	if err != nil {
		return Split{}, err
	}
	n := md.BlockCount
	s := Split{Host: fp, Layers: n + 1}
	switch {
	case gpuLayers == llama.GPULayersAll:
		gpuLayers = n + 1
	case gpuLayers < 0:
		return Split{}, fmt.Errorf("engine: estimate a split of %d GPU layers: want a count or all", gpuLayers)
	}
	if len(devices) == 0 || gpuLayers == 0 {
		return s, nil
	}
	if len(shares) > len(devices) {
		return Split{}, fmt.Errorf("engine: %d tensor-split shares for %d devices", len(shares), len(devices))
	}
	if cfg.Offload.SplitMode == llama.SplitNone {
		if cfg.Offload.MainGPU < 0 || cfg.Offload.MainGPU >= len(devices) {
			return Split{}, fmt.Errorf("engine: main GPU %d of %d devices", cfg.Offload.MainGPU, len(devices))
		}
		devices, shares = devices[cfg.Offload.MainGPU:cfg.Offload.MainGPU+1], nil
	}
	cut := splitPoints(shares, len(devices))

	// The KV per cell of each layer, as kvPerCell counts it.
	cfg = cfg.withDefaults()
	declared, ok := md.Uint(md.Architecture + poolingKey)
	pooling, err := resolvePooling(cfg.Pooling, declared, ok)
	if err != nil {
		return Split{}, fmt.Errorf("%w: %w", ErrEstimate, err)
	}
	cells := int64(alignTo(cfg.ctxSize(h.ctxTrain)+cfg.embedReserve(pooling), ctxPad))
	typeK, typeV, err := cfg.cacheTypes()
	if err != nil {
		return Split{}, err
	}
	fa := !cfg.NoFlashAttn
	// Each layer's part of fp.KV: its keys and values per cell, as
	// kvPerCell counts them, over all cells. Where fp.KV (llama.cpp's
	// sizing) is not that sum (a sliding window, recurrent state,
	// compressed keys), the parts are scaled to it, or even without head
	// counts.
	layerKV := make([]int64, n)
	var sum int64
	if len(h.headsKV) == n {
		maxKV := slices.Max(h.headsKV)
		for il, kv := range h.headsKV {
			vw := kv * h.headV
			if !fa {
				vw = maxKV * h.headV
			}
			layerKV[il] = cells * (typeK.RowBytes(kv*h.headK) + typeV.RowBytes(vw))
			sum += layerKV[il]
		}
	}
	for il := range layerKV {
		switch {
		case sum == fp.KV:
		case sum > 0:
			layerKV[il] = int64(float64(layerKV[il]) / float64(sum) * float64(fp.KV))
		default:
			layerKV[il] = fp.KV / int64(n)
		}
	}

	sizes, err := tensorSizes(md)
	if err != nil {
		return Split{}, err
	}
	start := max(n-gpuLayers, 0)
	act := min(gpuLayers, n+1)
	// dev is the index of the device layer il is on, -1 for the host.
	dev := func(il int) int {
		if il < start || il-start >= act {
			return -1
		}
		f := float32(il-start) / float32(act)
		i, _ := slices.BinarySearchFunc(cut, f, func(c, f float32) int {
			if c <= f {
				return -1 // upper_bound: the first point above f
			}
			return 1
		})
		return min(i, len(devices)-1)
	}
	out := make([]DeviceFootprint, len(devices))
	for i := range out {
		out[i].Device = devices[i]
	}
	for il := 0; il <= n; il++ {
		if d := dev(il); d >= 0 {
			out[d].Layers++
			s.GPULayers++
		}
	}
	tied := true
	for _, t := range md.Tensors {
		if t.Name == "output.weight" {
			tied = false
		}
	}
	for _, t := range md.Tensors {
		il, input := tensorLayer(t.Name, n)
		d := dev(il)
		switch {
		case input:
			if t.Name == "token_embd.weight" && tied {
				if d := dev(n); d >= 0 {
					out[d].Weights += sizes[t.Name] // the output layer's copy
				}
			}
			continue
		case d < 0:
			continue
		}
		out[d].Weights += sizes[t.Name]
		s.Host.Weights -= sizes[t.Name]
	}
	for il := 0; il < n; il++ {
		d := dev(il)
		if d < 0 {
			continue
		}
		out[d].KV += layerKV[il]
		s.Host.KV -= layerKV[il]
	}
	for _, d := range out {
		if d.Layers > 0 {
			d.Compute = fp.Compute
			s.Devices = append(s.Devices, d)
		}
	}
	return s, nil
}

// splitPoints are llama.cpp's split points of n devices: the cumulative
// shares, normalized to end at 1 (even shares when none is given).
func splitPoints(shares []float32, n int) []float32 {
	pts := make([]float32, n)
	copy(pts, shares)
	if !slices.ContainsFunc(pts, func(v float32) bool { return v != 0 }) {
		for i := range pts {
			pts[i] = 1
		}
	}
	var sum float32
	for i, v := range pts {
		sum += v
		pts[i] = sum
	}
	for i := range pts {
		pts[i] /= sum
	}
	return pts
}

// tensorLayer says which layer a tensor belongs to: a block's index
// (blk.N.*), the output layer (n: any other tensor), or the input layer
// (input true), as llama.cpp's tensor table places them.
func tensorLayer(name string, n int) (layer int, input bool) {
	if rest, ok := strings.CutPrefix(name, "blk."); ok {
		if num, _, ok := strings.Cut(rest, "."); ok {
			if i, err := strconv.Atoi(num); err == nil && i >= 0 && i < n {
				return i, false
			}
		}
	}
	switch strings.TrimSuffix(strings.TrimSuffix(name, ".weight"), ".bias") {
	case "token_embd", "token_embd_norm", "position_embd", "token_types":
		return -1, true
	}
	return n, false
}

// tensorSizes is each tensor's data size, as weightBytes counts it.
func tensorSizes(md *gguf.Metadata) (map[string]int64, error) {
	ts := byOffset(md)
	out := make(map[string]int64, len(ts))
	for i, t := range ts {
		size, ok := t.Size()
		if !ok {
			if i+1 < len(ts) {
				size = ts[i+1].Offset - t.Offset
			} else if n, ok := t.Elements(); ok && n < 1<<61 {
				size = 2 * n
			} else {
				return nil, fmt.Errorf("%w: tensor %q: size overflows", ErrEstimate, t.Name)
			}
		}
		if size > 1<<62 {
			return nil, fmt.Errorf("%w: tensor %q of %d bytes", ErrEstimate, t.Name, size)
		}
		out[t.Name] += int64(size)
	}
	return out, nil
}
