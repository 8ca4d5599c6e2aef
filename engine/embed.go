package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/corral-llm/corral/llama"
)

// Embeddings run through the scheduler, not beside it: Embed tokenizes in
// the caller's goroutine and enqueues a job; the scheduler, between two
// generation steps, evaluates pending inputs (of one job or several) in
// one llama_decode with embeddings turned on, reads each input's pooled
// vector, normalizes it and removes the input's cells from the KV cache.
// The generation batch never holds an embedding input: with embeddings on,
// llama.cpp pools every sequence of the batch and needs every token of
// it as an output, which the slots' prompt chunks are not.
//
// Sequence ids: input k of a pass is sequence Parallel+k, one of
// embedLanes ids after the slots' (the context is created with n_seq_max
// = Parallel + embedLanes), so it never meets a slot's cells.
//
// KV room: a pass holds at most BatchSize tokens, and the context is
// created with BatchSize cells more than the slots' share (embedReserve):
// the slots never hold more than Parallel × CtxPerRequest cells (admission
// bounds what idle slots keep), so a pass always finds its cells free,
// without evicting any slot's prefix cache, and they are free again when
// it ends. A pass is one micro-batch (n_ubatch = n_batch = BatchSize), as
// llama.cpp's pooling needs a sequence whole within one.
//
// The cells a pass takes are taken and freed within the pass, from
// llama.cpp's search head, which they leave at or before where it was:
// the next generation tokens take the cells they would have taken
// without the pass, and a slot's cells stay in position order (see
// place), so running streams' outputs do not change.

// embedLanes is the number of sequence ids reserved for embedding inputs:
// the most inputs one pass evaluates (llama.cpp allows 256 sequences).
const embedLanes = 64

// lanes is the number of embedding sequence ids an engine of cfg
// reserves: embedLanes, within llama.cpp's 256 sequences; 0 when it
// cannot embed.
func (cfg Config) lanes(p llama.Pooling) int {
	if !embeds(p) {
		return 0
	}
	return max(1, min(embedLanes, 256-cfg.Parallel))
}

// embedReserve is the KV cells an engine of cfg keeps for embedding
// passes: one batch, or none when it cannot embed.
func (cfg Config) embedReserve(p llama.Pooling) int {
	if !embeds(p) {
		return 0
	}
	return cfg.BatchSize
}

// embeds reports whether pooling p gives sequence embeddings.
func embeds(p llama.Pooling) bool {
	return p == llama.PoolingMean || p == llama.PoolingCLS || p == llama.PoolingLast
}

// poolingKey is the GGUF key, after the architecture, that declares a
// model's pooling (llama.cpp's LLM_KV_POOLING_TYPE).
const poolingKey = ".pooling_type"

// resolvePooling is the pooling for Config.Pooling name, with declared
// the GGUF's llama_pooling_type value (ok false when absent).
func resolvePooling(name string, declared uint64, ok bool) (llama.Pooling, error) {
	switch name {
	case "":
		// llama.cpp writes LLAMA_POOLING_TYPE_UNSPECIFIED (-1) as a
		// uint32 (its llama_model_saver does): no pooling declared.
		if !ok || declared == math.MaxUint32 {
			return llama.PoolingNone, nil
		}
		if declared > uint64(llama.PoolingRank-1) {
			return 0, fmt.Errorf("engine: the model declares pooling type %d, which llama.cpp does not know", declared)
		}
		return llama.Pooling(declared + 1), nil
	case "none":
		return llama.PoolingNone, nil
	case "mean":
		return llama.PoolingMean, nil
	case "cls":
		return llama.PoolingCLS, nil
	case "last":
		return llama.PoolingLast, nil
	}
	return 0, fmt.Errorf("engine: pooling %q: want none, mean, cls or last", name)
}

// modelPooling resolves Config.Pooling against the loaded model's
// metadata.
func modelPooling(name string, model *llama.Model) (llama.Pooling, error) {
	arch, _ := model.Meta("general.architecture")
	v, ok := model.Meta(arch + poolingKey)
	var declared uint64
	if ok {
		var err error
		if declared, err = strconv.ParseUint(v, 10, 32); err != nil {
			return 0, fmt.Errorf("engine: %s%s = %q: %w", arch, poolingKey, v, err)
		}
	}
	return resolvePooling(name, declared, ok)
}

// embedJob is an Embed call as the scheduler sees it.
type embedJob struct {
	ctx       context.Context
	inputs    [][]int32
	vecs      [][]float32
	next      int  // inputs[:next] went into a pass
	done      int  // inputs whose vector is in vecs
	started   bool // an input went into a pass: the job left the queue
	ended     bool // its reply was sent
	submitted time.Time
	reply     chan error // capacity 1: the scheduler never blocks on it
	stopWatch func() bool
}

