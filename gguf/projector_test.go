package gguf

import (
	"path/filepath"
	"testing"
)

// TestIsProjectorName: mmproj*.gguf and *.mmproj.gguf, in any case, are
// projectors' names; models' names, even with mmproj inside, are not.
func TestIsProjectorName(t *testing.T) {
	for name, want := range map[string]bool{
		"mmproj-model-f16.gguf":            true,
		"mmproj-google_gemma-3-4b-it.gguf": true,
		"MMPROJ-F16.GGUF":                  true,
		"mmproj.gguf":                      true,
		"gemma3.mmproj.gguf":               true,
		"Gemma3.MMProj.gguf":               true,
		"gemma3.gguf":                      false,
		"gemma-3-4b-mmproj-f16.gguf":       false, // its header tells
		"mmproj-f16.gguf.part":             false,
		"mmproj.txt":                       false,
	} {
		if got := IsProjectorName(name); got != want {
			t.Errorf("IsProjectorName(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestProjectorInputs: a synthetic projector says which media it takes
// in clip.has_vision_encoder and clip.has_audio_encoder; a model is no
// projector and takes none.
func TestProjectorInputs(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		kind          string
		vision, audio bool
	}{{"gemma3", true, false}, {"qwen2a", false, true}} {
		p := filepath.Join(dir, tc.kind+".gguf")
		if err := WriteSyntheticProjector(p, tc.kind, 64, 1); err != nil {
			t.Fatal(err)
		}
		md, err := ReadMetadata(p)
		if err != nil {
			t.Fatal(err)
		}
		v, a := md.ProjectorInputs()
		if !md.IsProjector() || v != tc.vision || a != tc.audio {
			t.Errorf("%s: projector %v, vision %v, audio %v; want true, %v, %v", tc.kind, md.IsProjector(), v, a, tc.vision, tc.audio)
		}
	}
	p := filepath.Join(dir, "model.gguf")
	if err := WriteSynthetic(p, Shapes["tiny"], 1); err != nil {
		t.Fatal(err)
	}
	md, err := ReadMetadata(p)
	if err != nil {
		t.Fatal(err)
	}
	if v, a := md.ProjectorInputs(); md.IsProjector() || v || a {
		t.Errorf("a model: projector %v, vision %v, audio %v", md.IsProjector(), v, a)
	}
}
