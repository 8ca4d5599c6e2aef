package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-llm/corral/llama"
)

// Engine serves one model. Create it with New; it is safe for concurrent use.
type Engine struct {
	cfg   Config
	info  ModelInfo
	model *llama.Model
	eog   []int32 // end-of-generation tokens, banned when IgnoreEOS

	nextID atomic.Uint64
	queued atomic.Int64 // requests submitted but not yet admitted or dropped

	// mu guards closed and the model's lifetime: Submit and the vocab
	// methods hold it for reading while they use the model (tokenizing, a
	// non-blocking send); Close takes it for writing before freeing. It is
	// never held around compute.
	mu      sync.RWMutex
	closed  bool
	submitq chan *request
	wake    chan struct{}         // capacity 1: "look at cancellations"
	ctrl    chan func(*scheduler) // snapshot requests, run by the scheduler
	quit    chan struct{}         // closed by Close
	done    chan struct{}         // closed when the scheduler has exited
	stats   atomic.Pointer[Stats] // published by the scheduler every step
	once    sync.Once
}

// request is a submitted generation as the scheduler sees it.
type request struct {
	id        uint64
	ctx       context.Context
	params    Request
	tokens    []int32
	sampler   *llama.Sampler
	stream    *Stream
	submitted time.Time
	stopWatch func() bool // detaches the context.AfterFunc wake-up
}

// New loads the model, creates the context and starts the scheduler.
func New(cfg Config) (*Engine, error) {
	if cfg.Parallel <= 0 {
		cfg.Parallel = 4
	}
	if cfg.Threads <= 0 {
		cfg.Threads = runtime.NumCPU()
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 512
	}
	if cfg.BatchSize < cfg.Parallel {
		cfg.BatchSize = cfg.Parallel
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = 256
	}
	model, err := llama.LoadModel(cfg.ModelPath)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	nctx := cfg.CtxSize
	if nctx <= 0 {
		nctx = min(model.CtxTrain(), 4096) * cfg.Parallel
	}
	lctx, err := llama.NewContext(model, llama.ContextParams{
		NCtx: nctx, NBatch: cfg.BatchSize, NSeqMax: cfg.Parallel, Threads: cfg.Threads,
	})
	if err != nil {
		model.Close()
		return nil, fmt.Errorf("engine: %w", err)
	}
	name := cfg.Name
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(cfg.ModelPath), ".gguf")
	}
	tmpl, _ := model.Meta("tokenizer.chat_template")
	arch, _ := model.Meta("general.architecture")
	e := &Engine{
		cfg:   cfg,
		model: model,
		info: ModelInfo{
			Name: name, Path: cfg.ModelPath, Architecture: arch,
			CtxTrain: model.CtxTrain(), SlotCtx: lctx.NCtxSeq(), VocabSize: model.NVocab(),
			ChatTemplate: tmpl, BOS: model.BOS(), EOS: model.EOS(), AddBOS: model.AddBOS(),
			Created: time.Now(),
		},
		submitq: make(chan *request, cfg.MaxQueue),
		wake:    make(chan struct{}, 1),
		ctrl:    make(chan func(*scheduler)),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	for tok := range int32(model.NVocab()) {
		if model.IsEOG(tok) {
			e.eog = append(e.eog, tok)
		}
	}
	s := newScheduler(e, lctx)
	e.stats.Store(&Stats{SlotsTotal: cfg.Parallel, KVCellsTotal: lctx.NCtx()})
	go s.run()
	return e, nil
}

// Info describes the loaded model.
func (e *Engine) Info() ModelInfo { return e.info }

// Submit tokenizes the prompt in the caller's goroutine, prepares the
// sampler and enqueues the request without waiting for the model. The
// request lives until ctx ends, it finishes, or Stream.Cancel is called.
func (e *Engine) Submit(ctx context.Context, req Request) (*Stream, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return nil, ErrClosed
	}
	toks := append([]int32(nil), req.Tokens...)
	if len(toks) == 0 {
		var err error
		toks, err = e.model.Tokenize(req.Prompt, req.AddSpecial, req.ParseSpecial)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrTokenize, err)
		}
	}
	if len(toks) == 0 {
		return nil, ErrEmptyPrompt
	}
	for _, t := range toks {
		if t < 0 || int(t) >= e.info.VocabSize {
			return nil, fmt.Errorf("engine: token id %d out of range [0,%d): %w", t, e.info.VocabSize, ErrBadToken)
		}
	}
	if len(toks) >= e.info.SlotCtx {
		return nil, fmt.Errorf("%w: %d prompt tokens, %d per slot", ErrPromptTooLong, len(toks), e.info.SlotCtx)
	}
	if req.PinSlot && (req.SlotID < 0 || req.SlotID >= e.cfg.Parallel) {
		return nil, fmt.Errorf("%w: %d (have %d)", ErrBadSlot, req.SlotID, e.cfg.Parallel)
	}
	sampler, err := e.newSampler(req)
	if err != nil {
		return nil, err
	}

	// Reserve a queue place; the counter is the bound, so the channel
	// send below never blocks.
	for {
		n := e.queued.Load()
		if n >= int64(e.cfg.MaxQueue) {
			sampler.Close()
			return nil, ErrQueueFull
		}
		if e.queued.CompareAndSwap(n, n+1) {
			break
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &request{
		id: e.nextID.Add(1), ctx: rctx, params: req, tokens: toks, sampler: sampler,
		submitted: time.Now(),
	}
	r.stream = newStream(r.id, len(toks), cancel)
	// Cancellation is a message: when the context ends, poke the scheduler,
	// which retires the request at its next step boundary.
	r.stopWatch = context.AfterFunc(rctx, e.poke)
	e.submitq <- r
	return r.stream, nil
}

func (e *Engine) newSampler(req Request) (*llama.Sampler, error) {
	sp := req.Sampling
	p := llama.SamplerParams{
		Temperature: sp.Temperature, TopK: sp.TopK, TopP: sp.TopP, MinP: sp.MinP, TypicalP: sp.TypicalP,
		RepeatPenalty: sp.RepeatPenalty, FrequencyPenalty: sp.FrequencyPenalty, PresencePenalty: sp.PresencePenalty,
		RepeatLastN: sp.RepeatLastN, Seed: sp.Seed, Grammar: req.Grammar,
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
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrGrammar, err)
	}
	return s, nil
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

// Slots reports every slot's state, as seen by the scheduler.
func (e *Engine) Slots(ctx context.Context) ([]SlotInfo, error) {
	reply := make(chan []SlotInfo, 1)
	select {
	case e.ctrl <- func(s *scheduler) { reply <- s.slotInfo() }:
	case <-e.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return <-reply, nil
}

// Stats is a snapshot of the engine's load, published by the scheduler
// after every step.
func (e *Engine) Stats() Stats {
	s := *e.stats.Load()
	s.QueueDepth = int(e.queued.Load())
	return s
}

// Close stops the scheduler, finishes every request as cancelled with
// ErrClosed and frees the model. Safe to call more than once.
func (e *Engine) Close() error {
	e.once.Do(func() {
		e.mu.Lock()
		e.closed = true
		e.mu.Unlock()
		close(e.quit)
		<-e.done
		e.model.Close()
	})
	return nil
}
