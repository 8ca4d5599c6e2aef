package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/internal/testsynth"
	"github.com/corral-llm/corral/registry"
)

// writeProjector writes a synthetic gemma3 projector (a "clip" GGUF) at
// path.
func writeProjector(t *testing.T, path string) {
	t.Helper()
	if err := gguf.WriteSyntheticProjector(path, "gemma3", 256, 1); err != nil {
		t.Fatal(err)
	}
}

// writeTextModel writes a synthetic text model (a "llama" GGUF) at path.
func writeTextModel(t *testing.T, path string) {
	t.Helper()
	if err := gguf.WriteSynthetic(path, gguf.Shapes["tiny"], 1); err != nil {
		t.Fatal(err)
	}
}

// TestFindProjector: discovery beside a model takes MODEL.mmproj.gguf,
// then mmproj-MODEL.gguf, then the one mmproj*.gguf of a folder holding
// no other model; a candidate that is not a "clip" file is passed over
// with a warning, and with another model or another projector in the
// folder nothing is taken. What it takes it logs.
func TestFindProjector(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m.gguf")
	touch(t, model)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	find := func(want, why string) {
		t.Helper()
		logs.Reset()
		if got := findProjector(model, log); got != want {
			t.Errorf("%s: found %q, want %q\nlog: %s", why, got, want, logs.String())
		}
	}
	find("", "an empty folder")

	lone := filepath.Join(dir, "mmproj-F16.gguf")
	writeProjector(t, lone)
	find(lone, "the one mmproj*.gguf beside the one model")
	if !strings.Contains(logs.String(), "projector found beside the model") || !strings.Contains(logs.String(), "mmproj="+lone) {
		t.Errorf("log of a projector found: %s", logs.String())
	}
	prefixed := filepath.Join(dir, "mmproj-m.gguf")
	writeProjector(t, prefixed)
	find(prefixed, "mmproj-MODEL.gguf before a lone mmproj*.gguf")
	suffixed := filepath.Join(dir, "m.mmproj.gguf")
	writeProjector(t, suffixed)
	find(suffixed, "MODEL.mmproj.gguf first")

	// MODEL.mmproj.gguf that is a model, not a projector: passed over.
	writeTextModel(t, suffixed)
	find(prefixed, "a text model named MODEL.mmproj.gguf")
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), `not a multimodal projector: its general.architecture is \"llama\"`) {
		t.Errorf("log of a candidate passed over: %s", logs.String())
	}
	os.Remove(suffixed)
	os.Remove(prefixed)

	// Two projectors of no name: none taken, the log says why.
	writeProjector(t, filepath.Join(dir, "mmproj-F32.gguf"))
	find("", "two mmproj*.gguf")
	if !strings.Contains(logs.String(), "several projectors beside the model") {
		t.Errorf("log of several projectors: %s", logs.String())
	}
	os.Remove(filepath.Join(dir, "mmproj-F32.gguf"))
	find(lone, "one mmproj*.gguf again")

	// Another model beside it: the lone projector may be that one's.
	touch(t, filepath.Join(dir, "other.gguf"))
	find("", "a lone mmproj*.gguf beside two models")
	// Its own projector still counts: named after it.
	writeProjector(t, filepath.Join(dir, "mmproj-m.gguf"))
	find(filepath.Join(dir, "mmproj-m.gguf"), "mmproj-MODEL.gguf beside two models")
	os.Remove(filepath.Join(dir, "mmproj-m.gguf"))
	// A projector (by its header) named like a model is not a model.
	os.Remove(filepath.Join(dir, "other.gguf"))
	writeProjector(t, filepath.Join(dir, "vision.gguf"))
	find(lone, "a lone mmproj*.gguf beside a projector named like a model")
	// A projector named for another model is not a model either.
	writeProjector(t, filepath.Join(dir, "other.mmproj.gguf"))
	find(lone, "a lone mmproj*.gguf beside another model's projector")
}

