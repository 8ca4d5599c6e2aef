package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/registry"
	"github.com/corral-llm/corral/server"
	"github.com/corral-llm/corral/serving"
	dto "github.com/prometheus/client_model/go"
)

// value is the value of a counter, gauge or untyped series.
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return m.Untyped.GetValue()
}

// Three completions of n tokens, two whole and one streamed, on two
// slots: the vLLM and llama-server families count them exactly, the
// gauges are back to 0, and every series is labelled with the model.
func TestMetricsWorkload(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 2})
	const n = 6
	before := ts.MetricFamilies(t)
	for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:generation_tokens_total", "vllm:prompt_tokens_total"} {
		if v := value(e2etest.Series(t, before, name, "model_name", "tiny")); v != 0 {
			t.Errorf("%s = %v before any request", name, v)
		}
	}
	if _, ok := before["vllm:time_to_first_token_seconds"]; ok {
		t.Errorf("a TTFT histogram before any request")
	}

	body := map[string]any{"prompt": "Once upon a time", "max_tokens": n, "temperature": 0, "ignore_eos": true}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		prompt []int
	)
	for range 2 {
		wg.Go(func() {
			resp, b := ts.Post(t, "/v1/completions", body)
			var c textCompletion
			unmarshal(t, string(b), &c)
			if resp.StatusCode != 200 || c.Usage == nil || c.Usage.CompletionTokens != n {
				t.Errorf("completion: %d %s", resp.StatusCode, b)
				return
			}
			mu.Lock()
			prompt = append(prompt, c.Usage.PromptTokens)
			mu.Unlock()
		})
	}
	wg.Go(func() {
		stream := map[string]any{"stream": true}
		for k, v := range body {
			stream[k] = v
		}
		v1Stream(t, ts.OpenStream(t, context.Background(), "/v1/completions", stream), "length")
	})
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	p := prompt[0] // the same prompt each time

	// The request families are recorded before the answers' last bytes.
	after := ts.MetricFamilies(t)
	hist := func(name string) *dto.Histogram {
		t.Helper()
		if f := after[name]; f == nil || f.GetType() != dto.MetricType_HISTOGRAM {
			t.Fatalf("%s is not a histogram: %v", name, f)
		}
		return e2etest.Series(t, after, name, "model_name", "tiny").GetHistogram()
	}
	for _, name := range []string{"vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
		"vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds", "vllm:request_time_per_output_token_seconds"} {
		if h := hist(name); h.GetSampleCount() != 3 || h.GetSampleSum() <= 0 {
			t.Errorf("%s: count %d sum %v, want 3 and > 0", name, h.GetSampleCount(), h.GetSampleSum())
		}
	}
	if h := hist("vllm:inter_token_latency_seconds"); h.GetSampleCount() != 3*(n-1) {
		t.Errorf("inter-token latencies: %d, want %d", h.GetSampleCount(), 3*(n-1))
	}
	if v := value(e2etest.Series(t, after, "vllm:request_success_total", "model_name", "tiny", "finished_reason", "length")); v != 3 {
		t.Errorf("vllm:request_success_total{finished_reason=length} = %v, want 3", v)
	}
	for _, name := range []string{"llamacpp:prompt_seconds_total", "llamacpp:tokens_predicted_seconds_total",
		"llamacpp:prompt_tokens_seconds", "llamacpp:predicted_tokens_seconds"} {
		if v := value(e2etest.Series(t, after, name, "model_name", "tiny")); v <= 0 {
			t.Errorf("%s = %v, want > 0", name, v)
		}
	}
	// As llama-server's, the throughput gauges cover the requests
	// finished since the previous scrape.
	again := ts.MetricFamilies(t)
	if v := value(e2etest.Series(t, again, "llamacpp:predicted_tokens_seconds", "model_name", "tiny")); v != 0 {
		t.Errorf("llamacpp:predicted_tokens_seconds = %v on the next scrape, want 0", v)
	}

	// The engine publishes its snapshot at the end of the step that
	// finished the last request, maybe after its answer went out.
	e2etest.WaitFor(t, "the engine to count 3 requests", func() bool { return ts.Metrics(t)["corral_requests_total"] == 3 })
	fams := ts.MetricFamilies(t)
	get := func(name string, labels ...string) float64 {
		t.Helper()
		return value(e2etest.Series(t, fams, name, append([]string{"model_name", "tiny"}, labels...)...))
	}
	exact := map[string]float64{
		"vllm:generation_tokens_total":    3 * n,
		"llamacpp:tokens_predicted_total": 3 * n,
		"vllm:prompt_tokens_total":        float64(3 * p),
		"vllm:prefix_cache_queries_total": float64(3 * p),
		"vllm:num_requests_running":       0,
		"vllm:num_requests_waiting":       0,
		"vllm:kv_cache_usage_perc":        0,
		"llamacpp:requests_processing":    0,
		"llamacpp:requests_deferred":      0,
		"corral_slots":                    2,
		"corral_models_loaded":            1,
	}
	for name, want := range exact {
		var got float64
		if name == "corral_models_loaded" {
			got = value(e2etest.Series(t, fams, name))
		} else {
			got = get(name)
		}
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	hits := get("vllm:prefix_cache_hits_total")
	if hits < 0 || hits >= float64(3*p) || hits != get("corral_prompt_tokens_cached_total") {
		t.Errorf("prefix cache hits %v of %d prompt tokens", hits, 3*p)
	}
	if evaluated := get("llamacpp:prompt_tokens_total"); evaluated != float64(3*p)-hits {
		t.Errorf("llamacpp:prompt_tokens_total = %v, want %v (uncached prompt tokens)", evaluated, float64(3*p)-hits)
	}
	steps := get("llamacpp:n_decode_total")
	if steps == 0 || steps != get("corral_steps_total") {
		t.Errorf("llamacpp:n_decode_total = %v, corral_steps_total %v", steps, get("corral_steps_total"))
	}
	if own := get("corral_scheduler_own_seconds_total"); own <= 0 {
		t.Errorf("corral_scheduler_own_seconds_total = %v, want some", own)
	}
	if busy := get("llamacpp:n_busy_slots_per_decode"); busy < 1 || busy > 2 {
		t.Errorf("llamacpp:n_busy_slots_per_decode = %v, want within [1, 2]", busy)
	}
	// Idle slots keep their tokens for prefix reuse: llama-server's ratio
	// counts them, vLLM's usage (the cache of running requests) does not.
	if cells := get("llamacpp:kv_cache_tokens"); cells == 0 || get("llamacpp:kv_cache_usage_ratio") <= 0 {
		t.Errorf("llamacpp:kv_cache_tokens = %v after the requests", cells)
	}
	// The cache's shape, as the endpoint picker reads it: labels of an
	// info gauge, the cells in blocks of serving.CacheBlockSize tokens.
	cells := get("corral_kv_cells")
	if v := value(e2etest.Series(t, fams, "vllm:cache_config_info", "model_name", "tiny",
		"block_size", strconv.Itoa(serving.CacheBlockSize),
		"num_gpu_blocks", strconv.Itoa(int(cells)/serving.CacheBlockSize))); v != 1 || cells < serving.CacheBlockSize {
		t.Errorf("vllm:cache_config_info = %v with %v cells", v, cells)
	}
	types := map[string]dto.MetricType{
		"vllm:cache_config_info":           dto.MetricType_GAUGE,
		"vllm:num_requests_running":        dto.MetricType_GAUGE,
		"vllm:generation_tokens_total":     dto.MetricType_COUNTER,
		"vllm:request_success_total":       dto.MetricType_COUNTER,
		"llamacpp:n_busy_slots_per_decode": dto.MetricType_GAUGE,
		"llamacpp:prompt_tokens_total":     dto.MetricType_COUNTER,
		"corral_queue_depth":               dto.MetricType_GAUGE,
	}
	for name, want := range types {
		if got := fams[name].GetType(); got != want {
			t.Errorf("%s is a %v, want a %v", name, got, want)
		}
	}
	for name, f := range fams {
		if !strings.HasPrefix(name, "vllm:") && !strings.HasPrefix(name, "llamacpp:") {
			continue
		}
		for _, m := range f.GetMetric() {
			labelled := false
			for _, l := range m.GetLabel() {
				labelled = labelled || (l.GetName() == "model_name" && l.GetValue() == "tiny")
			}
			if !labelled {
				t.Errorf("%s series %v lacks model_name=tiny", name, m.GetLabel())
			}
		}
	}
}

