package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/corral-llm/corral/bench"
	"github.com/corral-llm/corral/engine"
)

// benchFlags are the flags of corral bench.
type benchFlags struct {
	url, api, model     string
	apiKey              string
	load                bench.Config
	inputLen, outputLen int
	ignoreEOS           bool
	dataset             string
	sharedPrefixLen     int
	priority            int
	goodput, sweep      string
	jsonPath, plotPath  string
	progress            bool
	inProcess           bool
	engine              engine.Config
	voiceMode           string
	voice               bench.VoiceSpec
}

// runBench load-tests a server (or, with --in-process, an engine in this
// process) and prints vLLM-style serving metrics.
func runBench(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var f benchFlags
	fs.StringVar(&f.url, "url", "http://127.0.0.1:8080", "server `URL`")
	fs.StringVar(&f.api, "api", "chat", "request format: chat, completions or llamacpp")
	fs.StringVar(&f.apiKey, "api-key", os.Getenv("CORRAL_API_KEY"), "API `key` sent as Authorization: Bearer (default $CORRAL_API_KEY)")
	fs.StringVar(&f.model, "model", "", "model `id` to request (default: the first of /v1/models); several ids, comma-separated, are requested in turn")
	fs.IntVar(&f.load.Concurrency, "concurrency", 1, "closed loop: clients; open loop: cap on requests in flight (0: none)")
	fs.IntVar(&f.load.NumRequests, "num-requests", 100, "requests to send (0: until --duration)")
	fs.Float64Var(&f.load.RequestRate, "request-rate", 0, "open loop: mean arrivals per second (0: closed loop; inf: all at once)")
	fs.Float64Var(&f.load.Burstiness, "burstiness", 1, "open loop: gamma shape of arrival gaps (1: Poisson; <1 burstier)")
	fs.DurationVar(&f.load.Duration, "duration", 0, "stop sending after this long (0: no limit)")
	fs.IntVar(&f.load.Warmup, "warmup", 0, "unmeasured requests sent first")
	fs.Uint64Var(&f.load.Seed, "seed", 0, "seed for prompts, arrivals and cancellations")
	fs.Float64Var(&f.load.CancelFraction, "cancel-fraction", 0, "fraction of requests that hang up mid-stream")
	fs.IntVar(&f.load.CancelAfterTokens, "cancel-after-tokens", 0, "chunks a cancelling client reads before hanging up")
	fs.DurationVar(&f.load.Timeout, "timeout", 10*time.Minute, "per-request timeout (0: none)")
	fs.IntVar(&f.inputLen, "input-len", 128, "random prompts: length in `tokens`")
	fs.IntVar(&f.outputLen, "output-len", 128, "max tokens to generate per request (0: server default)")
	fs.BoolVar(&f.ignoreEOS, "ignore-eos", false, "generate --output-len tokens regardless of end-of-generation")
	fs.StringVar(&f.dataset, "dataset", "", "JSONL `file` with a \"prompt\" or \"messages\" per line")
	fs.IntVar(&f.sharedPrefixLen, "shared-prefix-len", 0, "`tokens` of system prompt shared by every prompt")
	fs.IntVar(&f.priority, "priority", 0, "every request's priority class (lower is served first; run two benches at once for a mix)")
	fs.StringVar(&f.goodput, "goodput", "", "SLOs in ms for goodput, like \"ttft:300 tpot:50 e2el:2000\"")
	fs.StringVar(&f.sweep, "sweep-concurrency", "", "comma-separated concurrencies to run in turn, like 1,4,8,16")
	fs.StringVar(&f.jsonPath, "json", "", "write every figure and the configuration to this JSON `file`")
	fs.StringVar(&f.plotPath, "plot", "", "draw latency CDFs (and sweep curves) to this .png, .svg or .html `file`")
	fs.BoolVar(&f.progress, "progress", true, "draw a progress bar on stderr")
	fs.BoolVar(&f.inProcess, "in-process", false, "drive an engine in this process instead of a server (needs -m)")
	fs.StringVar(&f.voiceMode, "voice", "", "voice load instead: `paced` (corral's /v1/voice) or resend (the reference's close-and-resend on /completion, any llama-server)")
	fs.IntVar(&f.voice.Sessions, "voice-sessions", 8, "voice: conversations at once")
	fs.IntVar(&f.voice.Turns, "voice-turns", 3, "voice: answers per conversation")
	fs.Float64Var(&f.voice.CharsPerSecond, "voice-cps", 15, "voice: the speaker's pace in characters per second")
	fs.Float64Var(&f.voice.BargeIn, "voice-barge-in", 0.3, "voice: fraction of answers the user interrupts")
	fs.IntVar(&f.voice.FirstMinTokens, "voice-first-min-tokens", 0, "voice paced: the first chunk's least tokens (0: the server's default, 10)")
	fs.StringVar(&f.engine.ModelPath, "m", "", "in-process: GGUF model `file`")
	fs.IntVar(&f.engine.Parallel, "np", 4, "in-process: slots decoded together")
	fs.IntVar(&f.engine.Parallel, "parallel", 4, "same as -np")
	fs.IntVar(&f.engine.Threads, "t", 0, "in-process: CPU threads (0: all cores)")
	fs.IntVar(&f.engine.Threads, "threads", 0, "same as -t")
	fs.IntVar(&f.engine.CtxSize, "c", 0, "in-process: KV cache size in tokens, shared by the slots")
	fs.IntVar(&f.engine.CtxSize, "ctx-size", 0, "same as -c")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return f.run(ctx)
}

