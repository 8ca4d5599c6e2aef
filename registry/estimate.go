package registry

import (
	"fmt"
	"slices"
	"strings"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/llama"
)

// EstimateFromFile is a Config.Estimate: the memory spec's engine will
// take, estimated from its GGUF header (see engine.EstimateMemory).
func EstimateFromFile(spec Spec) (int64, error) {
	md, err := gguf.ReadMetadata(spec.Engine.ModelPath)
	if err != nil {
		return 0, err
	}
	fp, err := engine.EstimateMemory(md, spec.Engine)
	if err != nil {
		return 0, err
	}
	return fp.Total(), nil
}

// PlaceFromFile is a Config.Place: the placements of spec's engine over
// devices, estimated from its GGUF header (see engine.EstimateSplit). A
// model with no layer to offload (-ngl 0, --device none) gets none: it
// stays on the host. A model pinned to devices (Engine.Offload.Devices)
// gets one placement over them, its layers split by --tensor-split or
// else the devices' free memory, as llama.cpp splits them; an unpinned
// one gets one placement on each device alone, in the order given, so
// that Acquire puts it on the first with room.
//
// A count of layers (or all) is placed as asked, and Acquire refuses it
// where a device's part exceeds that device's whole budget. Auto takes,
// on each device set, the most layers whose parts fit every device's
// budget (its limit, not what is free now: the registry evicts idle
// models to make room rather than offload fewer layers), down to none.
func PlaceFromFile(spec Spec, devices []Device) ([]Placement, error) {
	off := spec.Engine.Offload
	if !off.Enabled() || len(devices) == 0 {
		return nil, nil
	}
	md, err := gguf.ReadMetadata(spec.Engine.ModelPath)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]Device, len(devices))
	var names []string
	for _, d := range devices {
		byName[d.Name] = d
		names = append(names, d.Name)
	}
	var sets [][]string
	if len(off.Devices) > 0 {
		for _, name := range off.Devices {
			if _, ok := byName[name]; !ok {
				return nil, fmt.Errorf("no device %q (devices: %s)", name, strings.Join(names, ", "))
			}
		}
		sets = [][]string{off.Devices}
	} else {
		for _, name := range names {
			sets = append(sets, []string{name})
		}
	}
	var out []Placement
	for _, set := range sets {
		shares := off.TensorSplit
		if len(shares) == 0 && len(set) > 1 {
			// llama.cpp's default: the devices' free memory now.
			for _, name := range set {
				shares = append(shares, float32(byName[name].Free))
			}
		}
		place := func(layers int) (Placement, bool, error) {
			s, err := engine.EstimateSplit(md, spec.Engine, layers, set, shares)
			if err != nil {
				return Placement{}, false, err
			}
			p := Placement{Host: s.Host.Total(), Offload: off}
			p.Offload.Devices, p.Offload.GPULayers = set, s.GPULayers
			fits := true
			for _, d := range s.Devices {
				if p.Devices == nil {
					p.Devices = map[string]int64{}
				}
				p.Devices[d.Device] = d.Total()
				if b := byName[d.Device].Budget; b > 0 && d.Total() > b {
					fits = false
				}
			}
			if p.Devices == nil {
				p.Offload.GPULayers = 0
			}
			return p, fits, nil
		}
		if off.GPULayers != llama.GPULayersAuto {
			p, _, err := place(off.GPULayers)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
			continue
		}
		for k := md.BlockCount + 1; k >= 0; k-- {
			p, fits, err := place(k)
			if err != nil {
				return nil, err
			}
			if fits {
				out = append(out, p)
				break
			}
		}
	}
	// The most layers first; one host-only placement at most.
	slices.SortStableFunc(out, func(a, b Placement) int { return b.Offload.GPULayers - a.Offload.GPULayers })
	if i := slices.IndexFunc(out, Placement.hostOnly); i >= 0 {
		out = out[:i+1]
	}
	return out, nil
}
