package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
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

// parseSpecType sets sp's draft sources from a --spec-type value: a
// comma-separated list of ngram (each request's own tokens), draft-simple
// (llama-server's name for a draft model's drafts: sp.Model, which it
// needs) and draft-mtp (the model's own multi-token prediction head), or
// none. A draft model given drafts unless none is.
func parseSpecType(value string, sp *engine.Speculation) error {
	sp.Ngram, sp.MTP = false, false
	for _, name := range strings.Split(value, ",") {
		switch strings.TrimSpace(name) {
		case "ngram":
			sp.Ngram = true
		case "draft-mtp":
			if sp.Model != "" {
				return fmt.Errorf("%q: draft-mtp drafts with the model's own head, not with a draft model (--spec-draft-model)", value)
			}
			sp.MTP = true
		case "draft-simple":
			if sp.Model == "" {
				return fmt.Errorf("%q: draft-simple needs a draft model (--spec-draft-model)", value)
			}
		case "none":
			if value != "none" {
				return fmt.Errorf("%q: none goes alone", value)
			}
			if sp.Model != "" {
				return fmt.Errorf("%q: speculation is off, but a draft model is given (--spec-draft-model)", value)
			}
		default:
			return fmt.Errorf("%q: want ngram, draft-simple (with --spec-draft-model) or draft-mtp, or ngram with either, or none", value)
		}
	}
	return nil
}

// checkSpeculation refuses sizes of speculation out of bounds (0 is the
// engine's default).
func checkSpeculation(sp engine.Speculation) error {
	if sp.DraftMax < 0 || sp.DraftMax > 32 || sp.DraftMin < 0 || sp.DraftMin > max(sp.DraftMax, 1) || sp.NgramMax < 0 || sp.NgramMax == 1 || sp.NgramMax > 64 || sp.MaxDecoding < 0 {
		return errors.New("spec_draft_n_max (--spec-draft-n-max) is 1 to 32, --spec-draft-n-min at most that, --spec-ngram-n 2 to 64, --spec-max-decoding 0 or more")
	}
	if sp.NgramDraftMax < 0 || sp.NgramDraftMax > 64 || sp.NgramDraftMax > 0 && sp.NgramDraftMax < sp.DraftMax {
		return errors.New("spec_ngram_draft_max (--spec-ngram-draft-max) is --spec-draft-n-max to 64")
	}
	if !(sp.PMin >= 0 && sp.PMin <= 1) {
		return errors.New("spec_draft_p_min (--spec-draft-p-min) is 0 to 1")
	}
	if sp.Model != "" {
		if _, err := os.Stat(sp.Model); err != nil {
			return fmt.Errorf("spec_draft_model (--spec-draft-model): %w", err)
		}
	}
	return nil
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
//	    mmproj: gemma3.mmproj.gguf  # optional, like --mmproj ("": none, no discovery)
//	    spec_type: ngram     # optional, like --spec-type
//	    spec_draft_n_max: 16 # optional, like --spec-draft-n-max
//	    spec_ngram_draft_max: 32 # optional, like --spec-ngram-draft-max
//	    spec_draft_model: small.gguf # optional, like --spec-draft-model ("": none)
//	    spec_draft_p_min: 0.75 # optional, like --spec-draft-p-min
//	    spec_recurrent: true # optional, like --spec-recurrent
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
		MMProj              *string        `yaml:"mmproj"`
		SpecType            string         `yaml:"spec_type"`
		SpecDraftMax        *int           `yaml:"spec_draft_n_max"`
		SpecNgramDraftMax   *int           `yaml:"spec_ngram_draft_max"`
		SpecDraftModel      *string        `yaml:"spec_draft_model"`
		SpecDraftPMin       *float64       `yaml:"spec_draft_p_min"`
		SpecRecurrent       *bool          `yaml:"spec_recurrent"`
	} `yaml:"models"`
}

// projectorFlags are --mmproj and --no-mmproj.
type projectorFlags struct {
	// file is --mmproj: the projector of the one model given with -m.
	file string
	// off is --no-mmproj: no projector is looked for beside the models
	// (findProjector); a model's mmproj in --config still loads.
	off bool
	// log is where a projector found beside a model is told (nil:
	// slog.Default).
	log *slog.Logger
}

