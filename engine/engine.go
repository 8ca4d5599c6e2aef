package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/llama"
)

// DefaultPrefillBudget is Config.PrefillBudget's default, a trade-off
// measured with corral bench on the synthetic 135M Q8_0 model (-np 8 -t 2,
// 8 clients, 256-token prompts, 64 output tokens): against no separate
// budget, 64 cut the inter-token latency p99 from about 1,050 ms to 200 ms
// and the median TTFT from 2.1 s to 1.0 s, for 7 % less throughput;
// 16 keeps every step within 2x a decode step but costs 25 % throughput,
// since each step reads all the weights once whatever its size.
const DefaultPrefillBudget = 64

// Engine serves one model. Create it with New; it is safe for concurrent use.
type Engine struct {
	cfg   Config
	info  ModelInfo
	model *llama.Model
	eog   []int32          // end-of-generation tokens, banned when IgnoreEOS
	proj  *llama.Projector // Config.MMProj's; nil when none (media.go)
	jump  JumpMode         // jump-forward decoding (Config.JumpForward; jump.go); "" when off

	nextID   atomic.Uint64
	queued   atomic.Int64 // requests submitted but not yet admitted or dropped
	draining atomic.Bool  // Drain was called: admit nothing new

	// prep bounds the Submit calls tokenizing and compiling grammars at
	// once, so a burst of requests cannot take every core from decoding.
	prep chan struct{}
	// mediaReqs bounds the requests holding preprocessed media (a
	// projector's input, up to megabytes an image however small the
	// image sent), from their tokenization to their end: a Submit with
	// media waits for a place.
	mediaReqs chan struct{}

	// mu guards closed and the model's lifetime: Submit and the vocab
	// methods hold it for reading while they use the model (tokenizing, a
	// non-blocking send); Close takes it for writing before freeing. It is
	// never held around compute.
	mu      sync.RWMutex
	closed  bool
	submitq chan *request
	embedq  chan *embedJob  // Embed calls; the queue bound counts them with submitq's
	wake    chan struct{}   // capacity 1: "look at cancellations"
	quit    chan struct{}   // closed by Close
	life    context.Context // ends with Close: the scheduler's waits for Config.CPU
	endLife context.CancelFunc
	done    chan struct{}            // closed when the scheduler has exited
	snap    atomic.Pointer[snapshot] // published by the scheduler every step
	disk    *diskCache               // the scheduler's disk tier (disk.go), whose counters Stats reads; nil when none
	once    sync.Once
}

// request is a submitted generation as the scheduler sees it.
type request struct {
	id        uint64
	ctx       context.Context
	params    Request
	tokens    []int32
	media     []*mediaChunk // the chunks of its media, by start (media.go)
	mediaHeld bool          // it holds a place of Engine.mediaReqs
	sampler   *llama.Sampler
	stream    *Stream
	submitted time.Time
	stopWatch func() bool // detaches the context.AfterFunc wake-up

	gen    generation // progress, kept across preemptions
	resume []int32    // set while preempted: the history to evaluate again (see preempt)
	load   *diskLoad  // a disk-tier file read for its admission (see prefetch)
}

// withDefaults fills the zero fields that shape memory (New and
// EstimateMemory apply them alike): 4 slots, a 512-token batch of at least
// one token per slot.
func (cfg Config) withDefaults() Config {
	if cfg.Parallel <= 0 {
		cfg.Parallel = 4
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 512
	}
	cfg.BatchSize = max(cfg.BatchSize, cfg.Parallel)
	cfg.Speculate = cfg.Speculate.withDefaults()
	return cfg
}

// cacheTypes parses CacheTypeK and CacheTypeV.
func (cfg Config) cacheTypes() (k, v llama.CacheType, err error) {
	if k, err = llama.ParseCacheType(cfg.CacheTypeK); err != nil {
		return 0, 0, fmt.Errorf("engine: --cache-type-k: %w", err)
	}
	if v, err = llama.ParseCacheType(cfg.CacheTypeV); err != nil {
		return 0, 0, fmt.Errorf("engine: --cache-type-v: %w", err)
	}
	return k, v, nil
}

