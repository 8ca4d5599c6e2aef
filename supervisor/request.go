package supervisor

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptrace"
	"strings"
	"time"

	"github.com/corral-llm/corral/supervisor/agent"
	"github.com/corral-llm/corral/supervisor/process"
	"github.com/corral-llm/corral/wire"
)

// maxEventBytes bounds one server-sent event line from the child.
const maxEventBytes = wire.DefaultMaxLine

// request is the record of one submitted job. id, proc and cancel are
// fixed at creation, and so is job until run's conversation has ended (it
// then keeps only the name, under Worker.mu); everything else is guarded
// by Worker.mu.
type request struct {
	id     int64
	job    Job
	proc   *process.Process // the child current at submit
	cancel context.CancelCauseFunc

	// bodyBytes is what the job's body counts in the supervisor's byte
	// budget until the conversation ends; keptBytes what its name and
	// result count until the result is read or expires.
	bodyBytes, keptBytes int64
	// acct is whom the job's bytes and tokens are charged to; fixed at
	// creation.
	acct account

	state                       RequestState
	created, started, completed time.Time
	tl                          timeline        // the current turn
	text                        strings.Builder // the current turn's text
	outputChars, tokens         int
	firstToken                  time.Time
	toolItersLeft               int
	signals                     []ExitSignal
	finish                      FinishReason
	failReason                  FailReason
	failDetail                  string
	resultText                  string
}

// turn is one streamed upstream response.
type turn struct {
	text      string
	toolCalls []wire.ToolCall // native format only
	finish    FinishReason
}

// payload merges the fields the worker controls into a copy of params:
// messages, stream, stream_options.include_usage (the tokens a turn used
// are charged to its caller's key), tools (native format), and the
// defaults model and max_tokens when params does not set them. Other keys
// pass through.
func (w *Worker) payload(params map[string]any, msgs []wire.Message) map[string]any {
	p := make(map[string]any, len(params)+5)
	maps.Copy(p, params)
	p["messages"] = msgs
	p["stream"] = true
	opts := map[string]any{}
	if o, ok := p["stream_options"].(map[string]any); ok {
		maps.Copy(opts, o)
	}
	opts["include_usage"] = true
	p["stream_options"] = opts
	delete(p, "tools")
	if w.cfg.ToolFormat == agent.ToolFormatNative {
		if tools := append(append([]agent.ToolDef(nil), w.cfg.NormalTools...), w.cfg.ExitTools...); len(tools) > 0 {
			p["tools"] = tools
		}
	}
	if _, ok := p["model"]; !ok {
		p["model"] = w.cfg.Model
	}
	_, hasMax := p["max_tokens"]
	_, hasMaxCompletion := p["max_completion_tokens"]
	if !hasMax && !hasMaxCompletion && w.cfg.MaxTokens > 0 {
		p["max_tokens"] = w.cfg.MaxTokens
	}
	return p
}

// touch updates r's timeline under the lock.
func (w *Worker) touch(r *request, f func(t *timeline, now time.Time)) {
	now := time.Now()
	w.mu.Lock()
	f(&r.tl, now)
	w.mu.Unlock()
}

// stampReader records the time of every read that returned bytes.
type stampReader struct {
	r      io.Reader
	onData func()
}

func (s stampReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.onData()
	}
	return n, err
}