// TestModelSpecsProjector: --mmproj sets the -m model's projector,
// mmproj in --config a model's (relative to the config file; "" none),
// else each model gets the projector found beside it unless --no-mmproj;
// a file that is no projector, a missing one, --mmproj with several
// models and a projector given as a model are refused, naming the flag.
// --models-dir leaves projectors out.
func TestModelSpecsProjector(t *testing.T) {
	dir := t.TempDir()
	model, found := filepath.Join(dir, "gemma.gguf"), filepath.Join(dir, "gemma.mmproj.gguf")
	touch(t, model)
	writeProjector(t, found)
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	given := filepath.Join(sub, "other-projector.gguf")
	writeProjector(t, given)
	text := filepath.Join(sub, "text.gguf")
	writeTextModel(t, text)
	mflags := func(paths ...string) modelFlags {
		var f modelFlags
		for _, p := range paths {
			if err := f.Set(p); err != nil {
				t.Fatal(err)
			}
		}
		return f
	}
	quiet := slog.New(slog.DiscardHandler)
	specs := func(flags modelFlags, dir, config string, proj projectorFlags) []registry.Spec {
		t.Helper()
		proj.log = quiet
		s, err := modelSpecs(registry.Spec{Engine: engine.Config{}}, flags, dir, config, proj)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := specs(mflags(model), "", "", projectorFlags{}); s[0].Engine.MMProj != found {
		t.Errorf("-m: projector %q, want the one found beside it, %q", s[0].Engine.MMProj, found)
	}
	if s := specs(mflags(model), "", "", projectorFlags{file: given}); s[0].Engine.MMProj != given {
		t.Errorf("-m --mmproj: projector %q, want %q", s[0].Engine.MMProj, given)
	}
	if s := specs(mflags(model), "", "", projectorFlags{off: true}); s[0].Engine.MMProj != "" {
		t.Errorf("-m --no-mmproj: projector %q, want none", s[0].Engine.MMProj)
	}

	config := filepath.Join(dir, "models.yaml")
	if err := os.WriteFile(config, []byte(`
models:
  - id: relative
    path: gemma.gguf
    mmproj: sub/other-projector.gguf
  - id: none
    path: gemma.gguf
    mmproj: ""
  - id: found
    path: gemma.gguf
`), 0o644); err != nil {
		t.Fatal(err)
	}
	s := specs(nil, "", config, projectorFlags{})
	if s[0].Engine.MMProj != given || s[1].Engine.MMProj != "" || s[2].Engine.MMProj != found {
		t.Errorf("--config projectors %q %q %q, want %q (relative to the config file), none, %q (found)", s[0].Engine.MMProj, s[1].Engine.MMProj, s[2].Engine.MMProj, given, found)
	}
	s = specs(nil, "", config, projectorFlags{off: true})
	if s[0].Engine.MMProj != given || s[1].Engine.MMProj != "" || s[2].Engine.MMProj != "" {
		t.Errorf("--config --no-mmproj projectors %q %q %q, want %q (given), none, none", s[0].Engine.MMProj, s[1].Engine.MMProj, s[2].Engine.MMProj, given)
	}

	// --models-dir: the projector is no model, and the model finds it.
	s = specs(nil, dir, "", projectorFlags{})
	if len(s) != 1 || s[0].ID != "gemma" || s[0].Engine.MMProj != found {
		t.Errorf("--models-dir: %+v, want gemma alone, with %s", s, found)
	}
	if s := specs(nil, sub, "", projectorFlags{}); len(s) != 1 || s[0].ID != "text" {
		t.Errorf("--models-dir: %+v, want text alone (other-projector.gguf is a projector by its header)", s)
	}
	only := t.TempDir()
	writeProjector(t, filepath.Join(only, "mmproj-x.gguf"))
	if _, err := modelSpecs(registry.Spec{}, nil, only, "", projectorFlags{log: quiet}); err == nil || !strings.Contains(err.Error(), "no .gguf files (projectors are not models)") {
		t.Errorf("--models-dir of projectors alone: %v", err)
	}

	missing := filepath.Join(dir, "nowhere.gguf")
	for _, tt := range []struct {
		why    string
		flags  modelFlags
		dir    string
		config string
		proj   projectorFlags
		want   string
	}{
		{"--mmproj a model", mflags(model), "", "", projectorFlags{file: text}, "--mmproj " + text + `: not a multimodal projector: its general.architecture is "llama", not "clip"`},
		{"--mmproj missing", mflags(model), "", "", projectorFlags{file: missing}, "--mmproj " + missing + ": no such file"},
		{"--mmproj not GGUF", mflags(model), "", "", projectorFlags{file: config}, "--mmproj " + config + ": not a GGUF file corral can read"},
		{"--mmproj with two models", mflags(model, text), "", "", projectorFlags{file: given}, "--mmproj is the projector of the one model given with -m"},
		{"--mmproj with --models-dir", mflags(model), dir, "", projectorFlags{file: given}, "--mmproj is the projector of the one model given with -m"},
		{"-m a projector", mflags(given), "", "", projectorFlags{}, "-m " + given + ` is a multimodal projector (general.architecture "clip"), not a model: give it with --mmproj`},
	} {
		_, err := modelSpecs(registry.Spec{}, tt.flags, tt.dir, tt.config, tt.proj)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error with %q", tt.why, err, tt.want)
		}
	}
	for name, body := range map[string]string{
		"mmproj a model":   "models:\n  - path: gemma.gguf\n    mmproj: sub/text.gguf\n",
		"mmproj missing":   "models:\n  - path: gemma.gguf\n    mmproj: nowhere.gguf\n",
		"path a projector": "models:\n  - path: gemma.mmproj.gguf\n",
	} {
		bad := filepath.Join(dir, "bad.yaml")
		if err := os.WriteFile(bad, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := modelSpecs(registry.Spec{}, nil, "", bad, projectorFlags{log: quiet})
		if err == nil || !strings.Contains(err.Error(), "models[0]") {
			t.Errorf("%s: %v, want an error naming models[0]", name, err)
		}
	}
}

// TestServeProjectorFlags: corral serve refuses --mmproj with
// --no-mmproj, and a --mmproj that is no projector, naming the flag,
// before it loads anything.
func TestServeProjectorFlags(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m.gguf")
	writeTextModel(t, model)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-m", model, "--mmproj", model, "--no-mmproj"}, "--mmproj and --no-mmproj: give one"},
		{[]string{"-m", model, "--mmproj", model}, "--mmproj " + model + ": not a multimodal projector"},
	} {
		err := runServe(context.Background(), tt.args)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("corral serve %q: %v, want an error with %q", tt.args, err, tt.want)
		}
	}
}