// ctxSize is the KV cache size in tokens asked of llama.cpp: CtxSize, or
// the training context (at most 4096) per slot. With a buffer per slot,
// each slot's is rounded up to 256 cells, as llama.cpp would.
func (cfg Config) ctxSize(ctxTrain int) int {
	n := cfg.CtxSize
	if n <= 0 {
		n = min(ctxTrain, 4096) * cfg.Parallel
	}
	if cfg.KVPerSlot && cfg.Parallel > 0 {
		n = alignTo(n/cfg.Parallel, ctxPad) * cfg.Parallel
	}
	return n
}

// contextParams is the llama.cpp context New creates for a model whose
// training context is ctxTrain and pooling p, with cache types k and v
// (EstimateMemory sizes the same one).
//
// One KV buffer for all slots: any mix of slots and prompt chunks is then
// one forward pass, and a prefix is shared by copying cell labels.
// llama.cpp lets every sequence use the whole buffer; the engine accounts
// its cells (pool.go) and caps each request. An engine that embeds has
// BatchSize more cells, and sequence ids after the slots', for its
// embedding passes (see embed.go). With KVPerSlot, a buffer per slot
// instead, each an equal share.
//
// A persistent thread pool, whose workers spin between passes, only when
// the compute threads leave a core to the Go runtime: on 2 cores with -t
// 2 it cost 6 % of single-stream throughput over HTTP (the handler waits
// for a core), though in-process it saves about 3 %.
func (cfg Config) contextParams(ctxTrain int, p llama.Pooling, k, v llama.CacheType) llama.ContextParams {
	return llama.ContextParams{
		NCtx: cfg.ctxSize(ctxTrain) + cfg.embedReserve(p), NBatch: cfg.BatchSize, NSeqMax: cfg.Parallel + cfg.lanes(p),
		Threads: cfg.Threads, Unified: !cfg.KVPerSlot, NoFlashAttn: cfg.NoFlashAttn, NoThreadPool: cfg.Threads >= runtime.NumCPU(),
		Pooling: p, TypeK: k, TypeV: v, Rollback: cfg.rollback(),
	}
}

// rollback is how many tokens the recurrent state of lctx, a context
// of model, can go back over (0 without a recurrent state).
func rollback(model *llama.Model, lctx *llama.Context) int {
	if !model.Recurrent() {
		return 0
	}
	return lctx.Rollback()
}

// rollback is the number of tokens a recurrent state keeps to go back
// over a refused draft: a draft's worth when the engine speculates on
// such a model (Speculation.Recurrent, or MTP: a hybrid's head drafts
// only with them). llama.cpp keeps them only for
// some architectures' recurrent states (llama.Context.Rollback).
func (cfg Config) rollback() int {
	if !cfg.Speculate.on() || !cfg.Speculate.Recurrent && !cfg.Speculate.MTP {
		return 0
	}
	return cfg.Speculate.withDefaults().DraftMax
}

