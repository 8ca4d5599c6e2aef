package openai

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/registry"
)

// Tokenize serves POST /tokenize: {"content", "add_special"?,
// "parse_special"?} → {"tokens"}. As in llama-server, special tokens are
// not added unless asked and special-token text is parsed unless refused.
func (a *API) Tokenize(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Content      string `json:"content"`
		AddSpecial   bool   `json:"add_special"`
		ParseSpecial *bool  `json:"parse_special"`
		Model        string `json:"model"`
	}
	if e := decodeBody(r, &body); e != nil {
		WriteError(w, e)
		return
	}
	l, e := a.acquire(r.Context(), body.Model, nil)
	if e != nil {
		WriteError(w, e)
		return
	}
	defer l.Release()
	parse := body.ParseSpecial == nil || *body.ParseSpecial
	toks, err := l.Model().eng.Tokenize(body.Content, body.AddSpecial, parse)
	if err != nil {
		WriteError(w, submitError(err, "content"))
		return
	}
	if toks == nil {
		toks = []int32{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"tokens": toks})
}

// Detokenize serves POST /detokenize: {"tokens"} → {"content"}.
func (a *API) Detokenize(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Tokens []int64 `json:"tokens"`
		Model  string  `json:"model"`
	}
	if e := decodeBody(r, &body); e != nil {
		WriteError(w, e)
		return
	}
	l, e := a.acquire(r.Context(), body.Model, nil)
	if e != nil {
		WriteError(w, e)
		return
	}
	defer l.Release()
	m := l.Model()
	toks, e := parseTokens(body.Tokens, m.info.VocabSize, "tokens")
	if e != nil {
		WriteError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"content": m.eng.Detokenize(toks)})
}

// slot is one element of GET /slots, in llama-server's field names.
type slot struct {
	ID           int    `json:"id"`
	IDTask       int64  `json:"id_task"` // -1 when idle
	NCtx         int    `json:"n_ctx"`
	IsProcessing bool   `json:"is_processing"`
	State        string `json:"state"`
	NCached      int    `json:"n_cached"`
	NDecoded     int    `json:"n_decoded"`
}

