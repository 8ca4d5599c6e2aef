package responses

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/corral-llm/corral/wire"
)

// Response is the Responses API's response object, whole (the body of a
// non-streamed answer and of GET /v1/responses/{id}) and as the stream's
// lifecycle events carry it.
type Response struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"` // "response"
	CreatedAt          int64              `json:"created_at"`
	Status             string             `json:"status"` // in_progress, completed, incomplete, failed
	CompletedAt        *int64             `json:"completed_at"`
	Error              *ResponseError     `json:"error"`
	IncompleteDetails  *IncompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	MaxOutputTokens    *int               `json:"max_output_tokens"`
	Model              string             `json:"model"`
	Output             []Item             `json:"output"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Reasoning          Reasoning          `json:"reasoning"`
	ServiceTier        string             `json:"service_tier"`
	Temperature        float64            `json:"temperature"`
	Text               TextConfig         `json:"text"`
	ToolChoice         json.RawMessage    `json:"tool_choice"`
	Tools              []json.RawMessage  `json:"tools"`
	TopP               float64            `json:"top_p"`
	Truncation         string             `json:"truncation"`
	Usage              *Usage             `json:"usage"`
	User               *string            `json:"user"`
	Metadata           map[string]string  `json:"metadata"`
}

// ResponseError is a failed response's error.
type ResponseError struct {
	Code    string `json:"code"` // "server_error", "rate_limit_exceeded", …
	Message string `json:"message"`
}

// IncompleteDetails say why a response is incomplete.
type IncompleteDetails struct {
	Reason string `json:"reason"` // "max_output_tokens"
}

// TextConfig is the response's text configuration, as requested.
type TextConfig struct {
	Format json.RawMessage `json:"format"`
}

// Usage is the Responses API's token accounting.
type Usage struct {
	InputTokens         int                 `json:"input_tokens"`
	InputTokensDetails  InputTokensDetails  `json:"input_tokens_details"`
	OutputTokens        int                 `json:"output_tokens"`
	OutputTokensDetails OutputTokensDetails `json:"output_tokens_details"`
	TotalTokens         int                 `json:"total_tokens"`
}

// InputTokensDetails break the input tokens down.
type InputTokensDetails struct {
	CachedTokens int `json:"cached_tokens"` // found in the cache, not evaluated again
}

// OutputTokensDetails break the output tokens down.
type OutputTokensDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// Item is an output item: a message, a reasoning item or a function call
// (Type), with the fields of its type (MarshalJSON writes only those).
type Item struct {
	ID     string
	Type   string // message, reasoning, function_call
	Status string // in_progress, completed, incomplete
	// Content is a message's output_text parts or a reasoning item's
	// reasoning_text parts (a reasoning item's summary is always empty).
	Content []Part
	// A function_call's fields.
	CallID, Name, Namespace, Arguments string
}

// MarshalJSON writes the item in its type's shape.
func (it Item) MarshalJSON() ([]byte, error) {
	content := it.Content
	if content == nil {
		content = []Part{}
	}
	switch it.Type {
	case "message":
		return json.Marshal(struct {
			ID      string `json:"id"`
			Type    string `json:"type"`
			Status  string `json:"status"`
			Role    string `json:"role"`
			Content []Part `json:"content"`
		}{it.ID, it.Type, it.Status, "assistant", content})
	case "reasoning":
		return json.Marshal(struct {
			ID      string `json:"id"`
			Type    string `json:"type"`
			Status  string `json:"status"`
			Summary []Part `json:"summary"`
			Content []Part `json:"content"`
		}{it.ID, it.Type, it.Status, []Part{}, content})
	}
	return json.Marshal(struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		Status    string `json:"status"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Namespace string `json:"namespace,omitempty"`
		Arguments string `json:"arguments"`
	}{it.ID, it.Type, it.Status, it.CallID, it.Name, it.Namespace, it.Arguments})
}

