package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/openai/wire"
)

// ollamaMetrics are the timings and counts of a final object, durations
// in nanoseconds. Zero fields are left out, as Ollama does.
type ollamaMetrics struct {
	TotalDuration      time.Duration `json:"total_duration,omitempty"`
	LoadDuration       time.Duration `json:"load_duration,omitempty"`
	PromptEvalCount    int           `json:"prompt_eval_count,omitempty"`
	PromptEvalDuration time.Duration `json:"prompt_eval_duration,omitempty"`
	EvalCount          int           `json:"eval_count,omitempty"`
	EvalDuration       time.Duration `json:"eval_duration,omitempty"`
}

// ollamaGenerateResponse is an object of /api/generate's answer.
type ollamaGenerateResponse struct {
	Model      string    `json:"model"`
	CreatedAt  time.Time `json:"created_at"`
	Response   string    `json:"response"`
	Done       bool      `json:"done"`
	DoneReason string    `json:"done_reason,omitempty"`
	ollamaMetrics
}

// ollamaChatResponse is an object of /api/chat's answer.
type ollamaChatResponse struct {
	Model      string        `json:"model"`
	CreatedAt  time.Time     `json:"created_at"`
	Message    ollamaMessage `json:"message"`
	Done       bool          `json:"done"`
	DoneReason string        `json:"done_reason,omitempty"`
	ollamaMetrics
}

// ollamaResponder shapes the objects of /api/generate or /api/chat: one
// per text chunk while streaming, then a final one, done, with the
// metrics; or the final one with the whole text.
type ollamaResponder struct {
	model string
	chat  bool             // /api/chat's objects (a message), else /api/generate's (a response)
	start time.Time        // when the request arrived: total_duration runs from it
	load  time.Duration    // spent getting the model
	now   func() time.Time // the clock, time.Now but in tests
	// calls reads /api/chat's tool calls when the request has tools
	// (nil otherwise); sent counts those already in a streamed object.
	calls *chat.ToolParser
	tools chat.ToolFormat
	sent  int
}

func (f *ollamaResponder) object(text string, done bool, reason string, mt ollamaMetrics, calls ...wire.ToolCall) any {
	at := f.now().UTC()
	if f.chat {
		msg := ollamaMessage{Role: "assistant", Content: text}
		for _, c := range calls {
			var tc ollamaToolCall
			tc.ID, tc.Function.Name, tc.Function.Arguments = c.ID, c.Function.Name, json.RawMessage(c.Function.Arguments)
			if !json.Valid(tc.Function.Arguments) {
				tc.Function.Arguments, _ = json.Marshal(c.Function.Arguments) // arguments that are no JSON stay text
			}
			msg.ToolCalls = append(msg.ToolCalls, tc)
		}
		return &ollamaChatResponse{Model: f.model, CreatedAt: at, Message: msg, Done: done, DoneReason: reason, ollamaMetrics: mt}
	}
	return &ollamaGenerateResponse{Model: f.model, CreatedAt: at, Response: text, Done: done, DoneReason: reason, ollamaMetrics: mt}
}

func (f *ollamaResponder) streamStart() any { return nil }

// streamText sends text as it comes; with tools, the content the parser
// decided and each call once it is complete, as Ollama streams them.
func (f *ollamaResponder) streamText(text string, _ engine.Chunk) any {
	if f.calls == nil {
		return f.object(text, false, "", ollamaMetrics{})
	}
	content := deltaText(f.calls.Push(text))
	calls := f.calls.Calls()[f.sent:]
	f.sent += len(calls)
	if content == "" && len(calls) == 0 {
		return nil
	}
	return f.object(content, false, "", ollamaMetrics{}, calls...)
}

func (f *ollamaResponder) streamEnd(res engine.Result) []any {
	var evs []any
	if f.calls != nil {
		if res.FinishReason == engine.FinishLength {
			f.calls.Cut()
		}
		content := deltaText(f.calls.Finish())
		if calls := f.calls.Calls()[f.sent:]; content != "" || len(calls) > 0 {
			f.sent += len(calls)
			evs = append(evs, f.object(content, false, "", ollamaMetrics{}, calls...))
		}
	}
	return append(evs, f.final("", res))
}

func (f *ollamaResponder) whole(text string, _ []engine.TokenLogprobs, res engine.Result) any {
	return f.final(text, res)
}

// deltaText joins the content of parser pieces.
func deltaText(ds []wire.Delta) string {
	var b strings.Builder
	for _, d := range ds {
		b.WriteString(d.Text())
	}
	return b.String()
}

// final is the last object: done, with the metrics, and the whole
// answer's text and calls when not streamed.
func (f *ollamaResponder) final(text string, res engine.Result) any {
	mt := ollamaMetrics{
		TotalDuration:      f.now().Sub(f.start),
		LoadDuration:       f.load,
		PromptEvalCount:    res.Usage.PromptTokens,
		PromptEvalDuration: res.Timings.Prefill,
		EvalCount:          res.Usage.CompletionTokens,
		EvalDuration:       res.Timings.Decode,
	}
	// corral's "stop" and "length" are Ollama's done_reason too; the
	// other reasons end in an error but the paced ones, which these
	// endpoints never start.
	var calls []wire.ToolCall
	if f.calls != nil && text != "" {
		text, calls = chat.ParseToolCalls(f.tools, text, 0, res.FinishReason == engine.FinishLength)
	}
	return f.object(text, true, string(res.FinishReason), mt, calls...)
}

// ollamaError is the body of Ollama's errors, and a stream's error line.
type ollamaError struct {
	Error string `json:"error"`
}

// ollamaErrorBody is e in Ollama's shape.
func ollamaErrorBody(e *Error) any { return &ollamaError{Error: e.Message} }

// writeOllamaError writes e in Ollama's shape, {"error": message}, with
// e's status; a 503 carries Retry-After as in WriteError.
func writeOllamaError(w http.ResponseWriter, e *Error) {
	if e.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, e.Status, ollamaErrorBody(e))
}

// ollamaModelError words e as Ollama does when name is unknown.
func ollamaModelError(e *Error, name string) *Error {
	if e.Code == "model_not_found" {
		e.Message = fmt.Sprintf("model '%s' not found", name)
	}
	return e
}

// ollamaResponseName is the model name an answer reports: the one the
// request gave, as Ollama does, else the model's Ollama name.
func ollamaResponseName(requested, id string) string {
	if requested != "" {
		return requested
	}
	return ollamaName(id)
}

// ollamaName is the name /api/tags lists a model under: its id with
// Ollama's tag ":latest" unless the id has a tag already. Requests may
// leave the tag out.
func ollamaName(id string) string {
	if strings.Contains(id, ":") {
		return id
	}
	return id + ":latest"
}