// A model unloaded takes its gauges with it; its request counters stay,
// and its engine counters start again with the next load.
// TestMetricsSpeculation: with --spec-type ngram, a completion that
// copies its prompt has drafts taken, and vLLM's spec_decode families
// count them: the tokens taken, by position, sum to the tokens taken,
// which are at most the drafted ones; the answer is the one without
// speculation; /v1/models says the model speculates with n-grams.
func TestMetricsSpeculation(t *testing.T) {
	body := map[string]any{"prompt": "Tom and his mom went to the park. Tom and his mom went to the", "max_tokens": 48, "temperature": 0, "ignore_eos": true}
	answer := func(ts *e2etest.Server) string {
		resp, b := ts.Post(t, "/v1/completions", body)
		var c textCompletion
		unmarshal(t, string(b), &c)
		if resp.StatusCode != 200 || len(c.Choices) != 1 {
			t.Fatalf("completion: %d %s", resp.StatusCode, b)
		}
		return c.Choices[0].Text
	}
	speculative := func(ts *e2etest.Server) []string {
		var models struct {
			Data []struct {
				Meta struct {
					Speculative []string `json:"speculative"`
				} `json:"meta"`
			} `json:"data"`
		}
		ts.Get(t, "/v1/models", &models)
		if len(models.Data) != 1 || models.Data[0].Meta.Speculative == nil {
			t.Fatalf("/v1/models: %+v; want one model saying how it speculates", models)
		}
		return models.Data[0].Meta.Speculative
	}
	off := startServer(t, engine.Config{Parallel: 1})
	plain := answer(off)
	if a := speculative(off); len(a) != 0 {
		t.Errorf("/v1/models speculative: %q without speculation; want []", a)
	}
	draft := testmodel.Path(t, testmodel.TinyStories656K) // the served model itself: its drafts are taken
	for _, tc := range []struct {
		spec engine.Speculation
		want []string
	}{
		{engine.Speculation{Ngram: true}, []string{"ngram"}},
		{engine.Speculation{Model: draft}, []string{"draft:" + strings.TrimSuffix(testmodel.TinyStories656K, ".gguf")}},
	} {
		ts := startServer(t, engine.Config{Parallel: 1, Speculate: tc.spec})
		if got := answer(ts); got != plain {
			t.Errorf("with speculation %v %q; without %q", tc.want, got, plain)
		}
		if got := speculative(ts); !slices.Equal(got, tc.want) {
			t.Errorf("/v1/models speculative: %q; want %q", got, tc.want)
		}
		m := ts.MetricFamilies(t)
		counter := func(name string, labels ...string) float64 {
			return value(e2etest.Series(t, m, name, append([]string{"model_name", "tiny"}, labels...)...))
		}
		drafts, drafted, taken := counter("vllm:spec_decode_num_drafts_total"), counter("vllm:spec_decode_num_draft_tokens_total"), counter("vllm:spec_decode_num_accepted_tokens_total")
		var byPos float64
		for i := range 64 { // NgramDraftMax: lookup drafts grow past 8
			byPos += counter("vllm:spec_decode_num_accepted_tokens_per_pos_total", "position", strconv.Itoa(i))
		}
		if drafts == 0 || taken == 0 || taken > drafted || byPos != taken {
			t.Errorf("%v: %v drafts of %v tokens, %v taken (%v by position); want drafts taken, each counted once", tc.want, drafts, drafted, taken, byPos)
		}
	}
}