// Part is a content part of an output item: output_text in a message,
// reasoning_text in a reasoning item.
type Part struct {
	Type string `json:"type"`
	Text string `json:"text"`
	// Annotations and Logprobs are an output_text's, always [].
	Annotations *[]struct{} `json:"annotations,omitempty"`
	Logprobs    *[]struct{} `json:"logprobs,omitempty"`
}

// Event is one stream event: its type (the SSE event name) and its JSON.
type Event struct {
	Type string
	Data json.RawMessage
}

// AppendSSE appends the event framed as a server-sent event,
// "event: <type>\ndata: <json>\n\n".
func (e Event) AppendSSE(dst []byte) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, e.Type...)
	dst = append(dst, '\n')
	return wire.AppendData(dst, e.Data)
}

// End is how an answer ended.
type End struct {
	// FinishReason is "stop", "tool_calls" or "length" (cut off by
	// max_output_tokens or the context: the response is incomplete).
	FinishReason string
	Usage        TokenUsage
}

// TokenUsage is an answer's token counts, as the core knows them.
type TokenUsage struct {
	PromptTokens       int
	CachedPromptTokens int // of PromptTokens, found in the cache
	CompletionTokens   int
	ReasoningTokens    int // of CompletionTokens, the reasoning's (engine.Usage.ReasoningTokens)
}

// NewID returns a new random identifier with prefix ("resp", "msg", "fc",
// "rs"), as OpenAI's look: prefix, "_", 48 hex digits.
func NewID(prefix string) string {
	var b [24]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return prefix + "_" + hex.EncodeToString(b[:])
}

// NewResponse returns the in-progress response object for r and t: its
// settings echoed, no output yet. id and model are the response's;
// createdAt is in Unix seconds.
func NewResponse(id, model string, createdAt int64, r *Request, t *Translation) *Response {
	resp := &Response{
		ID: id, Object: "response", CreatedAt: createdAt, Status: "in_progress", Model: model,
		Output: []Item{}, ParallelToolCalls: t.ParallelToolCalls, Temperature: 1, TopP: 1,
		Truncation: "disabled", ServiceTier: "default", Tools: r.Tools, Metadata: r.Metadata,
		Text: TextConfig{Format: json.RawMessage(`{"type":"text"}`)}, ToolChoice: r.ToolChoice,
	}
	if resp.Tools == nil {
		resp.Tools = []json.RawMessage{}
	}
	if resp.Metadata == nil {
		resp.Metadata = map[string]string{}
	}
	if isNull(resp.ToolChoice) {
		resp.ToolChoice = json.RawMessage(`"auto"`)
	}
	if r.Instructions != nil {
		resp.Instructions = r.Instructions
	}
	if r.MaxOutputTokens != nil {
		resp.MaxOutputTokens = r.MaxOutputTokens
	}
	if r.PreviousResponseID != "" {
		resp.PreviousResponseID = &r.PreviousResponseID
	}
	if r.Reasoning != nil {
		resp.Reasoning = *r.Reasoning
	}
	if r.Temperature != nil {
		resp.Temperature = *r.Temperature
	}
	if r.TopP != nil {
		resp.TopP = *r.TopP
	}
	if r.Truncation != "" {
		resp.Truncation = r.Truncation
	}
	if r.Text != nil && !isNull(r.Text.Format) {
		resp.Text.Format = r.Text.Format
	}
	if r.User != "" {
		resp.User = &r.User
	}
	return resp
}

// Stream encodes one answer as the Responses stream events, and builds
// the whole response on the way (Response): call Start, then Delta for
// each piece of the answer, then End or Fail. A non-streamed answer goes
// through the same calls and discards the events. Every event carries
// its sequence_number, from 0.
//
// A reasoning delta opens a reasoning item (reasoning_text events), a
// content delta a message item (one output_text part), a tool call
// delta a function_call item (its call id and name from the call's first
// delta, then function_call_arguments events); a delta of another kind
// than the open item's closes it (content_part.done, output_item.done).
type Stream struct {
	resp       *Response
	namespaces map[string]string
	seq        int
	open       *Item // the item being written, nil when none
	openIndex  int   // its output_index
	text       strings.Builder
	call       int // the tool call index of an open function_call item
	done       bool
}

