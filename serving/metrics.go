package serving

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/kvevents"
	"github.com/corral-llm/corral/registry"
)

// ModelLabel is the label of every per-model series of /metrics: the
// model's id, as vLLM names its served model and as the Kubernetes
// Gateway API Inference Extension reads it.
const ModelLabel = "model_name"

// CacheBlockSize is the block size, in tokens, corral reports in
// vllm:cache_config_info. llama.cpp's KV cache holds single tokens, not
// blocks; 16 is vLLM's default, the block an endpoint picker hashes
// prompts in when it tunes its prefix index from a server's metrics, and
// the block of corral's KV events.
const CacheBlockSize = kvevents.BlockSize

// Histogram buckets, vLLM's (vllm/v1/metrics/loggers.py), so that
// dashboards made for vLLM show the same bands.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	tokenBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	latencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
		40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// metrics are the API's Prometheus metrics. The request families are
// observed when each generation ends (observe); the rest are read from the
// registry and the loaded engines' snapshots at scrape time (Collect), so
// that a model's gauges go when it unloads, and its engine counters start
// again from 0 when it loads again (Prometheus' rate() takes a reset in
// its stride). The request families live as long as the API.
type metrics struct {
	models *Registry
	reg    *prometheus.Registry

	success                                                    *prometheus.CounterVec
	toolRepairs                                                *prometheus.CounterVec
	ttft, itl, tpot, e2e, queue, prefill, decode               *prometheus.HistogramVec
	promptSeconds, predictedSeconds                            *prometheus.CounterVec
	global                                                     []globalFamily
	perModel                                                   []modelFamily
	loads, promptThroughput, predictedThroughput, kvCacheUsage *prometheus.Desc
	specAcceptedAt                                             *prometheus.Desc
	cacheConfig                                                *prometheus.Desc
	deviceReserved, deviceBudget                               *prometheus.Desc

	mu      sync.Mutex
	buckets map[string]*throughput // by model: since the previous scrape
}

// throughput sums the generations finished since the previous scrape, for
// llama-server's llamacpp:prompt_tokens_seconds and
// llamacpp:predicted_tokens_seconds.
type throughput struct {
	promptTokens, predictedTokens   int
	promptSeconds, predictedSeconds float64
}

// snapshot is what the per-model families read from a loaded engine.
type snapshot struct {
	engine.Stats
}

// globalFamily is a family without labels, read from the registry.
type globalFamily struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(*Registry) (float64, bool)
}

// modelFamily is a family labelled model_name, read from a loaded
// engine's snapshot.
type modelFamily struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(*snapshot) float64
}

func modelDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, []string{ModelLabel}, nil)
}

func gauge(name, help string, v func(*snapshot) float64) modelFamily {
	return modelFamily{modelDesc(name, help), prometheus.GaugeValue, v}
}

func counter(name, help string, v func(*snapshot) float64) modelFamily {
	return modelFamily{modelDesc(name, help), prometheus.CounterValue, v}
}

// ratio is n/d, 0 when d is 0.
func ratio(n, d float64) float64 {
	if d == 0 {
		return 0
	}
	return n / d
}