func (f *benchFlags) run(ctx context.Context) error {
	if f.voiceMode != "" {
		return f.runVoice(ctx)
	}
	slo, err := bench.ParseSLO(f.goodput)
	if err != nil {
		return err
	}
	concs := []int{f.load.Concurrency}
	if f.sweep != "" {
		if concs, err = parseInts(f.sweep); err != nil {
			return fmt.Errorf("-sweep-concurrency: %w", err)
		}
	}
	if f.inputLen < 0 || f.outputLen < 0 || f.sharedPrefixLen < 0 {
		return errors.New("-input-len, -output-len and -shared-prefix-len must not be negative")
	}
	settings := bench.Settings{
		InProcess: f.inProcess, InputLen: f.inputLen, OutputLen: f.outputLen, IgnoreEOS: f.ignoreEOS,
		Dataset: f.dataset, SharedPrefixLen: f.sharedPrefixLen, Priority: f.priority, Goodput: slo.String(), Load: f.load,
	}
	if f.sweep != "" {
		settings.Sweep = concs
	}

	var target bench.Target
	var tok bench.Tokenizer
	if f.inProcess {
		if f.engine.ModelPath == "" {
			return errors.New("-in-process needs -m FILE")
		}
		eng, err := engine.New(ctx, f.engine)
		if err != nil {
			return err
		}
		defer eng.Close()
		et := &bench.EngineTarget{Engine: eng, MaxTokens: f.outputLen, IgnoreEOS: f.ignoreEOS, Priority: f.priority}
		target, tok = et, et
		settings.Model, settings.ModelPath = eng.Info().Name, f.engine.ModelPath
		settings.Parallel, settings.Threads, settings.CtxSize = f.engine.Parallel, f.engine.Threads, f.engine.CtxSize
		settings.PromptTokenizer = "engine"
	} else {
		api, err := bench.ParseAPI(f.api)
		if err != nil {
			return err
		}
		c := bench.NewClient(f.url, api, slices.Max(concs))
		defer c.Close()
		c.Model, c.MaxTokens, c.IgnoreEOS, c.Priority, c.APIKey = f.model, f.outputLen, f.ignoreEOS, f.priority, f.apiKey
		if ids := strings.Split(f.model, ","); len(ids) > 1 {
			c.Model, c.Models = ids[0], ids
		}
		if c.Model == "" && api != bench.APILlamaCpp {
			if c.Model, err = c.FirstModel(ctx); err != nil {
				return fmt.Errorf("no -model given and %w", err)
			}
		}
		target, tok = c, c
		settings.URL, settings.API, settings.Model = f.url, api, c.Model
		settings.PromptTokenizer = "server"
		if _, err := c.CountTokens(ctx, "hello world"); err != nil {
			fmt.Fprintf(os.Stderr, "corral bench: the server cannot tokenize (%v); counting prompt tokens as words\n", err)
			tok, settings.PromptTokenizer = bench.Words{}, "words"
		}
	}

	if f.dataset != "" {
		settings.PromptTokenizer = "words" // dataset prompts are measured in words
	}
	report := &bench.Report{Settings: settings}
	var runErr error
	for i, conc := range concs {
		// Fresh prompts per run: a prompt a previous run sent would hit
		// the server's prefix cache.
		prompts, err := f.prompts(ctx, tok, f.load.Seed+uint64(i))
		if err != nil {
			return err
		}
		load := f.load
		load.Concurrency = conc
		var observe func(bench.Record)
		var bar *bench.Progress
		if f.progress {
			bar = bench.NewProgress(os.Stderr, load.NumRequests, load.Duration)
			observe = bar.Observe
		}
		out, err := bench.Run(ctx, target, prompts, load, observe)
		if bar != nil {
			bar.Close()
		}
		if err != nil && len(out.Records) == 0 {
			return err
		}
		report.Runs = append(report.Runs, bench.NewRunReport(load, out, slo))
		if err != nil {
			runErr = err // interrupted: report what was measured
			break
		}
	}
	report.WriteTable(os.Stdout)
	if f.inProcess {
		report.WriteSubmitTable(os.Stdout)
	}
	if f.jsonPath != "" {
		if err := report.WriteJSON(f.jsonPath); err != nil {
			return err
		}
	}
	if f.plotPath != "" {
		if err := bench.WritePlot(f.plotPath, report); err != nil {
			return err
		}
	}
	return runErr
}