// Slots serves GET /slots[?model=ID]: the slots of the model (default:
// the first), an empty list while it is not loaded.
func (a *API) Slots(w http.ResponseWriter, r *http.Request) {
	st, e := a.status(r.URL.Query().Get("model"))
	if e != nil {
		WriteError(w, e)
		return
	}
	if st.Model == nil {
		writeJSON(w, http.StatusOK, []slot{})
		return
	}
	infos, err := st.Model.eng.Slots(r.Context())
	if err != nil {
		WriteError(w, submitError(err, ""))
		return
	}
	out := make([]slot, len(infos))
	for i, s := range infos {
		out[i] = slot{ID: s.ID, IDTask: -1, NCtx: s.NCtx, IsProcessing: s.IsProcessing, State: s.State, NCached: s.CachedTokens, NDecoded: s.Decoded}
		if s.RequestID != 0 {
			out[i].IDTask = int64(s.RequestID)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// status finds the model a monitoring request names (see
// Registry.Acquire for names) without loading it.
func (a *API) status(name string) (registry.Status[*Model], *Error) {
	spec, err := a.models.Spec(name)
	if err != nil {
		return registry.Status[*Model]{}, modelError(err)
	}
	for _, st := range a.models.Status() {
		if st.ID == spec.ID {
			return st, nil
		}
	}
	panic("openai: a spec without a status")
}

// model is one element of GET /v1/models.
type model struct {
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
	// Requests are the requests holding the model now.
	Requests int `json:"requests"`
	// ExpiresAt is when the idle model unloads, absent when it is not
	// scheduled to.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Error is why its last load failed.
	Error string `json:"error,omitempty"`
	// Meta describes a loaded model in llama-server's fields.
	Meta *modelMeta `json:"meta,omitempty"`
}

type modelMeta struct {
	Architecture string `json:"architecture"`
	NCtxTrain    int    `json:"n_ctx_train"`
	NCtx         int    `json:"n_ctx"` // per slot
	NVocab       int    `json:"n_vocab"`
}

// Models serves GET /v1/models: every model the server knows, loaded or
// not.
func (a *API) Models(w http.ResponseWriter, r *http.Request) {
	var out []model
	for _, st := range a.models.Status() {
		m := model{ID: st.ID, Object: "model", OwnedBy: "corral", State: string(st.State), MemoryBytes: st.Need, Requests: st.Requests}
		if fi, err := os.Stat(st.Path); err == nil {
			m.Created = fi.ModTime().Unix()
		}
		if !st.ExpiresAt.IsZero() {
			m.ExpiresAt = &st.ExpiresAt
		}
		if st.Err != nil {
			m.Error = st.Err.Error()
		}
		if st.Model != nil {
			info := st.Model.info
			m.Created = info.Created.Unix()
			m.Meta = &modelMeta{Architecture: info.Architecture, NCtxTrain: info.CtxTrain, NCtx: info.SlotCtx, NVocab: info.VocabSize}
		}
		out = append(out, m)
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": out})
}

// Props serves llama-server's GET /props[?model=ID], which clients read
// for the context size and the number of slots. It loads the model.
func (a *API) Props(w http.ResponseWriter, r *http.Request) {
	l, e := a.acquire(r.Context(), r.URL.Query().Get("model"), nil)
	if e != nil {
		WriteError(w, e)
		return
	}
	defer l.Release()
	m := l.Model()
	writeJSON(w, http.StatusOK, map[string]any{
		"default_generation_settings": map[string]any{"n_ctx": m.info.SlotCtx, "model": m.info.Name},
		"total_slots":                 m.eng.Stats().SlotsTotal,
		"model_path":                  m.info.Path,
		"chat_template":               m.info.ChatTemplate,
	})
}

// Metrics serves GET /metrics in Prometheus' text format: the registry's
// gauges, then each loaded model's, labelled model="ID".
func (a *API) Metrics(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	header := func(name, kind, help string) {
		fmt.Fprintf(&b, "# HELP corral_%s %s\n# TYPE corral_%s %s\n", name, help, name, kind)
	}
	all := a.models.Status()
	budget := a.models.Budget()
	loaded := 0
	for _, st := range all {
		if st.State == registry.StateLoaded {
			loaded++
		}
	}
	header("models_loaded", "gauge", "Models loaded.")
	fmt.Fprintf(&b, "corral_models_loaded %d\n", loaded)
	header("memory_reserved_bytes", "gauge", "Memory reserved by loaded and loading models.")
	fmt.Fprintf(&b, "corral_memory_reserved_bytes %d\n", budget.Used())
	if !budget.Unlimited() {
		header("memory_budget_bytes", "gauge", "The memory budget (--memory-budget).")
		fmt.Fprintf(&b, "corral_memory_budget_bytes %d\n", budget.Limit())
	}
	header("requests_waiting_for_memory", "gauge", "Requests waiting for a model to get memory (every loaded model busy).")
	fmt.Fprintf(&b, "corral_requests_waiting_for_memory %d\n", a.models.Waiting())
	header("model_loads_total", "counter", "Loads of each model that succeeded.")
	for _, st := range all {
		fmt.Fprintf(&b, "corral_model_loads_total{model=%q} %d\n", st.ID, st.Loads)
	}
	type family struct {
		name, kind, help string
		value            func(engine.Stats) float64
	}
	families := []family{
		{"slots", "gauge", "Number of slots.", func(s engine.Stats) float64 { return float64(s.SlotsTotal) }},
		{"slots_busy", "gauge", "Slots serving a request.", func(s engine.Stats) float64 { return float64(s.SlotsBusy) }},
		{"queue_depth", "gauge", "Requests waiting for a slot.", func(s engine.Stats) float64 { return float64(s.QueueDepth) }},
		{"kv_cells_used", "gauge", "KV cache cells in use.", func(s engine.Stats) float64 { return float64(s.KVCellsUsed) }},
		{"kv_cells", "gauge", "KV cache cells in all.", func(s engine.Stats) float64 { return float64(s.KVCellsTotal) }},
		{"requests_total", "counter", "Requests finished since the model loaded.", func(s engine.Stats) float64 { return float64(s.Requests) }},
		{"tokens_generated_total", "counter", "Tokens generated since the model loaded.", func(s engine.Stats) float64 { return float64(s.TokensOut) }},
		{"steps_total", "counter", "Scheduler steps that decoded a batch.", func(s engine.Stats) float64 { return float64(s.Steps) }},
		{"forward_passes_total", "counter", "Model evaluations those steps took (one per step with the unified KV cache).", func(s engine.Stats) float64 { return float64(s.ForwardPasses) }},
		{"prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", func(s engine.Stats) float64 { return float64(s.PromptTokens) }},
		{"prompt_tokens_cached_total", "counter", "Prompt tokens found in a slot or the host cache instead of evaluated.", func(s engine.Stats) float64 { return float64(s.CachedPromptTokens) }},
		{"preemptions_total", "counter", "Requests preempted for a request of a better priority class.", func(s engine.Stats) float64 { return float64(s.Preemptions) }},
		{"host_cache_bytes", "gauge", "Host memory holding KV state of evicted prefixes.", func(s engine.Stats) float64 { return float64(s.HostCacheBytes) }},
		{"host_cache_restored_total", "counter", "Prefixes restored from the host cache.", func(s engine.Stats) float64 { return float64(s.HostCacheRestored) }},
		{"slots_paused", "gauge", "Slots holding a paced answer that waits for continue.", func(s engine.Stats) float64 { return float64(s.SlotsPaused) }},
		{"paced_requests_total", "counter", "Paced (voice) answers finished.", func(s engine.Stats) float64 { return float64(s.Paced.Requests) }},
		{"paced_chunks_total", "counter", "Chunks of paced answers.", func(s engine.Stats) float64 { return float64(s.Paced.Chunks) }},
		{"paced_interrupted_total", "counter", "Paced answers interrupted (barge-in or closed socket).", func(s engine.Stats) float64 { return float64(s.Paced.Interrupted) }},
		{"paced_pause_timeouts_total", "counter", "Paced answers ended because nobody continued them.", func(s engine.Stats) float64 { return float64(s.Paced.PauseTimeouts) }},
		{"paced_prompt_tokens_cached_total", "counter", "Prompt tokens of paced answers found cached.", func(s engine.Stats) float64 { return float64(s.Paced.CachedTokens) }},
		{"paced_prompt_tokens_evaluated_total", "counter", "Prompt tokens of paced answers evaluated.", func(s engine.Stats) float64 { return float64(s.Paced.PromptEvaluated) }},
		{"paced_reevaluated_tokens_total", "counter", "Tokens of paced answers evaluated a second time (0 unless preempted without a cache).", func(s engine.Stats) float64 { return float64(s.Paced.Reevaluated) }},
		{"paced_first_chunk_seconds_sum", "counter", "Submit to first chunk of paced answers, summed.", func(s engine.Stats) float64 { return s.Paced.FirstChunk.Seconds() }},
		{"embed_requests_total", "counter", "Embedding requests finished (or failed).", func(s engine.Stats) float64 { return float64(s.EmbedRequests) }},
		{"embed_inputs_total", "counter", "Inputs embedded.", func(s engine.Stats) float64 { return float64(s.EmbedInputs) }},
		{"embed_passes_total", "counter", "Forward passes that embedded them (several inputs, of several requests, per pass).", func(s engine.Stats) float64 { return float64(s.EmbedPasses) }},
		{"paced_first_chunk_seconds_count", "counter", "Paced answers with a first chunk.", func(s engine.Stats) float64 { return float64(s.Paced.FirstChunkCount) }},
	}
	stats := make([]engine.Stats, 0, loaded)
	var ids []string
	for _, st := range all {
		if st.Model != nil {
			stats = append(stats, st.Model.eng.Stats())
			ids = append(ids, st.ID)
		}
	}
	for _, f := range families {
		header(f.name, f.kind, f.help)
		for i, s := range stats {
			fmt.Fprintf(&b, "corral_%s{model=%q} %g\n", f.name, ids[i], f.value(s))
		}
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write([]byte(b.String()))
}
