package ollama

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/serving"
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

// ollamaEncoder shapes the objects of /api/generate or /api/chat: one
// per text chunk while streaming, then a final one, done, with the
// metrics; or the final one with the whole text.
type ollamaEncoder struct {
	model string
	chat  bool             // /api/chat's objects (a message), else /api/generate's (a response)
	start time.Time        // when the request arrived: total_duration runs from it
	load  time.Duration    // spent getting the model
	now   func() time.Time // the clock, time.Now but in tests
	reads bool             // the answer is read: its reasoning and calls come apart
}

func (f *ollamaEncoder) object(thinking, text string, done bool, reason string, mt ollamaMetrics, calls ...wire.ToolCall) any {
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

func (f *ollamaEncoder) Start() []any { return nil }

// Deltas sends text as it comes; read, the reasoning and content the
// reader decided and each call once it is complete, as Ollama streams
// them.
func (f *ollamaEncoder) Deltas(ds []wire.Delta, calls []wire.ToolCall, _ engine.Chunk) []any {
	if !f.reads {
		return []any{f.object("", ds[0].Text(), false, "", ollamaMetrics{})}
	}
	d := model.Merge(ds)
	if d.Content == nil && d.ReasoningContent == nil && len(calls) == 0 {
		return nil
	}
	var thinking string
	if d.ReasoningContent != nil {
		thinking = *d.ReasoningContent
	}
	return []any{f.object(thinking, d.Text(), false, "", ollamaMetrics{}, calls...)}
}

func (f *ollamaEncoder) End(res engine.Result, _ string) []any {
	return []any{f.final("", "", nil, res)}
}

func (f *ollamaEncoder) Whole(a serving.Answer, res engine.Result) any {
	return f.final(a.Reasoning, a.Content, a.Calls, res)
}

func (f *ollamaEncoder) Error(e *serving.Error) any { return ollamaErrorBody(e) }

// Ping is an object without text: NDJSON has no comments.
func (f *ollamaEncoder) Ping() any { return f.object("", "", false, "", ollamaMetrics{}) }

// final is the last object: done, with the metrics, and the whole
// answer's reasoning, text and calls when not streamed.
func (f *ollamaEncoder) final(thinking, text string, calls []wire.ToolCall, res engine.Result) any {
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
func ollamaErrorBody(e *serving.Error) any { return &ollamaError{Error: e.Message} }

// WriteError writes e in Ollama's shape, {"error": message}, with
// e's status; a 503 carries Retry-After as in WriteError.
func WriteError(w http.ResponseWriter, e *serving.Error) {
	if e.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	serving.WriteJSON(w, e.Status, ollamaErrorBody(e))
}

// ollamaModelError words e as Ollama does when name is unknown.
func ollamaModelError(e *serving.Error, name string) *serving.Error {
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
