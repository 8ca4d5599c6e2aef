package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/llama"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/registry"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/store"
	"github.com/corral-llm/corral/toolcall"
)

// modelFlag is one -m value: FILE or ID=FILE.
type modelFlag struct{ id, path string }

// modelFlags collects repeated -m flags.
type modelFlags []modelFlag

// String lists the files given (flag.Value).
func (m *modelFlags) String() string {
	var parts []string
	for _, f := range *m {
		parts = append(parts, f.path)
	}
	return strings.Join(parts, ",")
}

// Set adds one -m value (flag.Value): a file, or ID=FILE. A value that
// names an existing file is a file, "=" or not.
func (m *modelFlags) Set(v string) error {
	id, path, ok := strings.Cut(v, "=")
	if _, err := os.Stat(v); err == nil || !ok {
		id, path, ok = "", v, false
	}
	if path == "" || (ok && id == "") {
		return fmt.Errorf("want FILE or ID=FILE, got %q", v)
	}
	*m = append(*m, modelFlag{id: id, path: path})
	return nil
}

// checkPooling refuses a pooling name engine.New would refuse, before
// any model loads.
func checkPooling(name string) error {
	switch name {
	case "", "none", "mean", "cls", "last":
		return nil
	}
	return fmt.Errorf("%q: want none, mean, cls or last", name)
}

// cacheTypeFlag is -ctk or -ctv: a KV cache type's name, refused at
// parse time (with the names) when llama.ParseCacheType does not know it.
type cacheTypeFlag struct{ dst *string }

// String is the type's name (flag.Value); the zero flag's is f16.
func (f cacheTypeFlag) String() string {
	if f.dst == nil || *f.dst == "" {
		return "f16"
	}
	return *f.dst
}

// Set checks and sets the name (flag.Value).
func (f cacheTypeFlag) Set(s string) error {
	if _, err := llama.ParseCacheType(s); err != nil {
		return err
	}
	*f.dst = s
	return nil
}

// checkCacheTypes refuses, before any model loads, the KV cache types of
// cfg that no model can run with its flash attention setting (a
// quantized V without it); what depends on the model (its head size) is
// checked as it loads.
func checkCacheTypes(cfg engine.Config) error {
	k, err := llama.ParseCacheType(cfg.CacheTypeK)
	if err != nil {
		return fmt.Errorf("--cache-type-k: %w", err)
	}
	v, err := llama.ParseCacheType(cfg.CacheTypeV)
	if err != nil {
		return fmt.Errorf("--cache-type-v: %w", err)
	}
	return llama.CheckCacheTypes(k, v, !cfg.NoFlashAttn, 0, 0)
}

// fileID is the id of the model in file path: its name without .gguf.
func fileID(path string) string {
	return strings.TrimSuffix(filepath.Base(path), ".gguf")
}

