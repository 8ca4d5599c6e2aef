package openai

import (
	"net/http"
	"os"
	"time"

	"github.com/corral-llm/corral/gate"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/serving"
)

// modelEntry is one element of GET /v1/models.
type modelEntry struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// State is "loaded", "loading", "unloading" or "unloaded" (corral's
	// extension, as are the fields below).
	State string `json:"state"`
	// MemoryBytes is the memory the model reserves in the budget while
	// loaded, estimated from its GGUF file.
	MemoryBytes int64 `json:"memory_bytes"`
	// DeviceMemoryBytes is the memory it reserves on each GPU the same
	// way, by device name; absent for a model on the host only.
	DeviceMemoryBytes map[string]int64 `json:"device_memory_bytes,omitempty"`
	// Requests are the requests holding the model now.
	Requests int `json:"requests"`
	// ExpiresAt is when the idle model unloads, absent when it is not
	// scheduled to.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Error is why its last load failed.
	Error string `json:"error,omitempty"`
	// Architecture is what the model takes and gives, in the fields
	// llama-server's router lists for each model (loaded or not): text,
	// and the media its projector takes.
	Architecture modelArchitecture `json:"architecture"`
	// Capabilities are llama-server's: "completion", and "multimodal"
	// for a model with a projector.
	Capabilities []string `json:"capabilities"`
	// Meta describes a loaded model in llama-server's fields.
	Meta *modelMeta `json:"meta,omitempty"`
}

// modelArchitecture is llama-server's router's architecture of a model:
// input_modalities "text", then "image" and "audio" as its projector
// takes them; output_modalities "text".
type modelArchitecture struct {
	InputModalities  []string `json:"input_modalities"`
	OutputModalities []string `json:"output_modalities"`
}

// newModelArchitecture describes a model that takes images (vision)
// and audio as told, and whether it has a projector at all.
func newModelArchitecture(projector, vision, audio bool) (modelArchitecture, []string) {
	a := modelArchitecture{InputModalities: []string{"text"}, OutputModalities: []string{"text"}}
	if vision {
		a.InputModalities = append(a.InputModalities, "image")
	}
	if audio {
		a.InputModalities = append(a.InputModalities, "audio")
	}
	caps := []string{"completion"}
	if projector {
		caps = append(caps, "multimodal")
	}
	return a, caps
}

// projectorInputs reads which media the projector at path takes from its
// header, as llama-server's router does for a model it has not loaded;
// none when there is no projector or its header cannot be read.
func projectorInputs(path string) (projector, vision, audio bool) {
	if path == "" {
		return false, false, false
	}
	md, err := gguf.ReadMetadata(path)
	if err != nil || !md.IsProjector() {
		return false, false, false
	}
	vision, audio = md.ProjectorInputs()
	return true, vision, audio
}

type modelMeta struct {
	Architecture string `json:"architecture"`
	NCtxTrain    int    `json:"n_ctx_train"`
	NCtx         int    `json:"n_ctx"` // per request
	NVocab       int    `json:"n_vocab"`
	// CacheTypeK and CacheTypeV are the KV cache's key and value types
	// (-ctk and -ctv: "f16", "q8_0", ...).
	CacheTypeK string `json:"cache_type_k"`
	CacheTypeV string `json:"cache_type_v"`
	// Speculative names the draft sources the model speculates with
	// (--spec-type: "ngram"); empty when it does not (corral's extension).
	Speculative []string `json:"speculative"`
	// KV is the KV cache as it is now (corral's extension).
	KV *kvPool `json:"kv,omitempty"`
	// Offload is where its layers are, as /props gives it (corral's
	// extension).
	Offload offload `json:"offload"`
}

// offload is a loaded model's GPU offload: n_gpu_layers of its n_layers
// (the output layer counted) on devices.
type offload struct {
	GPULayers int      `json:"n_gpu_layers"`
	Layers    int      `json:"n_layers"`
	Devices   []string `json:"devices"`
}