// New loads the model, creates the context and starts the scheduler. When
// ctx ends during the model load, New stops it and returns ctx's error;
// after New returns, ctx no longer matters (use Close).
func New(ctx context.Context, cfg Config) (*Engine, error) {
	cfg = cfg.withDefaults()
	if _, err := ParseJumpMode(string(cfg.JumpForward)); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if cfg.Threads <= 0 {
		cfg.Threads = runtime.NumCPU()
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = 256
	}
	if cfg.PrefillBudget == 0 {
		cfg.PrefillBudget = DefaultPrefillBudget
	}
	if cfg.MaxQueueWait == 0 {
		cfg.MaxQueueWait = DefaultMaxQueueWait
	}
	if cfg.PauseGrace == 0 {
		cfg.PauseGrace = DefaultPauseGrace
	}
	if cfg.DiskCloseTimeout == 0 {
		cfg.DiskCloseTimeout = DefaultDiskCloseTimeout
	}
	typeK, typeV, err := cfg.cacheTypes()
	if err != nil {
		return nil, err
	}
	model, err := loadModel(ctx, cfg, typeK, typeV)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if err := servable(model); err != nil {
		model.Close()
		return nil, err
	}
	pooling, err := modelPooling(cfg.Pooling, model)
	if err != nil {
		model.Close()
		return nil, err
	}
	if cfg.KVPerSlot && embeds(pooling) {
		model.Close()
		return nil, errors.New("engine: a cache per slot is for generation; an embedding model's passes share one buffer")
	}
	if cfg.rollback() > 0 && model.Hybrid() && !embeds(pooling) {
		// A hybrid's batches split into micro-batches of consecutive
		// sequences only with a buffer per slot; with one buffer,
		// llama.cpp may move a sequence's recurrent state after the
		// micro-batch that wrote its rollback copies, which then take it
		// back to another sequence's state (llama.Context.homeStates).
		cfg.KVPerSlot = true
	}
	reserve := cfg.embedReserve(pooling)
	lctx, err := llama.NewContext(model, cfg.contextParams(model.CtxTrain(), pooling, typeK, typeV))
	if err != nil {
		model.Close()
		return nil, fmt.Errorf("engine: %w", err)
	}
	// The slots share one pool of cells; a request may use up to
	// CtxPerRequest of them: by default the model's training context, or
	// an equal share of the pool when that is more (what a slot had
	// before the pool, as llama-server's -c 16384 -np 1 gives a request
	// 16,384 tokens whatever the training context).
	poolCells := lctx.NCtx() - reserve
	reqCtx := cfg.CtxPerRequest
	if reqCtx <= 0 {
		reqCtx = max(model.CtxTrain(), poolCells/cfg.Parallel)
	}
	if reqCtx <= 0 || reqCtx > poolCells {
		reqCtx = poolCells
	}
	if cfg.KVPerSlot {
		reqCtx = min(reqCtx, lctx.NCtxSeq())
	}
	kind := memoryKind(model)
	if kind == MemoryRecurrent {
		// No cells to share: one state per sequence, whatever its
		// length. Every slot may hold a whole request's context at once.
		poolCells = cfg.Parallel * reqCtx
	}
	// A context smaller than the batch asked for takes smaller batches.
	cfg.BatchSize = min(cfg.BatchSize, lctx.NBatch())
	embedMax := 0
	if embeds(lctx.Pooling()) {
		// An input is one pass, within the training context.
		embedMax = cfg.BatchSize
		if ct := model.CtxTrain(); ct > 0 {
			embedMax = min(embedMax, ct)
		}
	}
	off := model.Offloaded()
	name := cfg.Name
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(cfg.ModelPath), ".gguf")
	}
	rb := rollback(model, lctx)
	draft, err := newDrafter(ctx, cfg, model, lctx, poolCells, rb)
	if err != nil {
		lctx.Close()
		model.Close()
		return nil, fmt.Errorf("engine: %w", err)
	}
	closeAll := func() {
		if draft != nil {
			draft.close()
		}
		lctx.Close()
		model.Close()
	}
	disk, err := openDisk(cfg, name, model.NVocab(), kind)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("engine: %w", err)
	}
	var proj *llama.Projector
	if cfg.MMProj != "" {
		if proj, err = llama.LoadProjector(cfg.MMProj, model, cfg.encoderThreads()); err != nil {
			closeAll()
			return nil, fmt.Errorf("engine: %w", err)
		}
	}
	tmpl, _ := model.Meta("tokenizer.chat_template")
	toolUse, _ := model.Meta("tokenizer.chat_template.tool_use")
	arch, _ := model.Meta("general.architecture")
	spec := cfg.Speculate.sources()
	if model.Recurrent() && rb == 0 {
		spec = nil // its state does not go back over a refused draft (speculate.go)
	}
	e := &Engine{
		cfg:   cfg,
		model: model,
		jump:  jumpMode(cfg.JumpForward),
		proj:  proj,
		info: ModelInfo{
			Name: name, Path: cfg.ModelPath, Architecture: arch,
			CtxTrain: model.CtxTrain(), CtxPerRequest: reqCtx, KVCells: poolCells, VocabSize: model.NVocab(),
			ChatTemplate: tmpl, ChatTemplateToolUse: toolUse, BOS: model.BOS(), EOS: model.EOS(), AddBOS: model.AddBOS(),
			Pooling: lctx.Pooling().String(), EmbeddingSize: model.NEmbd(), EmbedMaxTokens: embedMax,
			CacheTypeK: typeK.String(), CacheTypeV: typeV.String(), KVPerSlot: cfg.KVPerSlot, Speculation: spec,
			Created: time.Now(),
			Layers:  off.Layers, GPULayers: off.GPULayers, Devices: off.Devices,
			MemoryKind: kind, Memory: lctx.Memory(),
		},
		prep:      make(chan struct{}, max(2, runtime.NumCPU())),
		mediaReqs: make(chan struct{}, 2*cfg.Parallel),
		submitq:   make(chan *request, cfg.MaxQueue),
		embedq:    make(chan *embedJob, cfg.MaxQueue),
		wake:      make(chan struct{}, 1),
		quit:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	if proj != nil {
		e.info.Vision, e.info.Audio, e.info.AudioSampleRate = proj.Vision(), proj.Audio(), proj.AudioSampleRate()
	}
	e.life, e.endLife = context.WithCancel(context.Background())
	for tok := range int32(model.NVocab()) {
		if model.IsEOG(tok) {
			e.eog = append(e.eog, tok)
		}
	}
	s := newScheduler(e, lctx, poolCells, reqCtx)
	s.drafter = draft
	if e.cfg.Speculate.Model != "" {
		s.cost.settle = draftSettle // its measures cost a catch-up
	}
	e.disk = disk
	s.attachDisk(disk)
	s.publish()
	go s.run()
	return e, nil
}

