package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/internal/testsynth"
)

// TestServeMemoryKinds: corral serve loads a synthetic model of each
// memory kind from one --config, answers llama.cpp's /completion with
// llama-server's greedy text for it (testmodel.ArchGoldens, detokenized
// by the server), twice (the second time from its cache or a
// checkpoint), and /v1/models tells each model's memory kind and the
// bytes llama.cpp allocated for it.
func TestServeMemoryKinds(t *testing.T) {
	dir := t.TempDir()
	kinds := map[string]string{"llama": "attention", "gemma3": "sliding-window", "mamba": "recurrent", "qwen35": "hybrid"}
	var config strings.Builder
	config.WriteString("models:\n")
	for arch := range kinds {
		fmt.Fprintf(&config, "  - id: %s\n    path: %s\n", arch, testsynth.Arch(t, dir, arch))
	}
	path := filepath.Join(dir, "models.yaml")
	if err := os.WriteFile(path, []byte(config.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	url := startServe(t, "--config", path, "-c", "1024", "-np", "2", "--cache-ram", "16")
	post := func(route string, body any, out any) {
		t.Helper()
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Post(url+route, "application/json", strings.NewReader(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d %s", route, b, resp.StatusCode, data)
		}
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s: %v: %s", route, err, data)
		}
	}
	p := testmodel.ArchPrompts[0]
	for arch := range kinds {
		var want struct{ Content string }
		post("/detokenize", map[string]any{"model": arch, "tokens": testmodel.ArchGoldens[arch].Alone[0]}, &want)
		for _, turn := range []string{"first", "again"} {
			var got struct{ Content string }
			post("/completion", map[string]any{"model": arch, "prompt": p.Prompt, "n_predict": p.N, "temperature": 0, "ignore_eos": true}, &got)
			if got.Content != want.Content {
				t.Errorf("%s, %s: %q, want llama-server's %q", arch, turn, got.Content, want.Content)
			}
		}
	}
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var models struct {
		Data []struct {
			ID   string
			Meta *struct {
				KV *struct {
					Kind  string
					Bytes int64
				}
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&models); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, m := range models.Data {
		kind, ok := kinds[m.ID]
		if !ok {
			continue
		}
		seen++
		if m.Meta == nil || m.Meta.KV == nil || m.Meta.KV.Kind != kind || m.Meta.KV.Bytes <= 0 {
			t.Errorf("%s: meta %+v, want kv.kind %q and its bytes", m.ID, m.Meta, kind)
		}
	}
	if seen != len(kinds) {
		t.Errorf("/v1/models lists %d of the %d models: %+v", seen, len(kinds), models.Data)
	}
}