func newMetrics(models *Registry) *metrics {
	histogram := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, []string{ModelLabel})
	}
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, append([]string{ModelLabel}, labels...))
	}
	x := &metrics{
		models:  models,
		reg:     prometheus.NewRegistry(),
		buckets: make(map[string]*throughput),

		success: counterVec("vllm:request_success_total", "Finished requests by finish reason (stop, length, abort, error).", "finished_reason"),
		toolRepairs: counterVec("corral_tool_call_repairs_total",
			"Whole answers whose failed tool call was written again, by outcome: repaired, or failed (given back as written).", "outcome"),
		ttft: histogram("vllm:time_to_first_token_seconds", "Submit to first generated token.", ttftBuckets),
		itl: histogram("vllm:inter_token_latency_seconds",
			"Time between generated tokens: each request's n-1 gaps, observed at the request's mean gap when it ends.", tokenBuckets),
		tpot:    histogram("vllm:request_time_per_output_token_seconds", "Per request: decode time over generated tokens less one.", tokenBuckets),
		e2e:     histogram("vllm:e2e_request_latency_seconds", "Submit to finish.", latencyBuckets),
		queue:   histogram("vllm:request_queue_time_seconds", "Submit to admission to a slot (the whole life of a request never admitted).", latencyBuckets),
		prefill: histogram("vllm:request_prefill_time_seconds", "Admission to the last prompt token evaluated (and the first token sampled).", latencyBuckets),
		decode:  histogram("vllm:request_decode_time_seconds", "First generated token to finish.", latencyBuckets),

		promptSeconds:    counterVec("llamacpp:prompt_seconds_total", "Prompt process time, summed over finished requests."),
		predictedSeconds: counterVec("llamacpp:tokens_predicted_seconds_total", "Predict process time (first token to finish, pauses excluded), summed over finished requests."),

		loads:               prometheus.NewDesc("corral_model_loads_total", "Loads of each model that succeeded.", []string{ModelLabel}, nil),
		promptThroughput:    modelDesc("llamacpp:prompt_tokens_seconds", "Average prompt throughput in tokens/s of the requests finished since the previous scrape."),
		predictedThroughput: modelDesc("llamacpp:predicted_tokens_seconds", "Average generation throughput in tokens/s of the requests finished since the previous scrape."),
		kvCacheUsage:        modelDesc("vllm:kv_cache_usage_perc", "KV cache usage, 0 to 1: the pool's cells held for running requests over all its cells."),
		specAcceptedAt: prometheus.NewDesc("vllm:spec_decode_num_accepted_tokens_per_pos_total", "Drafted tokens the requests sampled, by their position in the draft (0: the first).",
			[]string{ModelLabel, "position"}, nil),
		cacheConfig: prometheus.NewDesc("vllm:cache_config_info",
			"The KV cache's shape, in its labels: block_size tokens a block (corral's cache holds tokens; the block is the unit routers hash prompts in), num_gpu_blocks the cache's cells over the block size.",
			[]string{ModelLabel, "block_size", "num_gpu_blocks"}, nil),
	}
	x.deviceReserved = prometheus.NewDesc("corral_memory_device_reserved_bytes", "Memory reserved on each GPU by loaded and loading models (their offloaded layers, their KV and a compute buffer).", []string{"device"}, nil)
	x.deviceBudget = prometheus.NewDesc("corral_memory_device_budget_bytes", "Each GPU's memory budget (--device-memory); absent when unlimited.", []string{"device"}, nil)
	x.global = []globalFamily{
		{prometheus.NewDesc("corral_models_loaded", "Models loaded.", nil, nil), prometheus.GaugeValue, func(r *Registry) (float64, bool) {
			n := 0
			for _, st := range r.Status() {
				if st.State == registry.StateLoaded {
					n++
				}
			}
			return float64(n), true
		}},
		{prometheus.NewDesc("corral_memory_reserved_bytes", "Memory reserved by loaded and loading models.", nil, nil), prometheus.GaugeValue,
			func(r *Registry) (float64, bool) { return float64(r.Budget().Used()), true }},
		{prometheus.NewDesc("corral_memory_budget_bytes", "The memory budget (--memory-budget); absent when unlimited.", nil, nil), prometheus.GaugeValue,
			func(r *Registry) (float64, bool) { return float64(r.Budget().Limit()), !r.Budget().Unlimited() }},
		{prometheus.NewDesc("corral_requests_waiting_for_memory", "Requests waiting for a model to get memory (every loaded model busy).", nil, nil), prometheus.GaugeValue,
			func(r *Registry) (float64, bool) { return float64(r.Waiting()), true }},
	}
	x.perModel = []modelFamily{
		// vLLM's names.
		gauge("vllm:num_requests_running", "Requests in a slot (prefilling, decoding or paused).", func(s *snapshot) float64 { return float64(s.SlotsBusy) }),
		gauge("vllm:num_requests_waiting", "Requests waiting for a slot.", func(s *snapshot) float64 { return float64(s.QueueDepth) }),
		counter("vllm:prompt_tokens_total", "Prompt tokens of admitted requests, cached ones included.", func(s *snapshot) float64 { return float64(s.PromptTokens) }),
		counter("vllm:generation_tokens_total", "Generated tokens.", func(s *snapshot) float64 { return float64(s.TokensOut) }),
		counter("vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix caches (slots and host cache).", func(s *snapshot) float64 { return float64(s.PromptTokens) }),
		counter("vllm:prefix_cache_hits_total", "Prompt tokens found in the prefix caches.", func(s *snapshot) float64 { return float64(s.CachedPromptTokens) }),
		counter("vllm:num_preemptions_total", "Requests preempted, for a request of a better priority class or because the KV pool ran out of cells.", func(s *snapshot) float64 { return float64(s.Preemptions) }),
		counter("vllm:spec_decode_num_drafts_total", "Speculative drafts evaluated (--spec-type).", func(s *snapshot) float64 { return float64(s.Spec.Drafts) }),
		counter("vllm:spec_decode_num_draft_tokens_total", "Tokens of those drafts.", func(s *snapshot) float64 { return float64(s.Spec.DraftTokens) }),
		counter("vllm:spec_decode_num_accepted_tokens_total", "Drafted tokens the requests sampled (each a step saved).", func(s *snapshot) float64 { return float64(s.Spec.Accepted) }),
		// llama-server's names.
		counter("llamacpp:prompt_tokens_total", "Number of prompt tokens processed (evaluated: cached ones excluded).", func(s *snapshot) float64 {
			return float64(s.PromptTokens - s.CachedPromptTokens)
		}),
		counter("llamacpp:tokens_predicted_total", "Number of generation tokens processed.", func(s *snapshot) float64 { return float64(s.TokensOut) }),
		counter("llamacpp:n_decode_total", "Total number of llama_decode() calls (scheduler steps).", func(s *snapshot) float64 { return float64(s.Steps) }),
		gauge("llamacpp:n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call.", func(s *snapshot) float64 {
			return ratio(float64(s.BusySlots), float64(s.Steps))
		}),
		gauge("llamacpp:kv_cache_usage_ratio", "KV-cache usage: cells holding a token (idle slots' cached prefixes included) over all cells.", func(s *snapshot) float64 {
			return min(1, ratio(float64(s.KVCellsUsed), float64(s.KVCellsTotal)))
		}),
		gauge("llamacpp:kv_cache_tokens", "KV-cache tokens.", func(s *snapshot) float64 { return float64(s.KVCellsUsed) }),
		gauge("llamacpp:requests_processing", "Number of requests processing.", func(s *snapshot) float64 { return float64(s.SlotsBusy) }),
		gauge("llamacpp:requests_deferred", "Number of requests deferred.", func(s *snapshot) float64 { return float64(s.QueueDepth) }),
		// corral's own.
		gauge("corral_slots", "Number of slots.", func(s *snapshot) float64 { return float64(s.SlotsTotal) }),
		gauge("corral_slots_busy", "Slots serving a request.", func(s *snapshot) float64 { return float64(s.SlotsBusy) }),
		gauge("corral_queue_depth", "Requests waiting for a slot.", func(s *snapshot) float64 { return float64(s.QueueDepth) }),
		gauge("corral_kv_cells_used", "KV cache cells holding a token: for running requests and for idle slots' cached prefixes.", func(s *snapshot) float64 { return float64(s.KVCellsUsed) }),
		gauge("corral_kv_cells_active", "KV cache cells held for running requests (a prefix shared with an idle slot counts here once).", func(s *snapshot) float64 { return float64(s.KVCellsActive) }),
		gauge("corral_kv_cells_cached", "KV cache cells held only by idle slots' cached prefixes (freed when the pool needs them).", func(s *snapshot) float64 { return float64(s.KVCellsUsed - s.KVCellsActive) }),
		gauge("corral_kv_cells", "KV cache cells in all: the pool the slots share.", func(s *snapshot) float64 { return float64(s.KVCellsTotal) }),
		counter("corral_requests_total", "Requests finished since the model loaded.", func(s *snapshot) float64 { return float64(s.Requests) }),
		counter("corral_tokens_generated_total", "Tokens generated since the model loaded.", func(s *snapshot) float64 { return float64(s.TokensOut) }),
		counter("corral_steps_total", "Scheduler steps that decoded a batch.", func(s *snapshot) float64 { return float64(s.Steps) }),
		counter("corral_forward_passes_total", "Model evaluations those steps took (one per step with the unified KV cache, two in a split step).", func(s *snapshot) float64 { return float64(s.ForwardPasses) }),
		counter("corral_split_steps_total", "Steps that evaluated their prompt chunks in a pass before the decoding tokens' (on a CPU with flash attention).", func(s *snapshot) float64 { return float64(s.SplitSteps) }),
		counter("corral_scheduler_own_seconds_total", "The scheduler's own time in its steps: all but the forward passes and the wait for the CPU share.", func(s *snapshot) float64 { return s.StepOwnTime.Seconds() }),
		counter("corral_prompt_tokens_total", "Prompt tokens of admitted requests.", func(s *snapshot) float64 { return float64(s.PromptTokens) }),
		counter("corral_prompt_tokens_cached_total", "Prompt tokens found in a slot or the host cache instead of evaluated.", func(s *snapshot) float64 { return float64(s.CachedPromptTokens) }),
		counter("corral_preemptions_total", "Requests preempted, for a request of a better priority class or for cells.", func(s *snapshot) float64 { return float64(s.Preemptions) }),
		counter("corral_pool_preemptions_total", "Requests preempted because the KV pool ran out of cells.", func(s *snapshot) float64 { return float64(s.PoolPreemptions) }),
		gauge("corral_host_cache_entries", "Prefixes held in host memory.", func(s *snapshot) float64 { return float64(s.HostCacheEntries) }),
		counter("corral_host_cache_saved_total", "Prefixes saved to host memory.", func(s *snapshot) float64 { return float64(s.HostCacheSaved) }),
		gauge("corral_host_cache_bytes", "Host memory holding KV state of evicted prefixes.", func(s *snapshot) float64 { return float64(s.HostCacheBytes) }),
		counter("corral_host_cache_restored_total", "Prefixes restored from the host cache.", func(s *snapshot) float64 { return float64(s.HostCacheRestored) }),
		gauge("corral_checkpoints", "Checkpoints of recurrent state held (recurrent and hybrid models).", func(s *snapshot) float64 { return float64(s.Checkpoints) }),
		gauge("corral_checkpoint_bytes", "Host memory holding checkpoints of recurrent state.", func(s *snapshot) float64 { return float64(s.CheckpointBytes) }),
		counter("corral_checkpoints_saved_total", "Checkpoints of recurrent state taken at the end of a prompt.", func(s *snapshot) float64 { return float64(s.CheckpointsSaved) }),
		counter("corral_checkpoint_hits_total", "Sequences continued from a checkpoint instead of evaluated again.", func(s *snapshot) float64 { return float64(s.CheckpointHits) }),
		gauge("corral_disk_cache_bytes", "Bytes of the files of the disk tier (--cache-disk) holding KV state of prefixes.", func(s *snapshot) float64 { return float64(s.DiskCacheBytes) }),
		gauge("corral_disk_cache_entries", "Prefixes held in the disk tier's files.", func(s *snapshot) float64 { return float64(s.DiskCacheEntries) }),
		counter("corral_disk_cache_hits_total", "Prefixes restored from the disk tier.", func(s *snapshot) float64 { return float64(s.DiskCacheHits) }),
		counter("corral_disk_cache_saved_total", "Prefixes written to the disk tier.", func(s *snapshot) float64 { return float64(s.DiskCacheSaved) }),
		counter("corral_disk_cache_dropped_total", "Prefixes not written to the disk tier: its writer's queue was full, the write failed, or at an unload they did not fit --cache-disk-size or --shutdown-timeout passed.", func(s *snapshot) float64 { return float64(s.DiskCacheDropped) }),
		counter("corral_disk_cache_evicted_total", "Files of the disk tier removed, least recently used first, to stay within --cache-disk-size.", func(s *snapshot) float64 { return float64(s.DiskCacheEvicted) }),
		counter("corral_disk_cache_rejected_total", "Files of the disk tier removed unloaded: torn, corrupted, or another model's or KV layout's.", func(s *snapshot) float64 { return float64(s.DiskCacheRejected) }),
		gauge("corral_slots_paused", "Slots holding a paced answer that waits for continue.", func(s *snapshot) float64 { return float64(s.SlotsPaused) }),
		counter("corral_paced_requests_total", "Paced (voice) answers finished.", func(s *snapshot) float64 { return float64(s.Paced.Requests) }),
		counter("corral_paced_chunks_total", "Chunks of paced answers.", func(s *snapshot) float64 { return float64(s.Paced.Chunks) }),
		counter("corral_paced_interrupted_total", "Paced answers interrupted (barge-in or closed socket).", func(s *snapshot) float64 { return float64(s.Paced.Interrupted) }),
		counter("corral_paced_pause_timeouts_total", "Paced answers ended because nobody continued them.", func(s *snapshot) float64 { return float64(s.Paced.PauseTimeouts) }),
		counter("corral_paced_prompt_tokens_cached_total", "Prompt tokens of paced answers found cached.", func(s *snapshot) float64 { return float64(s.Paced.CachedTokens) }),
		counter("corral_paced_prompt_tokens_evaluated_total", "Prompt tokens of paced answers evaluated.", func(s *snapshot) float64 { return float64(s.Paced.PromptEvaluated) }),
		counter("corral_paced_reevaluated_tokens_total", "Tokens of paced answers evaluated a second time (0 unless preempted without a cache).", func(s *snapshot) float64 { return float64(s.Paced.Reevaluated) }),
		counter("corral_paced_first_chunk_seconds_sum", "Submit to first chunk of paced answers, summed.", func(s *snapshot) float64 { return s.Paced.FirstChunk.Seconds() }),
		counter("corral_paced_first_chunk_seconds_count", "Paced answers with a first chunk.", func(s *snapshot) float64 { return float64(s.Paced.FirstChunkCount) }),
		counter("corral_embed_requests_total", "Embedding requests finished (or failed).", func(s *snapshot) float64 { return float64(s.EmbedRequests) }),
		counter("corral_embed_inputs_total", "Inputs embedded.", func(s *snapshot) float64 { return float64(s.EmbedInputs) }),
		counter("corral_embed_passes_total", "Forward passes that embedded them (several inputs, of several requests, per pass).", func(s *snapshot) float64 { return float64(s.EmbedPasses) }),
	}
	x.reg.MustRegister(x, x.success, x.toolRepairs, x.ttft, x.itl, x.tpot, x.e2e, x.queue, x.prefill, x.decode, x.promptSeconds, x.predictedSeconds,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return x
}