// NewStream returns the encoder of resp (from NewResponse), whose output
// it fills. namespaces are the Translation's.
func NewStream(resp *Response, namespaces map[string]string) *Stream {
	return &Stream{resp: resp, namespaces: namespaces}
}

// Response is the response as encoded so far; after End or Fail, the
// whole response.
func (s *Stream) Response() *Response { return s.resp }

// event builds an event of type typ with fields, adding type and
// sequence_number.
func (s *Stream) event(typ string, fields map[string]any) Event {
	fields["type"] = typ
	fields["sequence_number"] = s.seq
	s.seq++
	b, err := json.Marshal(fields)
	if err != nil { // only our own types and JSON as decoded: a programming error
		msg, _ := json.Marshal(fmt.Sprintf("encode %s: %v", typ, err))
		return Event{Type: "error", Data: fmt.Appendf(nil, `{"type":"error","code":"server_error","message":%s,"param":null,"sequence_number":%d}`, msg, s.seq-1)}
	}
	return Event{Type: typ, Data: b}
}

// snapshot is a copy of the response for an event: later changes to s
// do not show in an event already built (it is marshalled at once).
func (s *Stream) snapshot() map[string]any { return map[string]any{"response": s.resp} }

// Start returns response.created and response.in_progress.
func (s *Stream) Start() []Event {
	return []Event{s.event("response.created", s.snapshot()), s.event("response.in_progress", s.snapshot())}
}

// Delta returns the events of one piece of the answer.
func (s *Stream) Delta(d wire.Delta) []Event {
	var out []Event
	if d.ReasoningContent != nil && *d.ReasoningContent != "" {
		out = s.textDelta(out, "reasoning", *d.ReasoningContent)
	}
	if d.Content != nil && *d.Content != "" {
		out = s.textDelta(out, "message", *d.Content)
	}
	for _, tc := range d.ToolCalls {
		out = s.callDelta(out, tc)
	}
	return out
}

// textDelta adds text to an open item of kind typ (message or
// reasoning), opening it first.
func (s *Stream) textDelta(out []Event, typ, text string) []Event {
	if s.open == nil || s.open.Type != typ {
		out = s.close(out, "completed")
		out = s.openItem(out, typ)
	}
	s.text.WriteString(text)
	ev := "response.output_text.delta"
	fields := map[string]any{"item_id": s.open.ID, "output_index": s.openIndex, "content_index": 0, "delta": text}
	if typ == "reasoning" {
		ev = "response.reasoning_text.delta"
	} else {
		fields["logprobs"] = []struct{}{}
	}
	return append(out, s.event(ev, fields))
}

// callDelta adds a piece of a tool call.
func (s *Stream) callDelta(out []Event, tc wire.ToolCallDelta) []Event {
	if s.open == nil || s.open.Type != "function_call" || s.call != tc.Index {
		out = s.close(out, "completed")
		id := tc.ID
		if id == "" {
			id = NewID("call")
		}
		s.open = &Item{ID: NewID("fc"), Type: "function_call", Status: "in_progress", CallID: id,
			Name: tc.Function.Name, Namespace: s.namespaces[tc.Function.Name]}
		s.call = tc.Index
		s.openIndex = len(s.resp.Output)
		s.text.Reset()
		out = append(out, s.event("response.output_item.added", map[string]any{"output_index": s.openIndex, "item": s.open}))
	}
	if a := tc.Function.Arguments; a != "" {
		s.text.WriteString(a)
		out = append(out, s.event("response.function_call_arguments.delta", map[string]any{"item_id": s.open.ID, "output_index": s.openIndex, "delta": a}))
	}
	return out
}

