package main

import (
	"flag"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/llama"
	"github.com/corral-llm/corral/registry"
)

// offloadFlags are corral serve's GPU offload flags, under llama-server's
// names.
type offloadFlags struct {
	layers, devices, split, tensorSplit, backends, memory string
	mainGPU                                               int
}

// addOffloadFlags adds the offload flags to fs.
func addOffloadFlags(fs *flag.FlagSet) *offloadFlags {
	o := &offloadFlags{}
	aliases(func(name, help string) { fs.StringVar(&o.layers, name, "auto", help) },
		"layers to put on the GPUs: a `count`, auto (as many as fit in their free memory) or all; 0: none", "ngl", "n-gpu-layers", "gpu-layers")
	aliases(func(name, help string) { fs.StringVar(&o.devices, name, "", help) },
		"comma-separated GPUs to offload to (`names` as the log's devices line gives them: Vulkan0,Vulkan1), or none; default: all", "device", "dev")
	aliases(func(name, help string) { fs.StringVar(&o.split, name, "layer", help) },
		"how a model spreads over several GPUs: layer (whole layers and their KV per GPU), row (rows of each weight, where the backend can) or none (only --main-gpu)", "split-mode", "sm")
	aliases(func(name, help string) { fs.StringVar(&o.tensorSplit, name, "", help) },
		"share of the model each GPU takes, comma-separated `proportions` such as 3,1 (default: by free memory)", "tensor-split", "ts")
	aliases(func(name, help string) { fs.IntVar(&o.mainGPU, name, 0, help) },
		"`index` of the GPU (among those used) that holds the model with --split-mode none", "main-gpu", "mg")
	fs.StringVar(&o.memory, "device-memory", "", "memory the loaded models may take on each GPU: comma-separated `name=size` (Vulkan0=4GiB,CUDA0=90%); a GPU not named: its free memory at start less 1 GiB (unlimited when its driver does not say)")
	fs.StringVar(&o.backends, "backends", "", "`folders` (a path list) to load ggml's GPU backend libraries (libggml-vulkan.so, ...) from; none: CPU only (default: $"+llama.BackendsEnv+", else the binary's folder and ../lib/corral)")
	return o
}

// offload parses the flags into an engine's offload settings.
func (o *offloadFlags) offload() (llama.Offload, error) {
	return parseOffload(o.layers, o.devices, o.split, o.tensorSplit, o.mainGPU)
}

// setup points the binding at the backend folders of --backends, before
// any model loads.
func (o *offloadFlags) setup() error {
	if o.backends == "" {
		return nil
	}
	var dirs []string
	if o.backends != "none" {
		for _, d := range filepath.SplitList(o.backends) {
			if d != "" {
				dirs = append(dirs, d)
			}
		}
	}
	return llama.SetBackendDirs(dirs)
}

// parseOffload reads llama-server's offload flags (or a --config model's
// fields of the same names).
func parseOffload(layers, devices, split, tensorSplit string, mainGPU int) (llama.Offload, error) {
	var o llama.Offload
	n, err := parseGPULayers(layers)
	if err != nil {
		return o, err
	}
	o.GPULayers = n
	switch devices {
	case "":
	case "none":
		o.GPULayers = 0
	default:
		for _, d := range strings.Split(devices, ",") {
			if d = strings.TrimSpace(d); d == "" {
				return o, fmt.Errorf("--device %q: an empty name", devices)
			}
			o.Devices = append(o.Devices, d)
		}
	}
	mode, err := llama.ParseSplitMode(split)
	if err != nil {
		return o, fmt.Errorf("--split-mode: %w", err)
	}
	o.SplitMode = mode
	if tensorSplit != "" {
		for _, v := range strings.Split(tensorSplit, ",") {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 32)
			if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
				return o, fmt.Errorf("--tensor-split %q: want comma-separated proportions such as 3,1", tensorSplit)
			}
			o.TensorSplit = append(o.TensorSplit, float32(f))
		}
	}
	if mainGPU < 0 {
		return o, fmt.Errorf("--main-gpu %d: want an index from 0", mainGPU)
	}
	o.MainGPU = mainGPU
	return o, nil
}

