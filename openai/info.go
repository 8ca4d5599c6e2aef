package openai

import (
	"fmt"
	"net/http"
	"strings"
)

// Tokenize serves POST /tokenize: {"content", "add_special"?,
// "parse_special"?} → {"tokens"}. As in llama-server, special tokens are
// not added unless asked and special-token text is parsed unless refused.
func (a *API) Tokenize(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Content      string `json:"content"`
		AddSpecial   bool   `json:"add_special"`
		ParseSpecial *bool  `json:"parse_special"`
	}
	if e := decodeBody(r, &body); e != nil {
		WriteError(w, e)
		return
	}
	parse := body.ParseSpecial == nil || *body.ParseSpecial
	toks, err := a.eng.Tokenize(body.Content, body.AddSpecial, parse)
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
	}
	if e := decodeBody(r, &body); e != nil {
		WriteError(w, e)
		return
	}
	toks, e := parseTokens(body.Tokens, a.info.VocabSize, "tokens")
	if e != nil {
		WriteError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"content": a.eng.Detokenize(toks)})
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

// Slots serves GET /slots.
func (a *API) Slots(w http.ResponseWriter, r *http.Request) {
	infos, err := a.eng.Slots(r.Context())
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

// model is one element of GET /v1/models.
type model struct {
	ID      string    `json:"id"`
	Object  string    `json:"object"`
	Created int64     `json:"created"`
	OwnedBy string    `json:"owned_by"`
	Meta    modelMeta `json:"meta"`
}

type modelMeta struct {
	Architecture string `json:"architecture"`
	NCtxTrain    int    `json:"n_ctx_train"`
	NCtx         int    `json:"n_ctx"` // per slot
	NVocab       int    `json:"n_vocab"`
}

// Models serves GET /v1/models: the one model this API serves.
func (a *API) Models(w http.ResponseWriter, r *http.Request) {
	m := model{
		ID: a.info.Name, Object: "model", Created: a.info.Created.Unix(), OwnedBy: "corral",
		Meta: modelMeta{Architecture: a.info.Architecture, NCtxTrain: a.info.CtxTrain, NCtx: a.info.SlotCtx, NVocab: a.info.VocabSize},
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []model{m}})
}

// Props serves llama-server's GET /props, which clients read for the
// context size and the number of slots.
func (a *API) Props(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"default_generation_settings": map[string]any{"n_ctx": a.info.SlotCtx, "model": a.info.Name},
		"total_slots":                 a.eng.Stats().SlotsTotal,
		"model_path":                  a.info.Path,
		"chat_template":               a.info.ChatTemplate,
	})
}

// Metrics serves GET /metrics in Prometheus' text format.
func (a *API) Metrics(w http.ResponseWriter, r *http.Request) {
	st := a.eng.Stats()
	var b strings.Builder
	metric := func(name, kind, help string, v uint64) {
		fmt.Fprintf(&b, "# HELP corral_%s %s\n# TYPE corral_%s %s\ncorral_%s %d\n", name, help, name, kind, name, v)
	}
	metric("slots", "gauge", "Number of slots.", uint64(st.SlotsTotal))
	metric("slots_busy", "gauge", "Slots serving a request.", uint64(st.SlotsBusy))
	metric("queue_depth", "gauge", "Requests waiting for a slot.", uint64(st.QueueDepth))
	metric("kv_cells_used", "gauge", "KV cache cells in use.", uint64(st.KVCellsUsed))
	metric("kv_cells", "gauge", "KV cache cells in all.", uint64(st.KVCellsTotal))
	metric("requests_total", "counter", "Requests finished since start.", st.Requests)
	metric("tokens_generated_total", "counter", "Tokens generated since start.", st.TokensOut)
	metric("steps_total", "counter", "Scheduler steps that decoded a batch.", st.Steps)
	metric("forward_passes_total", "counter", "Model evaluations those steps took (one per step with the unified KV cache).", st.ForwardPasses)
	metric("prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", st.PromptTokens)
	metric("prompt_tokens_cached_total", "counter", "Prompt tokens found in a slot or the host cache instead of evaluated.", st.CachedPromptTokens)
	metric("preemptions_total", "counter", "Requests preempted for a request of a better priority class.", st.Preemptions)
	metric("host_cache_bytes", "gauge", "Host memory holding KV state of evicted prefixes.", uint64(st.HostCacheBytes))
	metric("host_cache_restored_total", "counter", "Prefixes restored from the host cache.", st.HostCacheRestored)
	p := st.Paced
	metric("slots_paused", "gauge", "Slots holding a paced answer that waits for continue.", uint64(st.SlotsPaused))
	metric("paced_requests_total", "counter", "Paced (voice) answers finished.", p.Requests)
	metric("paced_chunks_total", "counter", "Chunks of paced answers.", p.Chunks)
	metric("paced_interrupted_total", "counter", "Paced answers interrupted (barge-in or closed socket).", p.Interrupted)
	metric("paced_pause_timeouts_total", "counter", "Paced answers ended because nobody continued them.", p.PauseTimeouts)
	metric("paced_prompt_tokens_cached_total", "counter", "Prompt tokens of paced answers found cached.", p.CachedTokens)
	metric("paced_prompt_tokens_evaluated_total", "counter", "Prompt tokens of paced answers evaluated.", p.PromptEvaluated)
	metric("paced_reevaluated_tokens_total", "counter", "Tokens of paced answers evaluated a second time (0 unless preempted without a cache).", p.Reevaluated)
	fmt.Fprintf(&b, "# HELP corral_paced_first_chunk_seconds Submit to first chunk of paced answers.\n# TYPE corral_paced_first_chunk_seconds summary\n"+
		"corral_paced_first_chunk_seconds_sum %g\ncorral_paced_first_chunk_seconds_count %d\n", p.FirstChunk.Seconds(), p.FirstChunkCount)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write([]byte(b.String()))
}
