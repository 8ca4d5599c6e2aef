package serving

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gate"
	"github.com/corral-llm/corral/model"
)

// RequestLog is what a handler tells the request log (package server
// writes one line per request when it ends) about the generation it
// served. The handler fills it in the goroutine that serves the request.
type RequestLog struct {
	// Model is the model's id; "" when the request generated nothing.
	Model string
	// Prompt tokens, those of them found cached, and tokens generated.
	PromptTokens, CachedTokens, GeneratedTokens int
	// Queue is submit to admission to a slot; TTFT submit to the first
	// generated token (0: none).
	Queue, TTFT time.Duration
	// TokensPerSecond is the decoding speed (generated tokens after the
	// first over the time after it, pauses excluded).
	TokensPerSecond float64
	// FinishReason is vLLM's: stop, length, abort or error.
	FinishReason string
	// Disconnected says the client went away (or stopped reading) before
	// the answer was whole.
	Disconnected bool
}

type requestLogKey struct{}

// WithRequestLog returns ctx carrying rec for the handlers to fill in.
func WithRequestLog(ctx context.Context, rec *RequestLog) context.Context {
	return context.WithValue(ctx, requestLogKey{}, rec)
}

// Attrs are rec's fields for the request log line, none when the request
// generated nothing.
func (rec *RequestLog) Attrs() []slog.Attr {
	if rec == nil || rec.Model == "" {
		return nil
	}
	return []slog.Attr{
		slog.String("model", rec.Model),
		slog.Int("prompt_tokens", rec.PromptTokens),
		slog.Int("cached_tokens", rec.CachedTokens),
		slog.Int("generated_tokens", rec.GeneratedTokens),
		slog.Duration("queue", rec.Queue),
		slog.Duration("ttft", rec.TTFT),
		slog.Float64("tokens_per_second", rec.TokensPerSecond),
		slog.String("finish_reason", rec.FinishReason),
		slog.Bool("disconnected", rec.Disconnected),
	}
}

// settleTimeout bounds how long a handler waits for the engine to finish a
// request it cancelled (normally one scheduler step).
const settleTimeout = time.Minute

// outcome records how one generation ended: the request metrics as soon
// as its Result is final (before the answer's last bytes, so that a client
// that has read them finds the request counted), the request log when the
// handler returns.
type outcome struct {
	core *Core
	ctx  context.Context
	m    *model.Model
	s    *engine.Stream
	res  *engine.Result // set once observed
	gone bool           // the client went away or stopped reading
	// unlogged: the request log is not filled (a tool call's repair,
	// which serves a request whose log is its first answer's).
	unlogged bool
}

// final records res, s's final Result, in the metrics and against the
// caller's key's tokens per minute (once).
func (o *outcome) final(res engine.Result) {
	if o.res == nil {
		o.res = &res
		o.core.metrics.observe(o.m.Info().Name, res)
		gate.Charge(o.ctx, res.Usage.PromptTokens+res.Usage.CompletionTokens)
	}
}

// end, deferred by the handler, cancels s (a no-op once it finished),
// waits for its final Result when it was not recorded yet (the engine
// retires a cancelled request at its next step), records it, and fills
// the request log of the request's context when it carries one.
func (o *outcome) end() {
	o.s.Cancel()
	if o.res == nil {
		wait, cancel := context.WithTimeout(context.WithoutCancel(o.ctx), settleTimeout)
		defer cancel()
		for {
			if _, err := o.s.Recv(wait); err == io.EOF {
				break
			} else if err != nil {
				o.core.log.Warn("request not finished after its cancel", "model", o.m.Info().Name, "timeout", settleTimeout)
				return
			}
		}
		o.final(o.s.Result())
	}
	rec, _ := o.ctx.Value(requestLogKey{}).(*RequestLog)
	if rec == nil || o.unlogged {
		return
	}
	res := o.res
	*rec = RequestLog{
		Model: o.m.Info().Name, PromptTokens: res.Usage.PromptTokens, CachedTokens: res.Usage.CachedTokens,
		GeneratedTokens: res.Usage.CompletionTokens, Queue: res.Timings.Queued, TTFT: res.Timings.TTFT,
		TokensPerSecond: res.Timings.TokensPerSecond, FinishReason: finishedReason(res.FinishReason),
		Disconnected: o.gone || o.ctx.Err() != nil,
	}
}