// Describe sends the descriptors of the families Collect reads from
// snapshots (prometheus.Collector).
func (x *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range x.global {
		ch <- f.desc
	}
	for _, f := range x.perModel {
		ch <- f.desc
	}
	ch <- x.loads
	ch <- x.promptThroughput
	ch <- x.predictedThroughput
	ch <- x.kvCacheUsage
	ch <- x.specAcceptedAt
	ch <- x.cacheConfig
	ch <- x.deviceReserved
	ch <- x.deviceBudget
}

// Collect reads the registry and every loaded engine (prometheus.Collector).
func (x *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, f := range x.global {
		if v, ok := f.value(x.models); ok {
			ch <- prometheus.MustNewConstMetric(f.desc, f.kind, v)
		}
	}
	budgets := x.models.DeviceBudgets()
	for _, name := range x.models.DeviceNames() {
		b := budgets[name]
		ch <- prometheus.MustNewConstMetric(x.deviceReserved, prometheus.GaugeValue, float64(b.Used()), name)
		if !b.Unlimited() {
			ch <- prometheus.MustNewConstMetric(x.deviceBudget, prometheus.GaugeValue, float64(b.Limit()), name)
		}
	}
	for _, st := range x.models.Status() {
		ch <- prometheus.MustNewConstMetric(x.loads, prometheus.CounterValue, float64(st.Loads), st.ID)
		if st.Model == nil {
			continue
		}
		eng := st.Model.Engine()
		s := snapshot{Stats: eng.Stats()}
		for _, f := range x.perModel {
			ch <- prometheus.MustNewConstMetric(f.desc, f.kind, f.value(&s), st.ID)
		}
		// Idle slots' cached prefixes are free to evict, as vLLM counts
		// its prefix-cache blocks.
		ch <- prometheus.MustNewConstMetric(x.kvCacheUsage, prometheus.GaugeValue, min(1, ratio(float64(s.KVCellsActive), float64(s.KVCellsTotal))), st.ID)
		if s.Spec.Drafts > 0 { // a model that speculates
			for i, n := range s.Spec.AcceptedAt {
				ch <- prometheus.MustNewConstMetric(x.specAcceptedAt, prometheus.CounterValue, float64(n), st.ID, strconv.Itoa(i))
			}
		}
		ch <- prometheus.MustNewConstMetric(x.cacheConfig, prometheus.GaugeValue, 1, st.ID,
			strconv.Itoa(CacheBlockSize), strconv.Itoa(s.KVCellsTotal/CacheBlockSize))
		t := x.takeThroughput(st.ID)
		ch <- prometheus.MustNewConstMetric(x.promptThroughput, prometheus.GaugeValue, ratio(float64(t.promptTokens), t.promptSeconds), st.ID)
		ch <- prometheus.MustNewConstMetric(x.predictedThroughput, prometheus.GaugeValue, ratio(float64(t.predictedTokens), t.predictedSeconds), st.ID)
	}
}

