package e2e

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testsynth"
	"github.com/corral-llm/corral/registry"
)

// modelModalities is what GET /v1/models tells of a model's media.
type modelModalities struct {
	ID           string `json:"id"`
	State        string `json:"state"`
	MemoryBytes  int64  `json:"memory_bytes"`
	Architecture struct {
		Input  []string `json:"input_modalities"`
		Output []string `json:"output_modalities"`
	} `json:"architecture"`
	Capabilities []string `json:"capabilities"`
}

// TestModalities serves a model with a vision projector, one with an
// audio projector and the vision one's text model without its projector,
// and checks what each API says they take: /v1/models
// (architecture.input_modalities and capabilities, as llama-server's
// router and server give them) from the projectors' headers before any
// load and from the engines after; /props's modalities (loading the
// model); /api/show's capabilities ("vision", Ollama's). The budget
// counts the projector: the vision model reserves its estimate more than
// the same text model without it.
func TestModalities(t *testing.T) {
	dir := t.TempDir()
	gemma, vision := testsynth.Projector(t, dir, "gemma3")
	qwen, audio := testsynth.Projector(t, dir, "qwen2a")
	specOf := func(id, model, proj string) registry.Spec {
		return registry.Spec{ID: id, Engine: engine.Config{ModelPath: model, MMProj: proj, Name: id, Threads: 1, Parallel: 1}}
	}
	ms := startModels(t, registry.Config{KeepAlive: -1},
		specOf("seeing", gemma, vision), specOf("hearing", qwen, audio), specOf("text", gemma, ""))
	want := map[string]struct {
		inputs        []string
		multimodal    bool
		vision, audio bool
	}{
		"seeing":  {[]string{"text", "image"}, true, true, false},
		"hearing": {[]string{"text", "audio"}, true, false, true},
		"text":    {[]string{"text"}, false, false, false},
	}
	models := func(state string) map[string]modelModalities {
		t.Helper()
		var l struct{ Data []modelModalities }
		ms.Get(t, "/v1/models", &l)
		out := map[string]modelModalities{}
		for _, m := range l.Data {
			out[m.ID] = m
			w := want[m.ID]
			caps := []string{"completion"}
			if w.multimodal {
				caps = append(caps, "multimodal")
			}
			if m.State != state || !slices.Equal(m.Architecture.Input, w.inputs) || !slices.Equal(m.Architecture.Output, []string{"text"}) || !slices.Equal(m.Capabilities, caps) {
				t.Errorf("/v1/models, %s: %+v; want %s, input_modalities %q, output_modalities [text], capabilities %q", m.ID, m, state, w.inputs, caps)
			}
		}
		if len(out) != 3 {
			t.Fatalf("/v1/models: %+v", l.Data)
		}
		return out
	}
	before := models("unloaded")
	pmd, err := gguf.ReadMetadata(vision)
	if err != nil {
		t.Fatal(err)
	}
	proj, err := engine.EstimateProjector(pmd)
	if err != nil {
		t.Fatal(err)
	}
	if d := before["seeing"].MemoryBytes - before["text"].MemoryBytes; d != proj {
		t.Errorf("memory_bytes with the projector %d more than without, want its estimate %d", d, proj)
	}

	for id, w := range want {
		var props struct {
			Modalities  map[string]bool `json:"modalities"`
			MediaMarker string          `json:"media_marker"`
		}
		ms.Get(t, "/props?model="+id, &props)
		if m := props.Modalities; len(m) != 3 || m["vision"] != w.vision || m["audio"] != w.audio || m["video"] || props.MediaMarker != "<__media__>" {
			t.Errorf("/props?model=%s: modalities %v, media_marker %q; want vision %v, audio %v, video false, <__media__>", id, m, props.MediaMarker, w.vision, w.audio)
		}
		resp, b := ms.Post(t, "/api/show", map[string]string{"model": id})
		var show struct {
			Capabilities []string `json:"capabilities"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(b, &show) != nil {
			t.Fatalf("/api/show %s: %d %s", id, resp.StatusCode, b)
		}
		caps := []string{"completion"}
		if w.vision {
			caps = append(caps, "vision")
		}
		if !slices.Equal(show.Capabilities, caps) {
			t.Errorf("/api/show %s: capabilities %q, want %q", id, show.Capabilities, caps)
		}
	}
	models("loaded")
}