// TestServeFindsProjector: a real corral serve given a model whose
// projector lies beside it (as corral synth --mmproj writes them) loads
// it: /props says the model takes images; with --no-mmproj it takes
// none.
func TestServeFindsProjector(t *testing.T) {
	model, _ := testsynth.Projector(t, t.TempDir(), "gemma3")
	modalities := func(url string) map[string]bool {
		t.Helper()
		resp, err := http.Get(url + "/props?model=gemma3")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var props struct{ Modalities map[string]bool }
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &props) != nil {
			t.Fatalf("/props: %d %s", resp.StatusCode, b)
		}
		return props.Modalities
	}
	if m := modalities(startServe(t, "-m", model)); !m["vision"] || m["audio"] || m["video"] {
		t.Errorf("modalities with the projector found: %v, want vision alone", m)
	}
	if m := modalities(startServe(t, "-m", model, "--no-mmproj")); m["vision"] || m["audio"] || m["video"] || len(m) != 3 {
		t.Errorf("modalities with --no-mmproj: %v, want none of vision, audio, video", m)
	}
}

// TestShowProjector: corral show names the projector corral serve would
// find beside a model, and counts it in the memory line.
func TestShowProjector(t *testing.T) {
	model, proj := testsynth.Projector(t, t.TempDir(), "gemma3")
	out, err := exec.Command(testmodel.Binary(t), "show", model).CombinedOutput()
	if err != nil {
		t.Fatalf("corral show: %v\n%s", err, out)
	}
	pmd, err := gguf.ReadMetadata(proj)
	if err != nil {
		t.Fatal(err)
	}
	est, err := engine.EstimateProjector(pmd)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^    projector +`+regexp.QuoteMeta(proj)+`$`).Match(out) || !strings.Contains(string(out), ", projector "+registry.FormatBytes(est)+"; plus --cache-ram") {
		t.Errorf("corral show %s: want the projector %s and its %s in the memory line:\n%s", model, proj, registry.FormatBytes(est), out)
	}
}
