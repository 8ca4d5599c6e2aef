package llama

/*
#include <stdlib.h>
#include "shim.h"
#include "ggml-backend.h"

// corral_devices_fill writes up to n of the devices llama.cpp offloads to
// (GPUs, and integrated GPUs) into out and returns how many there are.
static size_t corral_devices(ggml_backend_dev_t * out, size_t n) {
	size_t k = 0;
	for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
		ggml_backend_dev_t d = ggml_backend_dev_get(i);
		enum ggml_backend_dev_type t = ggml_backend_dev_type(d);
		if (t != GGML_BACKEND_DEVICE_TYPE_GPU && t != GGML_BACKEND_DEVICE_TYPE_IGPU) {
			continue;
		}
		if (k < n) {
			out[k] = d;
		}
		k++;
	}
	return k;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"unsafe"
)

// BackendsEnv names the environment variable that lists the folders Init
// loads ggml backend libraries from (a path list, as PATH is). Set and
// empty, it loads none: the process computes on the CPU only.
const BackendsEnv = "CORRAL_BACKENDS"

// Backend is a ggml backend library (libggml-<name>.so: Vulkan, CUDA, ...)
// that Init found in a backend folder, loaded or not.
type Backend struct {
	// Path is the library's file.
	Path string
	// Name is the backend's name ("Vulkan"); empty when it did not load.
	Name string
	// Err says why the library did not load (ggml logged the details).
	Err error
}

var (
	backendMu   sync.Mutex
	backendDirs []string // nil: the defaults; see SetBackendDirs
	backendSet  bool
	backends    []Backend
)

// SetBackendDirs sets the folders Init loads backend libraries from,
// overriding $CORRAL_BACKENDS and the defaults (see DefaultBackendDirs);
// an empty list loads none. It must be called before Init (or anything
// that loads a model); later it returns an error.
func SetBackendDirs(dirs []string) error {
	backendMu.Lock()
	defer backendMu.Unlock()
	if initDone {
		return errors.New("llama: backend folders set after the backends were loaded")
	}
	backendDirs, backendSet = slices.Clone(dirs), true
	return nil
}

// DefaultBackendDirs are the folders Init loads backend libraries from
// when SetBackendDirs was not called: those $CORRAL_BACKENDS lists when it
// is set, else the executable's own folder and ../lib/corral beside it
// (an installation's layout: bin/corral, lib/corral/libggml-vulkan.so).
func DefaultBackendDirs() []string {
	if v, ok := os.LookupEnv(BackendsEnv); ok {
		var dirs []string
		for _, d := range filepath.SplitList(v) {
			if d != "" {
				dirs = append(dirs, d)
			}
		}
		return dirs
	}
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	if e, err := filepath.EvalSymlinks(exe); err == nil {
		exe = e
	}
	dir := filepath.Dir(exe)
	return []string{dir, filepath.Join(dir, "..", "lib", "corral")}
}

// loadBackends loads every libggml-<name>.so in dirs into ggml's backend
// registry, skipping ggml-base, which is compiled into this binary, and
// the CPU backend, whose variants it embeds (cpuvariant.go). A library of a backend already loaded (the same
// name in two folders) is skipped too. Called once, by Init.
func loadBackends(dirs []string) []Backend {
	var out []Backend
	seen := map[string]bool{}
	for _, dir := range dirs {
		libs, err := filepath.Glob(filepath.Join(dir, "libggml-*.so"))
		if err != nil {
			continue
		}
		for _, path := range libs {
			base := filepath.Base(path)
			kind := strings.TrimSuffix(strings.TrimPrefix(base, "libggml-"), ".so")
			if kind == "base" || kind == "cpu" || strings.HasPrefix(kind, "cpu-") || seen[kind] {
				continue
			}
			seen[kind] = true
			abs, err := filepath.Abs(path)
			if err != nil {
				abs = path
			}
			cpath := C.CString(abs)
			reg := C.ggml_backend_load(cpath)
			C.free(unsafe.Pointer(cpath))
			b := Backend{Path: abs}
			if reg == nil {
				b.Err = fmt.Errorf("llama: backend %s did not load (a library built for another corral, or no device it supports)", abs)
			} else {
				b.Name = C.GoString(C.ggml_backend_reg_name(reg))
			}
			out = append(out, b)
		}
	}
	return out
}

// Backends lists the backend libraries Init found, loaded or not.
func Backends() []Backend {
	Init()
	backendMu.Lock()
	defer backendMu.Unlock()
	return slices.Clone(backends)
}

// Device is a device layers can be offloaded to: a GPU (or integrated
// GPU) of a loaded backend.
type Device struct {
	// Name is ggml's name for it ("Vulkan0", "CUDA1"), what --device takes.
	Name string
	// Description is the driver's name for the device.
	Description string
	// Backend is the name of the backend it belongs to ("Vulkan").
	Backend string
	// Integrated is true for a GPU sharing the host's memory.
	Integrated bool
	// Free and Total are the device's memory in bytes, as its driver
	// reports them now.
	Free, Total int64
}

// Devices lists the devices the loaded backends found, in ggml's order
// (the order --tensor-split's proportions follow), with their memory now.
func Devices() []Device {
	Init()
	devs := devices()
	out := make([]Device, len(devs))
	for i, d := range devs {
		var free, total C.size_t
		C.ggml_backend_dev_memory(d, &free, &total)
		out[i] = Device{
			Name:        C.GoString(C.ggml_backend_dev_name(d)),
			Description: C.GoString(C.ggml_backend_dev_description(d)),
			Backend:     C.GoString(C.ggml_backend_reg_name(C.ggml_backend_dev_backend_reg(d))),
			Integrated:  C.ggml_backend_dev_type(d) == C.GGML_BACKEND_DEVICE_TYPE_IGPU,
			Free:        int64(free),
			Total:       int64(total),
		}
	}
	return out
}

// devices returns the offload devices' handles.
func devices() []C.ggml_backend_dev_t {
	n := C.corral_devices(nil, 0)
	if n == 0 {
		return nil
	}
	out := make([]C.ggml_backend_dev_t, n)
	C.corral_devices(&out[0], n)
	return out
}

// SplitMode is how a model spreads over several devices (llama-server's
// --split-mode).
type SplitMode string

// Split modes.
const (
	SplitLayer SplitMode = "layer" // whole layers per device, and their KV (the default)
	SplitRow   SplitMode = "row"   // rows of each weight across devices, where the backend supports it
	SplitNone  SplitMode = "none"  // everything on Offload.MainGPU
)

// ParseSplitMode returns the split mode named s ("" is SplitLayer).
func ParseSplitMode(s string) (SplitMode, error) {
	switch m := SplitMode(s); m {
	case "":
		return SplitLayer, nil
	case SplitLayer, SplitRow, SplitNone:
		return m, nil
	}
	return "", fmt.Errorf("split mode %q: want none, layer or row", s)
}

// GPU layer counts with a meaning of their own (Offload.GPULayers).
const (
	// GPULayersAuto offloads as many layers as fit in the devices' free
	// memory, beside the context's buffers (llama-server's -ngl auto).
	GPULayersAuto = -1
	// GPULayersAll offloads every layer, and the output layer.
	GPULayersAll = -2
)

// FitMargin is the device memory GPULayersAuto leaves free on each
// device, as llama-server's default --fit-target.
const FitMargin = 1 << 30

// Offload says which of a model's layers go to which devices: llama.cpp's
// llama_model_params, under llama-server's names. The zero value keeps
// everything on the CPU.
type Offload struct {
	// GPULayers is the number of layers stored and computed on the
	// devices (-ngl): a count, GPULayersAuto or GPULayersAll. 0 keeps the
	// model on the CPU.
	GPULayers int
	// Devices are the names of the devices to use (--device); none means
	// every device.
	Devices []string
	// SplitMode is how layers spread over several devices.
	SplitMode SplitMode
	// TensorSplit is the share of the model each device takes, in the
	// order of Devices (or of every device), as proportions
	// (--tensor-split 3,1); none splits by the devices' free memory.
	TensorSplit []float32
	// MainGPU is the index (in the devices used) of the device that holds
	// the whole model with SplitNone, and the intermediate results with
	// SplitRow.
	MainGPU int
	// MTP loads the model's multi-token prediction heads (llama.cpp's
	// load_mtp), which a context made with ContextParams.MTP runs; they
	// are skipped otherwise (Model.MTPHeads counts them either way).
	MTP bool
}

// Enabled reports whether o asks for any layer on a device.
func (o Offload) Enabled() bool { return o.GPULayers != 0 }

// cOffload is llama_model_params' offload fields and the C memory they
// point to, freed by free.
type cOffload struct {
	devs      *C.ggml_backend_dev_t // NULL-terminated
	split     *C.float
	overrides *C.struct_llama_model_tensor_buft_override // written by fit
}

func (c *cOffload) free() {
	C.free(unsafe.Pointer(c.devs))
	C.free(unsafe.Pointer(c.split))
	C.free(unsafe.Pointer(c.overrides))
}

// fitMu serializes corral_params_fit, which swaps llama.cpp's global log
// callback while it runs.
var fitMu sync.Mutex

// fit lowers params' GPU layers (and sets its split and tensor overrides)
// to what fits in the devices' free memory beside a context of cp,
// leaving FitMargin free on each device: llama.cpp's fitting,
// which reads the model's header and simulates the allocations.
func (c *cOffload) fit(path string, params *C.struct_llama_model_params, cp ContextParams) error {
	// NewContext's parameters (n_ctx 0 would be the training context).
	cp.NCtx = max(cp.NCtx, 1)
	cparams := cp.c()
	n := C.llama_max_tensor_buft_overrides()
	c.overrides = (*C.struct_llama_model_tensor_buft_override)(C.calloc(n, C.size_t(unsafe.Sizeof(C.struct_llama_model_tensor_buft_override{}))))
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	fitMu.Lock()
	ok := C.corral_params_fit(cpath, params, &cparams, c.split, c.overrides, C.size_t(FitMargin), cparams.n_ctx)
	fitMu.Unlock()
	if !ok {
		return errors.New("llama: the model does not fit the devices' free memory, even with no layer offloaded")
	}
	return nil
}

// Offloaded is where a loaded model's layers are.
type Offloaded struct {
	// Layers is the model's layers, counting the output layer as
	// llama.cpp does (its block count + 1).
	Layers int
	// GPULayers is how many of them are on devices: the last blocks, and
	// the output layer once every block is.
	GPULayers int
	// Devices are the names of the devices the model may use.
	Devices []string
}

// offloaded describes params' offload for a model of blocks layers.
func offloaded(params *C.struct_llama_model_params, blocks int) Offloaded {
	// As llama.cpp counts them (llama_model::load_tensors): the last n
	// blocks, the output layer past n_layer; a negative count offloads
	// none before llama.cpp's 2026 releases and all since.
	o := Offloaded{Layers: blocks + 1}
	n := int(params.n_gpu_layers)
	if n < 0 && negativeLayersAll {
		n = o.Layers
	}
	n = min(max(n, 0), o.Layers)
	if params.devices == nil {
		return o // not reached: apply always sets a list
	}
	for p := params.devices; *p != nil; p = (*C.ggml_backend_dev_t)(unsafe.Add(unsafe.Pointer(p), unsafe.Sizeof(*p))) {
		o.Devices = append(o.Devices, C.GoString(C.ggml_backend_dev_name(*p)))
	}
	if len(o.Devices) > 0 {
		o.GPULayers = n
	}
	return o
}

// Offloaded says where the model's layers are.
func (m *Model) Offloaded() Offloaded {
	o := m.offload
	o.Devices = slices.Clone(o.Devices)
	return o
}

// apply sets params' offload fields for o. The pointers it stores live
// until c.free.
func (o Offload) apply(params *C.struct_llama_model_params, c *cOffload) error {
	params.n_gpu_layers = 0
	params.load_mtp = C.bool(o.MTP)
	all := devices()
	if !o.Enabled() || (len(all) == 0 && o.GPULayers == GPULayersAuto && len(o.Devices) == 0) {
		// No device at all: llama.cpp would otherwise place the input
		// and output layers' buffers by the devices it sees.
		c.devs = (*C.ggml_backend_dev_t)(C.calloc(1, C.size_t(unsafe.Sizeof(C.ggml_backend_dev_t(nil)))))
		params.devices = c.devs
		return nil
	}
	if len(all) == 0 {
		return fmt.Errorf("llama: %s asked on a GPU, but no backend library loaded a device (backends: %s)", o.layersText(), backendsText())
	}
	var use []C.ggml_backend_dev_t
	if len(o.Devices) == 0 {
		use = all
	} else {
		for _, name := range o.Devices {
			i := slices.IndexFunc(all, func(d C.ggml_backend_dev_t) bool {
				return C.GoString(C.ggml_backend_dev_name(d)) == name
			})
			if i < 0 {
				return fmt.Errorf("llama: no device %q (devices: %s)", name, deviceNames(all))
			}
			use = append(use, all[i])
		}
	}
	maxDev := int(C.llama_max_devices())
	if len(use) > maxDev {
		return fmt.Errorf("llama: %d devices; this build offloads to at most %d", len(use), maxDev)
	}
	c.devs = (*C.ggml_backend_dev_t)(C.calloc(C.size_t(len(use)+1), C.size_t(unsafe.Sizeof(C.ggml_backend_dev_t(nil)))))
	copy(unsafe.Slice(c.devs, len(use)+1), use)
	params.devices = c.devs
	switch o.GPULayers {
	case GPULayersAuto, GPULayersAll:
		// llama.cpp's default: every layer and the output layer (999
		// before its 2026 releases, -1 since). Fitting lowers only this
		// value.
		params.n_gpu_layers = C.llama_model_default_params().n_gpu_layers
	default:
		if o.GPULayers < 0 {
			return fmt.Errorf("llama: %d GPU layers", o.GPULayers)
		}
		params.n_gpu_layers = C.int32_t(o.GPULayers)
	}
	mode, err := ParseSplitMode(string(o.SplitMode))
	if err != nil {
		return fmt.Errorf("llama: %w", err)
	}
	switch mode {
	case SplitNone:
		params.split_mode = C.LLAMA_SPLIT_MODE_NONE
	case SplitRow:
		params.split_mode = C.LLAMA_SPLIT_MODE_ROW
	default:
		params.split_mode = C.LLAMA_SPLIT_MODE_LAYER
	}
	if o.MainGPU < 0 || o.MainGPU >= len(use) {
		return fmt.Errorf("llama: main GPU %d of %d devices", o.MainGPU, len(use))
	}
	params.main_gpu = C.int32_t(o.MainGPU)
	// llama.cpp reads llama_max_devices() proportions.
	c.split = (*C.float)(C.calloc(C.size_t(maxDev), C.size_t(unsafe.Sizeof(C.float(0)))))
	if len(o.TensorSplit) > 0 {
		if len(o.TensorSplit) > len(use) {
			return fmt.Errorf("llama: %d tensor-split proportions for %d devices", len(o.TensorSplit), len(use))
		}
		sum := float32(0)
		for _, v := range o.TensorSplit {
			if !(v >= 0) || v > 1e6 {
				return fmt.Errorf("llama: tensor-split proportion %v", v)
			}
			sum += v
		}
		if sum <= 0 {
			return errors.New("llama: tensor-split proportions sum to 0")
		}
		copy(unsafe.Slice((*float32)(unsafe.Pointer(c.split)), maxDev), o.TensorSplit)
	}
	params.tensor_split = c.split
	return nil
}

// layersText names o's GPU layers as -ngl takes them.
func (o Offload) layersText() string {
	switch o.GPULayers {
	case GPULayersAuto:
		return "layers"
	case GPULayersAll:
		return "all layers"
	}
	return fmt.Sprintf("%d layers", o.GPULayers)
}

// backendsText lists the backend libraries found, for an error.
func backendsText() string {
	backendMu.Lock()
	defer backendMu.Unlock()
	if len(backends) == 0 {
		return "no libggml-*.so found"
	}
	var parts []string
	for _, b := range backends {
		if b.Err != nil {
			parts = append(parts, b.Path+" (did not load)")
		} else {
			parts = append(parts, b.Path+" ("+b.Name+", no device)")
		}
	}
	return strings.Join(parts, ", ")
}

// deviceNames lists the devices' names, comma-separated.
func deviceNames(devs []C.ggml_backend_dev_t) string {
	if len(devs) == 0 {
		return "none"
	}
	names := make([]string, len(devs))
	for i, d := range devs {
		names[i] = C.GoString(C.ggml_backend_dev_name(d))
	}
	return strings.Join(names, ", ")
}

// DeviceNodes is the number of graph nodes the context's forward passes
// have computed into device memory (a GPU's buffer, not the host's): 0
// for a model on the CPU. Counted by the eval callback that counts
// passes.
func (c *Context) DeviceNodes() uint64 {
	return uint64(*(*C.uint64_t)(unsafe.Add(unsafe.Pointer(c.passes), unsafe.Sizeof(C.uint64_t(0)))))
}
