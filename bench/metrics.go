// Package bench load-tests LLM servers and reports latency and throughput
// with the metrics of vLLM's "vllm bench serve": TTFT, TPOT, ITL, E2EL,
// request and token throughput and goodput, plus the time until a request
// was accepted (submit latency) and error counts by kind.
//
// A Target sends one request and returns what it observed as a Record:
// Client speaks HTTP (OpenAI chat, OpenAI completions, llama.cpp
// /completion), EngineTarget drives an engine.Engine in-process. Run drives
// a Target in a closed or open loop and Summarize turns the records into a
// Summary.
package bench

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Record is what one request observed. Times are offsets from the moment
// the request was sent, except Start, which is the offset of the send from
// the start of the run.
type Record struct {
	// Start is when the request was sent, relative to the run's start.
	Start time.Duration
	// Submit is the time until the request was accepted: the response
	// headers over HTTP, the return of Submit in-process.
	Submit time.Duration
	// Chunks holds the arrival time of every chunk that carried content.
	Chunks []time.Duration
	// End is the time the response was complete (or failed).
	End time.Duration
	// PromptTokens and OutputTokens count tokens: from the server's usage
	// when FromUsage, otherwise the workload's prompt length and the number
	// of content chunks.
	PromptTokens, OutputTokens int
	// CachedTokens is the server-reported prompt tokens reused from cache.
	CachedTokens int
	// FromUsage reports whether the server sent token usage.
	FromUsage bool
	// Err is the error kind ("" on success): http_<status>, timeout,
	// disconnect, connect, stream_error, or an engine error name in-process.
	Err string
	// ErrMsg is the error text, for logs.
	ErrMsg string
	// Cancelled reports that the client hung up on purpose
	// (Config.CancelFraction); such requests are neither successes nor errors.
	Cancelled bool
}

// ok reports whether r completed successfully.
func (r Record) ok() bool { return r.Err == "" && !r.Cancelled }

// TTFT is the time to the first content chunk; 0 when none arrived.
func (r Record) TTFT() time.Duration {
	if len(r.Chunks) == 0 {
		return 0
	}
	return r.Chunks[0]
}

// TPOT is the time per output token after the first,
// (E2EL − TTFT)/(out − 1); ok is false when out ≤ 1.
func (r Record) TPOT() (tpot time.Duration, ok bool) {
	if r.OutputTokens <= 1 {
		return 0, false
	}
	return (r.End - r.TTFT()) / time.Duration(r.OutputTokens-1), true
}

// ITL returns the gaps between consecutive content chunks.
func (r Record) ITL() []time.Duration {
	if len(r.Chunks) < 2 {
		return nil
	}
	gaps := make([]time.Duration, 0, len(r.Chunks)-1)
	for i := 1; i < len(r.Chunks); i++ {
		gaps = append(gaps, r.Chunks[i]-r.Chunks[i-1])
	}
	return gaps
}

