package llama_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/llama"
)

// TestCacheTypes: every name parses back to its type, whose block (values
// and bytes) is what the linked ggml's type traits say, so that the
// memory estimate sizes the cache as llama.cpp allocates it; an unknown
// name's error lists the names.
func TestCacheTypes(t *testing.T) {
	names := llama.CacheTypeNames()
	want := []string{"f16", "f32", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"}
	if !slices.Equal(names, want) {
		t.Fatalf("names %q, want %q", names, want)
	}
	for _, name := range names {
		ct, err := llama.ParseCacheType(name)
		if err != nil {
			t.Fatal(err)
		}
		elems, size, ggmlName := ct.GGMLTraits()
		if ct.String() != name || ggmlName != name {
			t.Errorf("%s: String %q, ggml's name %q", name, ct, ggmlName)
		}
		if ct.BlockSize() != elems || ct.RowBytes(elems) != size {
			t.Errorf("%s: block of %d values in %d bytes, ggml says %d in %d", name, ct.BlockSize(), ct.RowBytes(ct.BlockSize()), elems, size)
		}
		if ct.Quantized() != (elems > 1) {
			t.Errorf("%s: Quantized %v with blocks of %d", name, ct.Quantized(), elems)
		}
	}
	if ct, err := llama.ParseCacheType(""); err != nil || ct != llama.CacheF16 {
		t.Errorf(`ParseCacheType(""): %v, %v; want f16`, ct, err)
	}
	if got := llama.CacheQ8_0.RowBytes(64); got != 68 {
		t.Errorf("q8_0 RowBytes(64) = %d, want 68", got)
	}
	_, err := llama.ParseCacheType("q8")
	if err == nil || !strings.Contains(err.Error(), strings.Join(want, ", ")) {
		t.Errorf(`ParseCacheType("q8"): %v, want an error listing the names`, err)
	}
}

// TestCheckCacheTypes: a quantized V without flash attention, and a
// quantized type whose block does not divide the heads, are refused
// naming the flag; what llama.cpp runs passes.
func TestCheckCacheTypes(t *testing.T) {
	for _, tc := range []struct {
		k, v         llama.CacheType
		fa           bool
		headK, headV int
		want         string // "" when allowed
	}{
		{llama.CacheF16, llama.CacheF16, false, 8, 8, ""},
		{llama.CacheQ8_0, llama.CacheQ8_0, true, 64, 64, ""},
		{llama.CacheQ8_0, llama.CacheF16, false, 64, 64, ""}, // a quantized K needs no flash attention
		{llama.CacheQ4_0, llama.CacheQ4_0, true, 0, 0, ""},   // no attention: nothing to check
		{llama.CacheF16, llama.CacheQ8_0, false, 64, 64, "--cache-type-v q8_0 needs flash attention"},
		{llama.CacheQ4_0, llama.CacheF16, true, 16, 16, "--cache-type-k q4_0: the model's attention heads are 16 values wide"},
		{llama.CacheF16, llama.CacheIQ4NL, true, 64, 48, "--cache-type-v iq4_nl: the model's attention heads are 48 values wide"},
		{llama.CacheType(99), llama.CacheF16, true, 64, 64, "--cache-type-k"},
	} {
		err := llama.CheckCacheTypes(tc.k, tc.v, tc.fa, tc.headK, tc.headV)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v/%v fa=%v heads %d/%d: %v", tc.k, tc.v, tc.fa, tc.headK, tc.headV, err)
		case tc.want != "" && (!errors.Is(err, llama.ErrCacheType) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v/%v fa=%v heads %d/%d: %v, want ErrCacheType with %q", tc.k, tc.v, tc.fa, tc.headK, tc.headV, err, tc.want)
		}
	}
}

// TestNewContextRefusesCacheTypes: NewContext refuses, with
// ErrCacheType, a q8_0 cache for stories260K (heads 8 wide): with flash
// attention off llama.cpp would create the context and address the
// heads wrongly (its 4 KV heads make rows of 32 values, whole blocks).
// The head sizes are read from the model.
func TestNewContextRefusesCacheTypes(t *testing.T) {
	m, err := llama.LoadModel(t.Context(), testmodel.Path(t, testmodel.Stories260K))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if k, v := m.HeadSizes(); k != 8 || v != 8 {
		t.Fatalf("HeadSizes %d, %d; want 8, 8 (64 wide, 8 heads)", k, v)
	}
	for _, p := range []llama.ContextParams{
		{NCtx: 256, NSeqMax: 1, Threads: 1, TypeK: llama.CacheQ8_0, NoFlashAttn: true},
		{NCtx: 256, NSeqMax: 1, Threads: 1, TypeV: llama.CacheQ8_0},
	} {
		if c, err := llama.NewContext(m, p); !errors.Is(err, llama.ErrCacheType) {
			if c != nil {
				c.Close()
			}
			t.Errorf("K %v V %v: err %v, want ErrCacheType", p.TypeK, p.TypeV, err)
		}
	}
	// Float types of any width run.
	c, err := llama.NewContext(m, llama.ContextParams{NCtx: 256, NSeqMax: 1, Threads: 1, TypeK: llama.CacheF32, TypeV: llama.CacheBF16})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}
