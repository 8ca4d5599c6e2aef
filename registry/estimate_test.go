package registry

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/llama"
)

// TestEstimateFromFileCacheTypes: the budget's need follows a spec's KV
// cache types: with q8_0 keys and values it is the F16 need less the KV
// bytes quantization saves (a head of 64 values: 68 bytes against 128),
// and a combination llama.cpp cannot run is an error naming the flag.
func TestEstimateFromFileCacheTypes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv64.gguf")
	shape := gguf.Shape{Embd: 256, Layers: 2, Heads: 4, HeadsKV: 2, FF: 512, Vocab: 512, Ctx: 512, Type: "q8_0"}
	if err := gguf.WriteSynthetic(path, shape, 1); err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{ModelPath: path, CtxSize: 4096, Parallel: 4}
	f16, err := EstimateFromFile(Spec{ID: "m", Engine: cfg})
	if err != nil {
		t.Fatal(err)
	}
	cfg.CacheTypeK, cfg.CacheTypeV = "q8_0", "q8_0"
	q8, err := EstimateFromFile(Spec{ID: "m", Engine: cfg})
	if err != nil {
		t.Fatal(err)
	}
	// 4,096 cells × 2 layers × 2 KV heads × (K + V) × (128 - 68) bytes.
	if saved := int64(4096 * 2 * 2 * 2 * (128 - 68)); f16-q8 != saved {
		t.Errorf("need with q8_0 KV %d, with f16 %d: saves %d, want %d", q8, f16, f16-q8, saved)
	}
	cfg.NoFlashAttn = true
	if _, err := EstimateFromFile(Spec{ID: "m", Engine: cfg}); !errors.Is(err, llama.ErrCacheType) {
		t.Errorf("q8_0 V without flash attention: %v, want ErrCacheType", err)
	}
}
