package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// Settings is a benchmark's whole configuration, recorded in the report.
type Settings struct {
	// Target: a server (URL, API, Model) or an in-process engine.
	URL       string `json:"url,omitempty"`
	API       API    `json:"api,omitempty"`
	Model     string `json:"model"`
	InProcess bool   `json:"in_process"`
	ModelPath string `json:"model_path,omitempty"`
	Parallel  int    `json:"parallel,omitempty"`
	Threads   int    `json:"threads,omitempty"`
	CtxSize   int    `json:"ctx_size,omitempty"`
	// Workload.
	InputLen        int    `json:"input_len"`
	OutputLen       int    `json:"output_len"`
	IgnoreEOS       bool   `json:"ignore_eos"`
	Dataset         string `json:"dataset,omitempty"`
	SharedPrefixLen int    `json:"shared_prefix_len"`
	Priority        int    `json:"priority,omitempty"`
	// PromptTokenizer says how prompt lengths were measured: "server"
	// (/tokenize), "engine" or "words".
	PromptTokenizer string `json:"prompt_tokenizer"`
	// Goodput is the SLO as given, "" when none.
	Goodput string `json:"goodput,omitempty"`
	// Sweep lists the concurrencies of a sweep; empty for a single run.
	Sweep []int `json:"sweep_concurrency,omitempty"`
	// Load is the load shape (per run, Concurrency varies in a sweep).
	Load Config `json:"load"`
}

// RunReport is one run's load shape, figures and requests.
type RunReport struct {
	Load Config `json:"load"`
	Summary
	Requests []RequestReport `json:"requests"`

	records []Record // for plots
}

// RequestReport is one request's figures in the JSON report.
type RequestReport struct {
	StartMS      float64 `json:"start_ms"`
	SubmitMS     float64 `json:"submit_ms"`
	TTFTMS       float64 `json:"ttft_ms"`
	E2ELMS       float64 `json:"e2el_ms"`
	Chunks       int     `json:"chunks"`
	PromptTokens int     `json:"prompt_tokens"`
	OutputTokens int     `json:"output_tokens"`
	CachedTokens int     `json:"cached_tokens"`
	Error        string  `json:"error,omitempty"`
	ErrorMessage string  `json:"error_message,omitempty"`
	Cancelled    bool    `json:"cancelled,omitempty"`
}