// Embed computes one embedding per input with the pooling of
// ModelInfo.Pooling. It tokenizes in the caller's goroutine and enqueues
// the inputs, which the scheduler evaluates between generation steps,
// batched with other Embed calls' inputs; it returns when they are done
// or ctx ends (the inputs still queued are then dropped, and nothing of
// them stays in the KV cache).
//
// Errors: ErrNotEmbedding when the pooling is none; ErrTooManyInputs
// past MaxEmbedInputs; an *EmbedInputError for an input that is empty,
// longer than ModelInfo.EmbedMaxTokens, has a token id outside the
// vocabulary or text the vocabulary cannot encode; ErrQueueFull,
// ErrQueueTimeout and ErrClosed as for Submit (an Embed call takes one
// place in the queue); ctx's error.
func (e *Engine) Embed(ctx context.Context, inputs []EmbedInput) (*Embeddings, error) {
	if e.info.EmbedMaxTokens == 0 {
		return nil, fmt.Errorf("%w (%s)", ErrNotEmbedding, e.info.Pooling)
	}
	if len(inputs) == 0 {
		return nil, fmt.Errorf("engine: embed: %w", ErrEmptyPrompt)
	}
	if len(inputs) > MaxEmbedInputs {
		return nil, fmt.Errorf("%w: %d, at most %d", ErrTooManyInputs, len(inputs), MaxEmbedInputs)
	}
	job, err := e.enqueueEmbed(ctx, inputs)
	if err != nil {
		return nil, err
	}
	select {
	case err = <-job.reply:
	case <-ctx.Done():
		// The scheduler drops the job at its next step (the context's
		// wake-up tells it); its reply goes into the buffered channel.
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	n := 0
	for _, in := range job.inputs {
		n += len(in)
	}
	return &Embeddings{Vectors: job.vecs, Tokens: n}, nil
}

// enqueueEmbed reserves a queue place, tokenizes the inputs and sends the
// job to the scheduler.
func (e *Engine) enqueueEmbed(ctx context.Context, inputs []EmbedInput) (*embedJob, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if err := e.reserveQueue(); err != nil {
		return nil, err
	}
	toks, err := e.embedTokens(ctx, inputs)
	if err != nil {
		e.queued.Add(-1)
		return nil, err
	}
	jctx, cancel := context.WithCancel(ctx)
	job := &embedJob{
		ctx: jctx, inputs: toks, vecs: make([][]float32, len(toks)),
		submitted: time.Now(), reply: make(chan error, 1),
	}
	stop := context.AfterFunc(jctx, e.poke)
	job.stopWatch = func() bool { ok := stop(); cancel(); return ok }
	e.embedq <- job
	return job, nil
}

// embedTokens checks and tokenizes the inputs.
func (e *Engine) embedTokens(ctx context.Context, inputs []EmbedInput) ([][]int32, error) {
	select {
	case e.prep <- struct{}{}:
		defer func() { <-e.prep }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	limit := e.info.EmbedMaxTokens
	out := make([][]int32, len(inputs))
	for i, in := range inputs {
		toks := in.Tokens
		if len(toks) > 0 {
			for _, t := range toks {
				if t < 0 || int(t) >= e.info.VocabSize {
					return nil, &EmbedInputError{i, fmt.Errorf("%w: %d is out of range [0,%d)", ErrBadToken, t, e.info.VocabSize)}
				}
			}
			toks = slices.Clone(toks)
		} else {
			if in.Text == "" {
				return nil, &EmbedInputError{i, ErrEmptyPrompt}
			}
			var err error
			toks, err = e.model.TokenizeText(in.Text, llama.TokenizeOptions{AddSpecial: true, MaxTokens: limit})
			var many *llama.TooManyTokensError
			switch {
			case errors.As(err, &many):
				return nil, &EmbedInputError{i, &PromptTooLongError{Tokens: many.Tokens, Max: limit}}
			case errors.Is(err, llama.ErrTooManyTokens):
				return nil, &EmbedInputError{i, fmt.Errorf("%w: %v; an input may have %d tokens", ErrPromptTooLong, err, limit)}
			case err != nil:
				return nil, &EmbedInputError{i, fmt.Errorf("%w: %v", ErrTokenize, err)}
			}
		}
		if len(toks) == 0 {
			return nil, &EmbedInputError{i, ErrEmptyPrompt}
		}
		if len(toks) > limit {
			return nil, &EmbedInputError{i, &PromptTooLongError{Tokens: len(toks), Max: limit}}
		}
		out[i] = toks
	}
	return out, nil
}

// embedPass evaluates the pending embedding inputs that fit in one pass,
// in job order: at most BatchSize tokens, and one lane each. A job's
// inputs go in order, and a job whose next input does not fit holds back
// the jobs behind it, so a long input is not starved by short ones.
func (s *scheduler) embedPass() {
	if len(s.embeds) == 0 {
		return
	}
	type lane struct {
		job *embedJob
		idx int
	}
	var lanes []lane
	s.batch.Reset()
	room := s.e.cfg.BatchSize
	for _, j := range s.embeds {
		for j.next < len(j.inputs) && len(lanes) < s.lanes && len(j.inputs[j.next]) <= room {
			seq := s.e.cfg.Parallel + len(lanes)
			for pos, tok := range j.inputs[j.next] {
				s.batch.Add(tok, pos, seq, true) // pooling needs every token as an output
			}
			room -= len(j.inputs[j.next])
			lanes = append(lanes, lane{j, j.next})
			j.next++
			if !j.started {
				j.started = true
				s.e.queued.Add(-1)
			}
		}
		if j.next < len(j.inputs) {
			break // inputs go in order: a job's next input waits for the next pass
		}
	}
	if len(lanes) == 0 {
		return
	}
	release, err := s.cores()
	if err != nil {
		return // closing: receive returns false, shutdown fails the jobs
	}
	s.lctx.SetEmbeddings(true)
	err = s.lctx.Decode(&s.batch)
	s.lctx.SetEmbeddings(false)
	release()
	s.embedPasses++
	n := s.e.info.EmbeddingSize
	for k, l := range lanes {
		seq := s.e.cfg.Parallel + k
		if err == nil {
			v, ok := s.lctx.SeqEmbedding(make([]float32, 0, n), seq, n)
			if ok {
				normalize(v)
				l.job.vecs[l.idx] = v
				l.job.done++
				s.embedInputs++
			} else {
				err = fmt.Errorf("engine: embed: llama.cpp pooled nothing for input %d", l.idx)
			}
		}
		s.lctx.SeqRemove(seq, -1, -1)
	}
	s.batch.Reset()
	if err != nil {
		for _, l := range lanes {
			s.endEmbed(l.job, fmt.Errorf("engine: embed: %w", err))
		}
	}
	// Finish the jobs that are complete (or failed above), publishing
	// the stats first so that a caller sees its pass counted.
	var complete []*embedJob
	kept := s.embeds[:0]
	for _, j := range s.embeds {
		switch {
		case j.ended:
		case j.done == len(j.inputs):
			complete = append(complete, j)
		default:
			kept = append(kept, j)
		}
	}
	clear(s.embeds[len(kept):])
	s.embeds = kept
	s.embedRequests += uint64(len(complete))
	s.publish()
	for _, j := range complete {
		s.replyEmbed(j, nil)
	}
}

// endEmbed ends the job with err (nil: its vectors are ready), once.
func (s *scheduler) endEmbed(j *embedJob, err error) {
	if j.ended {
		return
	}
	s.embedRequests++
	s.replyEmbed(j, err)
}

// replyEmbed delivers the job's outcome; the job must not have ended,
// and is counted in embedRequests already.
func (s *scheduler) replyEmbed(j *embedJob, err error) {
	j.ended = true
	j.stopWatch()
	if !j.started {
		s.e.queued.Add(-1)
	}
	j.reply <- err
}

// retireEmbeds drops the jobs whose context ended, those that waited
// longer than MaxQueueWait for their first pass, and, once the engine
// drains, those not started.
func (s *scheduler) retireEmbeds(now time.Time) {
	maxWait := s.e.cfg.MaxQueueWait
	draining := s.e.draining.Load()
	kept := s.embeds[:0]
	for _, j := range s.embeds {
		switch {
		case j.ctx.Err() != nil:
			s.endEmbed(j, j.ctx.Err())
		case draining && !j.started:
			s.endEmbed(j, ErrClosed)
		case maxWait > 0 && !j.started && now.Sub(j.submitted) > maxWait:
			s.endEmbed(j, ErrQueueTimeout)
		default:
			kept = append(kept, j)
		}
	}
	clear(s.embeds[len(kept):])
	s.embeds = kept
}

// normalize scales v to unit L2 length, as OpenAI's embeddings are and
// llama-server's are by default; a zero vector stays zero.
func normalize(v []float32) {
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	if sum == 0 {
		return
	}
	inv := 1 / math.Sqrt(sum)
	for i, x := range v {
		v[i] = float32(float64(x) * inv)
	}
}