func TestMetricsUnload(t *testing.T) {
	ms := startModels(t, registry.Config{KeepAlive: -1}, spec(t, "tiny", testmodel.TinyStories656K, 2))
	complete := func() {
		t.Helper()
		resp, b := ms.Post(t, "/v1/completions", map[string]any{"prompt": "Hi", "max_tokens": 2, "ignore_eos": true, "keep_alive": 0})
		if resp.StatusCode != 200 {
			t.Fatalf("completion: %d %s", resp.StatusCode, b)
		}
	}
	unloaded := func() bool { return ms.states(t)["tiny"] == "unloaded" }
	for round := 1; round <= 2; round++ {
		complete()
		e2etest.WaitFor(t, "the model to unload", unloaded)
		fams := ms.MetricFamilies(t)
		for _, name := range []string{"vllm:num_requests_running", "vllm:kv_cache_usage_perc", "llamacpp:requests_processing", "corral_queue_depth", "vllm:generation_tokens_total"} {
			if f := fams[name]; f != nil && len(f.GetMetric()) > 0 {
				t.Errorf("round %d: %s has series after the unload: %v", round, name, f.GetMetric())
			}
		}
		if v := value(e2etest.Series(t, fams, "vllm:request_success_total", "model_name", "tiny", "finished_reason", "length")); v != float64(round) {
			t.Errorf("round %d: vllm:request_success_total = %v", round, v)
		}
		if v := value(e2etest.Series(t, fams, "corral_model_loads_total", "model_name", "tiny")); v != float64(round) {
			t.Errorf("round %d: corral_model_loads_total = %v", round, v)
		}
		if v := value(e2etest.Series(t, fams, "corral_models_loaded")); v != 0 {
			t.Errorf("round %d: corral_models_loaded = %v", round, v)
		}
	}
}