// takeThroughput returns the model's throughput bucket and starts a new
// one, as llama-server does at each scrape (so two scrapers share it).
func (x *metrics) takeThroughput(model string) throughput {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.buckets[model]
	if t == nil {
		return throughput{}
	}
	delete(x.buckets, model)
	return *t
}

// finishedReason is vLLM's finished_reason for an engine finish reason:
// stop, length, abort (cancelled, interrupted, paused too long) or error.
func finishedReason(r engine.FinishReason) string {
	switch r {
	case engine.FinishStop:
		return "stop"
	case engine.FinishLength:
		return "length"
	case engine.FinishError:
		return "error"
	}
	return "abort"
}

// observe records a finished generation of the model named model: the
// request families. A request with no generated token has no TTFT,
// prefill, decode or inter-token latency.
func (x *metrics) observe(model string, res engine.Result) {
	t, u := res.Timings, res.Usage
	x.success.WithLabelValues(model, finishedReason(res.FinishReason)).Inc()
	x.e2e.WithLabelValues(model).Observe(t.Total.Seconds())
	x.queue.WithLabelValues(model).Observe(t.Queued.Seconds())
	if t.TTFT <= 0 {
		return
	}
	decoding := (t.Decode - t.Held).Seconds()
	x.ttft.WithLabelValues(model).Observe(t.TTFT.Seconds())
	x.prefill.WithLabelValues(model).Observe(t.Prefill.Seconds())
	x.decode.WithLabelValues(model).Observe(t.Decode.Seconds())
	x.promptSeconds.WithLabelValues(model).Add(t.Prefill.Seconds())
	x.predictedSeconds.WithLabelValues(model).Add(max(0, decoding))
	if n := u.CompletionTokens - 1; n > 0 && decoding > 0 {
		gap := decoding / float64(n)
		x.tpot.WithLabelValues(model).Observe(gap)
		itl := x.itl.WithLabelValues(model)
		for range n {
			itl.Observe(gap)
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	b := x.buckets[model]
	if b == nil {
		b = &throughput{}
		x.buckets[model] = b
	}
	b.promptTokens += u.PromptTokens - u.CachedTokens
	b.promptSeconds += t.Prefill.Seconds()
	b.predictedTokens += u.CompletionTokens
	b.predictedSeconds += max(0, decoding)
}

// Metrics serves GET /metrics in Prometheus' exposition format (see
// docs/operations.md, Metrics): vLLM's and llama-server's families labelled
// model_name, corral's own, and the Go process's. Only for an admin
// unless Options.MetricsPublic: the prefix cache counters tell of other
// callers' prompts: a caller that may not gets writeErr's refusal.
func (c *Core) Metrics(w http.ResponseWriter, r *http.Request, writeErr ErrorWriter) {
	if !c.metricsPublic {
		if e := AdminOnly(r, "GET /metrics"); e != nil {
			writeErr(w, e)
			return
		}
	}
	c.metricsHandler.ServeHTTP(w, r)
}

// handler serves x's registry; log receives collection errors.
// kvEvents adds the KV event publisher's counters.
func (x *metrics) kvEvents(c KVEventCounter) {
	x.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "corral_kv_events_published_total", Help: "Batches of KV events the engines published (--kv-events)."},
			func() float64 { return float64(c.Published()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "corral_kv_events_dropped_total", Help: "Batches of KV events a subscriber missed: a queue was full, or they came after the publisher closed."},
			func() float64 { return float64(c.Dropped()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "corral_kv_events_subscribers", Help: "Subscribers of the KV events connected now."},
			func() float64 { return float64(c.Subscribers()) }))
}

func (x *metrics) handler(log *slog.Logger) http.Handler {
	return promhttp.HandlerFor(x.reg, promhttp.HandlerOpts{ErrorLog: printLogger{log}, ErrorHandling: promhttp.ContinueOnError})
}

// printLogger is promhttp's error logger on a slog.Logger.
type printLogger struct{ log *slog.Logger }

// Println logs v as a warning.
func (l printLogger) Println(v ...any) { l.log.Warn("metrics: " + fmt.Sprint(v...)) }
