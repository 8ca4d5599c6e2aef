package bench

import (
	"math"
	"testing"
	"time"
)

func msd(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestPercentileLinear(t *testing.T) {
	xs := []float64{1, 2, 3, 4}
	for _, tc := range []struct{ p, want float64 }{
		{0, 1},
		{50, 2.5},  // h = 1.5
		{90, 3.7},  // h = 2.7
		{99, 3.97}, // h = 2.97
		{100, 4},
	} {
		if got := Percentile(xs, tc.p); !near(got, tc.want) {
			t.Errorf("Percentile(%v, %v) = %v, want %v", xs, tc.p, got, tc.want)
		}
	}
	if got := Percentile([]float64{7}, 99); got != 7 {
		t.Errorf("one value: got %v, want 7", got)
	}
	if got := Percentile(nil, 50); !math.IsNaN(got) {
		t.Errorf("no values: got %v, want NaN", got)
	}
}

func TestTPOTOneToken(t *testing.T) {
	r := Record{Chunks: []time.Duration{msd(50)}, End: msd(60), OutputTokens: 1}
	if d, ok := r.TPOT(); ok {
		t.Errorf("TPOT with one token = %v, want excluded", d)
	}
	r.OutputTokens = 3 // (60 − 50) / 2
	if d, ok := r.TPOT(); !ok || d != msd(5) {
		t.Errorf("TPOT with three tokens = %v, %v; want 5ms", d, ok)
	}
	if got := r.ITL(); got != nil {
		t.Errorf("ITL of one chunk = %v, want none", got)
	}
}

// fixture is three completed requests, one failure and one cancellation.
//
//	A: sent 0ms,  headers 5ms, chunks 100 110 130, end 130, 3 tokens: TTFT 100, TPOT 15, ITL 10 20
//	B: sent 10ms, headers 2ms, chunk 50, end 60, 1 token:               TTFT 50, no TPOT, no ITL
//	C: sent 20ms, headers 1ms, chunks 40 70 75 95, end 100, 4 tokens:   TTFT 40, TPOT 20, ITL 30 5 20
func fixture() []Record {
	return []Record{
		{Start: 0, Submit: msd(5), Chunks: []time.Duration{msd(100), msd(110), msd(130)}, End: msd(130),
			PromptTokens: 10, OutputTokens: 3, CachedTokens: 4, FromUsage: true},
		{Start: msd(10), Submit: msd(2), Chunks: []time.Duration{msd(50)}, End: msd(60),
			PromptTokens: 20, OutputTokens: 1, FromUsage: true},
		{Start: msd(20), Submit: msd(1), Chunks: []time.Duration{msd(40), msd(70), msd(75), msd(95)}, End: msd(100),
			PromptTokens: 30, OutputTokens: 4, FromUsage: true},
		{Start: msd(30), Submit: msd(3), End: msd(3), Err: "http_503"},
		{Start: msd(40), Submit: msd(4), Chunks: []time.Duration{msd(20)}, End: msd(20), OutputTokens: 1, Cancelled: true},
	}
}

func TestSummarize(t *testing.T) {
	s := Summarize(fixture(), 2*time.Second, SLO{})
	if s.Completed != 3 || s.Failed != 1 || s.Cancelled != 1 {
		t.Errorf("completed/failed/cancelled = %d/%d/%d, want 3/1/1", s.Completed, s.Failed, s.Cancelled)
	}
	if len(s.Errors) != 1 || s.Errors["http_503"] != 1 {
		t.Errorf("errors = %v, want http_503:1", s.Errors)
	}
	if s.InputTokens != 60 || s.OutputTokens != 8 || s.CachedTokens != 4 {
		t.Errorf("tokens in/out/cached = %d/%d/%d, want 60/8/4", s.InputTokens, s.OutputTokens, s.CachedTokens)
	}
	if s.TokenSource != TokensFromUsage {
		t.Errorf("token source = %q, want usage", s.TokenSource)
	}
	// Throughputs over 2 s: 3 requests, 8 output tokens, 68 tokens in all.
	if !near(s.RequestThroughput, 1.5) || !near(s.OutputThroughput, 4) || !near(s.TotalThroughput, 34) {
		t.Errorf("throughput req/out/total = %v/%v/%v, want 1.5/4/34", s.RequestThroughput, s.OutputThroughput, s.TotalThroughput)
	}
	if s.Goodput != nil {
		t.Errorf("goodput = %v without SLO, want nil", *s.Goodput)
	}
	// Last acceptance: the cancelled request, sent at 40ms, accepted 4ms later.
	if !near(s.SubmitWallS, 0.044) {
		t.Errorf("submit wall = %v s, want 0.044", s.SubmitWallS)
	}
	checkStats(t, "TTFT", s.TTFT, Stats{ // 40 50 100
		N: 3, Mean: 190.0 / 3, Median: 50, P90: 90, P95: 95, P99: 99, Min: 40, Max: 100})
	checkStats(t, "TPOT", s.TPOT, Stats{ // 15 20; B's single token is excluded
		N: 2, Mean: 17.5, Median: 17.5, P90: 19.5, P95: 19.75, P99: 19.95, Min: 15, Max: 20})
	checkStats(t, "ITL", s.ITL, Stats{ // pooled: 5 10 20 20 30
		N: 5, Mean: 17, Median: 20, P90: 26, P95: 28, P99: 29.6, Min: 5, Max: 30})
	checkStats(t, "E2EL", s.E2EL, Stats{ // 60 100 130
		N: 3, Mean: 290.0 / 3, Median: 100, P90: 124, P95: 127, P99: 129.4, Min: 60, Max: 130})
	checkStats(t, "submit", s.Submit, Stats{ // 1 2 5
		N: 3, Mean: 8.0 / 3, Median: 2, P90: 4.4, P95: 4.7, P99: 4.94, Min: 1, Max: 5})
}

func checkStats(t *testing.T, name string, got, want Stats) {
	t.Helper()
	if got.N != want.N || !near(got.Mean, want.Mean) || !near(got.Median, want.Median) ||
		!near(got.P90, want.P90) || !near(got.P95, want.P95) || !near(got.P99, want.P99) ||
		!near(got.Min, want.Min) || !near(got.Max, want.Max) {
		t.Errorf("%s stats = %+v, want %+v", name, got, want)
	}
}

func TestTokenSource(t *testing.T) {
	recs := fixture()[:3]
	recs[1].FromUsage = false
	if got := Summarize(recs, time.Second, SLO{}).TokenSource; got != TokensMixed {
		t.Errorf("some usage: source %q, want mixed", got)
	}
	for i := range recs {
		recs[i].FromUsage = false
	}
	if got := Summarize(recs, time.Second, SLO{}).TokenSource; got != TokensFromChunks {
		t.Errorf("no usage: source %q, want chunks", got)
	}
	if got := Summarize(fixture()[3:4], time.Second, SLO{}).TokenSource; got != TokensNone {
		t.Errorf("nothing completed: source %q, want none", got)
	}
}

func TestGoodput(t *testing.T) {
	for _, tc := range []struct {
		slo  SLO
		want float64 // requests/s over 2 s
	}{
		// A fails TTFT (100 > 60); B passes (its TPOT is not checked);
		// C fails TPOT (20 > 18).
		{SLO{TTFT: msd(60), TPOT: msd(18)}, 0.5},
		// A fails E2EL (130 > 100); B (60) and C (100, at the limit) pass.
		{SLO{E2EL: msd(100)}, 1.0},
		// Everything passes; the failed and the cancelled request never count.
		{SLO{TTFT: time.Second}, 1.5},
	} {
		s := Summarize(fixture(), 2*time.Second, tc.slo)
		if s.Goodput == nil || !near(*s.Goodput, tc.want) {
			t.Errorf("goodput with %v = %v, want %v", tc.slo, s.Goodput, tc.want)
		}
	}
}

func TestParseSLO(t *testing.T) {
	slo, err := ParseSLO("ttft:300 tpot:50,e2el:2000.5")
	if err != nil {
		t.Fatal(err)
	}
	want := SLO{TTFT: msd(300), TPOT: msd(50), E2EL: msd(2000.5)}
	if slo != want {
		t.Errorf("ParseSLO = %+v, want %+v", slo, want)
	}
	if got := slo.String(); got != "ttft:300 tpot:50 e2el:2000.5" {
		t.Errorf("String = %q", got)
	}
	if slo, err := ParseSLO(""); err != nil || !slo.IsZero() {
		t.Errorf("empty: %+v, %v; want zero SLO", slo, err)
	}
	for _, bad := range []string{"ttft", "ttft:abc", "itl:5", "ttft:-1", "ttft:0", "e2el:inf"} {
		if _, err := ParseSLO(bad); err == nil {
			t.Errorf("ParseSLO(%q) succeeded, want error", bad)
		}
	}
}