// modelConfig is the YAML file of --config:
//
//	models:
//	  - id: stories          # optional: the file name without .gguf
//	    path: /models/stories260K.gguf
//	    ctx_size: 2048       # optional, like -c
//	    ctx_per_request: 2048 # optional, like --ctx-per-request
//	    parallel: 2          # optional, like -np
//	    kv_per_slot: true    # optional, like --kv-per-slot
//	    cache_ram: 64        # optional MiB, like --cache-ram
//	    cache_disk: /var/cache/corral  # optional, like --cache-disk ("" turns it off)
//	    cache_disk_size: 8GiB  # optional, like --cache-disk-size
//	    pooling: mean        # optional, like --pooling
//	    cache_type_k: q8_0   # optional, like -ctk
//	    cache_type_v: q8_0   # optional, like -ctv
//	    chat_template: chatml
//	    chat_template_file: qwen3.jinja  # or this, like --chat-template-file
//	    chat_template_kwargs: {enable_thinking: false}  # like --chat-template-kwargs
//	    chat_template_mutable: true  # optional, like --chat-template-mutable
//	    tool_format: hermes  # optional, like --tool-format
//	    reasoning_format: none # optional, like --reasoning-format
//	    reasoning_budget: 512  # optional, like --reasoning-budget
//	    keep_alive: -1       # optional, overrides the server's
//	    n_gpu_layers: 20     # optional, like -ngl (a count, auto or all)
//	    device: Vulkan0      # optional, like --device
//	    split_mode: layer    # optional, like --split-mode
//	    tensor_split: 3,1    # optional, like --tensor-split
//	    main_gpu: 0          # optional, like --main-gpu
type modelConfig struct {
	Models []struct {
		ID                  string         `yaml:"id"`
		Path                string         `yaml:"path"`
		CtxSize             *int           `yaml:"ctx_size"`
		CtxPerRequest       *int           `yaml:"ctx_per_request"`
		Parallel            *int           `yaml:"parallel"`
		KVPerSlot           *bool          `yaml:"kv_per_slot"`
		CacheRAM            *int64         `yaml:"cache_ram"`
		CacheDisk           *string        `yaml:"cache_disk"`
		CacheDiskSize       string         `yaml:"cache_disk_size"`
		Pooling             string         `yaml:"pooling"`
		CacheTypeK          string         `yaml:"cache_type_k"`
		CacheTypeV          string         `yaml:"cache_type_v"`
		ChatTemplate        string         `yaml:"chat_template"`
		ChatTemplateFile    string         `yaml:"chat_template_file"`
		ChatTemplateKwargs  map[string]any `yaml:"chat_template_kwargs"`
		ChatTemplateMutable *bool          `yaml:"chat_template_mutable"`
		ToolFormat          string         `yaml:"tool_format"`
		Reasoning           string         `yaml:"reasoning_format"`
		Budget              *int           `yaml:"reasoning_budget"`
		KeepAlive           string         `yaml:"keep_alive"`
		GPULayers           string         `yaml:"n_gpu_layers"`
		Device              string         `yaml:"device"`
		SplitMode           string         `yaml:"split_mode"`
		TensorSplit         string         `yaml:"tensor_split"`
		MainGPU             *int           `yaml:"main_gpu"`
	} `yaml:"models"`
}