// modelSpecs gathers the models to serve from -m flags, a models
// directory and a config file, in that order; base (its engine, chat
// template, template variables and tool-call format) configures each
// unless the config file says otherwise (a model's chat_template_kwargs
// override base's one by one). Each model's multimodal projector is
// proj.file for the -m model, its mmproj in the config file, or else
// (unless proj.off) the one findProjector finds beside it; each is
// checked to be a projector (checkProjector).
func modelSpecs(base registry.Spec, flags modelFlags, dir, configPath string, proj projectorFlags) ([]registry.Spec, error) {
	if proj.log == nil {
		proj.log = slog.Default()
	}
	var specs []registry.Spec
	// chosen: the specs whose projector was given (or refused), by index.
	chosen := map[int]bool{}
	add := func(id, path string) *registry.Spec {
		s := base
		s.ID, s.Engine.ModelPath, s.Engine.Name = id, path, id
		specs = append(specs, s)
		return &specs[len(specs)-1]
	}
	if proj.file != "" {
		if len(flags) != 1 || dir != "" || configPath != "" {
			return nil, errors.New("--mmproj is the projector of the one model given with -m; give each model of --config its mmproj")
		}
		if err := checkProjector(proj.file); err != nil {
			return nil, fmt.Errorf("--mmproj %w", err)
		}
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
		if err := notProjector(path); err != nil {
			return nil, fmt.Errorf("-m %w", err)
		}
		add(id, path).Engine.MMProj = proj.file
		chosen[len(specs)-1] = proj.file != ""
	}
	if len(flags) == 0 && dir == "" && configPath == "" {
		// No model named: every model pulled into the model directory.
		dir = store.DefaultDir()
		if paths, _ := modelFiles(dir); len(paths) == 0 {
			return nil, fmt.Errorf("no model: give -m FILE, --models-dir DIR or --config FILE, or corral pull one into %s", dir)
		}
	}
	if dir != "" {
		paths, err := modelFiles(dir)
		if err != nil {
			return nil, fmt.Errorf("--models-dir: %w", err)
		}
		if len(paths) == 0 {
			return nil, fmt.Errorf("--models-dir %s: no .gguf files (projectors are not models)", dir)
		}
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
			if err := notProjector(m.Path); err != nil {
				return nil, fmt.Errorf("%s: path %w", where, err)
			}
			s := add(id, m.Path)
			if m.MMProj != nil {
				p := *m.MMProj
				if p != "" && !filepath.IsAbs(p) {
					p = filepath.Join(filepath.Dir(configPath), p)
				}
				if p != "" {
					if err := checkProjector(p); err != nil {
						return nil, fmt.Errorf("%s: mmproj %w", where, err)
					}
				}
				s.Engine.MMProj = p
				chosen[len(specs)-1] = true
			}
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
			if m.SpecDraftModel != nil {
				p := *m.SpecDraftModel
				if p != "" && !filepath.IsAbs(p) {
					p = filepath.Join(filepath.Dir(configPath), p)
				}
				s.Engine.Speculate.Model = p
			}
			if m.SpecType != "" {
				if err := parseSpecType(m.SpecType, &s.Engine.Speculate); err != nil {
					return nil, fmt.Errorf("%s: spec_type: %w", where, err)
				}
			}
			if m.SpecDraftMax != nil {
				s.Engine.Speculate.DraftMax = *m.SpecDraftMax
			}
			if m.SpecNgramDraftMax != nil {
				s.Engine.Speculate.NgramDraftMax = *m.SpecNgramDraftMax
			}
			if m.SpecDraftPMin != nil {
				s.Engine.Speculate.PMin = *m.SpecDraftPMin
			}
			if m.SpecRecurrent != nil {
				s.Engine.Speculate.Recurrent = *m.SpecRecurrent
			}
			if err := checkSpeculation(s.Engine.Speculate); err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
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
	for i := range specs {
		s := &specs[i]
		if _, err := os.Stat(s.Engine.ModelPath); err != nil {
			return nil, fmt.Errorf("model %s: %w", s.ID, err)
		}
		if err := checkCacheTypes(s.Engine); err != nil {
			return nil, fmt.Errorf("model %s: %w", s.ID, err)
		}
		if !chosen[i] && !proj.off {
			s.Engine.MMProj = findProjector(s.Engine.ModelPath, proj.log.With("model", s.ID))
		}
	}
	return specs, nil
}

// modelFiles are the models of dir (--models-dir): its .gguf files, not
// hidden, that are not multimodal projectors (isProjectorFile), sorted.
func modelFiles(dir string) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.gguf"))
	if err != nil {
		return nil, err
	}
	paths = slices.DeleteFunc(paths, func(p string) bool { return strings.HasPrefix(filepath.Base(p), ".") || isProjectorFile(p) })
	slices.Sort(paths)
	return paths, nil
}

