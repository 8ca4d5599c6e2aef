package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/llama"
	"github.com/corral-llm/corral/toolcall"
	"github.com/corral-llm/corral/wire"
)

// Benchmarks run on the synthetic 135M model (gguf.Shapes["135m"], random
// Q8_0 weights), written once into $CORRAL_BENCH_DIR (default: the OS temp
// dir). Threads: $CORRAL_BENCH_THREADS (default 2).
//
//	make bench   or   go test -run '^$' -bench . -benchtime 3x ./engine/

func benchModel(b *testing.B) string {
	b.Helper()
	return benchSynth(b, "corral-synth-135m.gguf", gguf.Shapes["135m"])
}

// benchSynth is the synthetic model of shape (seed 1) in
// CORRAL_BENCH_DIR (default: the temporary folder) as name, written once.
func benchSynth(b *testing.B, name string, shape gguf.Shape) string {
	b.Helper()
	dir := os.Getenv("CORRAL_BENCH_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err == nil {
		return path
	}
	tmp := path + ".tmp"
	if err := gguf.WriteSynthetic(tmp, shape, 1); err != nil {
		b.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		b.Fatal(err)
	}
	return path
}

// benchLlamaModel loads the benchmark model through the binding; it is
// closed when the benchmark ends.
func benchLlamaModel(b *testing.B) *llama.Model {
	b.Helper()
	m, err := llama.LoadModel(context.Background(), benchModel(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.Close)
	return m
}

func benchThreads() int {
	var n int
	if _, err := fmt.Sscan(os.Getenv("CORRAL_BENCH_THREADS"), &n); err != nil || n <= 0 {
		return 2
	}
	return n
}

const benchTokens = 128

// BenchmarkRawLoop is the baseline: one sequence, greedy, a plain loop over
// the binding with no scheduler.
func BenchmarkRawLoop(b *testing.B) {
	m := benchLlamaModel(b)
	ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 2048, NBatch: 512, NSeqMax: 1, Threads: benchThreads()})
	if err != nil {
		b.Fatal(err)
	}
	defer ctx.Close()
	prompt, _ := m.Tokenize("Once upon a time", true, true)
	b.ResetTimer()
	for range b.N {
		ctx.Clear()
		s, _ := llama.NewSampler(m, llama.SamplerParams{})
		var batch llama.Batch
		for i, tok := range prompt {
			batch.Add(tok, i, 0, i == len(prompt)-1)
		}
		pos := len(prompt)
		for range benchTokens {
			if err := ctx.Decode(&batch); err != nil {
				b.Fatal(err)
			}
			tok, _ := s.Sample(ctx, batch.Len()-1)
			batch.Reset()
			batch.Add(tok, pos, 0, true)
			pos++
		}
		s.Close()
	}
	b.ReportMetric(float64(b.N*benchTokens)/b.Elapsed().Seconds(), "tok/s")
}

// BenchmarkLlamaBench measures what llama-bench's default tests do, on
// the binding: pp512 (one pass of 512 prompt tokens into an empty cache)
// and tg128 (128 passes of one token each), flash attention on, n_batch =
// n_ubatch = 512, $CORRAL_BENCH_THREADS threads. Compare with
//
//	llama-bench -m $CORRAL_BENCH_DIR/corral-synth-135m.gguf -t 2 -fa 1 -p 512 -n 128
//
// built from the same llama.cpp (../shared/peers/build-llama-server.sh
// with TARGETS=llama-bench): the ceiling of any server on these kernels.
func BenchmarkLlamaBench(b *testing.B) {
	m := benchLlamaModel(b)
	ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 1024, NBatch: 512, NSeqMax: 1, Threads: benchThreads()})
	if err != nil {
		b.Fatal(err)
	}
	defer ctx.Close()
	var batch llama.Batch
	b.Run("pp512", func(b *testing.B) {
		for b.Loop() {
			ctx.Clear()
			batch.Reset()
			for i := range 512 {
				batch.Add(llama.Token(100+i%1000), i, 0, i == 511)
			}
			if err := ctx.Decode(&batch); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*512)/b.Elapsed().Seconds(), "tok/s")
	})
	b.Run("tg128", func(b *testing.B) {
		for b.Loop() {
			ctx.Clear()
			for i := range 128 {
				batch.Reset()
				batch.Add(llama.Token(100+i%1000), i, 0, true)
				if err := ctx.Decode(&batch); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.N*128)/b.Elapsed().Seconds(), "tok/s")
	})
}

