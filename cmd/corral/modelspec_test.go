package main

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/registry"
)

// touch writes an empty file (modelSpecs checks that model files exist,
// not what they hold).
func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestModelSpecs(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"a.gguf", "b.gguf", "notes.txt"} {
		touch(t, filepath.Join(dir, f))
	}
	models := filepath.Join(dir, "models")
	if err := os.Mkdir(models, 0o755); err != nil {
		t.Fatal(err)
	}
	touch(t, filepath.Join(models, "c.gguf"))
	config := filepath.Join(dir, "models.yaml")
	if err := os.WriteFile(config, []byte(`
models:
  - path: models/c.gguf
    ctx_size: 2048
    parallel: 2
    kv_per_slot: true
    cache_ram: 64
    cache_disk: kv
    cache_disk_size: 8GiB
    pooling: mean
    cache_type_k: q8_0
    cache_type_v: q4_0
    chat_template: chatml
    tool_format: qwen3-coder
    reasoning_format: none
    reasoning_budget: 64
    keep_alive: -1
    spec_type: ngram
    spec_draft_n_max: 16
    spec_ngram_draft_max: 24
    spec_draft_model: a.gguf
    spec_draft_p_min: 0.75
    spec_recurrent: true
  - id: c10
    path: `+filepath.Join(models, "c.gguf")+`
    keep_alive: 10m
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var flags modelFlags
	for _, v := range []string{filepath.Join(dir, "a.gguf"), "bee=" + filepath.Join(dir, "b.gguf")} {
		if err := flags.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	base := engine.Config{Parallel: 4, CtxSize: 0, HostCacheBytes: 1 << 30}
	specs, err := modelSpecs(registry.Spec{Engine: base}, flags, dir, config, projectorFlags{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range specs {
		ids = append(ids, s.ID)
	}
	if got := strings.Join(ids, " "); got != "a bee a b c c10" {
		t.Fatalf("ids %q", got)
	}
	// -m a and the directory's a are one id twice: the registry refuses
	// that (registry.New), not modelSpecs.
	c := specs[4]
	if c.Engine.ModelPath != filepath.Join(models, "c.gguf") || c.Engine.CtxSize != 2048 || c.Engine.Parallel != 2 || !c.Engine.KVPerSlot ||
		c.Engine.HostCacheBytes != 64<<20 || c.Engine.Pooling != "mean" || c.ChatTemplate != "chatml" || c.KeepAlive == nil || *c.KeepAlive != -1 || c.Engine.Name != "c" {
		t.Errorf("config model: %+v", c)
	}
	if c.Engine.DiskCacheDir != filepath.Join(dir, "kv") || c.Engine.DiskCacheBytes != 8<<30 {
		t.Errorf("config model's disk cache: %q, %d bytes; want %q (relative to the config file), 8 GiB", c.Engine.DiskCacheDir, c.Engine.DiskCacheBytes, filepath.Join(dir, "kv"))
	}
	if fi, err := os.Stat(filepath.Join(dir, "kv")); err != nil || !fi.IsDir() {
		t.Errorf("cache_disk not created: %v", err)
	}
	if c.Engine.CacheTypeK != "q8_0" || c.Engine.CacheTypeV != "q4_0" {
		t.Errorf("config model's cache types: %q, %q", c.Engine.CacheTypeK, c.Engine.CacheTypeV)
	}
	if c.ToolFormat != "qwen3-coder" || c.ReasoningFormat != "none" || c.ReasoningBudget == nil || *c.ReasoningBudget != 64 {
		t.Errorf("config model's formats: %+v", c)
	}
	if sp := c.Engine.Speculate; !sp.Ngram || sp.DraftMax != 16 || sp.NgramDraftMax != 24 || sp.Model != filepath.Join(dir, "a.gguf") || sp.PMin != 0.75 || !sp.Recurrent || specs[5].Engine.Speculate.Ngram || specs[5].Engine.Speculate.Recurrent || specs[5].Engine.Speculate.Model != "" {
		t.Errorf("config model's speculation: %+v; the next's %+v", sp, specs[5].Engine.Speculate)
	}
	if c10 := specs[5]; c10.Engine.Pooling != "" || c10.Engine.CacheTypeK != "" || c10.Engine.Parallel != 4 || c10.Engine.KVPerSlot || c10.Engine.HostCacheBytes != 1<<30 || *c10.KeepAlive != 10*time.Minute || c10.ReasoningBudget != nil {
		t.Errorf("defaults under a config model: %+v", c10)
	}

	for name, body := range map[string]string{
		"unknown field":        "models:\n  - path: models/c.gguf\n    ctx: 10\n",
		"no path":              "models:\n  - id: x\n",
		"bad template":         "models:\n  - path: models/c.gguf\n    chat_template: nonesuch\n",
		"bad keep_alive":       "models:\n  - path: models/c.gguf\n    keep_alive: soon\n",
		"bad pooling":          "models:\n  - path: models/c.gguf\n    pooling: max\n",
		"missing file":         "models:\n  - path: nowhere.gguf\n",
		"bad tool_format":      "models:\n  - path: models/c.gguf\n    tool_format: xml\n",
		"bad reasoning_format": "models:\n  - path: models/c.gguf\n    reasoning_format: cot\n",
		"bad reasoning_budget": "models:\n  - path: models/c.gguf\n    reasoning_budget: -2\n",
		"bad cache_disk_size":  "models:\n  - path: models/c.gguf\n    cache_disk_size: 0\n",
		"cache_disk a file":    "models:\n  - path: models/c.gguf\n    cache_disk: a.gguf\n",
		"bad cache_type_k":     "models:\n  - path: models/c.gguf\n    cache_type_k: q8\n",
		"bad spec_type":        "models:\n  - path: models/c.gguf\n    spec_type: eagle\n",
		"bad spec_draft_n_max": "models:\n  - path: models/c.gguf\n    spec_draft_n_max: 33\n",
		"spec_ngram_draft_max below spec_draft_n_max": "models:\n  - path: models/c.gguf\n    spec_draft_n_max: 16\n    spec_ngram_draft_max: 8\n",
		"bad spec_draft_p_min":                        "models:\n  - path: models/c.gguf\n    spec_draft_p_min: 1.5\n",
		"no spec_draft_model":                         "models:\n  - path: models/c.gguf\n    spec_draft_model: nowhere.gguf\n",
	} {
		bad := filepath.Join(dir, "bad.yaml")
		if err := os.WriteFile(bad, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := modelSpecs(registry.Spec{Engine: base}, nil, "", bad, projectorFlags{}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A quantized V needs flash attention, whoever asks for it.
	noFA := base
	noFA.NoFlashAttn = true
	if _, err := modelSpecs(registry.Spec{Engine: noFA}, nil, "", config, projectorFlags{}); err == nil || !strings.Contains(err.Error(), "model c: unsupported KV cache type: --cache-type-v q4_0 needs flash attention") {
		t.Errorf("q4_0 V without flash attention: %v", err)
	}
	if err := flags.Set("=x.gguf"); err == nil {
		t.Error("-m =x.gguf accepted")
	}
	if _, err := modelSpecs(registry.Spec{Engine: base}, nil, t.TempDir(), "", projectorFlags{}); err == nil || !strings.Contains(err.Error(), "no .gguf") {
		t.Errorf("empty models dir: %v", err)
	}
}

// TestModelSpecsTemplates: a model's chat_template_file (relative to the
// config file) and chat_template replace the server's template, and its
// chat_template_kwargs are set over the server's one by one.
func TestModelSpecsTemplates(t *testing.T) {
	dir := t.TempDir()
	touch(t, filepath.Join(dir, "a.gguf"))
	if err := os.WriteFile(filepath.Join(dir, "mine.jinja"), []byte("{% for m in messages %}{{ m.content }}{% endfor %}"), 0o644); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "models.yaml")
	if err := os.WriteFile(config, []byte(`
models:
  - id: file
    path: a.gguf
    chat_template_file: mine.jinja
    chat_template_kwargs: {enable_thinking: true, extra: {depth: [1, 2]}}
  - id: builtin
    path: a.gguf
    chat_template: llama3
  - id: server
    path: a.gguf
`), 0o644); err != nil {
		t.Fatal(err)
	}
	base := registry.Spec{ChatTemplateFile: "/server.jinja", ChatTemplateKwargs: json.RawMessage(`{"enable_thinking": false, "reasoning_effort": "low"}`)}
	specs, err := modelSpecs(base, nil, "", config, projectorFlags{})
	if err != nil {
		t.Fatal(err)
	}
	file, builtin, server := specs[0], specs[1], specs[2]
	if file.ChatTemplateFile != filepath.Join(dir, "mine.jinja") || file.ChatTemplate != "" {
		t.Errorf("chat_template_file: %q %q", file.ChatTemplateFile, file.ChatTemplate)
	}
	var kw map[string]any
	if err := json.Unmarshal(file.ChatTemplateKwargs, &kw); err != nil {
		t.Fatal(err)
	}
	if kw["enable_thinking"] != true || kw["reasoning_effort"] != "low" || kw["extra"] == nil || len(kw) != 3 {
		t.Errorf("merged kwargs %s", file.ChatTemplateKwargs)
	}
	if builtin.ChatTemplate != "llama3" || builtin.ChatTemplateFile != "" {
		t.Errorf("chat_template: %q %q", builtin.ChatTemplate, builtin.ChatTemplateFile)
	}
	if server.ChatTemplateFile != "/server.jinja" || string(server.ChatTemplateKwargs) != string(base.ChatTemplateKwargs) {
		t.Errorf("a model without template settings: %+v", server)
	}
	for name, body := range map[string]string{
		"both":          "models:\n  - path: a.gguf\n    chat_template: chatml\n    chat_template_file: mine.jinja\n",
		"missing file":  "models:\n  - path: a.gguf\n    chat_template_file: nowhere.jinja\n",
		"reserved":      "models:\n  - path: a.gguf\n    chat_template_kwargs: {tools: []}\n",
		"not a mapping": "models:\n  - path: a.gguf\n    chat_template_kwargs: [1]\n",
	} {
		bad := filepath.Join(dir, "bad.yaml")
		if err := os.WriteFile(bad, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := modelSpecs(registry.Spec{}, nil, "", bad, projectorFlags{}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// Kimi K2's template appends to a list: chat_template_mutable allows
	// it, for its model.
	kimi := filepath.Join(testmodel.TemplatesDir(), "Kimi-K2-Instruct.jinja")
	mutable := filepath.Join(dir, "mutable.yaml")
	if err := os.WriteFile(mutable, []byte("models:\n  - path: a.gguf\n    chat_template_file: "+kimi+"\n    chat_template_mutable: true\n  - path: a.gguf\n    id: b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	specs, err = modelSpecs(registry.Spec{}, nil, "", mutable, projectorFlags{})
	if err != nil || !specs[0].ChatTemplateMutable || specs[1].ChatTemplateMutable {
		t.Errorf("chat_template_mutable: %v, %+v", err, specs)
	}
	if err := os.WriteFile(mutable, []byte("models:\n  - path: a.gguf\n    chat_template_file: "+kimi+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := modelSpecs(registry.Spec{}, nil, "", mutable, projectorFlags{}); err == nil || !strings.Contains(err.Error(), "--chat-template-mutable (chat_template_mutable: true in --config)") {
		t.Errorf("Kimi K2's template without chat_template_mutable: %v", err)
	}
}

func TestMemoryBudget(t *testing.T) {
	total, err := physicalMemory()
	if err != nil || total <= 0 {
		t.Fatalf("physical memory %d, %v", total, err)
	}
	half, err := memoryBudget("50%", slog.Default())
	if err != nil || half != total/2 && half != total/2+1 && half != total/2-1 {
		t.Errorf("50%% of %d = %d, %v", total, half, err)
	}
	if n, err := memoryBudget("2GiB", slog.Default()); err != nil || n != 2<<30 {
		t.Errorf("2GiB = %d, %v", n, err)
	}
}

// TestParseSpecType: --spec-type takes ngram, draft-simple (with a draft
// model) or draft-mtp (without one), ngram with either, comma-separated,
// or none (without a draft model).
func TestParseSpecType(t *testing.T) {
	for _, tc := range []struct {
		value, model   string
		ngram, mtp, ok bool
	}{
		{"ngram", "", true, false, true},
		{"ngram", "d.gguf", true, false, true},
		{"draft-simple", "d.gguf", false, false, true},
		{"ngram,draft-simple", "d.gguf", true, false, true},
		{"draft-simple", "", false, false, false},
		{"draft-mtp", "", false, true, true},
		{"ngram,draft-mtp", "", true, true, true},
		{"draft-mtp", "d.gguf", false, false, false},
		{"none", "", false, false, true},
		{"none", "d.gguf", false, false, false},
		{"ngram,none", "", false, false, false},
		{"eagle", "", false, false, false},
	} {
		sp := engine.Speculation{Ngram: !tc.ngram, MTP: !tc.mtp, Model: tc.model}
		err := parseSpecType(tc.value, &sp)
		if (err == nil) != tc.ok || tc.ok && (sp.Ngram != tc.ngram || sp.MTP != tc.mtp) {
			t.Errorf("%q with draft model %q: ngram %v, mtp %v, %v; want ngram %v, mtp %v, ok %v", tc.value, tc.model, sp.Ngram, sp.MTP, err, tc.ngram, tc.mtp, tc.ok)
		}
	}
}