// Info describes the loaded model.
func (e *Engine) Info() ModelInfo { return e.info }

// reserveQueue takes a place in the bounded queue, which Submit and
// Embed share, or fails with ErrClosed (closed or draining) or
// ErrQueueFull; the counter is the bound, so the channel send that
// follows never blocks. The caller holds e.mu for reading. Give the place
// back with e.queued.Add(-1) when the send does not happen.
func (e *Engine) reserveQueue() error {
	if e.closed || e.draining.Load() {
		return ErrClosed
	}
	for {
		n := e.queued.Load()
		if n >= int64(e.cfg.MaxQueue) {
			return ErrQueueFull
		}
		if e.queued.CompareAndSwap(n, n+1) {
			return nil
		}
	}
}

// Submit checks the request, tokenizes the prompt in the caller's
// goroutine, prepares the sampler and enqueues the request without waiting
// for the model. The request lives until ctx ends, it finishes, or
// Stream.Cancel is called.
//
// The queue bound is checked first, so a refused request costs no
// tokenization; at most a few Submit calls tokenize at once (the others
// wait, or give up when ctx ends).
func (e *Engine) Submit(ctx context.Context, req Request) (*Stream, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if err := e.reserveQueue(); err != nil {
		return nil, err
	}
	r, err := e.prepare(ctx, req)
	if err != nil {
		e.queued.Add(-1)
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	r.ctx = rctx
	r.id = e.nextID.Add(1)
	r.submitted = time.Now()
	r.stream = newStream(r.id, len(r.tokens), cancel, e.poke)
	// Cancellation is a message: when the context ends, poke the scheduler,
	// which retires the request at its next step boundary.
	r.stopWatch = context.AfterFunc(rctx, e.poke)
	e.submitq <- r
	return r.stream, nil
}

// prepare validates req, tokenizes its prompt and builds its sampler.
func (e *Engine) prepare(ctx context.Context, req Request) (*request, error) {
	if req.PinSlot && (req.SlotID < 0 || req.SlotID >= e.cfg.Parallel) {
		return nil, fmt.Errorf("%w: %d (have %d)", ErrBadSlot, req.SlotID, e.cfg.Parallel)
	}
	if c := req.Chunking; c != nil && (c.FirstMinTokens < 0 || c.FirstMaxTokens < 0 || c.MaxChars < 0) {
		return nil, fmt.Errorf("%w: negative bound in %+v", ErrBadChunking, *c)
	}
	if req.Logprobs && (req.TopLogprobs < 0 || req.TopLogprobs > MaxTopLogprobs) {
		return nil, fmt.Errorf("%w: %d top logprobs, want 0 to %d", ErrBadLogprobs, req.TopLogprobs, MaxTopLogprobs)
	}
	if req.Logprobs && req.Chunking != nil {
		return nil, fmt.Errorf("%w: a paced request cannot have logprobs", ErrBadLogprobs)
	}
	if req.PauseTimeout < 0 {
		return nil, fmt.Errorf("%w: negative pause timeout %v", ErrBadChunking, req.PauseTimeout)
	}
	if err := checkMarkup(&req, e.info.VocabSize); err != nil {
		return nil, err
	}
	held := false
	if len(req.Media) > 0 {
		select {
		case e.mediaReqs <- struct{}{}:
			held = true
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	r, err := e.prepareHeld(ctx, req)
	if err != nil {
		if held {
			<-e.mediaReqs
		}
		return nil, err
	}
	r.mediaHeld = held
	return r, nil
}

// prepareHeld is prepare once the request holds what its media need.
func (e *Engine) prepareHeld(ctx context.Context, req Request) (*request, error) {
	select {
	case e.prep <- struct{}{}:
		defer func() { <-e.prep }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if req.Grammar != "" {
		// Bounded in Go before llama.cpp parses it: its parser and its
		// grammar engine recurse on the C stack and bound nothing.
		if err := grammar.Validate(req.Grammar, grammar.DefaultLimits); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrGrammar, err)
		}
	}
	toks, media, err := e.promptTokens(&req)
	if err != nil {
		return nil, err
	}
	sampler, err := e.newSampler(req, toks)
	if err != nil {
		freeMedia(media)
		return nil, err
	}
	return &request{params: req, tokens: toks, media: media, sampler: sampler}, nil
}

// promptTokens tokenizes req's prompt as Submit evaluates it (its Prefix
// first, BOS only without one, Plain spans as text, media as media.go
// says) and checks it against the slot's context and the vocabulary. It
// returns the media's chunks too, which the caller frees. The caller
// holds a prep token.
func (e *Engine) promptTokens(req *Request) ([]int32, []*mediaChunk, error) {
	// A prompt needs one free cell for the first generated token.
	maxPrompt := e.info.CtxPerRequest - 1
	if len(req.Media) > 0 {
		if err := e.checkIDs(req.Prefix); err != nil {
			return nil, nil, err
		}
		return e.mediaTokens(req, maxPrompt)
	}
	toks, err := e.textPrompt(req, maxPrompt)
	return toks, nil, err
}

// checkIDs checks that toks are ids of the vocabulary.
func (e *Engine) checkIDs(toks []int32) error {
	for _, t := range toks {
		if t < 0 || int(t) >= e.info.VocabSize {
			return fmt.Errorf("engine: token id %d out of range [0,%d): %w", t, e.info.VocabSize, ErrBadToken)
		}
	}
	return nil
}

// textPrompt is promptTokens for a prompt without media.
func (e *Engine) textPrompt(req *Request, maxPrompt int) ([]int32, error) {
	toks := req.Tokens
	if len(toks) == 0 {
		// A prefix that fills the context still has its text counted
		// (one token at most is kept), for the error's exact count.
		room := max(1, maxPrompt-len(req.Prefix))
		var err error
		toks, err = e.model.TokenizeText(req.Prompt, llama.TokenizeOptions{
			AddSpecial: req.AddSpecial && len(req.Prefix) == 0, ParseSpecial: req.ParseSpecial, Plain: req.Plain,
			MaxTokens: room,
		})
		var many *llama.TooManyTokensError
		switch {
		case errors.As(err, &many):
			return nil, &PromptTooLongError{Tokens: len(req.Prefix) + many.Tokens, Max: maxPrompt}
		case errors.Is(err, llama.ErrTooManyTokens):
			// Over 1 GiB of text: not counted.
			return nil, fmt.Errorf("%w: %v; %d tokens per request", ErrPromptTooLong, err, e.info.CtxPerRequest)
		case err != nil:
			return nil, fmt.Errorf("%w: %v", ErrTokenize, err)
		}
		toks = append(slices.Clone(req.Prefix), toks...)
	} else {
		toks = slices.Clone(toks)
	}
	if len(req.Prefix) > 0 || len(req.Tokens) > 0 {
		if err := e.checkIDs(toks); err != nil {
			return nil, err
		}
	}
	if len(toks) == 0 {
		return nil, ErrEmptyPrompt
	}
	if len(toks) > maxPrompt {
		return nil, &PromptTooLongError{Tokens: len(toks), Max: maxPrompt}
	}
	return toks, nil
}

// newSampler builds the request's sampler, its penalties primed with the
// end of the prompt as llama-server's are.
func (e *Engine) newSampler(req Request, prompt []int32) (*llama.Sampler, error) {
	sp := req.Sampling
	lastN := sp.RepeatLastN
	if lastN < 0 || lastN > e.info.CtxPerRequest {
		lastN = e.info.CtxPerRequest
	}
	seed := uint32(sp.Seed)
	if sp.Seed < 0 || sp.Seed > math.MaxUint32 {
		seed = rand.Uint32()
	}
	p := llama.SamplerParams{
		Temperature: sp.Temperature, TopK: sp.TopK, TopP: sp.TopP, MinP: sp.MinP, TypicalP: sp.TypicalP,
		RepeatPenalty: sp.RepeatPenalty, FrequencyPenalty: sp.FrequencyPenalty, PresencePenalty: sp.PresencePenalty,
		RepeatLastN: lastN, Seed: seed, Grammar: req.Grammar,
	}
	if len(sp.LogitBias) > 0 || req.IgnoreEOS {
		p.LogitBias = make(map[int32]float32, len(sp.LogitBias)+len(e.eog))
		for tok, b := range sp.LogitBias {
			if tok < 0 || int(tok) >= e.info.VocabSize {
				return nil, fmt.Errorf("engine: logit_bias token %d out of range: %w", tok, ErrBadToken)
			}
			p.LogitBias[tok] = b
		}
		if req.IgnoreEOS {
			for _, tok := range e.eog {
				p.LogitBias[tok] = float32(negInf)
			}
		}
	}
	s, err := llama.NewSampler(e.model, p)
	var unwritable *llama.UnwritableError
	switch {
	case errors.As(err, &unwritable):
		return nil, fmt.Errorf("%w: %w", ErrGrammar, &UnsatisfiableError{Reason: unwritable.Reason})
	case errors.Is(err, llama.ErrGrammar):
		return nil, fmt.Errorf("%w: %v", ErrGrammar, err)
	case err != nil:
		return nil, fmt.Errorf("engine: %w", err)
	}
	if p.Grammar != "" && e.jump != "" {
		// Built here, once per model, so that the scheduler never waits
		// for it (jump.go).
		e.model.Pieces()
	}
	if penalized(sp) && lastN > 0 {
		// A medium's cells are no tokens to penalise.
		window := slices.DeleteFunc(slices.Clone(prompt[max(0, len(prompt)-lastN):]), isPlaceholder)
		if err := s.AcceptPrompt(window); err != nil {
			s.Close()
			return nil, fmt.Errorf("engine: %w", err)
		}
	}
	return s, nil
}

// penalized reports whether sp asks for any repetition penalty.
func penalized(sp Sampling) bool {
	return (sp.RepeatPenalty != 0 && sp.RepeatPenalty != 1) || sp.FrequencyPenalty != 0 || sp.PresencePenalty != 0
}

// poke wakes the scheduler without blocking.
func (e *Engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Tokenize converts text to token ids.
func (e *Engine) Tokenize(text string, addSpecial, parseSpecial bool) ([]int32, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return nil, ErrClosed
	}
	e.prep <- struct{}{}
	defer func() { <-e.prep }()
	toks, err := e.model.Tokenize(text, addSpecial, parseSpecial)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTokenize, err)
	}
	return toks, nil
}