// BenchmarkLongPrefill evaluates one prompt of 2,041 or 7,578 tokens in
// 512-token passes on the 135M shape with a 32k training context and a
// 32k cache, as scripts/versus.sh's long row does over HTTP: the
// binding's ceiling for that row, with and without ggml's persistent
// thread pool.
func BenchmarkLongPrefill(b *testing.B) {
	dir := os.Getenv("CORRAL_BENCH_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	path := filepath.Join(dir, "corral-synth-135m-32k.gguf")
	if _, err := os.Stat(path); err != nil {
		shape, err := gguf.ParseShape("135m,ctx=32768")
		if err != nil {
			b.Fatal(err)
		}
		if err := gguf.WriteSynthetic(path+".tmp", shape, 1); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			b.Fatal(err)
		}
	}
	m, err := llama.LoadModel(context.Background(), path)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	for _, pool := range []bool{false, true} {
		ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 32768, NBatch: 512, NSeqMax: 1, Threads: benchThreads(), NoThreadPool: !pool})
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{2041, 7578} {
			b.Run(fmt.Sprintf("pool=%v/%d", pool, n), func(b *testing.B) {
				var batch llama.Batch
				for b.Loop() {
					ctx.Clear()
					for i := 0; i < n; i += 512 {
						batch.Reset()
						for j := i; j < min(i+512, n); j++ {
							batch.Add(llama.Token(100+j%1000), j, 0, j == n-1)
						}
						if err := ctx.Decode(&batch); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/prompt")
			})
		}
		ctx.Close()
	}
}

// BenchmarkEngineStreams measures aggregate decode throughput through the
// engine (no HTTP) at several concurrencies, each stream generating
// benchTokens tokens with ignore_eos, and the scheduler's own time per
// step (Stats.StepOwnTime: all but the forward passes).
func BenchmarkEngineStreams(b *testing.B) {
	path := benchModel(b)
	for _, n := range []int{1, 4, 8, 16} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			e, err := engine.New(context.Background(), engine.Config{ModelPath: path, Parallel: n, Threads: benchThreads(), CtxSize: 1024 * n})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			b.ResetTimer()
			for range b.N {
				var wg sync.WaitGroup
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						s, err := e.Submit(context.Background(), engine.Request{
							Prompt: fmt.Sprintf("Stream %d: once upon a time", i), AddSpecial: true,
							MaxTokens: benchTokens, IgnoreEOS: true, NoCachePrompt: true,
						})
						if err != nil {
							b.Error(err)
							return
						}
						collect(b, s)
					}()
				}
				wg.Wait()
			}
			b.ReportMetric(float64(b.N*n*benchTokens)/b.Elapsed().Seconds(), "tok/s")
			st := e.Stats()
			b.ReportMetric(float64(st.StepOwnTime.Microseconds())/float64(max(1, st.Steps)), "own-µs/step")
		})
	}
}