// NewRunReport summarizes one run.
func NewRunReport(load Config, out Outcome, slo SLO) RunReport {
	rr := RunReport{Load: load, Summary: Summarize(out.Records, out.Duration, slo), records: out.Records}
	rr.Requests = make([]RequestReport, len(out.Records))
	for i, r := range out.Records {
		rr.Requests[i] = RequestReport{
			StartMS: ms(r.Start), SubmitMS: ms(r.Submit), TTFTMS: ms(r.TTFT()), E2ELMS: ms(r.End),
			Chunks: len(r.Chunks), PromptTokens: r.PromptTokens, OutputTokens: r.OutputTokens,
			CachedTokens: r.CachedTokens, Error: r.Err, ErrorMessage: r.ErrMsg, Cancelled: r.Cancelled,
		}
	}
	return rr
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Report is a whole benchmark: its settings and one run, or one per
// concurrency of a sweep.
type Report struct {
	Settings Settings    `json:"config"`
	Runs     []RunReport `json:"runs"`
}

// WriteJSON writes the report, indented, to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// WriteTable prints the report for people: the full figures of a single
// run, or one line per concurrency for a sweep.
func (r *Report) WriteTable(w io.Writer) {
	if len(r.Runs) == 1 {
		r.writeRun(w, r.Runs[0])
		return
	}
	r.writeSweep(w)
}

func loadName(c Config) string {
	switch {
	case math.IsInf(c.RequestRate, 1):
		return "open loop, all at once"
	case c.RequestRate > 0:
		s := fmt.Sprintf("open loop, %.4g req/s, Poisson", c.RequestRate)
		if c.Burstiness != 0 && c.Burstiness != 1 {
			s = fmt.Sprintf("open loop, %.4g req/s, gamma burstiness %.3g", c.RequestRate, c.Burstiness)
		}
		if c.Concurrency > 0 {
			s += fmt.Sprintf(", at most %d in flight", c.Concurrency)
		}
		return s
	}
	return fmt.Sprintf("closed loop, concurrency %d", c.Concurrency)
}

func (r *Report) target() string {
	if r.Settings.InProcess {
		return "in-process engine"
	}
	return fmt.Sprintf("%s (%s)", r.Settings.URL, r.Settings.API)
}

func (r *Report) writeRun(w io.Writer, run RunReport) {
	s := run.Summary
	line := func(name string, format string, v any) {
		fmt.Fprintf(w, "%-40s "+format+"\n", name+":", v)
	}
	section := func(title string) {
		pad := 50 - len(title)
		fmt.Fprintf(w, "%s%s%s\n", strings.Repeat("-", pad/2), title, strings.Repeat("-", pad-pad/2))
	}
	dist := func(name string, st Stats) {
		line("Mean "+name+" (ms)", "%.2f", st.Mean)
		line("Median "+name+" (ms)", "%.2f", st.Median)
		line("P90 "+name+" (ms)", "%.2f", st.P90)
		line("P99 "+name+" (ms)", "%.2f", st.P99)
	}
	fmt.Fprintln(w, "============ Serving Benchmark Result ============")
	line("Target", "%s", r.target())
	line("Model", "%s", r.Settings.Model)
	line("Load", "%s", loadName(run.Load))
	line("Successful requests", "%d", s.Completed)
	line("Failed requests", "%d", s.Failed)
	line("Cancelled requests", "%d", s.Cancelled)
	line("Benchmark duration (s)", "%.2f", s.DurationS)
	line("Total input tokens", "%d", s.InputTokens)
	line("Total generated tokens", "%d", s.OutputTokens)
	line("Cached prompt tokens", "%d", s.CachedTokens)
	line("Token counts from", "%s", s.TokenSource)
	line("Request throughput (req/s)", "%.2f", s.RequestThroughput)
	if s.Goodput != nil {
		line("Request goodput (req/s)", "%.2f", *s.Goodput)
	}
	line("Output token throughput (tok/s)", "%.2f", s.OutputThroughput)
	line("Total token throughput (tok/s)", "%.2f", s.TotalThroughput)
	section("Submit Latency")
	line("Submit wall (s)", "%.4f", s.SubmitWallS)
	dist("submit", s.Submit)
	section("Time to First Token")
	dist("TTFT", s.TTFT)
	section("Time per Output Token (excl. 1st token)")
	dist("TPOT", s.TPOT)
	section("Inter-token Latency")
	dist("ITL", s.ITL)
	section("End-to-end Latency")
	dist("E2EL", s.E2EL)
	if len(s.Errors) > 0 {
		section("Errors")
		for _, k := range sortedKeys(s.Errors) {
			line(k, "%d", s.Errors[k])
		}
	}
	fmt.Fprintln(w, strings.Repeat("=", 50))
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (r *Report) writeSweep(w io.Writer) {
	fmt.Fprintf(w, "Sweep: %s, model %s\n", r.target(), r.Settings.Model)
	fmt.Fprintf(w, "%5s %8s %10s %9s %9s %9s %9s %9s %9s %9s %5s %5s\n",
		"conc", "req/s", "out tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "ITL p50", "ITL p99", "E2EL p50", "sub p99", "ok", "err")
	for _, run := range r.Runs {
		s := run.Summary
		fmt.Fprintf(w, "%5d %8.2f %10.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %5d %5d\n",
			run.Load.Concurrency, s.RequestThroughput, s.OutputThroughput, s.TTFT.Median, s.TTFT.P99,
			s.TPOT.Median, s.ITL.Median, s.ITL.P99, s.E2EL.Median, s.Submit.P99, s.Completed, s.Failed)
	}
	fmt.Fprintln(w, "(latencies in ms; token counts from", tokenSources(r.Runs)+")")
}

func tokenSources(runs []RunReport) string {
	var srcs []string
	for _, run := range runs {
		if !slices.Contains(srcs, run.TokenSource) {
			srcs = append(srcs, run.TokenSource)
		}
	}
	return strings.Join(srcs, ", ")
}

// WriteSubmitTable prints seed 004's streaming benchmark table for every
// run: submit wall time, submit latency, TTFT and latency p50/p95/p99,
// and throughput.
func (r *Report) WriteSubmitTable(w io.Writer) {
	for _, run := range r.Runs {
		s := run.Summary
		fmt.Fprintf(w, "=== streaming benchmark (%s) ===\n", r.target())
		fmt.Fprintf(w, "Model: %s\n", r.Settings.Model)
		fmt.Fprintf(w, "Load: %s\n", loadName(run.Load))
		fmt.Fprintf(w, "Requests: %d (failed %d)\n", s.Completed, s.Failed)
		fmt.Fprintf(w, "Prompt tokens (total): %d\n", s.InputTokens)
		fmt.Fprintf(w, "Completion tokens (total): %d\n", s.OutputTokens)
		fmt.Fprintf(w, "Submit wall: %.6f s\n", s.SubmitWallS)
		fmt.Fprintf(w, "Submit latency p50/p95/p99: %.2f/%.2f/%.2f ms\n", s.Submit.Median, s.Submit.P95, s.Submit.P99)
		fmt.Fprintf(w, "TTFT p50/p95/p99: %.2f/%.2f/%.2f ms\n", s.TTFT.Median, s.TTFT.P95, s.TTFT.P99)
		fmt.Fprintf(w, "Latency p50/p95/p99: %.2f/%.2f/%.2f ms\n", s.E2EL.Median, s.E2EL.P95, s.E2EL.P99)
		fmt.Fprintf(w, "Throughput (completion, total): %.2f, %.2f tokens/s\n", s.OutputThroughput, s.TotalThroughput)
	}
}