// streamTurn posts one chat completion with stream=true and reads it to the
// end, recording progress for the timeout checks and feeding the
// repeated-line detector. The tokens the turn used are charged to the
// job's key (turnTokens) once the server has accepted it, however the
// turn ends.
func (w *Worker) streamTurn(ctx context.Context, r *request, body []byte) (turn, error) {
	now := time.Now()
	w.mu.Lock()
	r.tl = timeline{dispatched: now}
	if r.started.IsZero() {
		r.started = now
	}
	r.text.Reset()
	w.mu.Unlock()

	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) {
		w.touch(r, func(t *timeline, now time.Time) { t.connected = now })
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace),
		http.MethodPost, w.baseURL+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return turn{}, fail(FailUnknown, "build request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := w.client.Do(req)
	if err != nil {
		return turn{}, w.transportFailure(ctx, r, err)
	}
	defer resp.Body.Close()
	w.touch(r, func(t *timeline, now time.Time) { t.headers = now })
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		return turn{}, fail(FailUpstream, "status %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	var (
		usage  *wire.Usage // the last the server reported
		chunks int         // content-bearing chunks
	)
	defer func() { r.acct.lease.Charge(turnTokens(usage, len(body), chunks)) }()

	sr := wire.NewReader(stampReader{resp.Body, func() {
		w.touch(r, func(t *timeline, now time.Time) {
			t.lastByte = now
			w.streamByte = now // under w.mu, like t
		})
	}})
	sr.MaxLine = maxEventBytes
	loop := agent.LineLoopDetector{Guard: w.cfg.RepeatedLine}
	var (
		t    turn
		acc  agent.ToolCallAccumulator
		text strings.Builder
		done bool
	)
	for !done {
		ev, err := sr.Next()
		switch {
		case err == io.EOF:
		case errors.Is(err, wire.ErrLineTooLong):
			return turn{}, fail(FailUpstream, "stream event longer than %d bytes", maxEventBytes)
		case err != nil:
			return turn{}, w.transportFailure(ctx, r, err)
		}
		if err != nil {
			break
		}
		if ev.Done {
			done = true
			break
		}
		var c wire.ChatCompletionChunk
		if err := wire.DecodeEvent(ev.Data, &c); err != nil {
			var ee *wire.EventError
			if errors.As(err, &ee) {
				return turn{}, fail(FailUpstream, "error event: %.500s", ee.Raw)
			}
			return turn{}, fail(FailUpstream, "bad stream event %.200q: %v", ev.Data, err)
		}
		if c.Usage != nil {
			usage = c.Usage
		}
		if len(c.Choices) == 0 {
			continue // usage-only chunk
		}
		ch := c.Choices[0]
		for _, d := range ch.Delta.ToolCalls {
			if err := acc.Add(d); err != nil {
				return turn{}, &failure{FailToolParse, err.Error()}
			}
		}
		if content := ch.Delta.Text(); content != "" || len(ch.Delta.ToolCalls) > 0 {
			chunks++
			w.progress(r, content)
			text.WriteString(content)
			if line, looping := loop.Feed(content); looping {
				return turn{}, fail(FailRepeatedLine, "line repeated %d times: %.200q", w.cfg.RepeatedLine.Repeats, line)
			}
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			t.finish = FinishStop
			if *ch.FinishReason == "length" {
				t.finish = FinishMaxToken
			}
		}
	}
	if !done && t.finish == "" {
		return turn{}, w.transportFailure(ctx, r, io.ErrUnexpectedEOF)
	}
	if t.finish == "" {
		t.finish = FinishStop
	}
	t.text, t.toolCalls = text.String(), acc.Calls
	return t, nil
}

// bytesPerToken is the bytes of a request counted as one prompt token
// when the server reports no usage: about what tokenizers of English text
// average.
const bytesPerToken = 4

// turnTokens is what a turn is charged against its key's tokens per
// minute: the prompt and completion tokens of the usage the server
// reported, else an estimate: a token per bytesPerToken bytes of the
// request, and one per content-bearing chunk (servers stream a token a
// chunk).
func turnTokens(usage *wire.Usage, requestBytes, chunks int) int {
	if usage != nil && usage.PromptTokens+usage.CompletionTokens > 0 {
		return usage.PromptTokens + usage.CompletionTokens
	}
	return (requestBytes+bytesPerToken-1)/bytesPerToken + chunks
}

// progress accounts one content-bearing chunk.
func (w *Worker) progress(r *request, content string) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.tl.firstToken.IsZero() {
		r.tl.firstToken = now
	}
	if r.firstToken.IsZero() {
		r.firstToken = now
	}
	r.tokens++
	r.outputChars += len(content)
	r.text.WriteString(content)
}

// transportFailure handles a broken connection to the child. If the request
// was canceled, its cause is the error. Otherwise the child either died
// (the supervision loop restarts it with server_died) or is alive but
// unreachable, in which case the worker is asked to restart. Either way the
// restart fails this request, so it waits for that and returns the cause.
func (w *Worker) transportFailure(ctx context.Context, r *request, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	w.mu.Lock()
	reason := FailConnectionLost
	if r.tl.connected.IsZero() {
		reason = FailConnectFailed
	}
	w.mu.Unlock()
	// The child may be exiting right now: give its exit the connect timeout
	// to be seen, so that a crash is reported as server_died.
	grace := time.NewTimer(w.cfg.Timeouts.Connect)
	defer grace.Stop()
	select {
	case <-ctx.Done():
	case <-r.proc.Done():
	case <-grace.C:
		select {
		case w.kick <- restartRequest{r.proc, reason, err.Error()}:
		case <-ctx.Done():
		}
	}
	<-ctx.Done()
	return context.Cause(ctx)
}
