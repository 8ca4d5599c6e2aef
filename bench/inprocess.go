package bench

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/corral-llm/corral/engine"
)

// EngineTarget drives an engine directly, without HTTP: submit latency is
// the time Submit takes, chunks are what Stream.Recv returns. Comparing its
// figures with a Client's against `corral serve` on the same model shows
// the HTTP layer's cost. It is a Target and a Tokenizer.
type EngineTarget struct {
	Engine *engine.Engine
	// MaxTokens limits each generation (0: the engine's default).
	MaxTokens int
	// IgnoreEOS keeps generating past end-of-generation tokens.
	IgnoreEOS bool
	// Priority is every request's class (lower is served first).
	Priority int
}

// CountTokens counts text's tokens with the engine's vocabulary.
func (t *EngineTarget) CountTokens(_ context.Context, text string) (int, error) {
	toks, err := t.Engine.Tokenize(text, false, false)
	return len(toks), err
}

// Do submits p (its Text, with the model's special tokens added) and reads
// the stream to its end.
func (t *EngineTarget) Do(ctx context.Context, p Prompt, cancelAfter int) Record {
	rec := Record{PromptTokens: p.Tokens}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	s, err := t.Engine.Submit(ctx, engine.Request{
		Prompt:     p.Text(),
		AddSpecial: true,
		MaxTokens:  t.MaxTokens,
		IgnoreEOS:  t.IgnoreEOS,
		SlotID:     -1,
		Priority:   t.Priority,
	})
	rec.Submit = time.Since(start)
	if err != nil {
		rec.End = rec.Submit
		rec.Err, rec.ErrMsg = engineErrKind(err), err.Error()
		return rec
	}
	for {
		c, err := s.Recv(ctx)
		now := time.Since(start)
		if err == io.EOF {
			rec.End = now
			break
		}
		if err != nil {
			rec.End = now
			rec.Err, rec.ErrMsg = classify(ctx, err), err.Error()
			return rec
		}
		if c.Text != "" {
			rec.Chunks = append(rec.Chunks, now)
		}
		if cancelAfter > 0 && len(rec.Chunks) >= cancelAfter {
			s.Cancel()
			rec.End, rec.Cancelled = now, true
			return rec
		}
	}
	res := s.Result()
	if res.FinishReason == engine.FinishError {
		rec.Err = "engine_error"
		if res.Err != nil {
			rec.ErrMsg = res.Err.Error()
		}
		return rec
	}
	if res.FinishReason == engine.FinishCancelled {
		rec.Err, rec.ErrMsg = classify(ctx, ctx.Err()), "request cancelled"
		return rec
	}
	rec.FromUsage = true
	rec.PromptTokens = res.Usage.PromptTokens
	rec.OutputTokens = res.Usage.CompletionTokens
	rec.CachedTokens = res.Usage.CachedTokens
	return rec
}

// engineErrKinds names the engine's Submit errors in Record.Err.
var engineErrKinds = []struct {
	err  error
	kind string
}{
	{engine.ErrQueueFull, "queue_full"},
	{engine.ErrQueueTimeout, "queue_timeout"},
	{engine.ErrClosed, "closed"},
	{engine.ErrPromptTooLong, "prompt_too_long"},
	{engine.ErrEmptyPrompt, "empty_prompt"},
	{engine.ErrBadSlot, "bad_slot"},
	{engine.ErrGrammar, "grammar"},
}

// engineErrKind names a Submit error; engine_error when it is none of the
// engine's sentinels.
func engineErrKind(err error) string {
	for _, k := range engineErrKinds {
		if errors.Is(err, k.err) {
			return k.kind
		}
	}
	return "engine_error"
}