// Detokenize converts token ids back to text; ids outside the vocabulary
// are skipped.
func (e *Engine) Detokenize(tokens []int32) string {
	valid := make([]int32, 0, len(tokens))
	for _, t := range tokens {
		if t >= 0 && int(t) < e.info.VocabSize {
			valid = append(valid, t)
		}
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return ""
	}
	return e.model.Detokenize(valid)
}

// TokenPiece returns the text of one token ("" if out of range).
func (e *Engine) TokenPiece(tok int32) string {
	if tok < 0 || int(tok) >= e.info.VocabSize {
		return ""
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return ""
	}
	return string(e.model.AppendPiece(nil, tok, true))
}

// Slots reports every slot's state as of the scheduler's last step. The
// scheduler publishes one snapshot per step, however many callers poll.
func (e *Engine) Slots(ctx context.Context) ([]SlotInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return slices.Clone(e.snap.Load().slots), nil
}

// Drain stops admission for a graceful shutdown: Submit returns ErrClosed
// from now on, and every request still waiting for a slot finishes at
// once with FinishError and ErrClosed. Running requests, and those preempted
// for a better class, continue. Safe to call more than once.
func (e *Engine) Drain() {
	e.draining.Store(true)
	e.poke()
}

// Stats is a snapshot of the engine's load, published by the scheduler
// after every step (the queue depth and the disk tier's fields are
// current).
func (e *Engine) Stats() Stats {
	s := e.snap.Load().stats
	s.QueueDepth = int(e.queued.Load())
	e.diskStats(&s)
	return s
}