// modelSpecs gathers the models to serve from -m flags, a models
// directory and a config file, in that order; base (its engine, chat
// template, template variables and tool-call format) configures each
// unless the config file says otherwise (a model's chat_template_kwargs
// override base's one by one).
func modelSpecs(base registry.Spec, flags modelFlags, dir, configPath string) ([]registry.Spec, error) {
	var specs []registry.Spec
	add := func(id, path string) *registry.Spec {
		s := base
		s.ID, s.Engine.ModelPath, s.Engine.Name = id, path, id
		specs = append(specs, s)
		return &specs[len(specs)-1]
	}
	for _, f := range flags {
		// A file, or the id of a model in the model directory.
		path, err := store.Resolve(store.DefaultDir(), f.path)
		if err != nil {
			return nil, fmt.Errorf("-m: %w", err)
		}
		id := f.id
		if id == "" {
			id = fileID(path)
		}
		add(id, path)
	}
	if len(flags) == 0 && dir == "" && configPath == "" {
		// No model named: every model pulled into the model directory.
		dir = store.DefaultDir()
		if paths, _ := filepath.Glob(filepath.Join(dir, "*.gguf")); len(paths) == 0 {
			return nil, fmt.Errorf("no model: give -m FILE, --models-dir DIR or --config FILE, or corral pull one into %s", dir)
		}
	}
	if dir != "" {
		paths, err := filepath.Glob(filepath.Join(dir, "*.gguf"))
		if err != nil {
			return nil, fmt.Errorf("--models-dir: %w", err)
		}
		paths = slices.DeleteFunc(paths, func(p string) bool { return strings.HasPrefix(filepath.Base(p), ".") })
		if len(paths) == 0 {
			return nil, fmt.Errorf("--models-dir %s: no .gguf files", dir)
		}
		slices.Sort(paths)
		for _, p := range paths {
			add(fileID(p), p)
		}
	}
	if configPath != "" {
		b, err := os.ReadFile(configPath)
		if err != nil {
			return nil, err
		}
		var c modelConfig
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil {
			return nil, fmt.Errorf("--config %s: %w", configPath, err)
		}
		for i, m := range c.Models {
			where := fmt.Sprintf("--config %s: models[%d]", configPath, i)
			if m.Path == "" {
				return nil, fmt.Errorf("%s: no path", where)
			}
			if !filepath.IsAbs(m.Path) {
				m.Path = filepath.Join(filepath.Dir(configPath), m.Path)
			}
			id := m.ID
			if id == "" {
				id = fileID(m.Path)
			}
			s := add(id, m.Path)
			if m.CtxSize != nil {
				s.Engine.CtxSize = *m.CtxSize
			}
			if m.CtxPerRequest != nil {
				s.Engine.CtxPerRequest = *m.CtxPerRequest
			}
			if m.Parallel != nil {
				s.Engine.Parallel = *m.Parallel
			}
			if m.KVPerSlot != nil {
				s.Engine.KVPerSlot = *m.KVPerSlot
			}
			if m.CacheRAM != nil {
				s.Engine.HostCacheBytes = *m.CacheRAM << 20
			}
			if m.CacheDisk != nil {
				dir := *m.CacheDisk
				if dir != "" && !filepath.IsAbs(dir) {
					dir = filepath.Join(filepath.Dir(configPath), dir)
				}
				if err := checkCacheDisk(dir); err != nil {
					return nil, fmt.Errorf("%s: cache_disk: %w", where, err)
				}
				s.Engine.DiskCacheDir = dir
			}
			if m.CacheDiskSize != "" {
				n, err := diskCacheSize(m.CacheDiskSize)
				if err != nil {
					return nil, fmt.Errorf("%s: cache_disk_size %w", where, err)
				}
				s.Engine.DiskCacheBytes = n
			}
			if m.Pooling != "" {
				if err := checkPooling(m.Pooling); err != nil {
					return nil, fmt.Errorf("%s: pooling: %w", where, err)
				}
				s.Engine.Pooling = m.Pooling
			}
			for _, c := range []struct {
				key, val string
				dst      *string
			}{{"cache_type_k", m.CacheTypeK, &s.Engine.CacheTypeK}, {"cache_type_v", m.CacheTypeV, &s.Engine.CacheTypeV}} {
				if c.val == "" {
					continue
				}
				if _, err := llama.ParseCacheType(c.val); err != nil {
					return nil, fmt.Errorf("%s: %s: %w", where, c.key, err)
				}
				*c.dst = c.val
			}
			if m.ChatTemplateKwargs != nil {
				kw, err := mergeKwargs(s.ChatTemplateKwargs, m.ChatTemplateKwargs)
				if err != nil {
					return nil, fmt.Errorf("%s: chat_template_kwargs: %w", where, err)
				}
				s.ChatTemplateKwargs = kw
			}
			if m.ChatTemplateMutable != nil {
				s.ChatTemplateMutable = *m.ChatTemplateMutable
			}
			switch {
			case m.ChatTemplate != "" && m.ChatTemplateFile != "":
				return nil, fmt.Errorf("%s: give chat_template or chat_template_file, not both", where)
			case m.ChatTemplate != "":
				if _, err := chat.Lookup(m.ChatTemplate); err != nil {
					return nil, fmt.Errorf("%s: %w", where, err)
				}
				s.ChatTemplate, s.ChatTemplateFile = m.ChatTemplate, ""
			case m.ChatTemplateFile != "":
				if !filepath.IsAbs(m.ChatTemplateFile) {
					m.ChatTemplateFile = filepath.Join(filepath.Dir(configPath), m.ChatTemplateFile)
				}
				if err := checkTemplateFile(m.ChatTemplateFile, s.ChatTemplateKwargs, s.ChatTemplateMutable); err != nil {
					return nil, fmt.Errorf("%s: chat_template_file %w", where, err)
				}
				s.ChatTemplate, s.ChatTemplateFile = "", m.ChatTemplateFile
			}
			if m.ToolFormat != "" {
				if _, err := toolcall.Lookup(m.ToolFormat); err != nil {
					return nil, fmt.Errorf("%s: %w", where, err)
				}
				s.ToolFormat = m.ToolFormat
			}
			if m.Reasoning != "" {
				if err := checkReasoningFormat(m.Reasoning); err != nil {
					return nil, fmt.Errorf("%s: reasoning_format: %w", where, err)
				}
				s.ReasoningFormat = m.Reasoning
			}
			if b := m.Budget; b != nil {
				if *b < -1 {
					return nil, fmt.Errorf("%s: reasoning_budget %d: want -1 (no limit) or >= 0", where, *b)
				}
				s.ReasoningBudget = nil
				if *b >= 0 {
					s.ReasoningBudget = b
				}
			}
			if m.GPULayers != "" || m.Device != "" || m.SplitMode != "" || m.TensorSplit != "" || m.MainGPU != nil {
				if err := configOffload(&s.Engine.Offload, m.GPULayers, m.Device, m.SplitMode, m.TensorSplit, m.MainGPU); err != nil {
					return nil, fmt.Errorf("%s: %w", where, err)
				}
			}
			if m.KeepAlive != "" {
				d, err := serving.ParseKeepAlive(m.KeepAlive)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", where, err)
				}
				s.KeepAlive = &d
			}
		}
	}
	for _, s := range specs {
		if _, err := os.Stat(s.Engine.ModelPath); err != nil {
			return nil, fmt.Errorf("model %s: %w", s.ID, err)
		}
		if err := checkCacheTypes(s.Engine); err != nil {
			return nil, fmt.Errorf("model %s: %w", s.ID, err)
		}
	}
	return specs, nil
}