// kvPool describes a loaded model's KV cache: the pool of cells its slots
// share, and the host tier below it.
type kvPool struct {
	// Kind is what the model keeps of a sequence: "attention",
	// "sliding-window", "recurrent" or "hybrid".
	Kind string `json:"kind"`
	// Bytes is the memory llama.cpp allocated for it: the KV cells of
	// every kind and the recurrent states.
	Bytes  int64 `json:"bytes"`
	Cells  int   `json:"cells"`  // in all
	Active int   `json:"active"` // held for running requests
	Cached int   `json:"cached"` // held only by idle slots' cached prefixes
	Free   int   `json:"free"`
	// Host is the host-memory tier (--cache-ram), Disk the disk tier
	// below it (--cache-disk; zeros without one).
	Host kvTier `json:"host"`
	Disk kvTier `json:"disk"`
	// Checkpoints of recurrent state (recurrent and hybrid models).
	Checkpoints kvTier `json:"checkpoints"`
}

// kvTier is one tier of saved prefixes below the pool.
type kvTier struct {
	Bytes   int64  `json:"bytes"`
	Entries int    `json:"entries"`
	Saved   uint64 `json:"saved"`
	Hits    uint64 `json:"hits"` // prefixes restored from it
}

// Models serves GET /v1/models: every model the server knows, loaded or
// not. A caller that is not admin is not told why a load failed (the
// cause names files).
func Models(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	admin := gate.FromContext(r.Context()).Admin()
	var out []modelEntry
	for _, st := range c.Registry().Status() {
		m := modelEntry{ID: st.ID, Object: "model", OwnedBy: "corral", State: string(st.State), MemoryBytes: st.Need, DeviceMemoryBytes: st.Devices, Requests: st.Requests}
		if fi, err := os.Stat(st.Path); err == nil {
			m.Created = fi.ModTime().Unix()
		}
		if !st.ExpiresAt.IsZero() {
			m.ExpiresAt = &st.ExpiresAt
		}
		if st.Err != nil {
			m.Error = st.Err.Error()
			if !admin {
				m.Error = serving.LoadFailed(st.ID)
			}
		}
		var projector, vision, audio bool
		if st.Model != nil {
			info := st.Model.Info()
			projector, vision, audio = info.Vision || info.Audio, info.Vision, info.Audio
		} else if spec, err := c.Registry().Spec(st.ID); err == nil {
			projector, vision, audio = projectorInputs(spec.Engine.MMProj)
		}
		m.Architecture, m.Capabilities = newModelArchitecture(projector, vision, audio)
		if st.Model != nil {
			info := st.Model.Info()
			m.Created = info.Created.Unix()
			m.Meta = &modelMeta{Architecture: info.Architecture, NCtxTrain: info.CtxTrain, NCtx: info.CtxPerRequest, NVocab: info.VocabSize,
				CacheTypeK: info.CacheTypeK, CacheTypeV: info.CacheTypeV, Speculative: append([]string{}, info.Speculation...),
				Offload: offload{GPULayers: info.GPULayers, Layers: info.Layers, Devices: info.Devices}}
			if m.Meta.Offload.Devices == nil {
				m.Meta.Offload.Devices = []string{}
			}
			if e := st.Model.Engine(); e != nil {
				s := e.Stats()
				m.Meta.KV = &kvPool{
					Kind: string(info.MemoryKind), Bytes: info.Memory.Context,
					Cells: s.KVCellsTotal, Active: s.KVCellsActive, Cached: s.KVCellsUsed - s.KVCellsActive, Free: s.KVCellsTotal - s.KVCellsUsed,
					Host:        kvTier{Bytes: s.HostCacheBytes, Entries: s.HostCacheEntries, Saved: s.HostCacheSaved, Hits: s.HostCacheRestored},
					Disk:        kvTier{Bytes: s.DiskCacheBytes, Entries: s.DiskCacheEntries, Saved: s.DiskCacheSaved, Hits: s.DiskCacheHits},
					Checkpoints: kvTier{Bytes: s.CheckpointBytes, Entries: s.Checkpoints, Saved: s.CheckpointsSaved, Hits: s.CheckpointHits},
				}
			}
		}
		out = append(out, m)
	}
	serving.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": out})
}