// Close stops the scheduler, finishes every request as cancelled with
// ErrClosed, writes what the prefix caches hold to the disk tier (when
// Config.DiskCacheDir is set: every slot's cache and host entry, the most
// recent first within Config.DiskCacheBytes; Close waits for the writes,
// at most Config.DiskCloseTimeout) and frees the model. Safe to call more
// than once.
func (e *Engine) Close() error {
	e.once.Do(func() {
		e.mu.Lock()
		e.closed = true
		e.mu.Unlock()
		e.endLife()
		close(e.quit)
		<-e.done
		if e.proj != nil {
			e.proj.Close()
		}
		e.model.Close()
	})
	return nil
}

// ErrUnservable means the model is of a kind the engine does not run.
var ErrUnservable = errors.New("engine: model not servable")

// servable reports why the engine cannot run model, if it cannot: it
// evaluates a sequence token by token with llama_decode, which a
// diffusion model (it denoises a whole answer at once) and a model with
// an encoder (T5: llama_encode first, or llama.cpp aborts) do not fit.
func servable(model *llama.Model) error {
	switch {
	case model.Diffusion():
		return fmt.Errorf("%w: a diffusion model generates a whole answer by denoising, not token by token", ErrUnservable)
	case model.HasEncoder():
		return fmt.Errorf("%w: a model with an encoder (T5) needs llama_encode, which the engine does not run", ErrUnservable)
	}
	return nil
}

// loadModel loads cfg's model with cfg.Offload. Offloading as many layers
// as fit (llama.GPULayersAuto) sizes the context from the GGUF header
// first, as New will create it, so that its buffers are counted.
func loadModel(ctx context.Context, cfg Config, typeK, typeV llama.CacheType) (*llama.Model, error) {
	cfg.Offload.MTP = cfg.Speculate.MTP
	if cfg.Offload.GPULayers != llama.GPULayersAuto || len(llama.Devices()) == 0 {
		return llama.LoadModelOffload(ctx, cfg.ModelPath, cfg.Offload, llama.ContextParams{})
	}
	md, err := gguf.ReadMetadata(cfg.ModelPath)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", cfg.ModelPath, err)
	}
	declared, ok := md.Uint(md.Architecture + poolingKey)
	pooling, err := resolvePooling(cfg.Pooling, declared, ok)
	if err != nil {
		return nil, err
	}
	return llama.LoadModelOffload(ctx, cfg.ModelPath, cfg.Offload, cfg.contextParams(md.ContextLength, pooling, typeK, typeV))
}