// checkTemplateFile reads and parses a chat template file and renders a
// plain conversation with it and the template variables kwargs (a JSON
// object), or, for a template that renders only requests that offer
// tools, one offering a sample tool (see chat.Template.Check), so that a
// broken one is refused before any model loads; the error names the file
// and the template line. mutable lets the template change lists in
// place; without it one that does is refused, the error naming
// --chat-template-mutable.
func checkTemplateFile(path string, kwargs json.RawMessage, mutable bool) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	kw, err := model.ParseKwargs(kwargs)
	if err != nil {
		return err
	}
	opt := chat.Options{Kwargs: map[string]any{}, Mutable: mutable}
	for k, v := range kw {
		opt.Kwargs[k] = v
	}
	tmpl, err := chat.Parse(string(src))
	if err == nil {
		_, err = tmpl.Check(opt)
	}
	if errors.Is(err, chat.ErrMutates) {
		return fmt.Errorf("%s: %w: allow it with --chat-template-mutable (chat_template_mutable: true in --config)", path, err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// mergeKwargs sets the variables of over (a model's chat_template_kwargs
// in --config) on base (a JSON object, --chat-template-kwargs), and
// returns the result as a JSON object.
func mergeKwargs(base json.RawMessage, over map[string]any) (json.RawMessage, error) {
	kw, err := model.ParseKwargs(base)
	if err != nil {
		return nil, err
	}
	if kw == nil {
		kw = map[string]json.RawMessage{}
	}
	for k, v := range over {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		kw[k] = b
	}
	out, err := json.Marshal(kw)
	if err != nil {
		return nil, err
	}
	if _, err := model.ParseKwargs(out); err != nil {
		return nil, err
	}
	return out, nil
}