// The request log has one line per request with the generation's fields,
// under the client's X-Request-Id, which the response echoes; a client
// that goes away shows as disconnected, its request as aborted.
func TestRequestLogLine(t *testing.T) {
	log, logs := e2etest.NewLogger()
	ts := e2etest.Start(t, testmodel.TinyStories656K, e2etest.Options{Engine: engine.Config{Parallel: 1},
		Server: server.Config{Logger: log}})
	post := func(ctx context.Context, id string, body map[string]any) *http.Response {
		t.Helper()
		b, _ := json.Marshal(body)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/completions", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(server.RequestIDHeader, id)
		resp, err := ts.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	line := func(id string) map[string]any {
		t.Helper()
		var rec map[string]any
		e2etest.WaitFor(t, "the request line of "+id, func() bool {
			for _, r := range logs.Records(t, "request") {
				if r["id"] == id {
					rec = r
					return true
				}
			}
			return false
		})
		return rec
	}

	resp := post(context.Background(), "job-42.a", map[string]any{"prompt": "Once upon a time", "max_tokens": 5, "ignore_eos": true})
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got := resp.Header.Get(server.RequestIDHeader); resp.StatusCode != 200 || got != "job-42.a" {
		t.Fatalf("%d %s, X-Request-Id %q", resp.StatusCode, b, got)
	}
	var c textCompletion
	unmarshal(t, string(b), &c)
	rec := line("job-42.a")
	want := map[string]any{
		"method": "POST", "path": "/v1/completions", "status": float64(200), "model": "tiny",
		"prompt_tokens": float64(c.Usage.PromptTokens), "cached_tokens": float64(c.Usage.PromptTokensDetails.CachedTokens),
		"generated_tokens": float64(5), "finish_reason": "length", "disconnected": false,
	}
	for k, v := range want {
		if rec[k] != v {
			t.Errorf("request line %s = %v, want %v (%v)", k, rec[k], v, rec)
		}
	}
	for _, k := range []string{"ttft", "tokens_per_second", "duration"} {
		if v, ok := rec[k].(float64); !ok || v <= 0 {
			t.Errorf("request line %s = %v, want > 0", k, rec[k])
		}
	}
	if v, ok := rec["queue"].(float64); !ok || v < 0 {
		t.Errorf("request line queue = %v", rec["queue"])
	}

	// A streaming client that leaves after the first event.
	ctx, cancel := context.WithCancel(context.Background())
	resp = post(ctx, "leaver", map[string]any{"prompt": "Once upon a time", "max_tokens": 100000, "ignore_eos": true, "stream": true})
	ev := newSSEEvents(t, resp.Body).next()
	if len(ev.Data) == 0 {
		t.Fatalf("first event %+v", ev)
	}
	cancel()
	resp.Body.Close()
	rec = line("leaver")
	if rec["finish_reason"] != "abort" || rec["disconnected"] != true || rec["model"] != "tiny" {
		t.Errorf("request line of a client gone: %v", rec)
	}
	fams := ts.MetricFamilies(t)
	if v := value(e2etest.Series(t, fams, "vllm:request_success_total", "model_name", "tiny", "finished_reason", "abort")); v != 1 {
		t.Errorf("aborted requests: %v", v)
	}

	// An id with a space is replaced, and a request that generates
	// nothing has no generation fields.
	req, err := http.NewRequest(http.MethodGet, ts.URL+"/v1/models", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(server.RequestIDHeader, "two words")
	if resp, err = ts.Client.Do(req); err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	got := resp.Header.Get(server.RequestIDHeader)
	if got == "" || got == "two words" {
		t.Fatalf("X-Request-Id %q for an invalid one", got)
	}
	if rec := line(got); rec["model"] != nil || rec["path"] != "/v1/models" {
		t.Errorf("request line of a request without generation: %v", rec)
	}
}