// BenchmarkSubmitBurst submits 256 requests at once while a long prefill
// runs, and reports the p50/p99 time spent inside Submit (seed 004).
func BenchmarkSubmitBurst(b *testing.B) {
	e, err := engine.New(context.Background(), engine.Config{ModelPath: benchModel(b), Parallel: 4, Threads: benchThreads(), CtxSize: 4 * 2048, MaxQueue: 512})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 100)
	var lat []time.Duration
	b.ResetTimer()
	for range b.N {
		ctx, cancel := context.WithCancel(context.Background())
		prefill, err := e.Submit(ctx, engine.Request{Prompt: long, AddSpecial: true, MaxTokens: 1})
		if err != nil {
			b.Fatal(err)
		}
		streams := make([]*engine.Stream, 0, 256)
		for i := range 256 {
			t0 := time.Now()
			s, err := e.Submit(ctx, engine.Request{Prompt: fmt.Sprintf("Request %d says hello", i), AddSpecial: true, MaxTokens: 4})
			lat = append(lat, time.Since(t0))
			if err != nil {
				b.Fatal(err)
			}
			streams = append(streams, s)
		}
		cancel()
		collect(b, prefill)
		for _, s := range streams {
			collect(b, s)
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkGrammarAmong8 runs 8 streams, one of them constrained by a
// grammar, and reports the mean step time (ms/step: one token for every
// stream) with and without the grammar stream. A grammar pass over the
// whole vocabulary (49,152 tokens in the 135M shape) on every step slows
// every stream; checking only the sampled token does not.
func BenchmarkGrammarAmong8(b *testing.B) {
	path := benchModel(b)
	for _, withGrammar := range []bool{false, true} {
		b.Run(fmt.Sprintf("grammar=%v", withGrammar), func(b *testing.B) {
			e, err := engine.New(context.Background(), engine.Config{ModelPath: path, Parallel: 8, Threads: benchThreads(), CtxSize: 8 * 256})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			const n = 64
			b.ResetTimer()
			for range b.N {
				var wg sync.WaitGroup
				for i := range 8 {
					req := engine.Request{
						Prompt: fmt.Sprintf("stream %d once upon a time", i), AddSpecial: true,
						MaxTokens: n, IgnoreEOS: true, NoCachePrompt: true,
						Sampling: engine.Sampling{Temperature: 0.8, TopK: 40, TopP: 0.95, Seed: int64(i)},
					}
					if withGrammar && i == 0 {
						req.Grammar = `root ::= [a-z ]+`
					}
					s, err := e.Submit(context.Background(), req)
					if err != nil {
						b.Fatal(err)
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						collect(b, s)
					}()
				}
				wg.Wait()
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N*n), "ms/step")
		})
	}
}

// BenchmarkDecodeOneToken is one sequence decoding one token per pass,
// with ggml's threads kept in a pool attached to the context (spinning
// between passes) and without (ggml then starts and joins them for every
// pass): issue 8's single-stream effect of the pool.
func BenchmarkDecodeOneToken(b *testing.B) {
	m := benchLlamaModel(b)
	for _, tc := range []struct {
		name string
		p    llama.ContextParams
	}{{"pool", llama.ContextParams{}}, {"no-pool", llama.ContextParams{NoThreadPool: true}}} {
		b.Run(tc.name, func(b *testing.B) {
			p := tc.p
			p.NCtx, p.NBatch, p.NSeqMax, p.Threads = 512, 64, 1, benchThreads()
			ctx, err := llama.NewContext(m, p)
			if err != nil {
				b.Fatal(err)
			}
			defer ctx.Close()
			var batch llama.Batch
			for i := 0; b.Loop(); i++ {
				pos := i % 500
				if pos == 0 {
					ctx.SeqRemove(0, -1, -1)
				}
				batch.Reset()
				batch.Add(llama.Token(10+pos%50), pos, 0, true)
				if err := ctx.Decode(&batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPrefillAfterPrefix evaluates a 128-token prompt chunk on top of
// a cached prefix of 0 or 512 tokens, with and without flash attention:
// the attention part of a prefill grows with the context it attends to,
// much faster with the CPU flash-attention kernel (issue 8's TTFT anomaly).
func BenchmarkPrefillAfterPrefix(b *testing.B) {
	m := benchLlamaModel(b)
	for _, tc := range []struct {
		prefix int
		fa     bool
	}{{0, true}, {512, true}, {0, false}, {512, false}} {
		prefix := tc.prefix
		b.Run(fmt.Sprintf("prefix=%d/flash=%v", prefix, tc.fa), func(b *testing.B) {
			ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 2048, NBatch: 512, NSeqMax: 1, Threads: benchThreads(), Unified: true, NoFlashAttn: !tc.fa})
			if err != nil {
				b.Fatal(err)
			}
			defer ctx.Close()
			var batch llama.Batch
			for i := range prefix {
				batch.Add(llama.Token(100+i%1000), i, 0, false)
			}
			if err := ctx.Decode(&batch); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				ctx.SeqRemove(0, prefix, -1)
				batch.Reset()
				for i := range 128 {
					batch.Add(llama.Token(200+i), prefix+i, 0, i == 127)
				}
				if err := ctx.Decode(&batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeBesideIdleCaches decodes one token of a 128-token
// sequence while other sequences of the unified cache hold 0 or 15x1,024
// cells: every query scans the cache's whole used extent, masked cells
// included.
func BenchmarkDecodeBesideIdleCaches(b *testing.B) {
	m := benchLlamaModel(b)
	for _, others := range []int{0, 15} {
		b.Run(fmt.Sprintf("others=%dx1024", others), func(b *testing.B) {
			ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 16 * 2048, NBatch: 512, NSeqMax: 16, Threads: benchThreads(), Unified: true})
			if err != nil {
				b.Fatal(err)
			}
			defer ctx.Close()
			var batch llama.Batch
			fill := func(seq, n int) {
				for p := 0; p < n; p += 512 {
					batch.Reset()
					for i := p; i < min(n, p+512); i++ {
						batch.Add(llama.Token(100+i%1000), i, seq, false)
					}
					if err := ctx.Decode(&batch); err != nil {
						b.Fatal(err)
					}
				}
			}
			for seq := 1; seq <= others; seq++ {
				fill(seq, 1024)
			}
			fill(0, 128)
			for i := 0; b.Loop(); i++ {
				pos := 128 + i%256
				if pos == 128 {
					ctx.SeqRemove(0, 128, -1)
				}
				batch.Reset()
				batch.Add(llama.Token(10+pos%50), pos, 0, true)
				if err := ctx.Decode(&batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLogprobs is one greedy stream of benchTokens tokens through the
// engine without logprobs and with top-20 logprobs (Request.Logprobs,
// TopLogprobs 20): the cost of computing and delivering them per token.
func BenchmarkLogprobs(b *testing.B) {
	path := benchModel(b)
	for _, top := range []int{-1, 20} {
		name := "off"
		if top >= 0 {
			name = fmt.Sprintf("top=%d", top)
		}
		b.Run(name, func(b *testing.B) {
			e, err := engine.New(context.Background(), engine.Config{ModelPath: path, Parallel: 1, Threads: benchThreads(), CtxSize: 1024})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			req := engine.Request{Prompt: "Once upon a time", AddSpecial: true, MaxTokens: benchTokens, IgnoreEOS: true, NoCachePrompt: true}
			req.Logprobs, req.TopLogprobs = top >= 0, max(top, 0)
			for b.Loop() {
				s, err := e.Submit(context.Background(), req)
				if err != nil {
					b.Fatal(err)
				}
				collect(b, s)
			}
			b.ReportMetric(float64(b.N*benchTokens)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}

// BenchmarkSampleLogprobs is the sampling step alone over the synthetic
// model's vocabulary: Sample, and SampleLogprobs with 0 and 20
// alternatives (a log-softmax over the vocabulary, and a top-20 pass).
func BenchmarkSampleLogprobs(b *testing.B) {
	m := benchLlamaModel(b)
	ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 256, NBatch: 64, NSeqMax: 1, Threads: benchThreads()})
	if err != nil {
		b.Fatal(err)
	}
	defer ctx.Close()
	prompt, _ := m.Tokenize("Once upon a time", true, true)
	var batch llama.Batch
	for i, tok := range prompt {
		batch.Add(tok, i, 0, i == len(prompt)-1)
	}
	if err := ctx.Decode(&batch); err != nil {
		b.Fatal(err)
	}
	s, err := llama.NewSampler(m, llama.SamplerParams{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	idx := batch.Len() - 1
	b.Run("off", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Sample(ctx, idx); err != nil {
				b.Fatal(err)
			}
		}
	})
	var top []llama.TokenLogprob
	for _, n := range []int{0, 20} {
		b.Run(fmt.Sprintf("top=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, _, top, err = s.SampleLogprobs(ctx, idx, n, top); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// forcedCall is a request for one call of a function with three
// parameters, forced as tool_choice naming it forces it: the answer is
// Hermes markup, <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>,
// under the grammar toolcall's hermes format writes for it.
func forcedCall(tb testing.TB) engine.Request {
	tb.Helper()
	tool := wire.Tool{Type: "function"}
	tool.Function.Name = "get_weather"
	tool.Function.Parameters = []byte(`{"type": "object", "properties": {
		"city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]},
		"days": {"type": "integer", "minimum": 1, "maximum": 7},
		"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
		"required": ["city", "days", "unit"]}`)
	hermes, err := toolcall.Lookup("hermes")
	if err != nil {
		tb.Fatal(err)
	}
	g, err := hermes.Grammar([]wire.Tool{tool}, false, grammar.SchemaLimits{})
	if err != nil {
		tb.Fatal(err)
	}
	return engine.Request{
		Prompt:     "<|im_start|>user\nWhat is the weather in Paris for the next three days?<|im_end|>\n<|im_start|>assistant\n",
		AddSpecial: true, ParseSpecial: true, MaxTokens: 256, Grammar: g,
	}
}

// BenchmarkJumpForward is a forced tool call (forcedCall), one request at
// a time, greedy, in each jump-forward mode (Config.JumpForward), on the
// synthetic 135M model and on the trained stories260K: the time per call,
// and per call the scheduler's steps (forward passes), the generated
// tokens, and the tokens drafted ahead and confirmed (or, with JumpForce,
// written). With random weights the model writes the markup in pieces of
// any length, byte tokens as often as not, and confirms few of the
// drafted tokens; a trained model writes it the way the drafts do.
//
// CORRAL_BENCH_JUMP_MODEL=PATH adds a model (a synthetic recurrent or
// hybrid one, say: those draft only in JumpForce).
func BenchmarkJumpForward(b *testing.B) {
	req := forcedCall(b)
	models := []struct{ name, path string }{
		{"135m", benchModel(b)},
		{"stories260K", testmodel.Path(b, testmodel.Stories260K)},
	}
	if p := os.Getenv("CORRAL_BENCH_JUMP_MODEL"); p != "" {
		models = append(models, struct{ name, path string }{filepath.Base(p), p})
	}
	for _, m := range models {
		for _, mode := range []engine.JumpMode{engine.JumpOff, engine.JumpConfirm, engine.JumpForce} {
			b.Run(m.name+"/"+string(mode), func(b *testing.B) {
				e, err := engine.New(context.Background(), engine.Config{ModelPath: m.path, Parallel: 1, Threads: benchThreads(), CtxSize: 1024, JumpForward: mode})
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				before := e.Stats()
				tokens := 0
				for b.Loop() {
					s, err := e.Submit(context.Background(), req)
					if err != nil {
						b.Fatal(err)
					}
					_, res := collect(b, s)
					if res.FinishReason != engine.FinishStop {
						b.Fatalf("finish %s: %v", res.FinishReason, res.Err)
					}
					tokens += res.Usage.CompletionTokens
				}
				after := e.Stats()
				n := float64(b.N)
				b.ReportMetric(float64(after.Steps-before.Steps)/n, "steps/call")
				b.ReportMetric(float64(tokens)/n, "tokens/call")
				b.ReportMetric(float64(after.DraftTokens-before.DraftTokens)/n, "drafted/call")
				b.ReportMetric(float64(after.DraftAccepted-before.DraftAccepted)/n, "confirmed/call")
				b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/n, "ms/call")
			})
		}
	}
}

// BenchmarkDecodeWithDraft is a decode step of 1 or 16 sequences, each
// with 0, 1, 4, 16 or 31 drafted tokens (a 512-token batch, the
// engine's default, holds 16 × 32) after its token (jump.go), each
// with its logits: what a drafted token costs when the model does not
// confirm it, alone and beside other sequences (the sequences hold 320
// cells each, as the repeat row's prompts, in one unified cache).
func BenchmarkDecodeWithDraft(b *testing.B) {
	m := benchLlamaModel(b)
	const prefix = 320
	for _, seqs := range []int{1, 16} {
		for _, extra := range []int{0, 1, 4, 16, 31} {
			for _, bySeq := range []bool{false, true} {
				if bySeq && (seqs == 1 || extra == 0) {
					continue
				}
				b.Run(fmt.Sprintf("seqs=%d/draft=%d/byseq=%v", seqs, extra, bySeq), func(b *testing.B) {
					ctx := prefixedContext(b, m, seqs, prefix, 0)
					var batch llama.Batch
					for b.Loop() {
						batch.Reset()
						for s := range seqs {
							ctx.SeqRemove(s, prefix, -1)
						}
						for s := range seqs {
							batch.Add(llama.Token(300+s), prefix, s, true)
							if bySeq { // a sequence's drafts right after its token
								for i := range extra {
									batch.Add(llama.Token(400+i), prefix+1+i, s, true)
								}
							}
						}
						for s := range seqs {
							if !bySeq { // drafts after every sequence's token
								for i := range extra {
									batch.Add(llama.Token(400+i), prefix+1+i, s, true)
								}
							}
						}
						if err := ctx.Decode(&batch); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// BenchmarkDraftModel decodes benchTokens tokens on 1, 4 and 16 streams
// of the synthetic 135M at F32 without speculation and with a draft model
// (Speculation.Model), the same weights at Q8_0 (seed 1 both: they agree
// on most greedy tokens, and the draft decodes about twice as fast),
// drafting where the measured cost pays: tokens/s, steps and drafted and
// taken tokens per output token.
func BenchmarkDraftModel(b *testing.B) {
	shape := gguf.Shapes["135m"]
	shape.Type = "f32"
	target, draft := benchSynth(b, "corral-synth-135m-f32.gguf", shape), benchModel(b)
	for _, n := range []int{1, 4, 16} {
		for _, on := range []bool{false, true} {
			b.Run(fmt.Sprintf("streams=%d/draft=%v", n, on), func(b *testing.B) {
				cfg := engine.Config{ModelPath: target, Parallel: n, Threads: benchThreads(), CtxSize: 512 * n}
				if on {
					cfg.Speculate.Model = draft
				}
				e, err := engine.New(context.Background(), cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				speculationRuns(b, e, n, func(i int) engine.Request {
					return engine.Request{Prompt: fmt.Sprintf("Story %d: once upon a time", i), AddSpecial: true, MaxTokens: benchTokens, IgnoreEOS: true}
				})
			})
		}
	}
}

// speculationRuns runs n requests at once on e, req(i) the i-th, for
// each of b's iterations, and reports tokens/s, steps per output token
// and drafted and taken tokens per output token (each request writes
// benchTokens).
func speculationRuns(b *testing.B, e *engine.Engine, n int, req func(i int) engine.Request) {
	before := e.Stats()
	for b.Loop() {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				s, err := e.Submit(context.Background(), req(i))
				if err != nil {
					b.Error(err)
					return
				}
				collect(b, s)
			})
		}
		wg.Wait()
	}
	after := e.Stats()
	tokens := float64(b.N * n * benchTokens)
	b.ReportMetric(tokens/b.Elapsed().Seconds(), "tok/s")
	b.ReportMetric(float64(after.Steps-before.Steps)/tokens, "steps/tok")
	b.ReportMetric(float64(after.Spec.Accepted-before.Spec.Accepted)/tokens, "taken/tok")
	b.ReportMetric(float64(after.Spec.DraftTokens-before.Spec.DraftTokens)/tokens, "drafted/tok")
}

// BenchmarkSpeculation: n-gram speculation (Config.Speculate) against
// plain decoding, streams of benchTokens tokens at 1 and 4 at once, on
// the synthetic 135M model (random weights fall into loops, which the
// lookup finds: near the most it can gain) and on stories260K (a trained
// model writing a story from a prompt it partly repeats). Reports
// tokens/s, steps per token and drafted tokens taken.
func BenchmarkSpeculation(b *testing.B) {
	const prompt = "Tom and his mom went to the park. They saw a big dog. Tom and his mom went to the"
	models := []struct{ name, path string }{
		{"135m", benchModel(b)},
		{"stories260K", testmodel.Path(b, testmodel.Stories260K)},
	}
	for _, m := range models {
		for _, n := range []int{1, 4} {
			for _, on := range []bool{false, true} {
				b.Run(fmt.Sprintf("%s/streams=%d/spec=%v", m.name, n, on), func(b *testing.B) {
					e, err := engine.New(context.Background(), engine.Config{ModelPath: m.path, Parallel: n, Threads: benchThreads(), CtxSize: 1024 * n,
						Speculate: engine.Speculation{Ngram: on}})
					if err != nil {
						b.Fatal(err)
					}
					defer e.Close()
					speculationRuns(b, e, n, func(int) engine.Request {
						return engine.Request{Prompt: prompt, AddSpecial: true, MaxTokens: benchTokens, IgnoreEOS: true}
					})
				})
			}
		}
	}
}

// BenchmarkStreamWhileDiskRestores: a stream decodes while a request
// whose 4,000-token prefix is in the disk tier (written by an engine
// before, as after a restart) is admitted. Reported: the stream's
// longest gap between tokens from the request's submission to its first
// token (a file read on the scheduler goroutine stalls every stream for
// as long), and the request's time to first token, medians over the
// iterations. Each iteration opens a new engine on the directory: a
// restored prefix stays in a slot.
func BenchmarkStreamWhileDiskRestores(b *testing.B) {
	model := benchModel(b)
	dir := b.TempDir()
	prefix := make([]int32, 4000)
	for i := range prefix {
		prefix[i] = int32(100 + i%1000)
	}
	cfg := engine.Config{ModelPath: model, Parallel: 2, Threads: benchThreads(), CtxSize: 2 * 4200, DiskCacheDir: dir}
	prime, err := engine.New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	s, err := prime.Submit(context.Background(), engine.Request{Tokens: prefix, MaxTokens: 1})
	if err != nil {
		b.Fatal(err)
	}
	for _, err := s.Recv(context.Background()); err == nil; _, err = s.Recv(context.Background()) {
	}
	prime.Close()
	var gaps, ttfts []float64
	b.ResetTimer()
	for range b.N {
		e, err := engine.New(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		stream, err := e.Submit(ctx, engine.Request{Prompt: "Once upon a time", AddSpecial: true, MaxTokens: 4000, IgnoreEOS: true})
		if err != nil {
			b.Fatal(err)
		}
		ticks := make(chan time.Time, 8192)
		go func() {
			defer close(ticks)
			for _, err := stream.Recv(context.Background()); err == nil; _, err = stream.Recv(context.Background()) {
				ticks <- time.Now()
			}
		}()
		for range 4 { // the stream decodes
			<-ticks
		}
		start := time.Now()
		r, err := e.Submit(context.Background(), engine.Request{Tokens: append(slices.Clone(prefix), 7, 8, 9), MaxTokens: 1})
		if err != nil {
			b.Fatal(err)
		}
		_, err = r.Recv(context.Background())
		first := time.Now()
		for err == nil {
			_, err = r.Recv(context.Background())
		}
		if res := r.Result(); res.Err != nil || res.Usage.CachedTokens < len(prefix) {
			b.Fatalf("the restoring request: %+v", res)
		}
		stop()
		longest, last := time.Duration(0), start
		for t := range ticks {
			if t.After(first) {
				t = first
			}
			if t.After(start) {
				longest = max(longest, t.Sub(last))
				last = t
			}
		}
		longest = max(longest, first.Sub(last))
		gaps = append(gaps, longest.Seconds()*1e3)
		ttfts = append(ttfts, first.Sub(start).Seconds()*1e3)
		e.Close()
	}
	b.ReportMetric(median(gaps), "gap-ms")
	b.ReportMetric(median(ttfts), "ttft-ms")
}

// median returns the middle of xs (the mean of the two middle ones for
// an even count); xs is sorted.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// prefixedContext is a unified context of 512-token batches for seqs
// sequences and extra more, each with room for 384 cells (512 for the
// extra ones), the first seqs holding prefix cells of their own; it is
// closed when the benchmark ends.
func prefixedContext(b *testing.B, m *llama.Model, seqs, prefix, extra int) *llama.Context {
	b.Helper()
	ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: seqs*384 + extra*512, NBatch: 512, NSeqMax: seqs + extra, Threads: benchThreads(), Unified: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(ctx.Close)
	var batch llama.Batch
	for s := range seqs {
		batch.Reset()
		for i := range prefix {
			batch.Add(llama.Token(100+(i+s)%1000), i, s, false)
		}
		if err := ctx.Decode(&batch); err != nil {
			b.Fatal(err)
		}
	}
	return ctx
}

// BenchmarkMixedStep is a step of 2 or 16 decoding sequences (320 cells
// each, one unified cache) and another sequence's prompt chunk of 64 or
// 128 tokens, in one pass or in two (the chunk, then the decoding tokens:
// llama.Context.DecodeSplit).
func BenchmarkMixedStep(b *testing.B) {
	m := benchLlamaModel(b)
	const prefix = 320
	for _, seqs := range []int{2, 16} {
		for _, chunk := range []int{64, 128} {
			for _, split := range []bool{false, true} {
				b.Run(fmt.Sprintf("decoding=%d/chunk=%d/split=%v", seqs, chunk, split), func(b *testing.B) {
					ctx := prefixedContext(b, m, seqs, prefix, 1)
					var batch llama.Batch
					for b.Loop() {
						ctx.SeqRemove(seqs, -1, -1)
						batch.Reset()
						for i := range chunk {
							batch.Add(llama.Token(500+i), i, seqs, false)
						}
						for s := range seqs {
							ctx.SeqRemove(s, prefix, -1)
							batch.Add(llama.Token(300+s), prefix, s, true)
						}
						var err error
						if split {
							_, err = ctx.DecodeSplit(&batch)
						} else {
							err = ctx.Decode(&batch)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