// Stats summarizes a set of durations in milliseconds. Percentiles use
// linear interpolation between closest ranks, like numpy's default: for p
// and n sorted values, h = (n−1)·p/100 and the result is
// x[⌊h⌋] + (h−⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋]).
type Stats struct {
	N      int     `json:"n"`
	Mean   float64 `json:"mean"`
	Median float64 `json:"median"`
	P90    float64 `json:"p90"`
	P95    float64 `json:"p95"`
	P99    float64 `json:"p99"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// NewStats summarizes ds; the zero Stats when ds is empty.
func NewStats(ds []time.Duration) Stats {
	if len(ds) == 0 {
		return Stats{}
	}
	ms := make([]float64, len(ds))
	sum := 0.0
	for i, d := range ds {
		ms[i] = float64(d) / float64(time.Millisecond)
		sum += ms[i]
	}
	slices.Sort(ms)
	return Stats{
		N:      len(ms),
		Mean:   sum / float64(len(ms)),
		Median: Percentile(ms, 50),
		P90:    Percentile(ms, 90),
		P95:    Percentile(ms, 95),
		P99:    Percentile(ms, 99),
		Min:    ms[0],
		Max:    ms[len(ms)-1],
	}
}

// Percentile returns the p-th percentile (0–100) of sorted, interpolating
// linearly between closest ranks. It returns NaN for an empty slice.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	h := float64(n-1) * p / 100
	lo := int(math.Floor(h))
	if lo >= n-1 {
		return sorted[n-1]
	}
	if lo < 0 {
		return sorted[0]
	}
	return sorted[lo] + (h-float64(lo))*(sorted[lo+1]-sorted[lo])
}

// SLO holds the goodput thresholds; a zero field is not checked.
type SLO struct {
	TTFT, TPOT, E2EL time.Duration
}

// IsZero reports whether no threshold is set.
func (s SLO) IsZero() bool { return s == SLO{} }

// String formats s the way ParseSLO reads it.
func (s SLO) String() string {
	var parts []string
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"ttft", s.TTFT}, {"tpot", s.TPOT}, {"e2el", s.E2EL}} {
		if f.d > 0 {
			ms := float64(f.d) / float64(time.Millisecond)
			parts = append(parts, f.name+":"+strconv.FormatFloat(ms, 'g', -1, 64))
		}
	}
	return strings.Join(parts, " ")
}

// Meets reports whether a successful record is within every threshold.
// TPOT is not checked for requests with at most one output token.
func (s SLO) Meets(r Record) bool {
	if s.TTFT > 0 && r.TTFT() > s.TTFT {
		return false
	}
	if tpot, ok := r.TPOT(); ok && s.TPOT > 0 && tpot > s.TPOT {
		return false
	}
	if s.E2EL > 0 && r.End > s.E2EL {
		return false
	}
	return true
}

// ParseSLO reads thresholds like "ttft:300 tpot:50 e2el:2000" (milliseconds;
// separated by spaces or commas), as vllm bench serve's --goodput does.
func ParseSLO(s string) (SLO, error) {
	var slo SLO
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' }) {
		name, val, ok := strings.Cut(f, ":")
		if !ok {
			return SLO{}, fmt.Errorf("goodput %q: want NAME:MS", f)
		}
		ms, err := strconv.ParseFloat(val, 64)
		if err != nil || ms <= 0 || math.IsInf(ms, 0) {
			return SLO{}, fmt.Errorf("goodput %q: want a positive number of milliseconds", f)
		}
		d := time.Duration(ms * float64(time.Millisecond))
		switch strings.ToLower(name) {
		case "ttft":
			slo.TTFT = d
		case "tpot":
			slo.TPOT = d
		case "e2el":
			slo.E2EL = d
		default:
			return SLO{}, fmt.Errorf("goodput %q: unknown metric %q (want ttft, tpot or e2el)", f, name)
		}
	}
	return slo, nil
}

// Token sources reported in Summary.TokenSource.
const (
	TokensFromUsage  = "usage"  // every successful request's usage was sent
	TokensFromChunks = "chunks" // no usage: content chunks were counted
	TokensMixed      = "mixed"  // some requests had usage, some not
	TokensNone       = "none"   // no request completed
)

// Summary holds every figure of one run. Latencies are in milliseconds,
// throughputs per second of Duration.
type Summary struct {
	// Completed requests finished without error; Failed ended with one;
	// Cancelled were hung up by the client on purpose.
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
	// Errors counts failed requests by kind.
	Errors map[string]int `json:"errors"`
	// DurationS is the run's wall time in seconds.
	DurationS float64 `json:"duration_s"`
	// TokenSource says where token counts came from: usage, chunks, mixed
	// or none.
	TokenSource string `json:"token_source"`
	// Token totals over completed requests.
	InputTokens  int `json:"total_input_tokens"`
	OutputTokens int `json:"total_output_tokens"`
	CachedTokens int `json:"total_cached_tokens"`
	// Throughputs over DurationS, completed requests only.
	RequestThroughput float64 `json:"request_throughput"`
	OutputThroughput  float64 `json:"output_throughput"`
	TotalThroughput   float64 `json:"total_token_throughput"`
	// Goodput is completed requests per second meeting every SLO; nil when
	// no SLO was given.
	Goodput *float64 `json:"goodput"`
	// Latency distributions over completed requests (ITL: every gap between
	// content chunks, pooled across requests).
	TTFT   Stats `json:"ttft_ms"`
	TPOT   Stats `json:"tpot_ms"`
	ITL    Stats `json:"itl_ms"`
	E2EL   Stats `json:"e2el_ms"`
	Submit Stats `json:"submit_ms"`
	// SubmitWallS is the time from the first send to the last acceptance,
	// in seconds: how long submitting the whole load took.
	SubmitWallS float64 `json:"submit_wall_s"`
}

// Summarize computes the figures for records collected over duration.
func Summarize(recs []Record, duration time.Duration, slo SLO) Summary {
	s := Summary{Errors: map[string]int{}, DurationS: duration.Seconds()}
	var ttft, tpot, itl, e2el, submit []time.Duration
	var firstStart, lastSubmit time.Duration
	usage, good := 0, 0
	for i, r := range recs {
		if i == 0 || r.Start < firstStart {
			firstStart = r.Start
		}
		if r.Err == "" && r.Start+r.Submit > lastSubmit {
			lastSubmit = r.Start + r.Submit
		}
		switch {
		case r.Cancelled:
			s.Cancelled++
			continue
		case r.Err != "":
			s.Failed++
			s.Errors[r.Err]++
			continue
		}
		s.Completed++
		if r.FromUsage {
			usage++
		}
		s.InputTokens += r.PromptTokens
		s.OutputTokens += r.OutputTokens
		s.CachedTokens += r.CachedTokens
		ttft = append(ttft, r.TTFT())
		if d, ok := r.TPOT(); ok {
			tpot = append(tpot, d)
		}
		itl = append(itl, r.ITL()...)
		e2el = append(e2el, r.End)
		submit = append(submit, r.Submit)
		if slo.Meets(r) {
			good++
		}
	}
	switch {
	case s.Completed == 0:
		s.TokenSource = TokensNone
	case usage == 0:
		s.TokenSource = TokensFromChunks
	case usage == s.Completed:
		s.TokenSource = TokensFromUsage
	default:
		s.TokenSource = TokensMixed
	}
	if lastSubmit > firstStart {
		s.SubmitWallS = (lastSubmit - firstStart).Seconds()
	}
	if sec := duration.Seconds(); sec > 0 {
		s.RequestThroughput = float64(s.Completed) / sec
		s.OutputThroughput = float64(s.OutputTokens) / sec
		s.TotalThroughput = float64(s.InputTokens+s.OutputTokens) / sec
		if !slo.IsZero() {
			g := float64(good) / sec
			s.Goodput = &g
		}
	}
	s.TTFT, s.TPOT, s.ITL, s.E2EL = NewStats(ttft), NewStats(tpot), NewStats(itl), NewStats(e2el)
	s.Submit = NewStats(submit)
	return s
}