// prompts builds the workload: the dataset or random prompts, enough for
// every request and the warmup (a timed run cycles through 256).
func (f *benchFlags) prompts(ctx context.Context, tok bench.Tokenizer, seed uint64) ([]bench.Prompt, error) {
	if f.dataset != "" {
		prefix := ""
		if f.sharedPrefixLen > 0 {
			var err error
			if prefix, _, err = bench.SharedPrefix(ctx, tok, f.sharedPrefixLen, seed); err != nil {
				return nil, err
			}
		}
		return bench.LoadDataset(f.dataset, prefix)
	}
	n := f.load.NumRequests
	if n == 0 {
		n = 256
	}
	return bench.RandomPrompts(ctx, tok, bench.RandomSpec{
		N: n + f.load.Warmup, InputLen: f.inputLen, SharedPrefixLen: f.sharedPrefixLen, Seed: seed,
	})
}

// parseInts reads a comma-separated list of positive integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q: want positive integers separated by commas", part)
		}
		out = append(out, n)
	}
	return out, nil
}

// runVoice runs the voice load (see bench.RunVoice) and prints its summary.
func (f *benchFlags) runVoice(ctx context.Context) error {
	mode, err := bench.ParseVoiceMode(f.voiceMode)
	if err != nil {
		return err
	}
	if f.inProcess {
		return errors.New("-voice drives a server: drop -in-process")
	}
	spec := f.voice
	spec.Mode, spec.MaxTokens, spec.Seed = mode, f.outputLen, f.load.Seed
	if spec.MaxTokens <= 0 {
		spec.MaxTokens = 128
	}
	before, haveMetrics := bench.PromptEvaluated(ctx, f.url)
	start := time.Now()
	recs, runErr := bench.RunVoice(ctx, f.url, spec)
	s := bench.SummarizeVoice(spec, recs)
	s.DurationS = time.Since(start).Seconds()
	if after, ok := bench.PromptEvaluated(ctx, f.url); ok && haveMetrics && s.Answers > 0 {
		s.PromptEvaluated = (after - before) / float64(s.Answers)
	}
	s.SlotsLeaked = bench.BusySlots(ctx, f.url, 10*time.Second)
	fmt.Printf("voice %s: %d sessions x %d turns at %g chars/s, %.0f%% barge-in, max %d tokens, %.1f s\n",
		mode, spec.Sessions, spec.Turns, spec.CharsPerSecond, 100*spec.BargeIn, spec.MaxTokens, s.DurationS)
	fmt.Printf("  answers %d  failed %d %v  interrupted %d  chunks/answer %.1f\n", s.Answers, s.Failed, s.Errors, s.Interrupted, s.Chunks)
	fmt.Printf("  TTFT        p50 %8.1f ms  p99 %8.1f ms\n", s.TTFTP50, s.TTFTP99)
	fmt.Printf("  first chunk p50 %8.1f ms  p99 %8.1f ms\n", s.FirstP50, s.FirstP99)
	fmt.Printf("  re-evaluated tokens/answer %g   prompt tokens evaluated/answer %.1f   slots leaked %d\n",
		s.Reevaluated, s.PromptEvaluated, s.SlotsLeaked)
	if f.jsonPath != "" {
		b, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(f.jsonPath, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return runErr
}
