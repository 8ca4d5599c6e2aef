package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/wire"
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
	Thinking   string    `json:"thinking,omitempty"`
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
	// plan is how the answer is read; answer reads it while it streams
	// (nil when it is passed on as it is); sent counts the calls already
	// in a streamed object.
	plan   model.Plan
	answer *model.Reader
	sent   int
}

func (f *ollamaResponder) object(thinking, text string, done bool, reason string, mt ollamaMetrics, calls ...wire.ToolCall) any {
	at := f.now().UTC()
	if f.chat {
		msg := ollamaMessage{Role: "assistant", Content: text, Thinking: thinking}
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
	return &ollamaGenerateResponse{Model: f.model, CreatedAt: at, Response: text, Thinking: thinking, Done: done, DoneReason: reason, ollamaMetrics: mt}
}

func (f *ollamaResponder) streamStart() any { return nil }

// streamText sends text as it comes; read, the reasoning and content the
// reader decided and each call once it is complete, as Ollama streams
// them. No text is the keep-alive object, an empty one.
func (f *ollamaResponder) streamText(text string, _ engine.Chunk) any {
	if f.answer == nil || text == "" {
		return f.object("", text, false, "", ollamaMetrics{})
	}
	return f.pieces(f.answer.Push(text))
}

// pieces is the object of what the reader decided, with the calls
// completed since the last one; nil when there is nothing.
func (f *ollamaResponder) pieces(ds []wire.Delta) any {
	d := model.Merge(ds)
	calls := f.answer.Calls()[f.sent:]
	f.sent += len(calls)
	if d.Content == nil && d.ReasoningContent == nil && len(calls) == 0 {
		return nil
	}
	var thinking string
	if d.ReasoningContent != nil {
		thinking = *d.ReasoningContent
	}
	return f.object(thinking, d.Text(), false, "", ollamaMetrics{}, calls...)
}

func (f *ollamaResponder) streamEnd(res engine.Result) []any {
	var evs []any
	if f.answer != nil {
		if ev := f.pieces(f.answer.Finish(res.FinishReason == engine.FinishLength)); ev != nil {
			evs = append(evs, ev)
		}
	}
	return append(evs, f.final("", "", nil, res))
}

func (f *ollamaResponder) whole(text string, _ []engine.TokenLogprobs, res engine.Result) any {
	var thinking string
	var calls []wire.ToolCall
	if f.plan.Reads() {
		thinking, text, calls = f.plan.Parse(text, res.FinishReason == engine.FinishLength)
	}
	return f.final(thinking, text, calls, res)
}

// final is the last object: done, with the metrics, and the whole
// answer's reasoning, text and calls when not streamed.
func (f *ollamaResponder) final(thinking, text string, calls []wire.ToolCall, res engine.Result) any {
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
	return f.object(thinking, text, true, string(res.FinishReason), mt, calls...)
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