// openItem opens a message or reasoning item with its one content part.
func (s *Stream) openItem(out []Event, typ string) []Event {
	s.text.Reset()
	s.openIndex = len(s.resp.Output)
	var part Part
	if typ == "message" {
		s.open = &Item{ID: NewID("msg"), Type: "message", Status: "in_progress"}
		part = outputText("")
	} else {
		s.open = &Item{ID: NewID("rs"), Type: "reasoning", Status: "in_progress"}
		part = Part{Type: "reasoning_text"}
	}
	out = append(out, s.event("response.output_item.added", map[string]any{"output_index": s.openIndex, "item": s.open}))
	return append(out, s.event("response.content_part.added", map[string]any{"item_id": s.open.ID, "output_index": s.openIndex, "content_index": 0, "part": part}))
}

// outputText is an output_text part.
func outputText(text string) Part {
	return Part{Type: "output_text", Text: text, Annotations: &[]struct{}{}, Logprobs: &[]struct{}{}}
}

// close closes the open item, if any, with status and adds it to the
// output.
func (s *Stream) close(out []Event, status string) []Event {
	it := s.open
	if it == nil {
		return out
	}
	s.open = nil
	text := s.text.String()
	base := map[string]any{"item_id": it.ID, "output_index": s.openIndex}
	with := func(kv ...any) map[string]any {
		m := make(map[string]any, len(base)+len(kv)/2)
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	switch it.Type {
	case "message":
		part := outputText(text)
		out = append(out, s.event("response.output_text.done", with("content_index", 0, "text", text, "logprobs", []struct{}{})))
		out = append(out, s.event("response.content_part.done", with("content_index", 0, "part", part)))
		it.Content = []Part{part}
	case "reasoning":
		part := Part{Type: "reasoning_text", Text: text}
		out = append(out, s.event("response.reasoning_text.done", with("content_index", 0, "text", text)))
		out = append(out, s.event("response.content_part.done", with("content_index", 0, "part", part)))
		it.Content = []Part{part}
	case "function_call":
		it.Arguments = text
		out = append(out, s.event("response.function_call_arguments.done", with("arguments", text)))
	}
	it.Status = status
	s.resp.Output = append(s.resp.Output, *it)
	return append(out, s.event("response.output_item.done", map[string]any{"output_index": s.openIndex, "item": it}))
}

// End closes the answer: the open item, then response.completed, or
// response.incomplete (reason max_output_tokens) when it was cut off,
// with the usage.
func (s *Stream) End(e End, completedAt int64) []Event {
	if s.done {
		return nil
	}
	s.done = true
	status, ev := "completed", "response.completed"
	if e.FinishReason == "length" {
		status, ev = "incomplete", "response.incomplete"
		s.resp.IncompleteDetails = &IncompleteDetails{Reason: "max_output_tokens"}
	}
	out := s.close(nil, status)
	u := e.Usage
	s.resp.Usage = &Usage{
		InputTokens: u.PromptTokens, InputTokensDetails: InputTokensDetails{CachedTokens: u.CachedPromptTokens},
		OutputTokens: u.CompletionTokens, OutputTokensDetails: OutputTokensDetails{ReasoningTokens: u.ReasoningTokens},
		TotalTokens: u.PromptTokens + u.CompletionTokens,
	}
	s.resp.Status = status
	if status == "completed" {
		s.resp.CompletedAt = &completedAt
	}
	return append(out, s.event(ev, s.snapshot()))
}

// Fail ends the answer with an error after the stream began: the open
// item closes as incomplete, then response.failed carries the error
// (code: "server_error", "rate_limit_exceeded", …).
func (s *Stream) Fail(code, message string) []Event {
	if s.done {
		return nil
	}
	s.done = true
	out := s.close(nil, "incomplete")
	s.resp.Status = "failed"
	s.resp.Error = &ResponseError{Code: code, Message: message}
	return append(out, s.event("response.failed", s.snapshot()))
}

// ErrorEvent returns an "error" event, for an error that is no
// response's failure (the request was refused after the stream's
// headers were sent).
func (s *Stream) ErrorEvent(e *Error) Event {
	env := e.Envelope().Error
	code := env.Type
	if env.Code != nil {
		code = *env.Code
	}
	return s.event("error", map[string]any{"code": code, "message": e.Message, "param": env.Param})
}