// logDevices says which GPU backend libraries loaded and which devices
// they found.
func logDevices(log *slog.Logger) {
	for _, b := range llama.Backends() {
		if b.Err != nil {
			log.Warn("gpu backend did not load", "path", b.Path, "err", b.Err)
			continue
		}
		log.Info("gpu backend", "name", b.Name, "path", b.Path)
	}
	devs := engine.Devices()
	if len(devs) == 0 {
		log.Info("devices", "gpus", "none: layers stay on the CPU")
		return
	}
	for _, d := range devs {
		log.Info("device", "name", d.Name, "backend", d.Backend, "description", d.Description,
			"free", registry.FormatBytes(d.Free), "total", registry.FormatBytes(d.Total))
	}
}

// parseGPULayers reads an -ngl value: a count, auto or all (-1, as
// llama-server reads it).
func parseGPULayers(s string) (int, error) {
	switch s {
	case "", "auto":
		return llama.GPULayersAuto, nil
	case "all", "-1":
		return llama.GPULayersAll, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("-ngl %q: want a count of layers, auto or all", s)
	}
	return n, nil
}

// configOffload applies a --config model's offload fields over the
// server's flags in o: the fields given replace the flags' values.
func configOffload(o *llama.Offload, layers, devices, split, tensorSplit string, mainGPU *int) error {
	c, err := parseOffload(layers, devices, split, tensorSplit, 0)
	if err != nil {
		return err
	}
	if layers != "" || devices == "none" {
		o.GPULayers = c.GPULayers
	}
	if devices != "" && devices != "none" {
		o.Devices = c.Devices
	}
	if split != "" {
		o.SplitMode = c.SplitMode
	}
	if tensorSplit != "" {
		o.TensorSplit = c.TensorSplit
	}
	if mainGPU != nil {
		if *mainGPU < 0 {
			return fmt.Errorf("main_gpu %d: want an index from 0", *mainGPU)
		}
		o.MainGPU = *mainGPU
	}
	return nil
}

// aliases defines a flag under each of names through define: the first
// name gets help, the others "same as" it.
func aliases(define func(name, help string), help string, names ...string) {
	for i, name := range names {
		h := help
		if i > 0 {
			h = "same as " + flagName(names[0])
		}
		define(name, h)
	}
}

// flagName writes a flag's name as the help texts do: -x for one
// letter's worth (ngl, sm...), --name otherwise.
func flagName(name string) string {
	if len(name) <= 3 {
		return "-" + name
	}
	return "--" + name
}

// deviceBudgets are the registry's devices: each device found, with its
// budget from --device-memory (spec: name=size, comma-separated; a size
// is bytes with a unit or a percentage of the device's total memory),
// else its free memory now less llama.FitMargin, the headroom -ngl auto
// leaves, else (the driver reports no memory) unlimited.
func deviceBudgets(spec string, devs []engine.Device) ([]registry.Device, error) {
	given := map[string]string{}
	if spec != "" {
		for _, part := range strings.Split(spec, ",") {
			name, size, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok || name == "" {
				return nil, fmt.Errorf("--device-memory %q: want name=size pairs such as Vulkan0=4GiB", spec)
			}
			if _, dup := given[name]; dup {
				return nil, fmt.Errorf("--device-memory: %s given twice", name)
			}
			given[name] = size
		}
	}
	var out []registry.Device
	var names []string
	for _, d := range devs {
		names = append(names, d.Name)
		rd := registry.Device{Name: d.Name, Free: d.Free}
		if size, ok := given[d.Name]; ok {
			n, err := registry.ParseBytes(size, d.Total)
			if err != nil {
				return nil, fmt.Errorf("--device-memory %s: %w", d.Name, err)
			}
			if n <= 0 {
				return nil, fmt.Errorf("--device-memory %s=%s: want a size above 0", d.Name, size)
			}
			rd.Budget = n
			delete(given, d.Name)
		} else if d.Free > 0 {
			rd.Budget = max(d.Free-llama.FitMargin, 1)
		}
		out = append(out, rd)
	}
	for name := range given {
		if len(names) == 0 {
			names = []string{"none"}
		}
		return nil, fmt.Errorf("--device-memory: no device %q (devices: %s)", name, strings.Join(names, ", "))
	}
	return out, nil
}