// isProjectorFile reports whether the GGUF file at path is a multimodal
// projector, not a model: named as one (gguf.IsProjectorName), or with a
// header whose general.architecture is "clip". A file whose header cannot
// be read is not one (loading it as a model says what is wrong).
func isProjectorFile(path string) bool {
	if gguf.IsProjectorName(filepath.Base(path)) {
		return true
	}
	md, err := gguf.ReadMetadata(path)
	return err == nil && md.IsProjector()
}

// notProjector refuses a model file (-m, a path in --config) that is a
// multimodal projector by its header, naming --mmproj. A file whose
// header cannot be read passes: its load says what is wrong.
func notProjector(path string) error {
	if md, err := gguf.ReadMetadata(path); err == nil && md.IsProjector() {
		return fmt.Errorf("%s is a multimodal projector (general.architecture %q), not a model: give it with --mmproj (mmproj in --config)", path, md.Architecture)
	}
	return nil
}

// checkProjector checks that path is a multimodal projector: an existing
// GGUF file whose general.architecture is "clip" (the error starts with
// the path, for the caller to prefix with its flag).
func checkProjector(path string) error {
	md, err := gguf.ReadMetadata(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: no such file", path)
		}
		return fmt.Errorf("%s: not a GGUF file corral can read: %w", path, err)
	}
	if !md.IsProjector() {
		return fmt.Errorf("%s: not a multimodal projector: its general.architecture is %q, not %q", path, md.Architecture, gguf.ProjectorArchitecture)
	}
	return nil
}

// findProjector returns the multimodal projector beside the model at
// path, or "" when there is none it can be sure of. It tries, in the
// model's folder, for MODEL.gguf:
//
//  1. MODEL.mmproj.gguf (what corral synth --mmproj writes);
//  2. mmproj-MODEL.gguf;
//  3. the one file named mmproj*.gguf, only when the folder holds no
//     other model than this one (a Hugging Face repository's layout:
//     one model, one projector). With several models beside it, or
//     several projectors (F16 and F32, say), none is taken: a projector
//     made for another model would fail to load with this one, or worse,
//     load and mislead it.
//
// A candidate must be a projector by its header (checkProjector); one
// that is not is passed over with a warning. What it finds, or why it
// takes none of several, it logs.
func findProjector(path string, log *slog.Logger) string {
	dir, stem := filepath.Dir(path), strings.TrimSuffix(filepath.Base(path), ".gguf")
	take := func(p, rule string) bool {
		if _, err := os.Stat(p); err != nil {
			return false
		}
		if err := checkProjector(p); err != nil {
			log.Warn("projector beside the model passed over", "err", err)
			return false
		}
		log.Info("projector found beside the model", "mmproj", p, "rule", rule)
		return true
	}
	for _, c := range []struct{ name, rule string }{
		{stem + gguf.ProjectorSuffix, "MODEL" + gguf.ProjectorSuffix},
		{"mmproj-" + stem + ".gguf", "mmproj-MODEL.gguf"},
	} {
		if p := filepath.Join(dir, c.name); take(p, c.rule) {
			return p
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	self, err := os.Stat(path)
	if err != nil {
		return ""
	}
	var projectors []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(strings.ToLower(name), ".gguf") {
			continue
		}
		p := filepath.Join(dir, name)
		if strings.HasPrefix(strings.ToLower(name), "mmproj") {
			projectors = append(projectors, p)
			continue
		}
		if fi, err := os.Stat(p); err == nil && os.SameFile(fi, self) {
			continue
		}
		if !isProjectorFile(p) {
			return "" // another model: the projector may be its
		}
	}
	switch len(projectors) {
	case 0:
		return ""
	case 1:
		if take(projectors[0], "the one mmproj*.gguf beside the one model") {
			return projectors[0]
		}
		return ""
	}
	for i, p := range projectors {
		projectors[i] = filepath.Base(p)
	}
	log.Info("several projectors beside the model, none taken: give one with --mmproj (mmproj in --config)", "dir", dir, "projectors", strings.Join(projectors, ","))
	return ""
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
